// Point-to-point messages between GPU tensors on different ranks, staged
// through pinned host buffers, for an MPI that is not CUDA-aware (Debian's
// Open MPI): any number of ranks per GPU, several ranks sharing one GPU
// included.
//
//   send:    producer stream --event--> comm stream: cudaMemcpyAsync D2H into
//            the request's pinned buffer, event; once that event has passed
//            (polled with cudaEventQuery, never a synchronize), MPI_Isend of
//            the pinned buffer through the host Transport.
//   receive: MPI_Irecv into the request's pinned buffer; when the message is
//            in, cudaMemcpyAsync H2D on the comm stream, event, and the
//            consumer stream waits for that event on the GPU.
//
// The copies run on their own stream, so they overlap the compute stream's
// kernels; the host never waits for the device here, only for messages (with
// the host Transport's deadline, which covers the staging copies too).
//
// A DeviceTransport interface sits above it so that an NCCL implementation
// (ncclSend/ncclRecv on the comm stream, one GPU per rank, communicator
// bootstrapped over MPI) can be added beside it.
#ifndef BATON_CUDA_STAGED_TRANSPORT_H_
#define BATON_CUDA_STAGED_TRANSPORT_H_

#include <cstddef>
#include <memory>
#include <vector>

#include "baton/comm.h"
#include "cuda_util.h"

namespace baton::cuda {

class DeviceTransport {
 public:
  virtual ~DeviceTransport() = default;
  // Starts sending `bytes` bytes at device address `data` to `peer` once the
  // work recorded in `ready` (on the producer's stream) has finished.
  // `data` must stay untouched until WaitSend(id) returns.
  virtual void Isend(int id, const std::byte* data, std::size_t bytes, int peer, int tag, cudaEvent_t ready) = 0;
  // Starts receiving `bytes` bytes into device address `data`.
  virtual void Irecv(int id, std::byte* data, std::size_t bytes, int peer, int tag) = 0;
  // Waits for the message of receive `id`, then makes `consumer` wait (on the
  // GPU) until it is in `data`. Deadline and size checks as Transport::Wait.
  virtual void WaitRecv(int id, const WaitInfo& info, cudaStream_t consumer) = 0;
  // Waits until send `id` no longer needs its source (its staging copy is
  // done and MPI has finished with the pinned buffer).
  virtual void WaitSend(int id, const WaitInfo& info) = 0;
  // Moves sends along (posts MPI_Isend for finished staging copies). Cheap;
  // call between actions.
  virtual void Progress() = 0;
  // True if request `id` has nothing in flight.
  virtual bool Idle(int id) const = 0;
};

// The host-staged implementation over `host` (an MPI Transport, already
// Configure()d with at least `max_requests` requests). Pinned buffers of
// `max_bytes` bytes per request id are allocated here, once.
std::unique_ptr<DeviceTransport> MakeStagedTransport(Transport& host, int max_requests, std::size_t max_bytes,
                                                     double timeout_s);
// The same with a pinned buffer of bytes_per_request[id] bytes per id (0:
// the id is never used), so a rank pins only what its own messages need.
std::unique_ptr<DeviceTransport> MakeStagedTransport(Transport& host, std::vector<std::size_t> bytes_per_request,
                                                     double timeout_s);

}  // namespace baton::cuda

#endif  // BATON_CUDA_STAGED_TRANSPORT_H_
