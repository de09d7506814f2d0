#include "stage.h"

#include <fmt/format.h>

#include <Eigen/Core>

#include <algorithm>

#include "baton/deadline.h"
#include "baton/error.h"

namespace baton {

Stage::Stage(const ModelDesc& model, const StagePlan& plan, std::unique_ptr<StageDevice> device, bool own_params,
             bool own_grads)
    : model_(model), plan_(plan), device_(std::move(device)) {
  for (int i = 0; i < plan_.ops(); ++i) {
    if (plan_.layer[i] >= 0) {
      device_->AddLayer(model_.ops[static_cast<std::size_t>(plan_.first_op + i)], plan_.rows * plan_.tokens_per_sample);
    }
  }
  // Parameters: one buffer for the stage, carved into the named views the
  // model description gives.
  if (own_params) own_params_.assign(plan_.num_params, 0.0f);
  if (own_grads) own_grads_.assign(plan_.num_params, 0.0f);
  for (NamedParam& p : model_.Params(plan_.first_layer, plan_.last_layer)) {
    named_.push_back({std::move(p.name), std::move(p.shape), {}});
    named_at_.emplace_back(p.offset - plan_.param_offset, p.size);
  }
  Bind(own_params_, own_grads_);
  ws_act_ = device_->Allocate(plan_.workspace_bytes);
  ws_grad_ = device_->Allocate(plan_.workspace_bytes);
  ws_skip_ = device_->Allocate(plan_.workspace_bytes);
  if (plan_.state_workspace_bytes > 0) ws_state_ = device_->Allocate(plan_.state_workspace_bytes);
}

std::byte* Stage::Saved(int i, std::byte* slot) const {
  if (plan_.saved_bytes[i] == 0) return nullptr;
  if (slot != nullptr && plan_.saved_in_slot[i]) return slot + plan_.saved_offset[i];
  return ws_state_ + plan_.ws_saved_offset[i];
}

std::byte* Stage::Stash(int i, std::byte* slot) const {
  if (plan_.stash_bytes[i] == 0) return nullptr;
  if (slot != nullptr && plan_.stash_in_slot[i]) return slot + plan_.stash_offset[i];
  return ws_state_ + plan_.ws_stash_offset[i];
}

void Stage::Bind(std::span<float> params, std::span<float> grads) {
  params_ = params;
  grads_ = grads;
  for (std::size_t i = 0; i < named_.size(); ++i) {
    named_[i].data = params.empty() ? std::span<float>{} : params.subspan(named_at_[i].first, named_at_[i].second);
  }
  device_->BindParams(params, grads);
}

void Stage::ZeroGrads() {
  if (!grads_.empty()) device_->Zero(FloatView(device_->grads(), grads_.size()));
  std::fill(wide_.begin(), wide_.end(), 0.0);
}

void Stage::Widen() {
  if (grads_.size() != plan_.num_params) {
    throw Error(fmt::format("stage {}: gradients in double need the stage's own whole gradients", plan_.stage));
  }
  wide_.assign(plan_.num_params, 0.0);
}

void Stage::NarrowGrads() {
  const auto n = static_cast<Eigen::Index>(wide_.size());
  Eigen::Map<Eigen::VectorXf>(grads_.data(), n) = Eigen::Map<const Eigen::VectorXd>(wide_.data(), n).cast<float>();
}

void Stage::WeightsDone(int i, GradientsReady* ready) {
  const std::size_t from = ParamsFrom(i);
  if (!wide_.empty()) {
    const auto n = static_cast<Eigen::Index>(model_.ops[static_cast<std::size_t>(plan_.first_op + i)].num_params);
    Eigen::Map<Eigen::VectorXf> g(grads_.data() + from, n);
    Eigen::Map<Eigen::VectorXd>(wide_.data() + from, n) += g.cast<double>();
    g.setZero();
  }
  if (ready != nullptr) ready->Ready(from);
}

void Stage::Init(std::uint64_t seed) {
  for (int i = 0; i < plan_.ops(); ++i) {
    const OpDesc& op = model_.ops[static_cast<std::size_t>(plan_.first_op + i)];
    if (!op.has_params()) continue;
    // A tied head starts as its embedding: the same draws.
    const OpDesc& from = op.tied_to >= 0 ? model_.ops[static_cast<std::size_t>(op.tied_to)] : op;
    InitParams(from, std::span<float>(params_.data() + (op.param_offset - plan_.param_offset), op.num_params), seed);
  }
}

View Stage::Workspace(std::byte* base, int i, int rows, const SequencePart& part) const {
  return {base + plan_.workspace_offset[i], Shaped(plan_.act[i], rows, part)};
}

View Stage::Act(int i, std::byte* slot, int rows, const SequencePart& part, const std::byte* x) {
  if (slot != nullptr && plan_.kept[i]) return {slot + plan_.kept_offset[i], Shaped(plan_.act[i], rows, part)};
  if (i == 0 && slot == nullptr) return {const_cast<std::byte*>(x), Shaped(plan_.act[0], rows, part)};
  return Workspace(ws_act_, i, rows, part);
}

SequencePart Stage::LayerPart(int i, const SequencePart& part) const {
  SequencePart layer{part.begin, part.end, nullptr, nullptr, part.starts, part.length};
  // An attention layer's keys and values (and their gradients) at its offset in the slots.
  if (model_.ops[static_cast<std::size_t>(plan_.first_op + i)].type == LayerType::kAttention) {
    if (part.keys_values != nullptr) layer.keys_values = part.keys_values + plan_.sequence_offset[i];
    if (part.gradients != nullptr) layer.gradients = part.gradients + plan_.sequence_offset[i];
  }
  return layer;
}

void Stage::RunOp(int i, std::byte* slot, int rows, const SequencePart& part, const std::byte* x, View out) {
  WhileWaiting::Run();  // between ops too: a slow wire's held messages go out when due, not at the action's end
  const View in = Act(i, slot, rows, part, x);
  if (plan_.layer[i] >= 0) {
    device_->Forward(plan_.layer[i], in, out, Saved(i, slot), LayerPart(i, part));
    return;
  }
  device_->Add(in, Act(plan_.skip[i], slot, rows, part, x), out);
}

void Stage::Forward(ConstView x, std::byte* slot, View y, std::size_t* written, const SequencePart& part) {
  const int K = plan_.ops();
  const int rows = static_cast<int>(x.desc.shape[0]);
  for (int i = 0; i < K; ++i) {
    RunOp(i, slot, rows, part, x.data, i + 1 == K ? y : Act(i + 1, slot, rows, part));
    if (slot != nullptr && i + 1 < K && plan_.kept[i + 1]) *written += Shaped(plan_.act[i + 1], rows, part).bytes();
  }
}

void Stage::ForwardLoss(ConstView x, std::byte* slot, ConstView labels, float grad_scale, std::size_t* written,
                        const SequencePart& part) {
  const int K = plan_.ops();
  const int rows = static_cast<int>(x.desc.shape[0]);
  const View logits = Workspace(ws_act_, K, rows, part);
  Forward(x, slot, logits, written, part);
  View dlogits{nullptr, logits.desc};
  if (slot != nullptr) {
    dlogits.data = slot + plan_.dlogits_offset;
    *written += logits.bytes();
  }
  device_->CrossEntropy(logits, labels, grad_scale, dlogits);
}

void Stage::Recompute(std::byte* slot, int rows, const SequencePart& part) {
  if (plan_.checkpointing == Checkpointing::kNone) return;
  const int K = plan_.ops();
  for (int i = 0; i + 1 < K; ++i) {
    if (plan_.kept[i + 1]) continue;
    RunOp(i, slot, rows, part, nullptr, Act(i + 1, slot, rows, part));
  }
}

void Stage::Backward(std::byte* slot, ConstView dy, View dx, bool full, GradientsReady* ready,
                     const SequencePart& part) {
  const int rows = static_cast<int>(dx.desc.shape[0]);  // the microbatch's samples run
  Recompute(slot, rows, part);
  const int K = plan_.ops();
  for (int i = 0; i < K; ++i) {
    if (plan_.block_input[i]) device_->Zero(Workspace(ws_skip_, i, rows, part));
  }
  const ConstView top =
      plan_.is_last ? ConstView(slot + plan_.dlogits_offset, Shaped(plan_.act[K], rows, part)) : dy;
  for (int i = K - 1; i >= 0; --i) {
    WhileWaiting::Run();
    const ConstView gout = i + 1 == K ? top : ConstView(Workspace(ws_grad_, i + 1, rows, part));
    const View gin = i == 0 ? dx : Workspace(ws_grad_, i, rows, part);
    if (plan_.layer[i] < 0) {
      // y = a_i + a_skip: the gradient flows to both unchanged.
      device_->AddInto(gout, Workspace(ws_skip_, plan_.skip[i], rows, part));
      if (gin.data != nullptr) device_->Copy(gin, gout);
    } else {
      const View x = Act(i, slot, rows, part);
      const bool params = model_.ops[static_cast<std::size_t>(plan_.first_op + i)].has_params();
      // W runs later and needs this output gradient: keep it in the slot.
      if (params && !full) {
        device_->Copy(View{slot + plan_.wgrad_offset[i], Shaped(plan_.act[i + 1], rows, part)}, gout);
      }
      std::byte* stash = Stash(i, slot);
      if (gin.data != nullptr || stash != nullptr) {
        device_->BackwardInput(plan_.layer[i], x, Saved(i, slot), gout, gin, stash, LayerPart(i, part));
      }
      if (params && full) {
        device_->BackwardWeight(plan_.layer[i], x, Saved(i, slot), gout, stash, LayerPart(i, part));
        WeightsDone(i, ready);
      }
    }
    if (gin.data != nullptr && plan_.block_input[i]) device_->AddInto(Workspace(ws_skip_, i, rows, part), gin);
  }
}

void Stage::BackwardWeight(std::byte* slot, int rows, GradientsReady* ready, const SequencePart& part) {
  Recompute(slot, rows, part);
  // Last op first, as B goes: each op adds into its own gradients only, so
  // the order changes no bit, and the gradients become final from the end.
  for (int i = plan_.ops() - 1; i >= 0; --i) {
    if (plan_.layer[i] < 0 || !model_.ops[static_cast<std::size_t>(plan_.first_op + i)].has_params()) continue;
    WhileWaiting::Run();
    device_->BackwardWeight(plan_.layer[i], Act(i, slot, rows, part), Saved(i, slot),
                            ConstView(slot + plan_.wgrad_offset[i], Shaped(plan_.act[i + 1], rows, part)),
                            Stash(i, slot), LayerPart(i, part));
    WeightsDone(i, ready);
  }
}

void OpRanges(const ModelDesc& model, const StagePlan& st, ParamRange part, std::vector<ParamRange>& ranges,
              std::vector<int>& ops) {
  const std::size_t last = part.first + part.count;
  for (int i = 0; i < st.ops(); ++i) {
    const int o = st.first_op + i;
    const OpDesc& op = model.ops[static_cast<std::size_t>(o)];
    if (op.num_params == 0 || op.tied_to >= 0) continue;
    const std::size_t begin = op.param_offset - st.param_offset, end = begin + op.num_params;
    const std::size_t from = std::max(begin, part.first), to = std::min(end, last);
    if (from >= to) continue;
    ranges.push_back({from, to - from});
    ops.push_back(o);
  }
}

std::size_t Stage::ParamsFrom(int i) const {
  return model_.ops[static_cast<std::size_t>(plan_.first_op + i)].param_offset - plan_.param_offset;
}

}  // namespace baton
