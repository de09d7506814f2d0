// Data parallelism on the GPU: the gradient buckets of a rank's stages
// summed over its replicas, staged through pinned host memory for an MPI
// that is not CUDA-aware (Debian's Open MPI), as the pipeline's messages
// are (staged_transport.h):
//
//   start:  compute stream --event--> comm stream: cudaMemcpyAsync D2H of
//           the bucket into the request's pinned buffer, event;
//   then    (polled with cudaEventQuery between actions, never a
//           synchronize) the host group's MPI_Iallreduce on the pinned
//           buffer;
//   then    cudaMemcpyAsync H2D back into the bucket on the comm stream,
//           event; the sum has ended when that event has passed (Test), or
//           the compute stream waits for it on the GPU (Wait), so the
//           optimizer's kernels read the sums.
//
// ZeRO stage 1 the same way: a reduce-scatter copies the whole bucket down
// and only this member's summed part up; an all-gather copies this member's
// part (the updated parameters) down and the whole bucket up.
//
// The host reads nothing per microbatch: one copy each way per bucket and
// step. NCCL (ncclAllReduce and friends on the comm stream) would sit
// beside this.
#ifndef BATON_CUDA_STAGED_REPLICA_GROUP_H_
#define BATON_CUDA_STAGED_REPLICA_GROUP_H_

#include <cstddef>
#include <memory>
#include <vector>

#include "baton/comm.h"
#include "cuda_util.h"

namespace baton::cuda {

// Over `host` (the replicas' MPI group); `compute` is the stream whose work
// writes the gradients and reads the sums; floats_per_request[id] the
// largest bucket request `id` carries (0: never used), pinned here, once.
std::unique_ptr<ReplicaGroup> MakeStagedReplicaGroup(ReplicaGroup& host, cudaStream_t compute,
                                                     const std::vector<std::size_t>& floats_per_request);

}  // namespace baton::cuda

#endif  // BATON_CUDA_STAGED_REPLICA_GROUP_H_
