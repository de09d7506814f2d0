// A stage: a contiguous run of the model's top-level layers, flattened into
// a list of ops over activations a_0 (the stage input) .. a_K (its output).
// A residual block becomes its body's ops followed by an add of the block's
// input. Each op i reads a_i (and an add also a_skip) and writes a_{i+1}.
//
// Backward needs the input of every layer op. Which inputs a microbatch keeps
// in its ring slot is the checkpointing policy: none keeps them all; full
// keeps only a_0 and recomputes the rest into the stage's workspace inside
// backward; selective keeps a_0 and the outputs of the named layer types and
// recomputes the others. A split backward (I, then W later) also keeps, per
// layer with parameters, the gradient of its output, which W needs.
#ifndef BATON_RUNTIME_STAGE_H_
#define BATON_RUNTIME_STAGE_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "baton/config.h"
#include "baton/data.h"
#include "baton/model.h"
#include "baton/stage_device.h"

namespace baton {

enum class Checkpointing { kNone, kFull, kSelective };
Checkpointing ParseCheckpointing(const std::string& name);

struct StageOptions {
  int index = 0;        // stage number
  int first_layer = 0;  // top-level layers [first_layer, last_layer)
  int last_layer = 0;
  int rows = 1;  // samples per microbatch
  Checkpointing checkpointing = Checkpointing::kNone;
  std::vector<std::string> keep;  // selective: layer types whose outputs are kept
  bool is_last = false;           // computes the loss
  bool split_backward = false;    // the schedule runs I and W separately here
};

class Stage {
 public:
  // Computes on `device` (the host unless given).
  Stage(const std::vector<LayerSpec>& model_layers, int model_input, const StageOptions& options,
        std::unique_ptr<StageDevice> device = MakeHostStageDevice());

  int index() const { return options_.index; }
  int in_features() const { return width_.front(); }
  int out_features() const { return width_.back(); }
  int rows() const { return options_.rows; }
  std::size_t slot_floats() const { return slot_floats_; }
  // Floats of the slot filled by one forward (activations; dlogits on the last stage).
  std::size_t forward_floats() const { return forward_floats_; }

  // The host copies of the parameters and gradients (on a GPU stage, the
  // parameters are current after device().PullParams()).
  std::span<float> params() { return params_; }
  std::span<float> grads() { return grads_; }
  StageDevice& device() { return *device_; }
  void ZeroGrads();
  // PyTorch default init; layer i (k-th of a residual body) draws from a
  // generator seeded by (seed, i, k), so the weights do not depend on the
  // partition.
  void Init(std::uint64_t seed);
  // The stage's parameters with PyTorch nn.Sequential names ("{i}.weight",
  // "{i}.{k}.bias" inside a residual block) and shapes; `data` views params().
  struct Param {
    std::string name;
    std::vector<std::int64_t> shape;
    std::span<float> data;
  };
  const std::vector<Param>& named_params() const { return named_; }

  // F. slot: the microbatch's ring slot, holding the stage input a_0 at
  // InputOffset() (copied in by the caller). Writes the output to y (rows,
  // out). Counts in-place writes into *written_floats. All pointers are the
  // device's memory.
  void Forward(float* slot, float* y, std::size_t* written_floats);
  // F on the last stage: logits, then the loss (labels: rows values, device
  // memory); keeps dlogits in the slot. The loss and correct count go to the
  // device's totals (TakeLossTotals).
  void ForwardLoss(float* slot, const std::int32_t* labels, float grad_scale, std::size_t* written_floats);
  // I (full = false) or B (full = true). dy: (rows, out), ignored on the last
  // stage (its gradient is the slot's dlogits). dx: (rows, in), or null when
  // no one needs the input gradient (stage 0).
  void Backward(float* slot, const float* dy, float* dx, bool full);
  // W: weight gradients from the slot's kept inputs and output gradients.
  void BackwardWeight(float* slot);

  // Forward without a slot, for evaluation; rows <= rows().
  void Evaluate(const float* x, int rows, float* y);
  void EvaluateLoss(const float* x, int rows, const std::int32_t* labels);
  // The loss and correct predictions added since the last call.
  LossTotals TakeLossTotals() { return device_->TakeLossTotals(); }

  std::size_t InputOffset() const { return 0; }

 private:
  struct Op {
    int layer = -1;  // index into layers_, or -1 for a residual add
    int skip = -1;   // add: the block input's activation index
  };
  void Flatten(const std::vector<LayerSpec>& specs, int top_index, const std::string& prefix, int depth,
               std::uint64_t* counter);
  float* Act(int i, float* slot);
  // Runs op i for `rows` samples; `skip` is the add's second input.
  void RunOp(int i, const float* in, float* out, int rows, const float* skip);
  void Recompute(float* slot);

  StageOptions options_;
  std::unique_ptr<StageDevice> device_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<std::vector<int>> layer_seed_path_;  // (top index, k, ...) per layer
  std::vector<char> has_params_;                   // per layer (Params() allocates: ask once)
  std::vector<std::string> layer_names_;           // "{i}." or "{i}.{k}." per layer
  std::vector<int> layer_path_stack_;              // while flattening nested blocks
  std::vector<Op> ops_;
  std::vector<int> width_;              // features of a_0..a_K
  std::vector<char> stored_;            // a_i kept in the slot
  std::vector<std::size_t> slot_off_;   // a_i offset in the slot
  std::vector<std::size_t> wgrad_off_;  // per op with parameters: its output gradient in the slot
  std::size_t dlogits_off_ = 0;
  std::size_t slot_floats_ = 0, forward_floats_ = 0;
  FloatBuffer params_, grads_;  // host
  std::vector<Param> named_;
  // Workspace for one microbatch, device memory: recomputed activations,
  // gradients, skip sums.
  float* ws_act_ = nullptr;
  float* ws_grad_ = nullptr;
  float* ws_skip_ = nullptr;
  std::vector<std::size_t> ws_off_;  // per activation index, into each of the three
  std::vector<char> is_block_input_;
};

// First top-level layer of each stage (size stages + 1). Balanced splits
// minimise the largest stage's parameter count (or forward FLOPs); explicit
// counts are checked. Throws ConfigError with the rule.
std::vector<int> PartitionLayers(const TrainConfig& config, int stages);

}  // namespace baton

#endif  // BATON_RUNTIME_STAGE_H_
