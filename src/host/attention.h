// Causal multi-head self-attention on the host, GPT-2's: one fused QKV
// projection (Conv1D layout, weight [in, out] = [C, 3C]), scaled dot
// products with the causal mask, softmax, the heads' weighted values, and
// the output projection ([C, C]). Forward, input gradient (I) and weight
// gradient (W) are separate calls, as for every layer, so zero-bubble
// schedules split attention too.
//
// What a microbatch keeps for backward, besides the input x: the projected
// q, k, v (samples, seq, 3C), each row's softmax log-sum-exp per head
// (samples, heads, seq) — backward recomputes the probabilities from q, k
// and it instead of keeping (seq x seq) per head — and the heads' output
// before projection (samples, seq, C). I leaves the gradient of q, k, v
// (samples, seq, 3C) for W. All sizes are declared up front (SavedFloats,
// StashFloats) so the ring slot is sized before anything runs; the only
// scratch is one (seq x seq) score matrix, allocated at construction.
#ifndef BATON_HOST_ATTENTION_H_
#define BATON_HOST_ATTENTION_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <Eigen/Core>

#include "baton/buffer.h"
#include "baton/model.h"

namespace baton {

struct AttentionShape {
  int seq = 0;     // tokens per sample (T)
  int hidden = 0;  // C
  int heads = 0;   // H; head size D = C / H
  int head_size() const { return hidden / heads; }
};

// Parameters, in GPT-2's order and layout (AttentionLayout, baton/model.h):
// c_attn.weight [C, 3C], c_attn.bias [3C], c_proj.weight [C, C], c_proj.bias [C].
struct AttentionParams {
  const float* w_qkv;
  const float* b_qkv;
  const float* w_proj;
  const float* b_proj;
};
struct AttentionGrads {
  float* w_qkv;
  float* b_qkv;
  float* w_proj;
  float* b_proj;
};

// One slice of each sample's sequence (Seq1F1B): tokens [begin, end) of
// T. The sequence's keys and values live in one place for all its slices,
// `kv` (samples, T, 2C: k then v a row): a slice's forward writes its own
// rows there and reads rows [0, end); its queries are its own. Their
// gradients live in `dkv` (samples, T, 2C): a slice's input backward ADDS
// into rows [0, end); the slices run backward last first (the last slice,
// end = T, starts dkv at zero), so a slice's own rows are final once its
// own backward has added to them. `kv` stays with the sequence until its
// slices' last backward, `dkv` while the sequence runs backward.
struct SequenceSlice {
  int begin = 0;
  int end = 0;
  float* kv = nullptr;
  float* dkv = nullptr;
  const std::int32_t* starts = nullptr;  // packed documents (SequencePart::starts): samples x T; null: none
  // A packed sequence's length (SequencePart::length): its slices end
  // there, the last one's backward the first (0: T, every slice runs).
  int length = 0;
  int tokens() const { return end - begin; }
};

class CausalSelfAttention {
 public:
  // For up to `max_samples` samples per call. REQUIRES: heads divide hidden.
  CausalSelfAttention(const AttentionShape& shape, int max_samples);

  const AttentionShape& shape() const { return shape_; }
  std::size_t NumParams() const;
  // Floats a microbatch of `samples` keeps from forward for backward:
  // qkv, log-sum-exp, heads' output.
  std::size_t SavedFloats(int samples) const;
  // Floats I leaves for W: the gradient of qkv.
  std::size_t StashFloats(int samples) const;
  // Bytes of its own scratch: one head's scores and their gradient, the
  // heads' output gradient.
  std::size_t ScratchBytes() const { return (scores_.size() + dprobs_.size() + dctx_.size()) * sizeof(float); }

  // y = attention(x). x, y: (samples, seq, C). Writes `saved` (SavedFloats).
  // `starts` (packed documents, samples x seq; null: none): each token's
  // document's first token; a token attends to its own document's only.
  // `tokens` (0: seq): each sample's first `tokens` only (a packed
  // microbatch at its real length): x, y, saved laid out for them.
  void Forward(const AttentionParams& p, const float* x, float* y, float* saved, int samples,
               const std::int32_t* starts = nullptr, int tokens = 0);
  // dx from dy, given what Forward saved; writes the qkv gradient into
  // `stash` (StashFloats) for BackwardWeight. dx may be null (not needed).
  // `starts`, `tokens`: Forward's.
  void BackwardInput(const AttentionParams& p, const float* saved, const float* dy, float* dx, float* stash,
                     int samples, const std::int32_t* starts = nullptr, int tokens = 0);
  // ADDS the weight gradients, from x, what Forward saved, dy and I's stash.
  void BackwardWeight(const AttentionGrads& g, const float* x, const float* saved, const float* dy,
                      const float* stash, int samples, int tokens = 0);

  // The same three calls for one slice of each sample's sequence: x, y, dy
  // and dx are the slice's tokens (samples, tokens, C); the slice keeps
  // its rows' queries, log-sum-exp and heads' output (SliceSavedFloats),
  // the sequence's keys and values and their gradients are the slice's
  // `kv` and `dkv`, and I leaves the slice's own rows of dq, dk, dv for W
  // (SliceStashFloats).
  std::size_t SliceSavedFloats(int samples, int tokens) const;
  std::size_t SliceStashFloats(int samples, int tokens) const;
  void ForwardSlice(const AttentionParams& p, const float* x, float* y, float* saved, int samples,
                    const SequenceSlice& slice);
  void BackwardInputSlice(const AttentionParams& p, const float* saved, const float* dy, float* dx, float* stash,
                          int samples, const SequenceSlice& slice);
  void BackwardWeightSlice(const AttentionGrads& g, const float* x, const float* saved, const float* dy,
                           const float* stash, int samples, const SequenceSlice& slice);

 private:
  // W for `rows` token rows: from x, the heads' output ctx, dy and dqkv.
  void WeightGrads(const AttentionGrads& g, const float* x, const float* ctx, const float* dy, const float* dqkv,
                   Eigen::Index rows) const;

  AttentionShape shape_;
  AttentionLayout layout_;  // where the parameters and saved state lie (baton/model.h)
  FloatBuffer scores_;  // (seq, seq): one head's scores, then probabilities, then their gradient
  FloatBuffer dprobs_;  // (seq, seq)
  FloatBuffer dctx_;    // (max_samples, seq, C): the heads' output gradient
};

}  // namespace baton

#endif  // BATON_HOST_ATTENTION_H_
