#include "attention.h"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "gemm.h"

namespace baton {
namespace {

using host_detail::AddProduct;
using host_detail::Product;
using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Mat = Eigen::Map<RowMatrix>;
using ConstMat = Eigen::Map<const RowMatrix>;
// One head's (seq, D) block of a (rows, width) matrix: rows `width` floats apart.
using Strided = Eigen::Map<RowMatrix, 0, Eigen::OuterStride<>>;
using ConstStrided = Eigen::Map<const RowMatrix, 0, Eigen::OuterStride<>>;
using ConstRowVector = Eigen::Map<const Eigen::RowVectorXf>;
using RowVector = Eigen::Map<Eigen::RowVectorXf>;

// The first key token `token` attends to: its document's first (`starts`,
// the sample's per token; null: the sequence's).
inline Eigen::Index FirstKey(const std::int32_t* starts, Eigen::Index token) {
  return starts == nullptr ? 0 : starts[token];
}

// Row i of `s` holds the scores of token `first + i`, which attends to
// tokens FirstKey..first+i: they become its softmax (of the scores times
// `scale`), the rest zero, and lse[i] its log-sum-exp.
void CausalSoftmax(Mat& s, int first, float scale, float* lse, const std::int32_t* starts) {
  for (Eigen::Index i = 0; i < s.rows(); ++i) {
    auto r = s.row(i);
    const Eigen::Index last = first + i, lo = FirstKey(starts, last);
    float m = -std::numeric_limits<float>::infinity();
    for (Eigen::Index j = lo; j <= last; ++j) m = std::max(m, r(j) * scale);
    float sum = 0.0f;
    for (Eigen::Index j = lo; j <= last; ++j) {
      r(j) = std::exp(r(j) * scale - m);
      sum += r(j);
    }
    const float inv = 1.0f / sum;
    for (Eigen::Index j = 0; j < lo; ++j) r(j) = 0.0f;
    for (Eigen::Index j = lo; j <= last; ++j) r(j) *= inv;
    for (Eigen::Index j = last + 1; j < s.cols(); ++j) r(j) = 0.0f;
    lse[i] = m + std::log(sum);
  }
}

// The same probabilities again, from the scores and the saved log-sum-exp.
void CausalProbabilities(Mat& prob, int first, float scale, const float* lse, const std::int32_t* starts) {
  for (Eigen::Index i = 0; i < prob.rows(); ++i) {
    const Eigen::Index last = first + i, lo = FirstKey(starts, last);
    for (Eigen::Index j = 0; j < lo; ++j) prob(i, j) = 0.0f;
    for (Eigen::Index j = lo; j <= last; ++j) prob(i, j) = std::exp(prob(i, j) * scale - lse[i]);
    for (Eigen::Index j = last + 1; j < prob.cols(); ++j) prob(i, j) = 0.0f;
  }
}

// Softmax backward, row by row: dprob (the probabilities' gradient)
// becomes the scores' gradient p (dp - sum_k p_k dp_k), times `scale`.
void SoftmaxBackward(const Mat& prob, Mat& dprob, int first, float scale, const std::int32_t* starts) {
  for (Eigen::Index i = 0; i < prob.rows(); ++i) {
    const Eigen::Index last = first + i, lo = FirstKey(starts, last);
    float dot = 0.0f;
    for (Eigen::Index j = lo; j <= last; ++j) dot += prob(i, j) * dprob(i, j);
    for (Eigen::Index j = 0; j < lo; ++j) dprob(i, j) = 0.0f;
    for (Eigen::Index j = lo; j <= last; ++j) dprob(i, j) = prob(i, j) * (dprob(i, j) - dot) * scale;
    for (Eigen::Index j = last + 1; j < prob.cols(); ++j) dprob(i, j) = 0.0f;
  }
}

// Sample n's per-token document starts (null: none).
inline const std::int32_t* SampleStarts(const std::int32_t* starts, int n, int T) {
  return starts == nullptr ? nullptr : starts + static_cast<std::ptrdiff_t>(n) * T;
}

// f(a, b) for each document [a, b) of a sequence of T tokens, in order:
// the runs of equal starts (null: one, the whole sequence). A packed
// sample's attention is each document's own (L x L for L tokens: the sum
// of the squares of its documents' lengths, not T x T).
template <typename F>
void ForEachDocument(const std::int32_t* starts, int T, F&& f) {
  if (starts == nullptr) {
    f(0, T);
    return;
  }
  int a = 0;
  for (int t = 1; t <= T; ++t) {
    if (t == T || starts[t] != starts[a]) {
      f(a, t);
      a = t;
    }
  }
}

}  // namespace

CausalSelfAttention::CausalSelfAttention(const AttentionShape& shape, int max_samples)
    : shape_(shape),
      layout_(shape.hidden, shape.heads, shape.seq),
      scores_(static_cast<std::size_t>(shape.seq) * shape.seq),
      dprobs_(static_cast<std::size_t>(shape.seq) * shape.seq),
      dctx_(static_cast<std::size_t>(max_samples) * shape.seq * shape.hidden) {}

std::size_t CausalSelfAttention::NumParams() const { return layout_.params(); }

std::size_t CausalSelfAttention::SavedFloats(int samples) const {
  return static_cast<std::size_t>(samples) * shape_.seq * layout_.saved_per_row();
}

std::size_t CausalSelfAttention::StashFloats(int samples) const {
  return static_cast<std::size_t>(samples) * shape_.seq * layout_.stash_per_row();
}

void CausalSelfAttention::Forward(const AttentionParams& p, const float* x, float* y, float* saved, int samples,
                                  const std::int32_t* starts, int tokens) {
  const int S = shape_.seq, T = tokens > 0 ? tokens : S, C = shape_.hidden, H = shape_.heads, D = shape_.head_size();
  const AttentionLayout layout(C, H, T);  // the call's tokens: saved state packed for them
  const Eigen::Index rows = Eigen::Index(samples) * T;
  const auto count = static_cast<std::size_t>(samples);
  float* qkv = saved + layout.saved_qkv(count);  // (rows, 3C)
  float* lse = saved + layout.saved_lse(count);  // (samples, H, T)
  float* ctx = saved + layout.saved_ctx(count);  // (rows, C)
  Mat q_k_v(qkv, rows, 3 * C);
  q_k_v.rowwise() = ConstRowVector(p.b_qkv, 3 * C);
  AddProduct(q_k_v, ConstMat(x, rows, C), ConstMat(p.w_qkv, C, 3 * C));
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  for (int n = 0; n < samples; ++n) {
    // Each document [a, b) of the sample attends within itself.
    ForEachDocument(SampleStarts(starts, n, S), T, [&](int a, int b) {
      const int L = b - a;
      const float* base = qkv + (Eigen::Index(n) * T + a) * 3 * C;
      Mat s(scores_.data(), L, L);
      for (int h = 0; h < H; ++h) {
        const ConstStrided q(base + h * D, L, D, Eigen::OuterStride<>(3 * C));
        const ConstStrided k(base + C + h * D, L, D, Eigen::OuterStride<>(3 * C));
        const ConstStrided v(base + 2 * C + h * D, L, D, Eigen::OuterStride<>(3 * C));
        Product(s, q, k.transpose(), 0.0f);  // (L, L) = (L, D) (D, L)
        // Row i attends to positions 0..i: softmax over them, zero beyond.
        CausalSoftmax(s, 0, scale, lse + (Eigen::Index(n) * H + h) * T + a, nullptr);
        Strided out(ctx + (Eigen::Index(n) * T + a) * C + h * D, L, D, Eigen::OuterStride<>(C));
        Product(out, s, v, 0.0f);  // (L, D) = (L, L) (L, D)
      }
    });
  }
  Mat out(y, rows, C);
  out.rowwise() = ConstRowVector(p.b_proj, C);
  AddProduct(out, ConstMat(ctx, rows, C), ConstMat(p.w_proj, C, C));
}

void CausalSelfAttention::BackwardInput(const AttentionParams& p, const float* saved, const float* dy, float* dx,
                                        float* stash, int samples, const std::int32_t* starts, int tokens) {
  const int S = shape_.seq, T = tokens > 0 ? tokens : S, C = shape_.hidden, H = shape_.heads, D = shape_.head_size();
  const AttentionLayout layout(C, H, T);
  const Eigen::Index rows = Eigen::Index(samples) * T;
  const float* qkv = saved + layout.saved_qkv(static_cast<std::size_t>(samples));
  const float* lse = saved + layout.saved_lse(static_cast<std::size_t>(samples));
  float* dqkv = stash;  // (rows, 3C)
  Mat dctx(dctx_.data(), rows, C);
  Product(dctx, ConstMat(dy, rows, C), ConstMat(p.w_proj, C, C).transpose(), 0.0f);  // dy Wp^T
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  for (int n = 0; n < samples; ++n) {
    // Each document [a, b) of the sample: its rows of dq, dk and dv are its own.
    ForEachDocument(SampleStarts(starts, n, S), T, [&](int a, int b) {
      const int L = b - a;
      const float* base = qkv + (Eigen::Index(n) * T + a) * 3 * C;
      float* dbase = dqkv + (Eigen::Index(n) * T + a) * 3 * C;
      Mat prob(scores_.data(), L, L), dprob(dprobs_.data(), L, L);
      for (int h = 0; h < H; ++h) {
        const ConstStrided q(base + h * D, L, D, Eigen::OuterStride<>(3 * C));
        const ConstStrided k(base + C + h * D, L, D, Eigen::OuterStride<>(3 * C));
        const ConstStrided v(base + 2 * C + h * D, L, D, Eigen::OuterStride<>(3 * C));
        const ConstStrided dc(dctx_.data() + (Eigen::Index(n) * T + a) * C + h * D, L, D, Eigen::OuterStride<>(C));
        // The probabilities again, from the scores and the saved log-sum-exp.
        Product(prob, q, k.transpose(), 0.0f);
        CausalProbabilities(prob, 0, scale, lse + (Eigen::Index(n) * H + h) * T + a, nullptr);
        Strided dv(dbase + 2 * C + h * D, L, D, Eigen::OuterStride<>(3 * C));
        Product(dv, prob.transpose(), dc, 0.0f);  // P^T dctx
        Product(dprob, dc, v.transpose(), 0.0f);  // dctx V^T
        SoftmaxBackward(prob, dprob, 0, scale, nullptr);
        Strided dq(dbase + h * D, L, D, Eigen::OuterStride<>(3 * C));
        Strided dk(dbase + C + h * D, L, D, Eigen::OuterStride<>(3 * C));
        Product(dq, dprob, k, 0.0f);              // dS K
        Product(dk, dprob.transpose(), q, 0.0f);  // dS^T Q
      }
    });
  }
  if (dx != nullptr) {
    Product(Mat(dx, rows, C), ConstMat(dqkv, rows, 3 * C), ConstMat(p.w_qkv, C, 3 * C).transpose(), 0.0f);
  }
}

void CausalSelfAttention::BackwardWeight(const AttentionGrads& g, const float* x, const float* saved,
                                         const float* dy, const float* stash, int samples, int tokens) {
  const int T = tokens > 0 ? tokens : shape_.seq;
  const float* ctx = saved + AttentionLayout(shape_.hidden, shape_.heads, T).saved_ctx(static_cast<std::size_t>(samples));
  WeightGrads(g, x, ctx, dy, stash, Eigen::Index(samples) * T);
}

void CausalSelfAttention::WeightGrads(const AttentionGrads& g, const float* x, const float* ctx, const float* dy,
                                      const float* stash, Eigen::Index rows) const {
  const int C = shape_.hidden;
  const ConstMat dout(dy, rows, C), dqkv(stash, rows, 3 * C);
  AddProduct(Mat(g.w_proj, C, C), ConstMat(ctx, rows, C).transpose(), dout);  // ctx^T dy
  RowVector(g.b_proj, C).noalias() += dout.colwise().sum();
  AddProduct(Mat(g.w_qkv, C, 3 * C), ConstMat(x, rows, C).transpose(), dqkv);  // x^T dqkv
  RowVector(g.b_qkv, 3 * C).noalias() += dqkv.colwise().sum();
}

// ---- Slices ----
// A slice's saved state: its own q (samples, L, C), then each sample's
// rows' log-sum-exp per head (samples, H, L), then the heads' output
// (samples, L, C); L = its tokens. Its k and v are written into the
// sequence's (samples, T, 2C), where the later slices read them.

std::size_t CausalSelfAttention::SliceSavedFloats(int samples, int tokens) const {
  return static_cast<std::size_t>(samples) * tokens * (2 * shape_.hidden + shape_.heads);
}

std::size_t CausalSelfAttention::SliceStashFloats(int samples, int tokens) const {
  return static_cast<std::size_t>(samples) * tokens * 3 * shape_.hidden;
}

void CausalSelfAttention::ForwardSlice(const AttentionParams& p, const float* x, float* y, float* saved,
                                       int samples, const SequenceSlice& sl) {
  const int T = shape_.seq, C = shape_.hidden, H = shape_.heads, D = shape_.head_size();
  const int b = sl.begin, e = sl.end, L = sl.tokens();
  const Eigen::Index rows = Eigen::Index(samples) * L;
  float* q_all = saved;                                   // (samples, L, C)
  float* lse = saved + rows * C;                          // (samples, H, L)
  float* ctx = lse + Eigen::Index(samples) * H * L;       // (samples, L, C)
  // q of the slice's rows into its own state, k and v into the sequence's.
  Mat(q_all, rows, C).rowwise() = ConstRowVector(p.b_qkv, C);
  AddProduct(Mat(q_all, rows, C), ConstMat(x, rows, C), ConstMat(p.w_qkv, C, 3 * C).leftCols(C));
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  for (int n = 0; n < samples; ++n) {
    float* kv = sl.kv + Eigen::Index(n) * T * 2 * C;  // the sample's sequence: (T, 2C)
    Strided own(kv + Eigen::Index(b) * 2 * C, L, 2 * C, Eigen::OuterStride<>(2 * C));
    own.rowwise() = ConstRowVector(p.b_qkv + C, 2 * C);
    AddProduct(own, ConstMat(x + Eigen::Index(n) * L * C, L, C), ConstMat(p.w_qkv, C, 3 * C).rightCols(2 * C));
    Mat s(scores_.data(), L, e);
    for (int h = 0; h < H; ++h) {
      const ConstStrided q(q_all + Eigen::Index(n) * L * C + h * D, L, D, Eigen::OuterStride<>(C));
      const ConstStrided k(kv + h * D, e, D, Eigen::OuterStride<>(2 * C));
      const ConstStrided v(kv + C + h * D, e, D, Eigen::OuterStride<>(2 * C));
      Product(s, q, k.transpose(), 0.0f);  // (L, e)
      // Row i is token b + i: it attends to tokens 0..b+i.
      CausalSoftmax(s, b, scale, lse + (Eigen::Index(n) * H + h) * L, SampleStarts(sl.starts, n, T));
      Strided out(ctx + Eigen::Index(n) * L * C + h * D, L, D, Eigen::OuterStride<>(C));
      Product(out, s, v, 0.0f);  // (L, D) = (L, e) (e, D)
    }
  }
  Mat out(y, rows, C);
  out.rowwise() = ConstRowVector(p.b_proj, C);
  AddProduct(out, ConstMat(ctx, rows, C), ConstMat(p.w_proj, C, C));
}

void CausalSelfAttention::BackwardInputSlice(const AttentionParams& p, const float* saved, const float* dy,
                                             float* dx, float* stash, int samples, const SequenceSlice& sl) {
  const int T = shape_.seq, C = shape_.hidden, H = shape_.heads, D = shape_.head_size();
  const int b = sl.begin, e = sl.end, L = sl.tokens();
  const Eigen::Index rows = Eigen::Index(samples) * L;
  const float* q_all = saved;
  const float* lse = saved + rows * C;
  // The last slice is the sequence's first backward: its gradients start
  // here (a packed sequence's last is the one its length ends in).
  if (e == (sl.length > 0 ? sl.length : T)) Mat(sl.dkv, Eigen::Index(samples) * T, 2 * C).setZero();
  Mat dctx(dctx_.data(), rows, C);
  Product(dctx, ConstMat(dy, rows, C), ConstMat(p.w_proj, C, C).transpose(), 0.0f);  // dy Wp^T
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  Mat prob(scores_.data(), L, e), dprob(dprobs_.data(), L, e);
  for (int n = 0; n < samples; ++n) {
    const float* kv = sl.kv + Eigen::Index(n) * T * 2 * C;
    float* dkv = sl.dkv + Eigen::Index(n) * T * 2 * C;
    float* own = stash + Eigen::Index(n) * L * 3 * C;  // the slice's rows of dq, dk, dv
    for (int h = 0; h < H; ++h) {
      const ConstStrided q(q_all + Eigen::Index(n) * L * C + h * D, L, D, Eigen::OuterStride<>(C));
      const ConstStrided k(kv + h * D, e, D, Eigen::OuterStride<>(2 * C));
      const ConstStrided v(kv + C + h * D, e, D, Eigen::OuterStride<>(2 * C));
      const ConstStrided dc(dctx_.data() + Eigen::Index(n) * L * C + h * D, L, D, Eigen::OuterStride<>(C));
      Product(prob, q, k.transpose(), 0.0f);
      CausalProbabilities(prob, b, scale, lse + (Eigen::Index(n) * H + h) * L, SampleStarts(sl.starts, n, T));
      Strided dv(dkv + C + h * D, e, D, Eigen::OuterStride<>(2 * C));
      AddProduct(dv, prob.transpose(), dc);     // += P^T dctx, keys 0..e
      Product(dprob, dc, v.transpose(), 0.0f);  // dctx V^T
      SoftmaxBackward(prob, dprob, b, scale, SampleStarts(sl.starts, n, T));
      Strided dq(own + h * D, L, D, Eigen::OuterStride<>(3 * C));
      Strided dk(dkv + h * D, e, D, Eigen::OuterStride<>(2 * C));
      Product(dq, dprob, k, 0.0f);           // dS K: this slice's queries alone
      AddProduct(dk, dprob.transpose(), q);  // += dS^T Q, keys 0..e
    }
    // The slice's own rows of dk and dv are final now: W's stash, beside dq.
    Strided(own + C, L, 2 * C, Eigen::OuterStride<>(3 * C)) =
        ConstMat(dkv + Eigen::Index(b) * 2 * C, L, 2 * C);
  }
  if (dx != nullptr) {
    Product(Mat(dx, rows, C), ConstMat(stash, rows, 3 * C), ConstMat(p.w_qkv, C, 3 * C).transpose(), 0.0f);
  }
}

void CausalSelfAttention::BackwardWeightSlice(const AttentionGrads& g, const float* x, const float* saved,
                                              const float* dy, const float* stash, int samples,
                                              const SequenceSlice& sl) {
  const Eigen::Index rows = Eigen::Index(samples) * sl.tokens();
  const float* ctx = saved + rows * shape_.hidden + rows * shape_.heads;  // past q and the log-sum-exp
  WeightGrads(g, x, ctx, dy, stash, rows);
}

}  // namespace baton
