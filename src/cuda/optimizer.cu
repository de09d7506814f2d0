// The clip's pass over the gradients (their squares' sums in a fixed
// order, their scaling), then SGD and AdamW on device buffers with the CPU
// optimizers' update rules (src/model/optimizer.cc, PyTorch's
// single-tensor path): scalar
// coefficients are formed in double on the host and rounded to float, and
// each elementwise operation is rounded on its own. nvcc would fuse a
// multiply and an add into one FMA (one rounding instead of two), so the
// kernels spell the roundings out with the _rn intrinsics; an FP32 run then
// follows the CPU's arithmetic operation by operation.
#include <algorithm>
#include <cmath>

#include "baton/error.h"
#include "cuda_layers.h"

namespace baton::cuda {
namespace {

constexpr int kThreads = 256;

// Blocks for a grid-stride loop over n elements (capped so the count is an int).
int BlocksFor(std::size_t n) {
  const std::size_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(std::min<std::size_t>(blocks, 1 << 16));
}

// Each range's blocks in SquaresKernel: a block per 2,048 floats, at most
// kSquareBlocks; a function of the range's length alone, so that a range
// of the same floats sums in the same order wherever it lies.
__host__ __device__ inline unsigned BlocksOfRange(std::size_t count) {
  const std::size_t blocks = (count + 8 * kThreads - 1) / (8 * kThreads);
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > kSquareBlocks ? kSquareBlocks : blocks));
}

// The sum of v over a warp, the same lanes adding in the same order every time.
__device__ inline double WarpSum(double v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Block (b, r) of range r = (ranges[2r], ranges[2r + 1]) (first, count):
// partials[r kSquareBlocks + b] = the sum of the squares of its share of
// the range's floats (a grid-stride loop over the range's own blocks), in
// double (a float's square is exact there), by warps then in warp order.
__global__ void SquaresKernel(const float* __restrict__ x, const std::size_t* __restrict__ ranges,
                              double* __restrict__ partials) {
  const std::size_t first = ranges[2 * blockIdx.y], count = ranges[2 * blockIdx.y + 1];
  const unsigned blocks = BlocksOfRange(count);
  if (blockIdx.x >= blocks) return;  // the whole block: the range needs fewer
  double mine = 0;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(blocks) * blockDim.x) {
    const double v = x[first + i];
    mine += v * v;
  }
  __shared__ double warps[32];
  mine = WarpSum(mine);
  if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = mine;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0;
    for (unsigned w = 0; w < blockDim.x / 32; ++w) total += warps[w];
    partials[blockIdx.y * static_cast<std::size_t>(kSquareBlocks) + blockIdx.x] = total;
  }
}

// One warp a range: sums[r] = its blocks' partials, lane by lane in block
// order, then across the warp.
__global__ void SquareSumsKernel(const std::size_t* __restrict__ ranges, const double* __restrict__ partials,
                                 double* __restrict__ sums) {
  const unsigned blocks = BlocksOfRange(ranges[2 * blockIdx.x + 1]);
  double mine = 0;
  for (unsigned b = threadIdx.x; b < blocks; b += 32) mine += partials[blockIdx.x * std::size_t{kSquareBlocks} + b];
  mine = WarpSum(mine);
  if (threadIdx.x == 0) sums[blockIdx.x] = mine;
}

__global__ void ScaleKernel(float* __restrict__ x, std::size_t n, float factor) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    x[i] = __fmul_rn(x[i], factor);
  }
}

// State starts at zero, as the CPU optimizers' does (a checkpoint taken before
// the first step holds zeros). Zeroed on the legacy stream and waited for
// here, at construction, because the steps run on a non-blocking stream that
// does not wait for the legacy one.
void Zero(DeviceBuffer<float>& buffer) {
  if (buffer.size() == 0) return;
  BATON_CUDA_CHECK(cudaMemset(buffer.data(), 0, buffer.bytes()));
  BATON_CUDA_CHECK(cudaDeviceSynchronize());
}

// torch.optim.SGD without momentum:
//   p -= lr * (grad + weight_decay * p)   (p -= lr * grad without weight decay)
__global__ void SgdKernel(float* __restrict__ p, const float* __restrict__ grad, std::size_t n, float lr,
                          float weight_decay, bool decay) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const float g = decay ? __fadd_rn(grad[i], __fmul_rn(weight_decay, p[i])) : grad[i];
    p[i] = __fsub_rn(p[i], __fmul_rn(lr, g));
  }
}

// torch.optim.SGD with momentum (dampening 0, nesterov off):
//   g = grad + weight_decay * p
//   buf = g on the first step, momentum * buf + g after
//   p -= lr * buf
__global__ void SgdMomentumKernel(float* __restrict__ p, const float* __restrict__ grad, float* __restrict__ buf,
                                  std::size_t n, float lr, float momentum, float weight_decay, bool first) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const float g = __fadd_rn(grad[i], __fmul_rn(weight_decay, p[i]));
    const float b = first ? g : __fadd_rn(__fmul_rn(momentum, buf[i]), g);
    buf[i] = b;
    p[i] = __fsub_rn(p[i], __fmul_rn(lr, b));
  }
}

// The per-step scalars of AdamW, rounded to float on the host.
struct AdamWCoefficients {
  float decay;                  // 1 - lr * weight_decay
  float w;                      // 1 - beta1, torch.lerp's weight
  float beta2;                  // beta2
  float one_minus_beta2;        // 1 - beta2
  float step_size;              // lr / (1 - beta1^t)
  float bias_correction2_sqrt;  // sqrt(1 - beta2^t)
  float eps;
};

// torch.optim.AdamW (amsgrad off), in the CPU optimizer's order:
//   p *= 1 - lr * weight_decay
//   m = lerp(m, g, 1 - beta1)   (torch.lerp's two forms, chosen by the weight)
//   v = v * beta2 + ((1 - beta2) * g) * g
//   p += (-step_size * m) / (sqrt(v) / sqrt(1 - beta2^t) + eps)
__global__ void AdamWKernel(float* __restrict__ p, const float* __restrict__ grad, float* __restrict__ m,
                            float* __restrict__ v, std::size_t n, AdamWCoefficients c) {
  const bool small_weight = fabsf(c.w) < 0.5f;
  const float one_minus_w = __fsub_rn(1.0f, c.w);
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const float g = grad[i];
    const float param = __fmul_rn(p[i], c.decay);
    const float diff = __fsub_rn(g, m[i]);
    const float mi = small_weight ? __fadd_rn(m[i], __fmul_rn(c.w, diff)) : __fsub_rn(g, __fmul_rn(diff, one_minus_w));
    const float vi = __fadd_rn(__fmul_rn(v[i], c.beta2), __fmul_rn(__fmul_rn(c.one_minus_beta2, g), g));
    const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), c.bias_correction2_sqrt), c.eps);
    m[i] = mi;
    v[i] = vi;
    p[i] = __fadd_rn(param, __fdiv_rn(__fmul_rn(-c.step_size, mi), denom));
  }
}

class CudaSgd final : public CudaOptimizer {
 public:
  CudaSgd(const OptimizerSpec& s, std::size_t num_params)
      : CudaOptimizer(s),
        num_params_(num_params),
        momentum_(static_cast<float>(s.momentum)),
        weight_decay_(static_cast<float>(s.weight_decay)),
        buf_(s.momentum != 0.0 ? num_params : 0) {
    Zero(buf_);
  }

  void Step(const Context& ctx, float* params, const float* grads) override {
    // As on the CPU: the branch follows the float momentum, the buffer's
    // existence the configured one; the rate is the step's (a schedule's).
    const auto lr = static_cast<float>(spec_.lr);
    if (num_params_ > 0) {
      if (momentum_ == 0.0f) {
        SgdKernel<<<BlocksFor(num_params_), kThreads, 0, ctx.stream>>>(params, grads, num_params_, lr, weight_decay_,
                                                                       weight_decay_ != 0.0f);
      } else {
        SgdMomentumKernel<<<BlocksFor(num_params_), kThreads, 0, ctx.stream>>>(
            params, grads, buf_.data(), num_params_, lr, momentum_, weight_decay_, steps_ == 0);
      }
      BATON_CUDA_CHECK_LAUNCH();
    }
    ++steps_;
  }

  std::vector<std::span<float>> State() override {
    if (buf_.size() == 0) return {};
    return {std::span<float>(buf_.data(), buf_.size())};
  }

 private:
  std::size_t num_params_;
  float momentum_, weight_decay_;
  DeviceBuffer<float> buf_;  // momentum buffer; empty without momentum
};

class CudaAdamW final : public CudaOptimizer {
 public:
  CudaAdamW(const OptimizerSpec& s, std::size_t num_params)
      : CudaOptimizer(s), num_params_(num_params), exp_avg_(num_params), exp_avg_sq_(num_params) {
    Zero(exp_avg_);
    Zero(exp_avg_sq_);
  }

  void Step(const Context& ctx, float* params, const float* grads) override {
    ++steps_;
    if (num_params_ == 0) return;
    const double t = static_cast<double>(steps_);
    const double bias_correction1 = 1.0 - std::pow(spec_.beta1, t);
    const double bias_correction2 = 1.0 - std::pow(spec_.beta2, t);
    const AdamWCoefficients c{
        .decay = static_cast<float>(1.0 - spec_.lr * spec_.weight_decay),
        .w = static_cast<float>(1.0 - spec_.beta1),
        .beta2 = static_cast<float>(spec_.beta2),
        .one_minus_beta2 = static_cast<float>(1.0 - spec_.beta2),
        .step_size = static_cast<float>(spec_.lr / bias_correction1),
        .bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2)),
        .eps = static_cast<float>(spec_.eps),
    };
    AdamWKernel<<<BlocksFor(num_params_), kThreads, 0, ctx.stream>>>(params, grads, exp_avg_.data(), exp_avg_sq_.data(),
                                                                     num_params_, c);
    BATON_CUDA_CHECK_LAUNCH();
  }

  std::vector<std::span<float>> State() override {
    return {std::span<float>(exp_avg_.data(), exp_avg_.size()),
            std::span<float>(exp_avg_sq_.data(), exp_avg_sq_.size())};
  }

 private:
  std::size_t num_params_;
  DeviceBuffer<float> exp_avg_;     // m
  DeviceBuffer<float> exp_avg_sq_;  // v
};

}  // namespace

void SquareSums(const Context& ctx, const float* x, const std::size_t* ranges, int count, std::size_t longest,
                double* partials, double* sums) {
  // The ranges in launches of at most 65,535 (a grid's y extent).
  constexpr int kMostRanges = 65535;
  for (int at = 0; at < count; at += kMostRanges) {
    const int n = std::min(kMostRanges, count - at);
    const std::size_t* these = ranges + 2 * static_cast<std::size_t>(at);
    double* their_partials = partials + static_cast<std::size_t>(at) * kSquareBlocks;
    const dim3 grid(BlocksOfRange(longest), static_cast<unsigned>(n));
    SquaresKernel<<<grid, kThreads, 0, ctx.stream>>>(x, these, their_partials);
    BATON_CUDA_CHECK_LAUNCH();
    SquareSumsKernel<<<n, 32, 0, ctx.stream>>>(these, their_partials, sums + at);
    BATON_CUDA_CHECK_LAUNCH();
  }
}

void Scale(const Context& ctx, float* x, std::size_t n, float factor) {
  if (n == 0) return;
  ScaleKernel<<<BlocksFor(n), kThreads, 0, ctx.stream>>>(x, n, factor);
  BATON_CUDA_CHECK_LAUNCH();
}

std::unique_ptr<CudaOptimizer> MakeCudaOptimizer(const OptimizerSpec& spec, std::size_t num_params) {
  CheckOptimizerSpec(spec);
  if (spec.type == OptimizerType::kSgd) return std::make_unique<CudaSgd>(spec, num_params);
  return std::make_unique<CudaAdamW>(spec, num_params);
}

}  // namespace baton::cuda
