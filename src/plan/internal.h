// What the plan library's files share and nothing outside it needs.
#ifndef BATON_PLAN_INTERNAL_H_
#define BATON_PLAN_INTERNAL_H_

#include <vector>

#include "baton/plan.h"
#include "baton/sim.h"

namespace baton::plan_detail {

// Activation a of the model for `rows` samples: token ids (i32, (rows,
// seq)) entering a model that embeds them; (rows, seq, features) for
// sequences; (rows, features) for feature vectors.
// `tokens` > 0: a slice of that many tokens of each sample's sequence.
TensorDesc Activation(const ModelDesc& model, int a, int rows, int tokens = 0);

// The share of a model's forward multiply-adds that attends over the keys
// (attention's scores and weighted values), for the compute split of a
// sequence's slices.
double AttentionCostShare(const ModelDesc& model);

// Stage `stage`'s plan: what a microbatch keeps, where in its slot, its
// workspaces; its ring capacity `capacity` microbatches.
StagePlan PlanStage(const RunPlan& run, int stage, bool split_backward, int capacity);

// The message buffers of a stage (local index `local`) of S stages with m
// microbatches a step: an inbox for its input (any stage but the first:
// received, or handed over by the stage before it on this rank) and one for
// its output gradient (any but the last); an outbox on each side whose
// neighbour stage is on another rank.
std::vector<BufferPlan> StageBuffers(const StagePlan& stage, int local, int stages, int microbatches,
                                     bool prev_remote, bool next_remote);

// Where a tied head's two copies live, for any placement: the stages of the
// embedding and of the head, or {-1, -1} without a tied head.
struct TiedStages {
  int embedding = -1, head = -1;
  std::size_t floats = 0;
};
TiedStages FindTiedStages(const ModelDesc& model, const std::vector<int>& bounds);

// The static memory stage `st` adds to its rank (RankMemory without the
// ring): parameters, gradients, optimizer state over `optimizer_floats`,
// workspaces, its layers' scratch on `run.device`, and `buffers`.
RankMemory StageMemory(const RunPlan& run, const StagePlan& st, std::size_t optimizer_floats,
                       const std::vector<BufferPlan>& buffers);

}  // namespace baton::plan_detail

#endif  // BATON_PLAN_INTERNAL_H_
