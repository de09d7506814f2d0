// Softmax cross-entropy over one microbatch on the device, as
// baton::CrossEntropy (PyTorch's nn.CrossEntropyLoss(reduction='sum') with the
// gradient scaled by the caller), and the residual block's additions.
#include <algorithm>
#include <climits>
#include <limits>
#include <string>

#include "baton/error.h"
#include "cuda_layers.h"

namespace baton::cuda {
namespace {

constexpr int kThreads = 256;
constexpr unsigned kFullWarp = 0xffffffffu;

// Blocks for a grid-stride loop over n elements (capped so the count is an int).
int BlocksFor(std::size_t n) {
  const std::size_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<int>(std::min<std::size_t>(blocks, 1 << 16));
}

__global__ void AddKernel(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ out,
                          std::size_t n) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    out[i] = a[i] + b[i];
  }
}

__global__ void AddIntoKernel(const float* __restrict__ x, float* __restrict__ y, std::size_t n) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    y[i] += x[i];
  }
}

// *largest = max(*largest, the largest |x| of x's floats as bits): a float
// is a NaN or an infinity exactly when that reaches 0x7f800000. One atomic
// per block, after the block's own max by warp shuffles.
__global__ void LargestBitsKernel(const float* __restrict__ x, std::size_t n, unsigned* __restrict__ largest) {
  unsigned mine = 0;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    mine = max(mine, __float_as_uint(x[i]) & 0x7fffffffu);
  }
  for (int offset = 16; offset > 0; offset /= 2) mine = max(mine, __shfl_down_sync(kFullWarp, mine, offset));
  __shared__ unsigned warps[32];
  if (threadIdx.x % 32 == 0) warps[threadIdx.x / 32] = mine;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (unsigned w = 1; w < blockDim.x / 32; ++w) mine = max(mine, warps[w]);
    atomicMax(largest, mine);
  }
}

// Sum of v over the block, returned to every thread. REQUIRES: blockDim.x is a
// multiple of 32; every thread calls it. `shared` holds 32 floats; the
// closing barrier lets the next call reuse it.
__device__ float BlockSum(float v, float* shared) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullWarp, v, offset);
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x / 32) ? shared[lane] : 0.0f;
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullWarp, v, offset);
  __syncthreads();
  return v;
}

// The order of the argmax: the larger value, and on ties the smaller index
// (torch.argmax and the CPU loss take the first maximum). A total order on
// non-NaN values, so every lane of a butterfly ends with the same winner.
__device__ bool Precedes(float v1, int i1, float v2, int i2) { return v1 > v2 || (v1 == v2 && i1 < i2); }

__device__ void WarpArgMax(float& v, int& i) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float other_v = __shfl_xor_sync(kFullWarp, v, offset);
    const int other_i = __shfl_xor_sync(kFullWarp, i, offset);
    if (Precedes(other_v, other_i, v, i)) {
      v = other_v;
      i = other_i;
    }
  }
}

// The block's (max, first index of the max), returned to every thread; the
// requirements of BlockSum. A thread that saw no element holds (-inf, INT_MAX),
// which loses to every real element, -inf included.
__device__ void BlockArgMax(float& v, int& i, float* shared_v, int* shared_i) {
  WarpArgMax(v, i);
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  if (lane == 0) {
    shared_v[warp] = v;
    shared_i[warp] = i;
  }
  __syncthreads();
  if (lane < static_cast<int>(blockDim.x / 32)) {
    v = shared_v[lane];
    i = shared_i[lane];
  } else {
    v = -std::numeric_limits<float>::infinity();
    i = INT_MAX;
  }
  WarpArgMax(v, i);
  __syncthreads();
}

// One block per row (grid-stride over rows). Thread 0 gathers the block's
// loss and hits and adds them with one atomic each at the end. A label of
// kIgnoreLabel (a packed sample's unfilled positions) adds no loss and
// gets a zero gradient row, as PyTorch's ignore_index. Any other label
// outside [0, classes) cannot be reported from here without synchronising,
// so it poisons the loss and its dlogits row with NaN instead of reading
// outside the row.
__global__ void CrossEntropyKernel(const float* __restrict__ logits, const std::int32_t* __restrict__ labels, int rows,
                                   int classes, float grad_scale, float* __restrict__ dlogits, double* loss_sum,
                                   unsigned long long* correct) {
  __shared__ float shared_v[32];
  __shared__ int shared_i[32];
  __shared__ float shared_sum[32];
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  double block_loss = 0.0;
  unsigned long long block_hits = 0;
  for (int row = static_cast<int>(blockIdx.x); row < rows; row += static_cast<int>(gridDim.x)) {
    const std::size_t base = static_cast<std::size_t>(row) * classes;
    const float* z = logits + base;  // (classes)

    float max = -std::numeric_limits<float>::infinity();
    int argmax = INT_MAX;
    for (int j = static_cast<int>(threadIdx.x); j < classes; j += static_cast<int>(blockDim.x)) {
      if (Precedes(z[j], j, max, argmax)) {
        max = z[j];
        argmax = j;
      }
    }
    BlockArgMax(max, argmax, shared_v, shared_i);

    // log softmax[label] = (z[label] - max) - log sum exp(z - max): no exp overflows.
    float partial = 0.0f;
    for (int j = static_cast<int>(threadIdx.x); j < classes; j += static_cast<int>(blockDim.x)) {
      partial += expf(z[j] - max);
    }
    const float sum_exp = BlockSum(partial, shared_sum);

    const std::int32_t label = labels[row];
    if (label == kIgnoreLabel) {
      if (dlogits != nullptr) {
        for (int j = static_cast<int>(threadIdx.x); j < classes; j += static_cast<int>(blockDim.x)) dlogits[base + j] = 0;
      }
      continue;
    }
    const bool valid = label >= 0 && label < classes;
    if (dlogits != nullptr) {
      // The CPU's rounding: exp(z - max) * (grad_scale / sum_exp), then the
      // label's grad_scale taken off.
      const float scale = grad_scale / sum_exp;
      for (int j = static_cast<int>(threadIdx.x); j < classes; j += static_cast<int>(blockDim.x)) {
        float d = valid ? expf(z[j] - max) * scale : kNaN;
        if (j == label) d -= grad_scale;
        dlogits[base + j] = d;
      }
    }
    if (threadIdx.x == 0) {
      if (valid) {
        block_loss += static_cast<double>(logf(sum_exp)) - static_cast<double>(z[label] - max);
        block_hits += argmax == label ? 1 : 0;
      } else {
        block_loss = std::numeric_limits<double>::quiet_NaN();
      }
    }
  }
  if (threadIdx.x == 0) {
    if (loss_sum != nullptr) atomicAdd(loss_sum, block_loss);
    if (correct != nullptr && block_hits != 0) atomicAdd(correct, block_hits);
  }
}

}  // namespace

void Add(const Context& ctx, const float* a, const float* b, float* out, std::size_t n) {
  if (n == 0) return;
  AddKernel<<<BlocksFor(n), kThreads, 0, ctx.stream>>>(a, b, out, n);
  BATON_CUDA_CHECK_LAUNCH();
}

void LargestBits(const Context& ctx, const float* x, std::size_t n, unsigned* largest) {
  if (n == 0) return;
  LargestBitsKernel<<<BlocksFor(n), kThreads, 0, ctx.stream>>>(x, n, largest);
  BATON_CUDA_CHECK_LAUNCH();
}

void AddInto(const Context& ctx, const float* x, float* y, std::size_t n) {
  if (n == 0) return;
  AddIntoKernel<<<BlocksFor(n), kThreads, 0, ctx.stream>>>(x, y, n);
  BATON_CUDA_CHECK_LAUNCH();
}

void CrossEntropy(const Context& ctx, const float* logits, const std::int32_t* labels, int rows, int classes,
                  float grad_scale, float* dlogits, double* loss_sum, unsigned long long* correct) {
  if (rows < 0 || classes < 1) {
    // (fmt's headers do not compile under nvcc in C++20 mode.)
    throw Error("cuda cross-entropy: " + std::to_string(rows) + " rows of " + std::to_string(classes) +
                " classes; need rows >= 0 and classes >= 1");
  }
  if (rows == 0) return;
  // Whole warps, no more than a row can use; enough blocks to fill the
  // device, few enough that the per-block atomics stay cheap. The atomics'
  // order varies, so *loss_sum may differ in its last bits between runs; the
  // gradient does not.
  const int threads = std::clamp((classes + 31) / 32 * 32, 32, kThreads);
  const int blocks = std::min(rows, 1024);
  CrossEntropyKernel<<<blocks, threads, 0, ctx.stream>>>(logits, labels, rows, classes, grad_scale, dlogits, loss_sum,
                                                         correct);
  BATON_CUDA_CHECK_LAUNCH();
}

}  // namespace baton::cuda
