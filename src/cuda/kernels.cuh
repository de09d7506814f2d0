// What the CUDA layers share (layers.cu, transformer.cu): launch sizes, a
// block-wide sum and maximum, the bias and column-sum launchers, FP32
// products in the context's precision, and the base of layers that bound
// their rows. Private to src/cuda.
#ifndef BATON_CUDA_KERNELS_CUH_
#define BATON_CUDA_KERNELS_CUH_

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>

#include "baton/error.h"
#include "cuda_layers.h"

namespace baton::cuda::detail {

constexpr int kThreads = 256;

// Blocks for a grid-stride loop over n elements: one element per thread up to
// a cap past which each thread takes several (the cap keeps the count an int).
inline int BlocksFor(std::size_t n) {
  const std::size_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(std::min<std::size_t>(blocks, 1 << 16));
}

// Threads for one block per row of `cols` elements: whole warps (the
// reductions shuffle across full warps), no more than the row can use.
inline int RowThreads(int cols) { return std::clamp((cols + 31) / 32 * 32, 32, kThreads); }

// Sum of v over the block, returned to every thread. REQUIRES: blockDim.x is a
// multiple of 32 and at most 1024; every thread of the block calls it.
// `shared` holds 32 floats; the closing barrier lets the next call reuse it.
__device__ inline float BlockSum(float v, float* shared) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int warps = static_cast<int>(blockDim.x / 32);
  v = lane < warps ? shared[lane] : 0.0f;
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  __syncthreads();
  return v;
}

// The maximum of v over the block, as BlockSum.
__device__ inline float BlockMax(float v, float* shared) {
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int warps = static_cast<int>(blockDim.x / 32);
  v = lane < warps ? shared[lane] : -INFINITY;
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  __syncthreads();
  return v;
}

// y (rows, cols) += bias (cols) on every row.
void LaunchAddBias(cudaStream_t stream, const float* bias, float* y, int rows, int cols);
// out (cols) += the column sums of m (rows, cols), in a fixed order.
void LaunchAddColumnSums(cudaStream_t stream, const float* m, int rows, int cols, float* out);

// C (m, n) = op(A) op(B) + beta C, column-major FP32 data: plain SGEMM, or
// TF32 tensor-core products when ctx.precision is tf32. (BF16 runs keep
// these products in FP32: only the linear layers take BF16 operands.)
void GemmF32(const Context& ctx, cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k, const float* a,
             int lda, const float* b, int ldb, float beta, float* c, int ldc);
// `batch` such products, operand i at a + i stride_a, b + i stride_b,
// c + i stride_c.
void GemmF32Batched(const Context& ctx, cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k,
                    const float* a, int lda, long long stride_a, const float* b, int ldb, long long stride_b,
                    float beta, float* c, int ldc, long long stride_c, int batch);

// Layers that bound the rows of a call by the scratch sized at construction.
class SizedLayer : public CudaLayer {
 public:
  // Layers without weights have no weight gradient, but a call beyond the
  // rows they were made for is still refused.
  void BackwardWeight(const Context&, const float*, const float*, int rows) override { CheckRows(rows); }

 protected:
  SizedLayer(const OpDesc& op, int max_rows) : CudaLayer(op), max_rows_(max_rows) {}

  void CheckRows(int rows) const {
    if (rows < 0 || rows > max_rows_) {
      throw Error("cuda " + std::string(EnumName(Type())) + " layer (" + std::to_string(in_features()) + " -> " +
                  std::to_string(out_features()) + " features): " + std::to_string(rows) +
                  " rows given, the layer was made for 0 to " + std::to_string(max_rows_));
    }
  }

  int max_rows_;
};

// The embedding, position-embedding or attention layer `op` describes
// (transformer.cu), for up to `max_rows` token rows per call.
std::unique_ptr<CudaLayer> MakeTransformerLayer(const OpDesc& op, int max_rows);

}  // namespace baton::cuda::detail

#endif  // BATON_CUDA_KERNELS_CUH_
