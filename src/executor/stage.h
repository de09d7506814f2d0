// A stage's compute: runs a StagePlan's ops (plan.h) on a StageDevice, and
// holds the stage's parameters and gradients (host copies; a GPU keeps its
// own and pushes and pulls them).
//
// Op i reads activation a_i (and an add also a_skip) and writes a_{i+1}.
// Where a_i lives is the plan's slot layout: in the microbatch's ring slot
// if kept, else in the stage's workspace, recomputed inside backward when
// the checkpointing policy dropped it.
#ifndef BATON_RUNTIME_STAGE_H_
#define BATON_RUNTIME_STAGE_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "baton/buffer.h"
#include "baton/model.h"
#include "baton/stage_device.h"
#include "baton/view.h"
#include "baton/plan.h"

namespace baton {

// Told, during a backward, that the stage's gradients from float `from` to
// the end of its gradient buffer are final for the step (data parallelism
// starts their sums then, as PyTorch DDP's hooks do). Called as the
// backward passes each op with parameters, last op first.
class GradientsReady {
 public:
  virtual void Ready(std::size_t from) = 0;

 protected:
  ~GradientsReady() = default;
};

// The clip's parts of `part` (parameters of stage `st` of `model`): each
// op's parameters within it, each op with parameters once (a tied head's
// copy not: its embedding's counts), appended to `ranges` with the op's
// index in `ops`, in the stage's order.
void OpRanges(const ModelDesc& model, const StagePlan& st, ParamRange part, std::vector<ParamRange>& ranges,
              std::vector<int>& ops);

class Stage {
 public:
  // REQUIRES: `plan` is a stage of a plan of `model`; both outlive the stage.
  // The stage makes its own parameter and gradient buffers unless told not
  // to (sharded data parallel: ZeRO 3 gathers the parameters, ZeRO 2 and 3
  // the gradients, into the executor's windows, and Bind points the stage
  // at them).
  Stage(const ModelDesc& model, const StagePlan& plan, std::unique_ptr<StageDevice> device, bool own_params = true,
        bool own_grads = true);

  const StagePlan& plan() const { return plan_; }
  int index() const { return plan_.stage; }

  // The host copies of the parameters and gradients (on a GPU stage, the
  // parameters are current after device().PullParams()): the stage's own,
  // or the memory Bind gave it (empty: none bound).
  std::span<float> params() { return params_; }
  std::span<float> grads() { return grads_; }
  // Points the stage's layers and named views at `params` and `grads`
  // (each num_params floats, or empty: none), host memory that outlives
  // the binding. The host device only; never inside an action.
  void Bind(std::span<float> params, std::span<float> grads);
  StageDevice& device() { return *device_; }
  // The float gradients and, when widened, the doubles too.
  void ZeroGrads();
  // Gradients summed in double (RankPlan::wide_gradients; the host device,
  // the stage's own gradients). Widen gives each parameter a double; from
  // then on each op's weight gradients, as B or W finishes them for one
  // microbatch, are added into the doubles and the floats zeroed (while
  // they are still in cache), so a step's sum over its microbatches is a
  // sum of doubles of each microbatch's floats (exact unless one
  // parameter's exponents span more than a double's extra 29 bits), before
  // the op is said ready; NarrowGrads rounds the summed doubles into the
  // float gradients for the optimizer.
  void Widen();
  std::span<double> wide_grads() { return wide_; }
  void NarrowGrads();
  // PyTorch's default init, each op from its own stream (InitParams): the
  // weights do not depend on the partition.
  void Init(std::uint64_t seed);
  // The stage's parameters with PyTorch nn.Sequential names ("{i}.weight",
  // "{i}.{k}.bias" inside a residual block) and shapes; `data` views params().
  struct Param {
    std::string name;
    std::vector<std::int64_t> shape;
    std::span<float> data;
  };
  const std::vector<Param>& named_params() const { return named_; }

  // F of `rows` samples. With a slot (training), the slot holds the stage
  // input a_0 (the caller copied x in) and keeps what the plan says; counts
  // the bytes written in place into *written. Without one (evaluation),
  // reads x and keeps nothing. Writes the output to y. All views are the
  // device's memory. `part` (every call): the unit's part of its sequence
  // (SequencePart, resolved by the plan: the tokens it computes, the views
  // shaped for them by Shaped, and the sequence's key/value slot and, in
  // its backward, gradient slot, StagePlan::sequence_bytes each); whole
  // sequences: {}.
  void Forward(ConstView x, std::byte* slot, View y, std::size_t* written, const SequencePart& part = {});
  // F on the last stage: logits, then the loss against `labels` (i32, rows).
  // With a slot, keeps dlogits (scaled by grad_scale) there; without one,
  // only counts the loss. The loss and correct count go to the device's
  // totals (TakeLossTotals).
  void ForwardLoss(ConstView x, std::byte* slot, ConstView labels, float grad_scale, std::size_t* written,
                   const SequencePart& part = {});
  // I (full = false) or B (full = true). dy: the output gradient, ignored
  // on the last stage (its gradient is the slot's dlogits). dx: the input
  // gradient, or a null view when no one needs it (stage 0); its shape's
  // rows are the microbatch's samples run (its forward's).
  // `ready` (optional): told as each op's weight gradients are done (B only).
  void Backward(std::byte* slot, ConstView dy, View dx, bool full, GradientsReady* ready = nullptr,
                const SequencePart& part = {});
  // W: weight gradients from the slot's kept inputs and output gradients of
  // the microbatch's `rows` samples run, last op first; `ready` as for Backward.
  void BackwardWeight(std::byte* slot, int rows, GradientsReady* ready = nullptr, const SequencePart& part = {});
  // The loss and correct predictions added since the last call.
  LossTotals TakeLossTotals() { return device_->TakeLossTotals(); }

  // Activation-shaped tensor `t` of the plan for `rows` samples and the
  // part's tokens.
  static TensorDesc Shaped(const TensorDesc& t, int rows, const SequencePart& part = {}) {
    const TensorDesc r = t.WithRows(rows);
    if (!part.whole()) return r.WithTokens(part.tokens());
    return part.length > 0 ? r.WithTokens(part.length) : r;
  }

 private:
  // Activation i for `rows` samples: in the slot if kept and there is a
  // slot, else in the workspace (a_0 without a slot: `x`).
  View Act(int i, std::byte* slot, int rows, const SequencePart& part, const std::byte* x = nullptr);
  View Workspace(std::byte* base, int i, int rows, const SequencePart& part) const;
  // Op i's saved state and stash: in the slot or in the state workspace (plan.h).
  std::byte* Saved(int i, std::byte* slot) const;
  std::byte* Stash(int i, std::byte* slot) const;
  // Op i's part of the unit's: an attention layer's keys and values at its
  // offset in the sequence's slots (StagePlan::sequence_offset).
  SequencePart LayerPart(int i, const SequencePart& part) const;
  // Runs op i for `rows` samples.
  void RunOp(int i, std::byte* slot, int rows, const SequencePart& part, const std::byte* x, View out);
  void Recompute(std::byte* slot, int rows, const SequencePart& part);
  // Op i's first parameter, in floats from the stage's first.
  std::size_t ParamsFrom(int i) const;
  // Op i's weight gradients done for a microbatch: folded into the
  // doubles (Widen), then `ready` told.
  void WeightsDone(int i, GradientsReady* ready);

  const ModelDesc& model_;
  const StagePlan& plan_;
  std::unique_ptr<StageDevice> device_;
  FloatBuffer own_params_, own_grads_;  // host, unless the executor binds its own
  std::span<float> params_, grads_;      // what the layers use now
  std::vector<double> wide_;              // Widen: the step's gradient sums in double
  std::vector<Param> named_;
  std::vector<std::pair<std::size_t, std::size_t>> named_at_;  // per named parameter: its floats' first, count
  // Workspace for one microbatch, device memory (workspace_offset per
  // activation): recomputed activations, gradients, skip sums.
  std::byte* ws_act_ = nullptr;
  std::byte* ws_grad_ = nullptr;
  std::byte* ws_skip_ = nullptr;
  std::byte* ws_state_ = nullptr;  // layers' saved states and stashes (state_workspace_bytes)
};

}  // namespace baton

#endif  // BATON_RUNTIME_STAGE_H_
