// The model description: what the layers of a config are, independent of
// where they compute. One description serves the stages (which ops, which
// widths), the rank plan (activation and ring-slot sizes), partitioning
// (parameter and FLOP weights), benchmarks (GEMM FLOPs), the config checks,
// weight files (PyTorch names and shapes) and both backends' parameter
// layouts. It has no Eigen, MPI or CUDA in it.
//
// A model is a list of top-level layers (nn.Sequential order). A residual
// block {type: residual, layers: [...]} is flattened into its body's ops
// followed by an add op: a_{i+1} = a_i + a_skip. So the model is a chain of
// ops over activations a_0 (the input) .. a_N (the logits); op i reads a_i
// (and an add also a_skip) and writes a_{i+1}.
//
// Also here: the optimizers' interface and rules, shared by the host's
// optimizers (baton/host.h) and the CUDA ones.
#ifndef BATON_MODEL_H_
#define BATON_MODEL_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "baton/choices.h"
#include "baton/named_enum.h"

namespace baton {

// kResidual is a block in a config; in a ModelDesc it is the add op that
// closes the block. The transformer's: embedding (token ids -> vectors),
// position_embedding (adds a learned vector per position), attention (causal
// multi-head self-attention, GPT-2's).
enum class LayerType : std::uint8_t {
  kLinear,
  kRelu,
  kGelu,
  kLayerNorm,
  kResidual,
  kEmbedding,
  kPositionEmbedding,
  kAttention,
};
// linear, relu, gelu, layernorm, residual, embedding, position_embedding, attention
std::string_view EnumName(LayerType type);
std::span<const LayerType> EnumValues(LayerType);

// One entry of the model's layer list, as written in the config.
struct LayerSpec {
  LayerType type = LayerType::kLinear;
  int out = 0;                  // linear: output features; embedding, position_embedding: the vector size
  bool bias = true;             // linear: with bias
  double eps = 1e-5;            // layernorm
  std::vector<LayerSpec> body;  // residual: y = x + body(x)
  int vocab = 0;                // embedding: token ids in [0, vocab)
  int positions = 0;            // position_embedding: the table's length (>= the sequence)
  int heads = 0;                // attention
  bool conv1d = false;          // linear: weight stored [in, out] (GPT-2's Conv1D), not nn.Linear's [out, in]
  bool tied = false;            // linear (an LM head): its weight is the model's embedding table
  std::string name;             // the parameters' name prefix, when not nn.Sequential's "{i}."
};

// A parameter tensor of a layer, in PyTorch's name and layout.
struct ParamInfo {
  std::string name;        // "weight" or "bias"
  std::vector<int> shape;  // linear weight: {out, in}; bias: {out}
  std::size_t offset = 0;  // in floats, from the layer's first parameter
  std::size_t size = 0;    // floats
};

// One op of the flattened model.
struct OpDesc {
  LayerType type = LayerType::kLinear;  // kResidual: the add closing a block
  int in = 0, out = 0;                  // features of a_i and a_{i+1}
  bool bias = true;                     // linear
  double eps = 1e-5;                    // layernorm
  int skip = -1;                        // add: the activation the block started from
  int seq = 1;                          // tokens per sample the op sees (attention needs it)
  int heads = 0;                        // attention
  int vocab = 0;                        // embedding
  bool conv1d = false;                  // linear: weight [in, out]
  int tied_to = -1;                     // linear: the embedding op whose table it shares (a copy, kept equal)
  std::size_t saved_per_row = 0;        // floats a microbatch keeps per token row beyond the input (attention)
  std::size_t stash_per_row = 0;        // floats I leaves per token row for W (attention: the qkv gradient)
  int top = 0;                          // the top-level layer it belongs to
  std::string name;                     // parameter-name prefix: "3." or "2.1." (nn.Sequential)
  std::vector<int> seed_path;           // (top index, index in the block, ...): its init stream
  std::vector<ParamInfo> params;        // PyTorch's order and shapes
  std::size_t num_params = 0;           // floats
  std::size_t param_offset = 0;         // floats, from the model's first parameter
  double flops_per_row = 0;             // forward multiply-adds per row (partitioning by FLOPs)
  double gemm_flops_per_row = 0;        // forward FLOPs of matrix products per row: 2 in out (linear)

  bool is_layer() const { return type != LayerType::kResidual; }
  bool has_params() const { return num_params > 0; }
  // Partition weight by parameters: the parameter count plus one, so that
  // parameter-free layers still weigh something; 0 for an add.
  double balance_params() const { return is_layer() ? static_cast<double>(num_params) + 1 : 0.0; }
};

// A parameter tensor of the model under its PyTorch name: where its floats
// lie among the model's (ops' parameters are laid out one after the other).
struct NamedParam {
  std::string name;                 // "3.weight", "h.0.attn.c_attn.bias"
  std::vector<std::int64_t> shape;  // PyTorch's
  std::size_t offset = 0;           // floats from the model's first parameter
  std::size_t size = 0;             // floats
};

struct ModelDesc {
  int input = 0;                 // features of a_0 (1 for token ids)
  int seq = 1;                   // tokens per sample; 1: samples are feature vectors (MLPs)
  bool tokens = false;           // a_0 holds token ids (i32), embedded by the first op
  std::vector<OpDesc> ops;       // op i: a_i -> a_{i+1}
  std::vector<int> width;        // features of a_0 .. a_N
  std::vector<char> block_input; // per activation: a residual block starts from it
  std::vector<int> top_begin;    // first op of each top-level layer; size top-level layers + 1
  std::size_t num_params = 0;    // floats, all ops

  int top_layers() const { return static_cast<int>(top_begin.size()) - 1; }
  int classes() const { return width.back(); }
  // Ops [first, last) of top-level layers [first_layer, last_layer).
  std::pair<int, int> OpRange(int first_layer, int last_layer) const {
    return {top_begin[static_cast<std::size_t>(first_layer)], top_begin[static_cast<std::size_t>(last_layer)]};
  }
  // Sums over the top-level layers [first_layer, last_layer).
  std::size_t NumParams(int first_layer, int last_layer) const;
  double GemmFlopsPerRow(int first_layer, int last_layer) const;
  // Partition weight of top-level layer t: parameters (plus one per layer) or forward multiply-adds.
  double BalanceWeight(int t, bool by_flops) const;
  // The parameters of top-level layers [first_layer, last_layer), in order:
  // the one place their names are made.
  std::vector<NamedParam> Params(int first_layer, int last_layer) const;
  std::vector<NamedParam> Params() const { return Params(0, top_layers()); }
  // A tied head's weight and the embedding table it is (their names), or
  // nothing without a tied head.
  std::optional<std::pair<std::string, std::string>> TiedParams() const;
  // The (in, out) shapes of the linear layers, in order: what the devices'
  // product-rate probes multiply (RankDevice::GemmGflops).
  std::vector<std::pair<int, int>> LinearShapes() const;
};

// FLOPs of one pass of a product-rate probe: each (in, out) shape's
// forward, input-gradient and weight-gradient products at `rows` rows.
double ProbeFlops(const std::vector<std::pair<int, int>>& shapes, int rows);

// Causal self-attention's layout, GPT-2's, that both backends index
// through: its parameters, floats from the op's first — c_attn.weight
// [C, 3C] (Conv1D), c_attn.bias [3C], c_proj.weight [C, C], c_proj.bias
// [C] — and what a call of n samples of T tokens saves for the backward
// passes, floats from the saved state's first — the projected q, k, v
// (n T, 3C), each row's softmax log-sum-exp per head (n, H, T), the heads'
// output before projection (n T, C) — and what I leaves W: the qkv
// gradient (n T, 3C).
struct AttentionLayout {
  std::size_t c = 0, heads = 0, seq = 0;  // width C, heads H, tokens T

  AttentionLayout(int width, int heads, int seq)
      : c(static_cast<std::size_t>(width)), heads(static_cast<std::size_t>(heads)), seq(static_cast<std::size_t>(seq)) {}
  explicit AttentionLayout(const OpDesc& op) : AttentionLayout(op.in, op.heads, op.seq) {}
  std::size_t w_qkv() const { return 0; }
  std::size_t b_qkv() const { return 3 * c * c; }
  std::size_t w_proj() const { return b_qkv() + 3 * c; }
  std::size_t b_proj() const { return w_proj() + c * c; }
  std::size_t params() const { return b_proj() + c; }
  std::size_t saved_qkv(std::size_t) const { return 0; }
  std::size_t saved_lse(std::size_t samples) const { return samples * seq * 3 * c; }
  std::size_t saved_ctx(std::size_t samples) const { return saved_lse(samples) + samples * heads * seq; }
  // Per token row: what a call saves, and what I leaves for W.
  std::size_t saved_per_row() const { return 4 * c + heads; }
  std::size_t stash_per_row() const { return 3 * c; }
  // Sequence slices: what a slice saves per token row (its queries, the
  // log-sum-exp per head, the heads' output: its keys and values live
  // with the sequence), and the sequence's keys and values (samples, T,
  // 2C) for `samples` samples: as many floats again hold their gradients
  // while the sequence runs backward.
  std::size_t slice_saved_per_row() const { return 2 * c + heads; }
  std::size_t sequence_floats(std::size_t samples) const { return samples * seq * 2 * c; }
};

// What a layer is, on any backend: its op's description, with the
// accessors every backend's layer class offers (the host's Layer, the CUDA
// backend's CudaLayer).
class DescribedLayer {
 public:
  const OpDesc& desc() const { return desc_; }
  LayerType Type() const { return desc_.type; }
  int in_features() const { return desc_.in; }
  int out_features() const { return desc_.out; }
  // Parameters in PyTorch's order and layout; empty for relu/gelu.
  const std::vector<ParamInfo>& Params() const { return desc_.params; }
  std::size_t NumParams() const { return desc_.num_params; }

 protected:
  explicit DescribedLayer(OpDesc desc) : desc_(std::move(desc)) {}

 private:
  OpDesc desc_;
};

// One layer for `in` input features and `seq` tokens per sample. Throws
// ConfigError for a bad size (in or out < 1, eps not > 0, heads not
// dividing the width, a position table shorter than the sequence) or for a
// residual block (not a single layer).
OpDesc DescribeLayer(const LayerSpec& spec, int in, int seq = 1);
// The whole model: flattens residual blocks, names parameters, lays them out
// one after the other. `seq` > 1: samples are sequences of `seq` tokens;
// a model starting with an embedding takes token ids. Throws ConfigError as
// DescribeLayer, for a residual body that changes the width, an embedding
// anywhere but first, or a tied head without an embedding of its shape.
ModelDesc DescribeModel(const std::vector<LayerSpec>& layers, int input, int seq = 1);

// Bytes a layer of `op` allocates for its own use on `device` beside its
// parameters, the ring slot and the stage's workspaces, when called with at
// most `max_rows` token rows. On the host only attention keeps any: the
// heads' output gradient (max_rows x C floats) and two score matrices of
// one head at a time (seq x seq floats each). On a GPU attention keeps every
// head's at once (its heads are one batched product), a linear layer BF16
// copies of its weight and of the largest activation operands (x and dy),
// and a layernorm each row's mean and 1/std. Each backend's layers allocate
// exactly this (StageDevice::ScratchBytes reports what they did), and the
// memory plan counts it.
std::size_t ScratchBytes(const OpDesc& op, int max_rows, Device device);

// ---- GPT ----
// model: {type: gpt, vocab, seq_len, hidden, heads, blocks, tied}
struct GptSpec {
  int vocab = 256;
  int seq_len = 128;
  int hidden = 256;
  int heads = 8;
  int blocks = 8;
  bool tied = true;
  double eps = 1e-5;
};
// The layer list of a GPT-2-style decoder with Hugging Face GPT-2's
// parameter names, as top-level layers (the partition's units): the
// embedding and the position table (pipeline.layout's "E"), then per block
// its two residual halves, x + attn(ln_1(x)) and x + mlp(ln_2(x)) with a 4x
// GELU MLP in Conv1D layout ("t"), then the final layernorm and the LM head
// ("L"; its weight is the embedding's when tied).
std::vector<LayerSpec> GptLayers(const GptSpec& gpt);
// A pair of positions' cost in a GPT, in a position's: attention's
// multiply-adds for one (query, key) pair (q.k and p.v, per block: 2C)
// over a token's in the products (per block 12C^2 for the projections and
// the MLP, and the head's C x vocab). Forward and backward scale alike.
inline double GptPairCost(const GptSpec& g) {
  const double c = g.hidden;
  return 2.0 * c * g.blocks / (12.0 * c * c * g.blocks + c * g.vocab);
}
// Top-level layers of GptLayers' parts: 2 + 2 blocks + 2 in all.
inline constexpr int kGptEmbeddingLayers = 2;  // wte, wpe
inline constexpr int kGptBlockLayers = 2;      // attention half, MLP half
inline constexpr int kGptLossLayers = 2;       // ln_f, lm_head

// PyTorch's default initialisation of one op's parameters (nn.Linear:
// weight and bias uniform in +-1/sqrt(in); nn.LayerNorm: weight 1, bias 0),
// drawing from `rng`. REQUIRES: params.size() == op.num_params.
void InitParams(const OpDesc& op, std::span<float> params, std::mt19937_64& rng);
// The same from the op's own stream, seeded by (seed, op.seed_path): the
// weights do not depend on how the model is partitioned.
void InitParams(const OpDesc& op, std::span<float> params, std::uint64_t seed);

// ---- Optimizers: exactly PyTorch's update rules ----
enum class OptimizerType : std::uint8_t { kSgd, kAdamW };
std::string_view EnumName(OptimizerType type);  // sgd, adamw
std::span<const OptimizerType> EnumValues(OptimizerType);

struct OptimizerSpec {
  OptimizerType type = OptimizerType::kSgd;
  double lr = 0.01;
  double momentum = 0.0;      // sgd
  double weight_decay = 0.0;  // sgd: added to the gradient; adamw: decoupled
  double beta1 = 0.9;         // adamw
  double beta2 = 0.999;       // adamw
  double eps = 1e-8;          // adamw
};

// Throws ConfigError naming the field, the value and the rule.
void CheckOptimizerSpec(const OptimizerSpec& spec);

// train.lr_schedule: each step's learning rate, shaped as nanoGPT and
// Megatron-LM shape it. Step s (1-based) of a peak rate `lr`:
//   s <= warmup_steps:            lr x s / warmup_steps (a linear warm-up from 0)
//   warmup_steps < s <= decay:    constant: lr; linear: lr - r (lr - min_lr);
//                                 cosine: min_lr + (1 + cos(pi r)) / 2 (lr - min_lr),
//                                 r = (s - warmup_steps) / (decay - warmup_steps)
//   s > decay:                    min_lr (constant: lr)
// decay = decay_steps, or the run's last step where 0. The schedule's state
// is the step: a resumed run goes on at the same rates.
enum class LrDecay : std::uint8_t { kConstant, kLinear, kCosine };
std::string_view EnumName(LrDecay type);  // constant, linear, cosine
std::span<const LrDecay> EnumValues(LrDecay);
struct LrSchedule {
  LrDecay type = LrDecay::kConstant;
  std::int64_t warmup_steps = 0;  // 0: none
  double min_lr = 0.0;            // linear, cosine: where the decay ends
  std::int64_t decay_steps = 0;   // linear, cosine: the step it ends at (0: the run's last)
};
// Step `step`'s rate (1-based) of a run of `total_steps` with peak `lr`.
double LearningRateAt(const LrSchedule& schedule, double lr, std::int64_t step, std::int64_t total_steps);
// PyTorch's names of the optimizer's state buffers, in order:
// "momentum_buffer" (SGD with momentum); "exp_avg", "exp_avg_sq" (AdamW);
// none for plain SGD. Every backend keeps its state in this order.
std::vector<std::string> OptimizerStateNames(const OptimizerSpec& spec);

// What every optimizer keeps beside its update rule, on any backend: its
// spec, the names of its state buffers, and the steps taken.
class OptimizerBook {
 public:
  explicit OptimizerBook(const OptimizerSpec& spec) : spec_(spec), names_(OptimizerStateNames(spec)) {}
  const OptimizerSpec& spec() const { return spec_; }
  // PyTorch's names of the State() buffers (OptimizerStateNames).
  const std::vector<std::string>& StateNames() const { return names_; }
  std::int64_t steps() const { return steps_; }
  // Restores the number of steps taken (resuming from a checkpoint: AdamW's
  // bias correction and SGD's first-step momentum depend on it).
  void set_steps(std::int64_t steps) { steps_ = steps; }
  // The rate the next steps take (a schedule's, LearningRateAt).
  void set_lr(double lr) { spec_.lr = lr; }

 protected:
  OptimizerSpec spec_;
  std::vector<std::string> names_;
  std::int64_t steps_ = 0;
};

class Optimizer : public OptimizerBook {
 public:
  using OptimizerBook::OptimizerBook;
  virtual ~Optimizer() = default;
  // One update of params from grads (same size as given at construction).
  virtual void Step(std::span<float> params, std::span<const float> grads) = 0;
  // Optimizer state, in StateNames() order, for checkpoints.
  virtual std::vector<std::span<float>> State() = 0;
};

}  // namespace baton

#endif  // BATON_MODEL_H_
