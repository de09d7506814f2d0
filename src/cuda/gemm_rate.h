// The GPU's matrix-product rate at a model's linear shapes, for `baton
// bench` (RankDevice::GemmGflops on `device: cuda`).
#ifndef BATON_CUDA_GEMM_RATE_H_
#define BATON_CUDA_GEMM_RATE_H_

#include <utility>
#include <vector>

#include "baton/choices.h"
#include "cuda_util.h"

namespace baton::cuda {

// GFLOP/s of each (in, out) linear layer's forward, input-gradient and
// weight-gradient products at `rows` rows, in `precision`, on the current
// device, enqueued on `stream` and timed with CUDA events: the best of 5
// rounds of at least 50 ms after one warm-up pass. 0 for no shapes.
// Synchronizes `stream`; allocates and frees its buffers.
double LinearGflops(cudaStream_t stream, Precision precision, const std::vector<std::pair<int, int>>& shapes,
                    int rows);

}  // namespace baton::cuda

#endif  // BATON_CUDA_GEMM_RATE_H_
