// One stage's plan: what a microbatch keeps for its backward, where each
// kept tensor lies in its ring slot, and the stage's workspaces.
#include <algorithm>

#include "baton/buffer.h"
#include "internal.h"

namespace baton::plan_detail {
namespace {

// Every tensor in a slot or a workspace starts on kBufferAlignment, as the
// buffers themselves do: a vectorised kernel rounds by where its operand
// starts (Eigen peels the floats before the first aligned one and computes
// them one by one, its packet exp and sums round otherwise), so a tensor's
// offset, which depends on the stage's other tensors, would make the
// placement change the training's last bits.
std::size_t Aligned(std::size_t bytes) {
  return (bytes + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
}

// The stage's ops (their device layer indices, adds' skips), activations and
// parameters.
void PlanOps(const RunPlan& run, StagePlan& p) {
  const ModelDesc& model = run.model;
  const int K = p.ops();
  int layers = 0;
  const int tokens = run.slices > 1 ? run.slice_tokens : 0;  // a slice's, or the sequence's
  for (int i = 0; i <= K; ++i) {
    const int a = p.first_op + i;
    // The first stage's input is the dataset's; every other tensor the model's.
    TensorDesc t = i == 0 && p.is_first ? run.input.WithRows(run.rows) : Activation(model, a, run.rows, tokens);
    if (i == 0 && p.is_first && tokens > 0) t = t.WithTokens(tokens);
    p.act.push_back(t);
    p.block_input.push_back(model.block_input[static_cast<std::size_t>(a)]);
  }
  for (int i = 0; i < K; ++i) {
    const OpDesc& op = model.ops[static_cast<std::size_t>(p.first_op + i)];
    p.layer[i] = op.is_layer() ? layers++ : -1;
    p.skip[i] = op.is_layer() ? -1 : op.skip - p.first_op;
    p.num_params += op.num_params;
  }
}

// Which activations a microbatch keeps in its slot: always the stage input;
// the output a_K never (the next stage or the loss takes it); between them,
// as the checkpointing policy says.
void PlanKept(const RunPlan& run, StagePlan& p) {
  const int K = p.ops();
  p.kept.assign(K + 1, 0);
  p.kept[0] = 1;
  for (int i = 0; i + 1 < K; ++i) {
    const OpDesc& op = run.model.ops[static_cast<std::size_t>(p.first_op + i)];
    switch (run.checkpointing) {
      case Checkpointing::kNone:
        p.kept[i + 1] = 1;
        break;
      case Checkpointing::kFull:
        break;
      case Checkpointing::kSelective:
        p.kept[i + 1] = op.is_layer() && std::find(run.keep.begin(), run.keep.end(), op.type) != run.keep.end();
        break;
    }
  }
}

// Layers' own state: what forward saves (kept in the slot when the op is
// not recomputed) and what I leaves for W (in the slot when W runs later);
// both also have a place in the state workspace.
void PlanLayerState(const RunPlan& run, StagePlan& p) {
  const int K = p.ops();
  const int tokens = run.slices > 1 ? run.slice_tokens : run.model.seq;
  const auto token_rows = static_cast<std::size_t>(run.rows) * static_cast<std::size_t>(tokens);
  p.saved_bytes.assign(K, 0);
  p.stash_bytes.assign(K, 0);
  p.saved_in_slot.assign(K, 0);
  p.stash_in_slot.assign(K, 0);
  p.saved_offset.assign(K, 0);
  p.stash_offset.assign(K, 0);
  p.ws_saved_offset.assign(K, 0);
  p.ws_stash_offset.assign(K, 0);
  std::size_t state = 0;
  for (int i = 0; i < K; ++i) {
    const OpDesc& op = run.model.ops[static_cast<std::size_t>(p.first_op + i)];
    // A slice of attention keeps its rows' statistics and heads' output;
    // its q, k, v live with the sequence (PlanSequence).
    const std::size_t saved_per_row =
        run.slices > 1 && op.type == LayerType::kAttention ? AttentionLayout(op).slice_saved_per_row() : op.saved_per_row;
    p.saved_bytes[i] = token_rows * saved_per_row * sizeof(float);
    p.stash_bytes[i] = token_rows * op.stash_per_row * sizeof(float);
    p.ws_saved_offset[i] = state;
    state += Aligned(p.saved_bytes[i]);
    p.ws_stash_offset[i] = state;
    state += Aligned(p.stash_bytes[i]);
    p.saved_in_slot[i] = p.saved_bytes[i] > 0 && (i + 1 == K || p.kept[i + 1]);
    p.stash_in_slot[i] = p.stash_bytes[i] > 0 && p.split_backward;
  }
  p.state_workspace_bytes = state;
}

// The slot: the forward's part (kept activations, the loss gradient, saved
// states), then W's (output gradients, stashes); and the activation
// workspace, one microbatch of every activation.
void PlanSlot(const RunPlan& run, StagePlan& p) {
  const int K = p.ops();
  p.kept_offset.assign(K + 1, 0);
  std::size_t slot = 0;
  for (int i = 0; i < K; ++i) {
    if (!p.kept[i]) continue;
    p.kept_offset[i] = slot;
    slot += Aligned(p.act[i].bytes());
  }
  if (p.is_last) {
    p.dlogits_offset = slot;
    slot += Aligned(p.act[K].bytes());
  }
  for (int i = 0; i < K; ++i) {
    if (!p.saved_in_slot[i]) continue;
    p.saved_offset[i] = slot;
    slot += Aligned(p.saved_bytes[i]);
  }
  p.forward_bytes = slot;
  p.wgrad_offset.assign(K, 0);
  if (p.split_backward) {
    for (int i = 0; i < K; ++i) {
      if (!run.model.ops[static_cast<std::size_t>(p.first_op + i)].has_params()) continue;
      p.wgrad_offset[i] = slot;
      slot += Aligned(p.act[i + 1].bytes());
    }
  }
  for (int i = 0; i < K; ++i) {
    if (!p.stash_in_slot[i]) continue;
    p.stash_offset[i] = slot;
    slot += Aligned(p.stash_bytes[i]);
  }
  p.slot_bytes = slot;
  p.workspace_offset.assign(K + 1, 0);
  std::size_t ws = 0;
  for (int i = 0; i <= K; ++i) {
    p.workspace_offset[i] = ws;
    ws += Aligned(p.act[i].bytes());
  }
  p.workspace_bytes = ws;
}

// Sequence slices: each attention op's sequence slot part, the sequence's
// q, k, v and their gradients for `rows` samples (SequenceSlice).
void PlanSequence(const RunPlan& run, StagePlan& p) {
  p.slices = run.slices;
  if (run.slices == 1) return;
  p.slice_tokens = run.slice_tokens;
  p.sequence_offset.assign(static_cast<std::size_t>(p.ops()), 0);
  for (int i = 0; i < p.ops(); ++i) {
    const OpDesc& op = run.model.ops[static_cast<std::size_t>(p.first_op + i)];
    if (op.type != LayerType::kAttention) continue;
    p.sequence_offset[static_cast<std::size_t>(i)] = p.sequence_bytes;
    p.sequence_bytes += Aligned(AttentionLayout(op).sequence_floats(static_cast<std::size_t>(run.rows)) * sizeof(float));
  }
}

}  // namespace

StagePlan PlanStage(const RunPlan& run, int stage, bool split_backward, int capacity) {
  StagePlan p;
  p.stage = stage;
  p.first_layer = run.bounds[static_cast<std::size_t>(stage)];
  p.last_layer = run.bounds[static_cast<std::size_t>(stage) + 1];
  const auto [first_op, last_op] = run.model.OpRange(p.first_layer, p.last_layer);
  p.first_op = first_op;
  p.rows = run.rows;
  p.is_first = stage == 0;
  p.is_last = stage + 1 == run.stages();
  p.split_backward = split_backward;
  p.checkpointing = run.checkpointing;
  p.param_offset = run.model.ops[static_cast<std::size_t>(first_op)].param_offset;
  p.tokens_per_sample = run.model.seq;
  p.layer.assign(static_cast<std::size_t>(last_op - first_op), -1);
  p.skip.assign(p.layer.size(), -1);
  PlanOps(run, p);
  PlanKept(run, p);
  PlanLayerState(run, p);
  PlanSlot(run, p);
  PlanSequence(run, p);
  p.ring_capacity = capacity;
  return p;
}

}  // namespace baton::plan_detail

namespace baton {

StagePlan PlanStageAlone(const RunPlan& shape, int stage, bool split_backward) {
  return plan_detail::PlanStage(shape, stage, split_backward, 1);
}

}  // namespace baton
