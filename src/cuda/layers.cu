// The CUDA layers: linear through cuBLAS (FP32, or BF16 operands with FP32
// accumulation), relu, gelu and layernorm as kernels. Like the CPU layers they
// keep no state between calls: backward gets the layer's input x and the
// output gradient dy and recomputes what it needs (layernorm's mean and 1/std).
//
// Scratch memory (BF16 operand copies, layernorm statistics) belongs to the
// layer and is reused by every call, so all calls on one layer must be
// ordered on one stream (a stage runs its layers on its compute stream).
//
// Messages are built without fmt: its headers do not compile under nvcc in
// C++20 mode (consteval format strings).
#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include <cuda_bf16.h>

#include "baton/error.h"
#include "cuda_layers.h"
#include "kernels.cuh"

namespace baton::cuda {

namespace {

using detail::BlockSum;
using detail::BlocksFor;
using detail::kThreads;
using detail::RowThreads;
using detail::SizedLayer;

__global__ void RoundToBf16Kernel(const float* __restrict__ x, __nv_bfloat16* __restrict__ y, std::size_t n) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    y[i] = __float2bfloat16_rn(x[i]);
  }
}

// y (rows, cols) += bias (cols) on every row.
__global__ void AddBiasKernel(const float* __restrict__ bias, float* __restrict__ y, std::size_t n, int cols) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    y[i] += bias[i % static_cast<std::size_t>(cols)];
  }
}

// Column sums of a (rows, cols) matrix, added into out (cols). Block
// (32, kSumRows): threadIdx.x picks the column, so a warp reads 32 adjacent
// floats of a row; the kSumRows partial sums of a column are then added in
// a fixed order, so the result does not vary from run to run.
constexpr int kSumRows = 8;

__global__ void AddColumnSumsKernel(const float* __restrict__ m, int rows, int cols, float* __restrict__ out) {
  __shared__ float partial[kSumRows][32];
  const int col = static_cast<int>(blockIdx.x * 32 + threadIdx.x);
  float s = 0.0f;
  if (col < cols) {
    for (int i = static_cast<int>(threadIdx.y); i < rows; i += kSumRows) {
      s += m[static_cast<std::size_t>(i) * cols + col];
    }
  }
  partial[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    float total = 0.0f;
    for (int k = 0; k < kSumRows; ++k) total += partial[k][threadIdx.x];
    out[col] += total;
  }
}


__global__ void ReluForwardKernel(const float* __restrict__ x, float* __restrict__ y, std::size_t n) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    y[i] = fmaxf(x[i], 0.0f);
  }
}

// The derivative at 0 is taken as 0, as PyTorch does.
__global__ void ReluBackwardKernel(const float* __restrict__ x, const float* __restrict__ dy, float* __restrict__ dx,
                                   std::size_t n) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    dx[i] = x[i] > 0.0f ? dy[i] : 0.0f;
  }
}

// gelu, tanh form (PyTorch's nn.GELU(approximate='tanh')), the CPU layer's
// constants and order of operations:
//   y = x/2 (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
constexpr float kGeluBeta = static_cast<float>(std::numbers::sqrt2 * std::numbers::inv_sqrtpi);  // sqrt(2/pi)
constexpr float kGeluKappa = 0.044715f;

__global__ void GeluForwardKernel(const float* __restrict__ x, float* __restrict__ y, std::size_t n) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const float a = x[i];
    y[i] = 0.5f * a * (1.0f + tanhf(kGeluBeta * (a + kGeluKappa * (a * a * a))));
  }
}

// dy/dx = (1 + t)/2 + x/2 (1 - t^2) sqrt(2/pi) (1 + 3 0.044715 x^2), t = tanh(u).
__global__ void GeluBackwardKernel(const float* __restrict__ x, const float* __restrict__ dy, float* __restrict__ dx,
                                   std::size_t n) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const float a = x[i];
    const float t = tanhf(kGeluBeta * (a + kGeluKappa * (a * a * a)));
    dx[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * a * (1.0f - t * t) * kGeluBeta * (1.0f + 3.0f * kGeluKappa * (a * a)));
  }
}

struct RowMoments {
  float mean;
  float rstd;  // 1 / sqrt(var + eps)
};

// The moments of one row of `cols` floats, returned to every thread of the
// block. Two passes (mean, then the centred square), as on the CPU, keep the
// variance accurate for rows far from zero.
__device__ RowMoments BlockRowMoments(const float* __restrict__ xr, int cols, float eps, float* shared) {
  float s = 0.0f;
  for (int j = static_cast<int>(threadIdx.x); j < cols; j += static_cast<int>(blockDim.x)) s += xr[j];
  const float mean = BlockSum(s, shared) / static_cast<float>(cols);
  float q = 0.0f;
  for (int j = static_cast<int>(threadIdx.x); j < cols; j += static_cast<int>(blockDim.x)) {
    const float d = xr[j] - mean;
    q += d * d;
  }
  const float var = BlockSum(q, shared) / static_cast<float>(cols);
  return {mean, 1.0f / sqrtf(var + eps)};
}

// One block per row (grid-stride over rows):
//   y = (x - mean) * rstd * weight + bias
__global__ void LayerNormForwardKernel(const float* __restrict__ x, const float* __restrict__ weight,
                                       const float* __restrict__ bias, float* __restrict__ y, int rows, int cols,
                                       float eps) {
  __shared__ float shared[32];
  for (int row = static_cast<int>(blockIdx.x); row < rows; row += static_cast<int>(gridDim.x)) {
    const std::size_t base = static_cast<std::size_t>(row) * cols;
    const RowMoments m = BlockRowMoments(x + base, cols, eps, shared);
    for (int j = static_cast<int>(threadIdx.x); j < cols; j += static_cast<int>(blockDim.x)) {
      y[base + j] = (x[base + j] - m.mean) * m.rstd * weight[j] + bias[j];
    }
  }
}

// One block per row. With g = dy * weight and xhat = (x - mean) * rstd:
//   dx = rstd (g - mean(g) - xhat mean(g xhat))
__global__ void LayerNormBackwardInputKernel(const float* __restrict__ x, const float* __restrict__ dy,
                                             const float* __restrict__ weight, float* __restrict__ dx, int rows,
                                             int cols, float eps) {
  __shared__ float shared[32];
  for (int row = static_cast<int>(blockIdx.x); row < rows; row += static_cast<int>(gridDim.x)) {
    const std::size_t base = static_cast<std::size_t>(row) * cols;
    const RowMoments m = BlockRowMoments(x + base, cols, eps, shared);
    float g_sum = 0.0f, gx_sum = 0.0f;
    for (int j = static_cast<int>(threadIdx.x); j < cols; j += static_cast<int>(blockDim.x)) {
      const float g = dy[base + j] * weight[j];
      g_sum += g;
      gx_sum += g * ((x[base + j] - m.mean) * m.rstd);
    }
    const float g_mean = BlockSum(g_sum, shared) / static_cast<float>(cols);
    const float gx_mean = BlockSum(gx_sum, shared) / static_cast<float>(cols);
    for (int j = static_cast<int>(threadIdx.x); j < cols; j += static_cast<int>(blockDim.x)) {
      const float g = dy[base + j] * weight[j];
      const float xhat = (x[base + j] - m.mean) * m.rstd;
      dx[base + j] = m.rstd * (g - g_mean - xhat * gx_mean);
    }
  }
}

// stats (rows, 2) = (mean, rstd) of every row, one block per row.
__global__ void LayerNormStatsKernel(const float* __restrict__ x, float* __restrict__ stats, int rows, int cols,
                                     float eps) {
  __shared__ float shared[32];
  for (int row = static_cast<int>(blockIdx.x); row < rows; row += static_cast<int>(gridDim.x)) {
    const RowMoments m = BlockRowMoments(x + static_cast<std::size_t>(row) * cols, cols, eps, shared);
    if (threadIdx.x == 0) {
      stats[2 * static_cast<std::size_t>(row)] = m.mean;
      stats[2 * static_cast<std::size_t>(row) + 1] = m.rstd;
    }
  }
}

// dweight += sum over rows of dy * xhat; dbias += sum over rows of dy. The
// column-sum layout of AddColumnSumsKernel, with the statistics of
// LayerNormStatsKernel.
__global__ void LayerNormBackwardWeightKernel(const float* __restrict__ x, const float* __restrict__ dy,
                                              const float* __restrict__ stats, int rows, int cols,
                                              float* __restrict__ dweight, float* __restrict__ dbias) {
  __shared__ float partial_w[kSumRows][32];
  __shared__ float partial_b[kSumRows][32];
  const int col = static_cast<int>(blockIdx.x * 32 + threadIdx.x);
  float sw = 0.0f, sb = 0.0f;
  if (col < cols) {
    for (int i = static_cast<int>(threadIdx.y); i < rows; i += kSumRows) {
      const std::size_t k = static_cast<std::size_t>(i) * cols + col;
      const float mean = stats[2 * static_cast<std::size_t>(i)], rstd = stats[2 * static_cast<std::size_t>(i) + 1];
      sw += dy[k] * ((x[k] - mean) * rstd);
      sb += dy[k];
    }
  }
  partial_w[threadIdx.y][threadIdx.x] = sw;
  partial_b[threadIdx.y][threadIdx.x] = sb;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    float tw = 0.0f, tb = 0.0f;
    for (int k = 0; k < kSumRows; ++k) {
      tw += partial_w[k][threadIdx.x];
      tb += partial_b[k][threadIdx.x];
    }
    dweight[col] += tw;
    dbias[col] += tb;
  }
}

// ---- linear: y = x W^T + b, PyTorch's nn.Linear ----
//
// cuBLAS is column-major: a row-major (r, c) matrix with leading dimension c
// is, to cuBLAS, its transpose (c, r). So each product is written for the
// transposes:
//   F: y^T (out, rows)  = W (out, in) x^T (in, rows)   -> A = W as (in, out), op T
//   I: dx^T (in, rows)  = W^T (in, out) dy^T (out, rows)
//   W: dW^T (in, out)  += x^T (in, rows) dy (rows, out) -> B = dy as (out, rows), op T
// With conv1d (GPT-2's Conv1D) the weight is stored (in, out), to cuBLAS
// (out, in) = W^T:
//   F: y^T (out, rows)  = W^T x^T                       -> A = W as (out, in), op N
//   I: dx^T (in, rows)  = W dy^T                        -> A = W as (out, in), op T
//   W: dW^T (out, in)  += dy^T (out, rows) x (rows, in) -> B = x as (in, rows), op T
class CudaLinear final : public SizedLayer {
 public:
  // The BF16 copies are sized for the largest call whatever the precision:
  // the precision comes with each call's Context, and nothing may be
  // allocated once training runs.
  CudaLinear(const OpDesc& op, int max_rows)
      : SizedLayer(op, max_rows),
        bias_(op.bias),
        conv1d_(op.conv1d),
        x_bf16_(static_cast<std::size_t>(max_rows) * op.in),
        dy_bf16_(static_cast<std::size_t>(max_rows) * op.out),
        w_bf16_(static_cast<std::size_t>(op.out) * op.in) {}

  std::size_t ScratchBytes() const override { return x_bf16_.bytes() + dy_bf16_.bytes() + w_bf16_.bytes(); }

  // Once per parameter update, not per call: the weights' BF16 rounding.
  void RefreshWeights(const Context& ctx) override {
    if (ctx.precision != Precision::kBF16) return;
    const std::size_t n = w_bf16_.size();
    RoundToBf16Kernel<<<BlocksFor(n), kThreads, 0, ctx.stream>>>(params_, w_bf16_.data(), n);
    BATON_CUDA_CHECK_LAUNCH();
  }

  void Forward(const Context& ctx, const float* x, float* y, int rows) const override {
    CheckRows(rows);
    if (rows == 0) return;
    const int in = in_features(), out = out_features();
    const void* w = Weights(ctx);
    const void* xa = Operand(ctx, x, x_bf16_, static_cast<std::size_t>(rows) * in);
    if (conv1d_) {
      Gemm(ctx, CUBLAS_OP_N, CUBLAS_OP_N, out, rows, in, w, out, xa, in, 0.0f, y, out);
    } else {
      Gemm(ctx, CUBLAS_OP_T, CUBLAS_OP_N, out, rows, in, w, in, xa, in, 0.0f, y, out);
    }
    if (bias_) detail::LaunchAddBias(ctx.stream, params_ + static_cast<std::size_t>(out) * in, y, rows, out);
  }

  void BackwardInput(const Context& ctx, const float* x, const float* dy, float* dx, int rows) const override {
    (void)x;
    CheckRows(rows);
    if (rows == 0) return;
    const int in = in_features(), out = out_features();
    const void* w = Weights(ctx);
    const void* dya = Operand(ctx, dy, dy_bf16_, static_cast<std::size_t>(rows) * out);
    if (conv1d_) {
      Gemm(ctx, CUBLAS_OP_T, CUBLAS_OP_N, in, rows, out, w, out, dya, out, 0.0f, dx, in);
    } else {
      Gemm(ctx, CUBLAS_OP_N, CUBLAS_OP_N, in, rows, out, w, in, dya, out, 0.0f, dx, in);
    }
  }

  void BackwardWeight(const Context& ctx, const float* x, const float* dy, int rows) override {
    CheckRows(rows);
    if (rows == 0) return;
    const int in = in_features(), out = out_features();
    const void* xa = Operand(ctx, x, x_bf16_, static_cast<std::size_t>(rows) * in);
    const void* dya = Operand(ctx, dy, dy_bf16_, static_cast<std::size_t>(rows) * out);
    if (conv1d_) {
      Gemm(ctx, CUBLAS_OP_N, CUBLAS_OP_T, out, in, rows, dya, out, xa, in, 1.0f, grads_, out);
    } else {
      Gemm(ctx, CUBLAS_OP_N, CUBLAS_OP_T, in, out, rows, xa, in, dya, out, 1.0f, grads_, in);
    }
    if (bias_) detail::LaunchAddColumnSums(ctx.stream, dy, rows, out, grads_ + static_cast<std::size_t>(out) * in);
  }

 private:
  // The weight operand: the FP32 weights, or in BF16 their copy from the
  // last RefreshWeights.
  const void* Weights(const Context& ctx) const {
    return ctx.precision == Precision::kBF16 ? static_cast<const void*>(w_bf16_.data()) : params_;
  }

  // An activation operand as the precision wants it: the FP32 data itself,
  // or its BF16 rounding staged in `scratch`.
  const void* Operand(const Context& ctx, const float* data, DeviceBuffer<__nv_bfloat16>& scratch,
                      std::size_t n) const {
    if (ctx.precision != Precision::kBF16) return data;
    RoundToBf16Kernel<<<BlocksFor(n), kThreads, 0, ctx.stream>>>(data, scratch.data(), n);
    BATON_CUDA_CHECK_LAUNCH();
    return scratch.data();
  }

  // C (m, n) = op(A) op(B) + beta C, column-major, FP32 C: FP32 or TF32
  // products on the FP32 data (detail::GemmF32), or BF16 operands with FP32
  // accumulation.
  static void Gemm(const Context& ctx, cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k,
                   const void* a, int lda, const void* b, int ldb, float beta, float* c, int ldc) {
    if (ctx.precision != Precision::kBF16) {
      detail::GemmF32(ctx, op_a, op_b, m, n, k, static_cast<const float*>(a), lda, static_cast<const float*>(b), ldb,
                      beta, c, ldc);
      return;
    }
    const float alpha = 1.0f;
    BATON_CUBLAS_CHECK(cublasGemmEx(ctx.cublas, op_a, op_b, m, n, k, &alpha, a, CUDA_R_16BF, lda, b, CUDA_R_16BF, ldb,
                                    &beta, c, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  }


  bool bias_;
  bool conv1d_;  // weight stored (in, out)
  // BF16 roundings of the activation operands, rewritten by every BF16 call,
  // and of the weights, rewritten by RefreshWeights.
  mutable DeviceBuffer<__nv_bfloat16> x_bf16_;   // (max_rows, in)
  mutable DeviceBuffer<__nv_bfloat16> dy_bf16_;  // (max_rows, out)
  DeviceBuffer<__nv_bfloat16> w_bf16_;           // the weight's layout: (out, in), or (in, out) with conv1d
};

// ---- relu: y = max(x, 0) ----
class CudaRelu final : public SizedLayer {
 public:
  CudaRelu(const OpDesc& op, int max_rows) : SizedLayer(op, max_rows) {}

  void Forward(const Context& ctx, const float* x, float* y, int rows) const override {
    CheckRows(rows);
    const std::size_t n = static_cast<std::size_t>(rows) * in_features();
    if (n == 0) return;
    ReluForwardKernel<<<BlocksFor(n), kThreads, 0, ctx.stream>>>(x, y, n);
    BATON_CUDA_CHECK_LAUNCH();
  }

  void BackwardInput(const Context& ctx, const float* x, const float* dy, float* dx, int rows) const override {
    CheckRows(rows);
    const std::size_t n = static_cast<std::size_t>(rows) * in_features();
    if (n == 0) return;
    ReluBackwardKernel<<<BlocksFor(n), kThreads, 0, ctx.stream>>>(x, dy, dx, n);
    BATON_CUDA_CHECK_LAUNCH();
  }
};

// ---- gelu, tanh approximation ----
class CudaGelu final : public SizedLayer {
 public:
  CudaGelu(const OpDesc& op, int max_rows) : SizedLayer(op, max_rows) {}

  void Forward(const Context& ctx, const float* x, float* y, int rows) const override {
    CheckRows(rows);
    const std::size_t n = static_cast<std::size_t>(rows) * in_features();
    if (n == 0) return;
    GeluForwardKernel<<<BlocksFor(n), kThreads, 0, ctx.stream>>>(x, y, n);
    BATON_CUDA_CHECK_LAUNCH();
  }

  void BackwardInput(const Context& ctx, const float* x, const float* dy, float* dx, int rows) const override {
    CheckRows(rows);
    const std::size_t n = static_cast<std::size_t>(rows) * in_features();
    if (n == 0) return;
    GeluBackwardKernel<<<BlocksFor(n), kThreads, 0, ctx.stream>>>(x, dy, dx, n);
    BATON_CUDA_CHECK_LAUNCH();
  }
};

// ---- layernorm over features: PyTorch's nn.LayerNorm(in), elementwise affine ----
//   xhat = (x - mean) / sqrt(var + eps)  (biased variance),  y = xhat * weight + bias
class CudaLayerNorm final : public SizedLayer {
 public:
  CudaLayerNorm(const OpDesc& op, int max_rows)
      : SizedLayer(op, max_rows), eps_(static_cast<float>(op.eps)), stats_(2 * static_cast<std::size_t>(max_rows)) {}

  void Forward(const Context& ctx, const float* x, float* y, int rows) const override {
    CheckRows(rows);
    if (rows == 0) return;
    const int in = in_features();
    LayerNormForwardKernel<<<rows, RowThreads(in), 0, ctx.stream>>>(x, params_, params_ + in, y, rows, in, eps_);
    BATON_CUDA_CHECK_LAUNCH();
  }

  void BackwardInput(const Context& ctx, const float* x, const float* dy, float* dx, int rows) const override {
    CheckRows(rows);
    if (rows == 0) return;
    const int in = in_features();
    LayerNormBackwardInputKernel<<<rows, RowThreads(in), 0, ctx.stream>>>(x, dy, params_, dx, rows, in, eps_);
    BATON_CUDA_CHECK_LAUNCH();
  }

  std::size_t ScratchBytes() const override { return stats_.bytes(); }

  void BackwardWeight(const Context& ctx, const float* x, const float* dy, int rows) override {
    CheckRows(rows);
    if (rows == 0) return;
    const int in = in_features();
    LayerNormStatsKernel<<<rows, RowThreads(in), 0, ctx.stream>>>(x, stats_.data(), rows, in, eps_);
    BATON_CUDA_CHECK_LAUNCH();
    const dim3 block(32, kSumRows);
    LayerNormBackwardWeightKernel<<<(in + 31) / 32, block, 0, ctx.stream>>>(x, dy, stats_.data(), rows, in, grads_,
                                                                            grads_ + in);
    BATON_CUDA_CHECK_LAUNCH();
  }

 private:
  float eps_;
  DeviceBuffer<float> stats_;  // (max_rows, 2): mean, rstd, for BackwardWeight
};

}  // namespace

namespace detail {

void LaunchAddBias(cudaStream_t stream, const float* bias, float* y, int rows, int cols) {
  const std::size_t n = static_cast<std::size_t>(rows) * cols;
  if (n == 0) return;
  AddBiasKernel<<<BlocksFor(n), kThreads, 0, stream>>>(bias, y, n, cols);
  BATON_CUDA_CHECK_LAUNCH();
}

void LaunchAddColumnSums(cudaStream_t stream, const float* m, int rows, int cols, float* out) {
  if (cols == 0) return;
  const dim3 block(32, kSumRows);
  AddColumnSumsKernel<<<(cols + 31) / 32, block, 0, stream>>>(m, rows, cols, out);
  BATON_CUDA_CHECK_LAUNCH();
}

namespace {
cublasComputeType_t F32Compute(const Context& ctx) {
  return ctx.precision == Precision::kTF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}
}  // namespace

// TF32: FP32 data, tensor-core products with inputs rounded to TF32 (10-bit
// mantissa), FP32 accumulation, as torch.backends.cuda.matmul.allow_tf32.
void GemmF32(const Context& ctx, cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k, const float* a,
             int lda, const float* b, int ldb, float beta, float* c, int ldc) {
  const float alpha = 1.0f;
  BATON_CUBLAS_CHECK(cublasGemmEx(ctx.cublas, op_a, op_b, m, n, k, &alpha, a, CUDA_R_32F, lda, b, CUDA_R_32F, ldb,
                                  &beta, c, CUDA_R_32F, ldc, F32Compute(ctx), CUBLAS_GEMM_DEFAULT));
}

void GemmF32Batched(const Context& ctx, cublasOperation_t op_a, cublasOperation_t op_b, int m, int n, int k,
                    const float* a, int lda, long long stride_a, const float* b, int ldb, long long stride_b,
                    float beta, float* c, int ldc, long long stride_c, int batch) {
  const float alpha = 1.0f;
  BATON_CUBLAS_CHECK(cublasGemmStridedBatchedEx(ctx.cublas, op_a, op_b, m, n, k, &alpha, a, CUDA_R_32F, lda, stride_a,
                                                b, CUDA_R_32F, ldb, stride_b, &beta, c, CUDA_R_32F, ldc, stride_c,
                                                batch, F32Compute(ctx), CUBLAS_GEMM_DEFAULT));
}

}  // namespace detail

// The per-row layers' view calls: the matrix calls over (every token row,
// features).
void CudaLayer::ForwardOp(const Context& ctx, const ConstView& x, const View& y, float*) const {
  Forward(ctx, x.as<float>(), y.as<float>(), static_cast<int>(x.desc.matrix_rows()));
}

void CudaLayer::BackwardInputOp(const Context& ctx, const ConstView& x, const float*, const ConstView& dy,
                                const View& dx, float*) const {
  if (dx.data == nullptr) return;
  BackwardInput(ctx, x.as<float>(), dy.as<float>(), dx.as<float>(), static_cast<int>(x.desc.matrix_rows()));
}

void CudaLayer::BackwardWeightOp(const Context& ctx, const ConstView& x, const float*, const ConstView& dy,
                                 const float*) {
  BackwardWeight(ctx, x.as<float>(), dy.as<float>(), static_cast<int>(x.desc.matrix_rows()));
}

std::unique_ptr<CudaLayer> MakeCudaLayer(const OpDesc& op, int max_rows) {
  if (max_rows < 1) {
    throw ConfigError("cuda " + std::string(EnumName(op.type)) + " layer: max_rows must be >= 1, got " +
                      std::to_string(max_rows));
  }
  switch (op.type) {
    case LayerType::kLinear:
      return std::make_unique<CudaLinear>(op, max_rows);
    case LayerType::kRelu:
      return std::make_unique<CudaRelu>(op, max_rows);
    case LayerType::kGelu:
      return std::make_unique<CudaGelu>(op, max_rows);
    case LayerType::kLayerNorm:
      return std::make_unique<CudaLayerNorm>(op, max_rows);
    case LayerType::kEmbedding:
    case LayerType::kPositionEmbedding:
    case LayerType::kAttention:
      return detail::MakeTransformerLayer(op, max_rows);
    case LayerType::kResidual:
      break;
  }
  throw ConfigError("op " + op.name + ": an add is not a layer (the stage adds the skip itself)");
}

std::unique_ptr<CudaLayer> MakeCudaLayer(const LayerSpec& spec, int in, int max_rows) {
  return MakeCudaLayer(DescribeLayer(spec, in), max_rows);
}

}  // namespace baton::cuda
