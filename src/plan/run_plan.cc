// The run plan from a config: the schedule (loaded, lowered, validated,
// simulated with unit costs), the model, its partition and the shapes.
#include <fmt/format.h>

#include <algorithm>

#include "baton/error.h"
#include "baton/slices.h"
#include "baton/price.h"
#include "internal.h"

namespace baton {
namespace {

// The schedule's forwards alone, in each rank's order: evaluation runs them.
// Removing backwards removes only waits, so a schedule that finishes still
// does.
Schedule ForwardOnly(const Schedule& schedule) {
  Schedule out = ComputeOnly(schedule);
  out.name = schedule.name + " (forward only)";
  for (auto& row : out.actions) {
    // An overlapped unit (OVERLAP_F_B) contributes its forward.
    for (Action& a : row) {
      if (a.kind == ActionKind::kOverlapFB) a = Action{a.stage, ActionKind::kForward, a.microbatch};
    }
    std::erase_if(row, [](const Action& a) { return a.kind != ActionKind::kForward; });
  }
  return out;
}

bool HasShardingActions(const Schedule& s) {
  for (const auto& row : s.actions) {
    for (const Action& a : row) {
      if (IsSharding(a.kind)) return true;
    }
  }
  return false;
}

// The price a run's gathers are placed by: unit compute costs (a rank's
// forward 1, shared by its stages), each stage's gather one forward of it.
SimOptions GatherPrice(const Schedule& s) {
  SimOptions o;
  o.record_timeline = true;
  std::vector<int> per_rank(static_cast<std::size_t>(s.ranks), 0);
  for (int st = 0; st < s.stages; ++st) ++per_rank[static_cast<std::size_t>(s.stage_rank[st])];
  for (int st = 0; st < s.stages; ++st) {
    o.shards.gather_time.push_back(1.0 / per_rank[static_cast<std::size_t>(s.stage_rank[st])]);
  }
  return o;
}

// Under ZeRO 2 and 3 every stage a rank computes is summed by a REDUCE_GRAD
// of its own (its gradients would not reach the optimizer's shards
// otherwise), and under 3 gathered by an UNSHARD; CheckSharding has
// checked where they stand. Throws ConfigError naming the rank and stage.
void CheckShardedRun(const TrainConfig& c, const Schedule& s, ZeroStage zero) {
  for (int r = 0; r < s.ranks; ++r) {
    std::vector<char> computes(static_cast<std::size_t>(s.stages), 0), reduced(computes), gathered(computes);
    for (const Action& unit : s.actions[static_cast<std::size_t>(r)]) {
      ForEachPart(unit, [&](const Action& a) {
        if (a.stage < 0) return;
        const auto st = static_cast<std::size_t>(a.stage);
        if (IsCompute(a.kind)) computes[st] = 1;
        if (!HasMicrobatch(a.kind) && a.kind != ActionKind::kIdle && s.stage_rank[st] != r) {
          throw ConfigError(fmt::format("{}: the schedule {} has {} on rank {}, but stage {} runs on rank {}: a rank "
                                        "gathers, frees and sums only its own stages",
                                        c.source, c.pipeline.schedule, ToString(a), r, a.stage, s.stage_rank[st]));
        }
        if (a.kind == ActionKind::kReduceGrad) reduced[st] = 1;
        if (a.kind == ActionKind::kUnshard) gathered[st] = 1;
      });
    }
    for (int st = 0; st < s.stages; ++st) {
      const auto k = static_cast<std::size_t>(st);
      if (!computes[k]) continue;
      const char* missing =
          !reduced[k] ? "REDUCE_GRAD" : zero.shards_parameters() && !gathered[k] ? "UNSHARD" : nullptr;
      if (missing == nullptr) continue;
      throw ConfigError(fmt::format(
          "{}: data_parallel.zero is {}, but the schedule {} has no {} of stage {} on rank {} (a schedule file "
          "that places sharded data parallel's actions places them for every stage: each rank reduce-scatters "
          "its stages' gradients{}; leave them out and baton places them)",
          c.source, zero.number(), c.pipeline.schedule, missing, st, r,
          zero.shards_parameters() ? " and gathers their parameters" : ""));
    }
  }
}

}  // namespace

namespace plan_detail {

TensorDesc Activation(const ModelDesc& m, int a, int rows, int tokens) {
  if (tokens <= 0) tokens = m.seq;
  if (a == 0 && m.tokens) return {DType::kI32, {rows, tokens}};
  const int width = m.width[static_cast<std::size_t>(a)];
  if (m.seq > 1) return {DType::kF32, {rows, tokens, width}};
  return {DType::kF32, {rows, width}};
}

double AttentionCostShare(const ModelDesc& m) {
  double quadratic = 0, all = 0;
  for (const OpDesc& op : m.ops) {
    all += op.flops_per_row;
    if (op.type == LayerType::kAttention) quadratic += 2.0 * op.seq * op.in;
  }
  return all > 0 ? std::clamp(quadratic / all, 0.0, 1.0) : 0.0;
}

}  // namespace plan_detail

Schedule PlaceRunShardingActions(const Schedule& schedule, ZeroStage zero) {
  return AddShardingActions(schedule, zero, GatherPrice(schedule));
}

RunPlan PlanShape(const TrainConfig& c, ModelDesc model, int stages) {
  RunPlan plan;
  plan.lowered.stages = stages;
  plan.model = std::move(model);
  plan.bounds = PartitionLayers(c, plan.model, stages);
  plan.replicas = c.data_parallel.size;
  plan.zero = c.data_parallel.in_effect();
  plan.bucket_cap_bytes = c.data_parallel.bucket_cap_mb * 1024 * 1024;
  plan.wide_gradients = WideGradients(c);
  plan.global_batch = c.train.batch_size;
  // A microbatch's rows: the global batch over every replica's
  // microbatches (each replica's own count where they differ).
  int microbatches = c.pipeline.microbatches * plan.replicas;
  if (!c.pipeline.replica_microbatches.empty()) {
    microbatches = 0;
    for (const int m : c.pipeline.replica_microbatches) microbatches += m;
  }
  plan.rows = c.train.batch_size / microbatches;
  plan.batch_size = plan.rows * c.pipeline.microbatches;
  plan.input = SampleInput(c.data);
  plan.labels_per_sample = LabelsPerSample(c.data);
  plan.checkpointing = c.pipeline.checkpointing;
  plan.keep = c.pipeline.keep;
  plan.wait_timeout_s = c.pipeline.wait_timeout_s;
  plan.optimizer_states = static_cast<int>(OptimizerStateNames(c.train.optimizer).size());
  plan.optimizer = c.train.optimizer.type;
  plan.clips = c.train.clip_grad_norm > 0;
  plan.device = c.device;
  // Slices: the cuts of a sequence (the compute split from the share of
  // the model's work that attends over the keys; the saved state grows
  // with the tokens alone).
  plan.slices = c.pipeline.seq_slices;
  plan.packed = RealLengths(c.data.packing);
  plan.documents = c.data.packing != Packing::kNone;
  const SequenceSlices sliced = SliceSequence(plan.model.seq, plan.slices, c.pipeline.seq_split,
                                              plan_detail::AttentionCostShare(plan.model), 0.0);
  plan.cuts = sliced.cuts;
  plan.slice_cost = sliced.cost;
  plan.slice_token_share = sliced.memory;  // nothing quadratic: the tokens' shares
  plan.slice_tokens = 0;
  for (int s = 0; s < plan.slices; ++s) {
    plan.slice_tokens = std::max(plan.slice_tokens, plan.cuts[static_cast<std::size_t>(s) + 1] - plan.cuts[static_cast<std::size_t>(s)]);
  }
  return plan;
}

RunPlan PlanRun(const TrainConfig& c) {
  // The schedule first: its errors come before the model's and the partition's.
  GenerateOptions options;
  options.chunks = c.pipeline.chunks;
  options.slices = c.pipeline.seq_slices;
  Schedule s = LoadSchedule(c.pipeline.schedule, c.pipeline.ranks, c.pipeline.microbatches, options);
  Validate(s);
  // Sharded data parallel: the schedule's own actions, or placed here.
  const ZeroStage zero = c.data_parallel.in_effect();
  const bool idle_sharding_actions = !zero.has_actions() && HasShardingActions(s);
  if (zero.has_actions()) {
    if (!HasShardingActions(s)) s = PlaceRunShardingActions(s, zero);
    CheckShardedRun(c, s, zero);
  }
  Schedule lowered = Lower(s);
  Validate(lowered);
  RunPlan plan = PlanShape(c, DescribeModel(c.model.layers, c.model.input, c.model.seq), lowered.stages);
  plan.lowered = std::move(lowered);
  plan.idle_sharding_actions = idle_sharding_actions;
  // Derived from a validated schedule, and Lower itself refuses an order
  // that cannot progress (CheckStructure would ask for backwards).
  // Under ZeRO 3 the evaluation gathers each stage too, around its forwards.
  Schedule forwards = ForwardOnly(plan.lowered);
  if (zero.shards_parameters()) forwards = PlaceRunShardingActions(forwards, zero);
  plan.evaluation = Lower(forwards);
  if (plan.lowered.slices != plan.slices) {
    throw ConfigError(fmt::format("{}: the schedule {} holds {} slice(s) a microbatch, but pipeline.seq_slices is {}",
                                  c.source, c.pipeline.schedule, plan.lowered.slices, plan.slices));
  }
  plan.sim = Simulate(plan.lowered, PriceRun(plan, RunCosts{}));  // unit costs
  return plan;
}

TensorDesc SampleInput(const DataConfig& d) {
  if (IsTokenDataset(d.dataset)) return {DType::kI32, {1, d.seq_len}};
  return {DType::kF32, {1, d.features}};
}

int LabelsPerSample(const DataConfig& d) { return IsTokenDataset(d.dataset) ? d.seq_len : 1; }

void CheckModelInput(const TrainConfig& c, const RunPlan& plan) {
  const bool tokens = plan.input.dtype == DType::kI32;
  if (tokens == plan.model.tokens && (!tokens || plan.input.shape.per_sample() == plan.model.seq)) return;
  throw ConfigError(fmt::format(
      "{}: data.dataset is {}: its samples are {}, but the model takes {}", c.source, EnumName(c.data.dataset),
      ToString(plan.input),
      plan.model.tokens ? fmt::format("{} token ids (an embedding first)", plan.model.seq)
                        : fmt::format("{} f32 features", plan.model.input)));
}

}  // namespace baton
