// One price for a run (baton/price.h).
#include "baton/price.h"

#include <algorithm>
#include <cmath>

#include "internal.h"

namespace baton {
namespace {

// Each stage's gradient sums over the replicas (the alpha-beta time of its
// buckets); a stage with a tied copy sums at its rank's end. From the
// model and the partition alone: a shape (PlanShape) prices them too.
GradientSums PriceGradientSums(const RunPlan& plan, const RunCosts& costs) {
  GradientSums sums;
  if (plan.replicas <= 1 || (costs.allreduce_step_latency == 0.0 && costs.allreduce_bandwidth == 0.0)) return sums;
  if (plan.zero.has_actions()) return sums;  // the schedule's REDUCE_GRAD actions (PriceShards)
  for (int s = 0; s < plan.stages(); ++s) {
    // In double (wide gradients) the same buckets carry twice the bytes.
    const double wide = double(plan.GradSumBytes()) / sizeof(float);
    sums.stage_time.push_back(GradientSumTime(plan.StageParamBytes(s) * wide, plan.replicas,
                                              plan.bucket_cap_bytes * wide, costs.allreduce_step_latency,
                                              costs.allreduce_bandwidth));
  }
  sums.at_end = plan.SummedAtEnd();
  return sums;
}

// Sharded data parallel's collectives (ZeRO 2 and 3), each a stage's
// whole parameters or gradients in one ring all-gather or reduce-scatter
// priced by the replica group's all-reduce α–β, ZeRO 2's all-gather after
// the optimizer step included; their windows are in the ranks' static
// bytes already (RankMemory), so no gathered bytes here.
ShardCosts PriceShards(const RunPlan& plan, const RunCosts& costs) {
  ShardCosts shards;
  if (!plan.zero.has_actions() || (costs.allreduce_step_latency == 0.0 && costs.allreduce_bandwidth == 0.0)) return shards;
  for (int s = 0; s < plan.stages(); ++s) {
    const double t = ShardCollectiveTime(plan.StageParamBytes(s), plan.replicas, costs.allreduce_step_latency, costs.allreduce_bandwidth);
    shards.reduce_time.push_back(t);
    shards.gather_time.push_back(plan.zero.shards_parameters() ? t : 0.0);
    shards.after_step.push_back(plan.zero.gathers_after_step() ? t : 0.0);
  }
  return shards;
}

// The optimizer's step: each stage's update and clip pass over what its
// replica updates (a shard of 1 / D under ZeRO 1-3: the clip's squares
// then count the shard alone, as the runtime counts them), and the norm's
// exchange: a reduction of the per-op squares to rank 0 and the norm's
// broadcast, each a tree of ceil(log2 N) messages over the N ranks.
UpdateCosts PriceUpdates(const RunPlan& plan, const RunCosts& costs) {
  UpdateCosts u;
  if (costs.update.empty() && costs.clip.empty()) return u;
  const double share = plan.zero.shards_optimizer() && plan.replicas > 1 ? 1.0 / plan.replicas : 1.0;
  for (const double t : costs.update) u.stage_time.push_back(t * share);
  if (!plan.clips) return u;
  for (const double t : costs.clip) u.clip.push_back(t * share);
  // (A shape not yet lowered: a rank a stage.)
  const int world = (plan.lowered.ranks > 0 ? plan.lowered.ranks : plan.stages()) * plan.replicas;
  u.exchange = world > 1 ? 2.0 * std::ceil(std::log2(double(world))) * costs.latency : 0.0;
  return u;
}

}  // namespace

SimOptions PriceSchedule(const PriceShape& shape, const RunCosts& costs) {
  SimOptions o;
  o.record_timeline = false;
  o.compute.uniform = costs.uniform;
  o.compute.stages = costs.stage_costs;
  o.messages = {costs.latency, costs.bandwidth, shape.message_bytes, costs.link_delay};
  o.memory = costs.memory;
  o.cores = costs.cores;
  o.slices.cost = shape.slice_cost;
  o.slices.memory = shape.slice_memory;
  o.slices.message = shape.slice_message;
  return o;
}

SimOptions PriceRun(const RunPlan& plan, const RunCosts& costs) {
  PriceShape shape;
  shape.message_bytes = LargestMessageBytes(plan.model, plan.bounds, plan.rows);
  const bool slots = !costs.memory.stage_bytes.empty();
  if (plan.slices > 1) {
    // A slice costs its share of a whole microbatch's work and its
    // messages carry its tokens; in the memory plan it holds a whole
    // (slice's) slot.
    if (!costs.stage_costs.empty()) shape.slice_cost = costs.slice_cost.empty() ? plan.slice_cost : costs.slice_cost;
    if (slots) shape.slice_memory.assign(static_cast<std::size_t>(plan.slices), 1.0);
    if (!costs.stage_costs.empty()) (slots ? shape.slice_message : shape.slice_memory) = plan.slice_token_share;
  }
  SimOptions o = PriceSchedule(shape, costs);
  o.sums = PriceGradientSums(plan, costs);
  o.shards = PriceShards(plan, costs);
  o.update = PriceUpdates(plan, costs);
  // A tied head's exchange between its two ranks (the executor's
  // SumTiedGradients), in the gradients' element type.
  const plan_detail::TiedStages tied = plan_detail::FindTiedStages(plan.model, plan.bounds);
  if (tied.embedding >= 0) {
    o.tied = {tied.embedding, tied.head, double(tied.floats) * double(plan.GradSumBytes())};
  }
  return o;
}

CorePools ShareCores(const SharedCores& machine, int cores, int ranks, int replicas) {
  CorePools out;
  const int world = ranks * replicas;
  if (cores <= 0 || world <= cores) return out;
  out.pool.assign(static_cast<std::size_t>(ranks), 0);
  out.pool_cores.assign(1, double(cores) * ranks / world);
  out.shared = machine;
  return out;
}

double LargestMessageBytes(const ModelDesc& model, const std::vector<int>& bounds, int rows) {
  double bytes = 0;
  for (std::size_t s = 1; s + 1 < bounds.size(); ++s) {
    const int a = model.top_begin[static_cast<std::size_t>(bounds[s])];
    bytes = std::max(bytes, double(rows) * model.seq * model.width[static_cast<std::size_t>(a)] * sizeof(float));
  }
  return bytes;
}

}  // namespace baton
