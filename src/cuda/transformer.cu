// The transformer's layers on a CUDA device, with the host layers' parameter
// layouts, saved state and stash (src/model/attention.h, layers.cc), so a
// GPT trains on either:
//
// - embedding: token ids -> rows of the table (nn.Embedding); its weight
//   gradient adds each row's gradient into the token's table row with
//   atomicAdd (the order of those float additions varies from run to run:
//   equal to the host's to rounding, not bit for bit);
// - position embedding: y[s, t] = x[s, t] + table[t] (GPT-2's wpe), a packed
//   document's positions restarting at its first token; the table's
//   gradient summed row by row in order, as the host sums it, where
//   documents are packed;
// - causal self-attention (GPT-2's): the fused QKV projection and the output
//   projection through cuBLAS, each sample's heads' scores and weighted
//   values as strided-batched products over the heads, and the causal
//   softmax (scale, mask, log-sum-exp) and its backward as kernels, one
//   block per row. Like the host, forward keeps q, k, v, each row's
//   log-sum-exp and the heads' output; backward recomputes the probabilities
//   from them; I leaves the qkv gradient for W. Packed documents
//   (Context::starts): a call of T tokens (its views' shape) takes T x T
//   products, and the mask keeps each row to its own document's keys
//   (keys from starts[i] to i), so a document's probabilities, and so its
//   outputs and gradients, are those of the document alone.
//
// Attention's products stay FP32 (TF32 under precision: tf32) in every
// precision: only the linear layers take BF16 operands.
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>

#include "baton/error.h"
#include "cuda_layers.h"
#include "kernels.cuh"

namespace baton::cuda::detail {
namespace {

// ---- kernels ----

// y (rows, c) = table[ids[r]]; an id outside [0, vocab) gives a zero row
// (the data's tokens are checked against the vocabulary on the host).
__global__ void EmbeddingForwardKernel(const std::int32_t* __restrict__ ids, const float* __restrict__ table,
                                       float* __restrict__ y, std::size_t n, int c, int vocab) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::size_t r = i / static_cast<std::size_t>(c), k = i % static_cast<std::size_t>(c);
    const std::int32_t id = ids[r];
    y[i] = id >= 0 && id < vocab ? table[static_cast<std::size_t>(id) * c + k] : 0.0f;
  }
}

// grads[ids[r]] += dy[r] for every row r.
__global__ void EmbeddingBackwardWeightKernel(const std::int32_t* __restrict__ ids, const float* __restrict__ dy,
                                              float* __restrict__ grads, std::size_t n, int c, int vocab) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::size_t r = i / static_cast<std::size_t>(c), k = i % static_cast<std::size_t>(c);
    const std::int32_t id = ids[r];
    if (id >= 0 && id < vocab) atomicAdd(grads + static_cast<std::size_t>(id) * c + k, dy[i]);
  }
}

// Token row r's position (of `tokens` a sample, the sequence's `seq`
// positions apart in `starts`): its place in the sequence, from its
// document's first token where documents are packed.
__device__ inline std::size_t PositionOf(std::size_t r, std::size_t tokens, std::size_t seq,
                                         const std::int32_t* __restrict__ starts) {
  const std::size_t n = r / tokens, t = r % tokens;
  return starts == nullptr ? t : t - static_cast<std::size_t>(starts[n * seq + t]);
}

// y = x + table[position] (rows of c floats, `tokens` rows a sample).
__global__ void PositionForwardKernel(const float* __restrict__ x, const float* __restrict__ table,
                                      float* __restrict__ y, std::size_t n, int c, std::size_t tokens,
                                      std::size_t seq, const std::int32_t* __restrict__ starts) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::size_t r = i / static_cast<std::size_t>(c), k = i % static_cast<std::size_t>(c);
    y[i] = x[i] + table[PositionOf(r, tokens, seq, starts) * c + k];
  }
}

// Packed documents: grads[position] += dy[r] for every row r, the rows in
// order for each table entry (the host's order of the additions). A block
// takes `features` features (blockIdx.x's), their column of the table's
// first `seq` rows staged in shared memory (seq x features floats), and
// one thread a feature walks the rows there; without room for the
// column (features 0), each thread adds into the table in place.
__global__ void PositionGradientKernel(const float* __restrict__ dy, float* __restrict__ grads, std::size_t rows,
                                       int c, std::size_t tokens, std::size_t seq,
                                       const std::int32_t* __restrict__ starts, int features) {
  extern __shared__ float column[];  // (seq, features)
  if (features == 0) {
    const std::size_t k = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
    if (k >= static_cast<std::size_t>(c)) return;
    for (std::size_t r = 0; r < rows; ++r) grads[PositionOf(r, tokens, seq, starts) * c + k] += dy[r * c + k];
    return;
  }
  const std::size_t first = static_cast<std::size_t>(blockIdx.x) * static_cast<std::size_t>(features);
  const auto width = static_cast<std::size_t>(features);
  const std::size_t left = static_cast<std::size_t>(c) - first;
  const std::size_t mine = left < width ? left : width;  // the last block's may be fewer
  for (std::size_t e = threadIdx.x; e < seq * width; e += blockDim.x) {
    const std::size_t f = e % width;
    column[e] = f < mine ? grads[(e / width) * c + first + f] : 0.0f;
  }
  __syncthreads();
  if (threadIdx.x < mine) {
    const std::size_t f = threadIdx.x;
    for (std::size_t r = 0; r < rows; ++r) column[PositionOf(r, tokens, seq, starts) * width + f] += dy[r * c + first + f];
  }
  __syncthreads();
  for (std::size_t e = threadIdx.x; e < seq * width; e += blockDim.x) {
    const std::size_t f = e % width;
    if (f < mine) grads[(e / width) * c + first + f] = column[e];
  }
}

// The first key row i of a sample attends to: its document's first
// (`starts`: the sample's, per token), else 0.
__device__ inline int FirstKey(const std::int32_t* __restrict__ starts, int i) {
  return starts == nullptr ? 0 : static_cast<int>(starts[i]);
}

// One sample's scores, (heads, T, T) row-major, in place: row i of head h
// becomes softmax over lo <= j <= i of scale * s[i, j] (zero elsewhere; lo
// the row's FirstKey), and lse[h T + i] its log-sum-exp (of the scaled
// scores). One block per row.
__global__ void CausalSoftmaxKernel(float* __restrict__ s, float* __restrict__ lse, int rows, int t, float scale,
                                    const std::int32_t* __restrict__ starts) {
  __shared__ float shared[32];
  for (int row = static_cast<int>(blockIdx.x); row < rows; row += static_cast<int>(gridDim.x)) {
    const int i = row % t, lo = FirstKey(starts, i);
    float* r = s + static_cast<std::size_t>(row) * t;
    float m = -INFINITY;
    for (int j = lo + static_cast<int>(threadIdx.x); j <= i; j += static_cast<int>(blockDim.x)) {
      m = fmaxf(m, r[j] * scale);
    }
    m = BlockMax(m, shared);
    float sum = 0.0f;
    for (int j = lo + static_cast<int>(threadIdx.x); j <= i; j += static_cast<int>(blockDim.x)) {
      sum += expf(r[j] * scale - m);
    }
    sum = BlockSum(sum, shared);
    const float inv = 1.0f / sum;
    for (int j = static_cast<int>(threadIdx.x); j < t; j += static_cast<int>(blockDim.x)) {
      r[j] = j >= lo && j <= i ? expf(r[j] * scale - m) * inv : 0.0f;
    }
    if (threadIdx.x == 0) lse[row] = m + logf(sum);
  }
}

// The probabilities again from the scores and the saved log-sum-exp:
// p[i, j] = exp(scale s[i, j] - lse[i]) for lo <= j <= i, else 0.
__global__ void CausalProbabilitiesKernel(float* __restrict__ s, const float* __restrict__ lse, std::size_t n, int t,
                                          float scale, const std::int32_t* __restrict__ starts) {
  for (std::size_t e = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::size_t row = e / static_cast<std::size_t>(t);
    const int j = static_cast<int>(e % static_cast<std::size_t>(t)), i = static_cast<int>(row % t);
    s[e] = j >= FirstKey(starts, i) && j <= i ? expf(s[e] * scale - lse[row]) : 0.0f;
  }
}

// Softmax backward in place of dp, one block per row:
// ds[i, j] = p[i, j] (dp[i, j] - sum_k p[i, k] dp[i, k]) scale for
// lo <= j <= i, else 0.
__global__ void CausalSoftmaxBackwardKernel(const float* __restrict__ p, float* __restrict__ dp, int rows, int t,
                                            float scale, const std::int32_t* __restrict__ starts) {
  __shared__ float shared[32];
  for (int row = static_cast<int>(blockIdx.x); row < rows; row += static_cast<int>(gridDim.x)) {
    const int i = row % t, lo = FirstKey(starts, i);
    const float* pr = p + static_cast<std::size_t>(row) * t;
    float* dr = dp + static_cast<std::size_t>(row) * t;
    float dot = 0.0f;
    for (int j = lo + static_cast<int>(threadIdx.x); j <= i; j += static_cast<int>(blockDim.x)) dot += pr[j] * dr[j];
    dot = BlockSum(dot, shared);
    for (int j = static_cast<int>(threadIdx.x); j < t; j += static_cast<int>(blockDim.x)) {
      dr[j] = j >= lo && j <= i ? pr[j] * (dr[j] - dot) * scale : 0.0f;
    }
  }
}

int Samples(const ConstView& x) { return static_cast<int>(x.desc.shape[0]); }

// The layers here run on views; the matrix calls of per-row layers do not
// apply to them.
[[noreturn]] void NotPerRow(const OpDesc& op) {
  throw Error("cuda " + std::string(EnumName(op.type)) + " layer " + op.name +
              ": not a per-row layer; call it through ForwardOp / BackwardInputOp / BackwardWeightOp");
}

class ViewLayer : public SizedLayer {
 public:
  void Forward(const Context&, const float*, float*, int) const override { NotPerRow(desc()); }
  void BackwardInput(const Context&, const float*, const float*, float*, int) const override { NotPerRow(desc()); }
  void BackwardWeight(const Context&, const float*, const float*, int) override { NotPerRow(desc()); }

 protected:
  ViewLayer(const OpDesc& op, int max_rows) : SizedLayer(op, max_rows) {}
};

// ---- embedding ----
class CudaEmbedding final : public ViewLayer {
 public:
  CudaEmbedding(const OpDesc& op, int max_rows) : ViewLayer(op, max_rows) {}

  void ForwardOp(const Context& ctx, const ConstView& x, const View& y, float*) const override {
    const int rows = static_cast<int>(x.desc.elements());
    CheckRows(rows);
    const std::size_t n = static_cast<std::size_t>(rows) * out_features();
    if (n == 0) return;
    EmbeddingForwardKernel<<<BlocksFor(n), kThreads, 0, ctx.stream>>>(x.as<std::int32_t>(), params_, y.as<float>(), n,
                                                                      out_features(), desc().vocab);
    BATON_CUDA_CHECK_LAUNCH();
  }
  // Token ids have no gradient.
  void BackwardInputOp(const Context&, const ConstView&, const float*, const ConstView&, const View&,
                       float*) const override {}
  void BackwardWeightOp(const Context& ctx, const ConstView& x, const float*, const ConstView& dy,
                        const float*) override {
    const int rows = static_cast<int>(x.desc.elements());
    CheckRows(rows);
    const std::size_t n = static_cast<std::size_t>(rows) * out_features();
    if (n == 0) return;
    EmbeddingBackwardWeightKernel<<<BlocksFor(n), kThreads, 0, ctx.stream>>>(x.as<std::int32_t>(), dy.as<float>(),
                                                                             grads_, n, out_features(), desc().vocab);
    BATON_CUDA_CHECK_LAUNCH();
  }
};

// ---- position embedding ----
class CudaPositionEmbedding final : public ViewLayer {
 public:
  CudaPositionEmbedding(const OpDesc& op, int max_rows) : ViewLayer(op, max_rows) {}

  void ForwardOp(const Context& ctx, const ConstView& x, const View& y, float*) const override {
    CheckRows(static_cast<int>(x.desc.matrix_rows()));
    const auto n = static_cast<std::size_t>(x.desc.elements());
    if (n == 0) return;
    PositionForwardKernel<<<BlocksFor(n), kThreads, 0, ctx.stream>>>(x.as<float>(), params_, y.as<float>(), n,
                                                                     out_features(), Tokens(x.desc), Seq(), ctx.starts);
    BATON_CUDA_CHECK_LAUNCH();
  }
  void BackwardInputOp(const Context& ctx, const ConstView&, const float*, const ConstView& dy, const View& dx,
                       float*) const override {
    if (dx.data == nullptr || dy.bytes() == 0) return;
    BATON_CUDA_CHECK(cudaMemcpyAsync(dx.data, dy.data, dy.bytes(), cudaMemcpyDeviceToDevice, ctx.stream));
  }
  // The table's gradient: the column sums of dy as (samples, seq x
  // features); packed, each row into its position's.
  void BackwardWeightOp(const Context& ctx, const ConstView&, const float*, const ConstView& dy,
                        const float*) override {
    CheckRows(static_cast<int>(dy.desc.matrix_rows()));
    if (ctx.starts == nullptr) {
      LaunchAddColumnSums(ctx.stream, dy.as<float>(), static_cast<int>(dy.desc.shape[0]),
                          static_cast<int>(dy.desc.shape.per_sample()), grads_);
      return;
    }
    const auto rows = static_cast<std::size_t>(dy.desc.matrix_rows());
    if (rows == 0) return;
    // Up to 32 features a block in 48 KiB of shared memory (8 at GPT-2's
    // 1,024 positions), else in place.
    const int c = out_features();
    const auto fits = static_cast<int>(std::min<std::size_t>(32, (48 << 10) / (Seq() * sizeof(float))));
    if (fits == 0) {
      PositionGradientKernel<<<(c + kThreads - 1) / kThreads, kThreads, 0, ctx.stream>>>(
          dy.as<float>(), grads_, rows, c, Tokens(dy.desc), Seq(), ctx.starts, 0);
    } else {
      PositionGradientKernel<<<(c + fits - 1) / fits, 32, Seq() * static_cast<std::size_t>(fits) * sizeof(float),
                               ctx.stream>>>(dy.as<float>(), grads_, rows, c, Tokens(dy.desc), Seq(), ctx.starts,
                                             fits);
    }
    BATON_CUDA_CHECK_LAUNCH();
  }

 private:
  // Token rows a sample in `d` (samples, tokens, features), and the sequence's positions.
  std::size_t Tokens(const TensorDesc& d) const {
    return static_cast<std::size_t>(d.shape.per_sample()) / static_cast<std::size_t>(out_features());
  }
  std::size_t Seq() const { return static_cast<std::size_t>(desc().seq); }
};

// ---- causal self-attention ----
//
// Row-major (rows, width) matrices are, to cuBLAS, their transposes
// (width, rows). For one sample, q, k, v are (T, 3C) rows; head h's q is
// the (D, T) column-major block at column offset h D with leading dimension
// 3C (likewise k at C + h D, v at 2C + h D), so the heads are a strided
// batch with stride D. A head's (T, T) row-major matrix (scores,
// probabilities, their gradients) is, to cuBLAS, its transpose.
class CudaAttention final : public ViewLayer {
 public:
  CudaAttention(const OpDesc& op, int max_rows)
      : ViewLayer(op, max_rows),
        layout_(op),
        t_(op.seq),
        c_(op.in),
        h_(op.heads),
        d_(op.in / op.heads),
        scores_(static_cast<std::size_t>(op.heads) * op.seq * op.seq),
        dprobs_(scores_.size()),
        dctx_(static_cast<std::size_t>(max_rows) * op.in) {}

  std::size_t ScratchBytes() const override { return scores_.bytes() + dprobs_.bytes() + dctx_.bytes(); }

  void ForwardOp(const Context& ctx, const ConstView& x, const View& y, float* saved) const override {
    const int samples = Samples(x), t = Tokens(x), rows = samples * t;
    CheckRows(rows);
    if (rows == 0) return;
    const auto count = static_cast<std::size_t>(samples);
    const AttentionLayout layout(c_, h_, t);  // the call's tokens: saved state packed for them, as the host's
    float* qkv = saved + layout.saved_qkv(count);   // (rows, 3C)
    float* lse = saved + layout.saved_lse(count);   // (samples, H, T)
    float* ctxs = saved + layout.saved_ctx(count);  // (rows, C)
    // qkv = x W_qkv + b_qkv:  qkv^T (3C, rows) = W_qkv^T (3C, C) x^T (C, rows)
    GemmF32(ctx, CUBLAS_OP_N, CUBLAS_OP_N, 3 * c_, rows, c_, WQkv(params_), 3 * c_, x.as<float>(), c_, 0.0f, qkv,
            3 * c_);
    LaunchAddBias(ctx.stream, BQkv(params_), qkv, rows, 3 * c_);
    const float scale = 1.0f / std::sqrt(static_cast<float>(d_));
    const long long tt = static_cast<long long>(t) * t;
    for (int n = 0; n < samples; ++n) {
      const float* base = qkv + static_cast<std::size_t>(n) * t * 3 * c_;
      // S^T (T, T) = K Q^T: A = k block (D, T) op T, B = q block (D, T).
      GemmF32Batched(ctx, CUBLAS_OP_T, CUBLAS_OP_N, t, t, d_, base + c_, 3 * c_, d_, base, 3 * c_, d_, 0.0f,
                     scores_.data(), t, tt, h_);
      float* row_lse = lse + static_cast<std::size_t>(n) * h_ * t;
      CausalSoftmaxKernel<<<h_ * t, RowThreads(t), 0, ctx.stream>>>(scores_.data(), row_lse, h_ * t, t, scale,
                                                                     SampleStarts(ctx, n));
      BATON_CUDA_CHECK_LAUNCH();
      // ctx^T (D, T) = V^T P^T: A = v block (D, T), B = P's storage (P^T).
      GemmF32Batched(ctx, CUBLAS_OP_N, CUBLAS_OP_N, d_, t, t, base + 2 * c_, 3 * c_, d_, scores_.data(), t, tt, 0.0f,
                     ctxs + static_cast<std::size_t>(n) * t * c_, c_, d_, h_);
    }
    // y = ctx W_proj + b_proj
    GemmF32(ctx, CUBLAS_OP_N, CUBLAS_OP_N, c_, rows, c_, WProj(params_), c_, ctxs, c_, 0.0f, y.as<float>(), c_);
    LaunchAddBias(ctx.stream, BProj(params_), y.as<float>(), rows, c_);
  }

  void BackwardInputOp(const Context& ctx, const ConstView& x, const float* saved, const ConstView& dy,
                       const View& dx, float* stash) const override {
    const int samples = Samples(x), t = Tokens(x), rows = samples * t;
    CheckRows(rows);
    if (rows == 0) return;
    const AttentionLayout layout(c_, h_, t);
    const float* qkv = saved + layout.saved_qkv(static_cast<std::size_t>(samples));
    const float* lse = saved + layout.saved_lse(static_cast<std::size_t>(samples));
    float* dqkv = stash;  // (rows, 3C)
    // dctx = dy W_proj^T:  dctx^T (C, rows) = W_proj (C, C) dy^T; W_proj's
    // storage is W_proj^T to cuBLAS, so op T.
    GemmF32(ctx, CUBLAS_OP_T, CUBLAS_OP_N, c_, rows, c_, WProj(params_), c_, dy.as<float>(), c_, 0.0f, dctx_.data(),
            c_);
    const float scale = 1.0f / std::sqrt(static_cast<float>(d_));
    const long long tt = static_cast<long long>(t) * t;
    const std::size_t probs = static_cast<std::size_t>(h_) * t * t;
    for (int n = 0; n < samples; ++n) {
      const float* base = qkv + static_cast<std::size_t>(n) * t * 3 * c_;
      float* dbase = dqkv + static_cast<std::size_t>(n) * t * 3 * c_;
      const float* dc = dctx_.data() + static_cast<std::size_t>(n) * t * c_;
      const std::int32_t* starts = SampleStarts(ctx, n);
      // The probabilities again: the scores, then exp(scale s - lse).
      GemmF32Batched(ctx, CUBLAS_OP_T, CUBLAS_OP_N, t, t, d_, base + c_, 3 * c_, d_, base, 3 * c_, d_, 0.0f,
                     scores_.data(), t, tt, h_);
      CausalProbabilitiesKernel<<<BlocksFor(probs), kThreads, 0, ctx.stream>>>(
          scores_.data(), lse + static_cast<std::size_t>(n) * h_ * t, probs, t, scale, starts);
      BATON_CUDA_CHECK_LAUNCH();
      // dV = P^T dctx:  dV^T (D, T) = dctx^T (D, T) P (T, T); P from its storage (P^T), op T.
      GemmF32Batched(ctx, CUBLAS_OP_N, CUBLAS_OP_T, d_, t, t, dc, c_, d_, scores_.data(), t, tt, 0.0f, dbase + 2 * c_,
                     3 * c_, d_, h_);
      // dP = dctx V^T:  dP^T (T, T) = V dctx^T: A = v block (D, T) op T, B = dctx block (D, T).
      GemmF32Batched(ctx, CUBLAS_OP_T, CUBLAS_OP_N, t, t, d_, base + 2 * c_, 3 * c_, d_, dc, c_, d_, 0.0f,
                     dprobs_.data(), t, tt, h_);
      CausalSoftmaxBackwardKernel<<<h_ * t, RowThreads(t), 0, ctx.stream>>>(scores_.data(), dprobs_.data(), h_ * t,
                                                                           t, scale, starts);
      BATON_CUDA_CHECK_LAUNCH();
      // dQ = dS K:  dQ^T (D, T) = K^T (D, T) dS^T (dS's storage).
      GemmF32Batched(ctx, CUBLAS_OP_N, CUBLAS_OP_N, d_, t, t, base + c_, 3 * c_, d_, dprobs_.data(), t, tt, 0.0f, dbase,
                     3 * c_, d_, h_);
      // dK = dS^T Q:  dK^T (D, T) = Q^T (D, T) dS (dS's storage, op T).
      GemmF32Batched(ctx, CUBLAS_OP_N, CUBLAS_OP_T, d_, t, t, base, 3 * c_, d_, dprobs_.data(), t, tt, 0.0f,
                     dbase + c_, 3 * c_, d_, h_);
    }
    if (dx.data != nullptr) {
      // dx = dqkv W_qkv^T:  dx^T (C, rows) = W_qkv (C, 3C) dqkv^T; W_qkv's storage is W_qkv^T, op T.
      GemmF32(ctx, CUBLAS_OP_T, CUBLAS_OP_N, c_, rows, 3 * c_, WQkv(params_), 3 * c_, dqkv, 3 * c_, 0.0f,
              dx.as<float>(), c_);
    }
  }

  void BackwardWeightOp(const Context& ctx, const ConstView& x, const float* saved, const ConstView& dy,
                        const float* stash) override {
    const int samples = Samples(x), t = Tokens(x), rows = samples * t;
    CheckRows(rows);
    if (rows == 0) return;
    const float* ctxs = saved + AttentionLayout(c_, h_, t).saved_ctx(static_cast<std::size_t>(samples));
    // dW_proj (C, C) += ctx^T dy:  its storage dW_proj^T = dy^T ctx.
    GemmF32(ctx, CUBLAS_OP_N, CUBLAS_OP_T, c_, c_, rows, dy.as<float>(), c_, ctxs, c_, 1.0f, WProj(grads_), c_);
    LaunchAddColumnSums(ctx.stream, dy.as<float>(), rows, c_, BProj(grads_));
    // dW_qkv (C, 3C) += x^T dqkv:  its storage dW_qkv^T (3C, C) = dqkv^T x.
    GemmF32(ctx, CUBLAS_OP_N, CUBLAS_OP_T, 3 * c_, c_, rows, stash, 3 * c_, x.as<float>(), c_, 1.0f, WQkv(grads_),
            3 * c_);
    LaunchAddColumnSums(ctx.stream, stash, rows, 3 * c_, BQkv(grads_));
  }

 private:
  // The call's tokens a sample (its views' shape: the sequence, or a packed
  // microbatch's length), refused past the sequence the layer was made for.
  int Tokens(const ConstView& x) const {
    const int samples = Samples(x);
    const int t = samples > 0 ? static_cast<int>(x.desc.matrix_rows() / samples) : t_;
    if (t < 1 || t > t_) {
      throw Error("cuda attention layer " + desc().name + ": " + std::to_string(t) + " tokens a sample, made for 1 to " +
                  std::to_string(t_));
    }
    return t;
  }
  // Sample n's document starts (stride: the whole sequence), or null.
  const std::int32_t* SampleStarts(const Context& ctx, int n) const {
    return ctx.starts == nullptr ? nullptr : ctx.starts + static_cast<std::size_t>(n) * t_;
  }

  // GPT-2's order and layout (AttentionLayout, as the host's).
  template <typename T>
  T* WQkv(T* p) const { return p + layout_.w_qkv(); }
  template <typename T>
  T* BQkv(T* p) const { return p + layout_.b_qkv(); }
  template <typename T>
  T* WProj(T* p) const { return p + layout_.w_proj(); }
  template <typename T>
  T* BProj(T* p) const { return p + layout_.b_proj(); }

  AttentionLayout layout_;
  int t_, c_, h_, d_;
  // One sample's heads at a time: scores then probabilities (H, T, T), their
  // gradients (H, T, T); the heads' output gradient (max_rows, C).
  mutable DeviceBuffer<float> scores_, dprobs_, dctx_;
};

}  // namespace

std::unique_ptr<CudaLayer> MakeTransformerLayer(const OpDesc& op, int max_rows) {
  switch (op.type) {
    case LayerType::kEmbedding:
      return std::make_unique<CudaEmbedding>(op, max_rows);
    case LayerType::kPositionEmbedding:
      return std::make_unique<CudaPositionEmbedding>(op, max_rows);
    case LayerType::kAttention:
      return std::make_unique<CudaAttention>(op, max_rows);
    default:
      break;
  }
  throw ConfigError("op " + op.name + ": not a transformer layer");
}

}  // namespace baton::cuda::detail
