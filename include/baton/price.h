// One price for a run: the simulator's options (baton/sim.h) for a plan,
// built in one place (PriceRun) from the plan and a cost source — a
// profile (the tune room's ProfileRunCosts, baton/profile_price.h),
// `baton bench`'s measured actions, or none (unit costs) — and used by the
// plan's own simulation and memory plan, `baton tune` and the automatic
// placement, `baton bench`'s prediction, the shared-core calibration, and
// `baton simulate --profile`. Pure: no MPI, no device.
#ifndef BATON_PRICE_H_
#define BATON_PRICE_H_

#include <vector>

#include "baton/costs.h"
#include "baton/model.h"
#include "baton/plan.h"
#include "baton/sim.h"

namespace baton {

// What a cost source gives a run's price.
struct RunCosts {
  // One per stage: one whole microbatch's F, I, W (and optionally F&B)
  // through the stage, in any one time unit. Empty: `uniform` for every
  // rank (unit costs by default: the schedule's own simulation).
  std::vector<Costs> stage_costs;
  Costs uniform;
  // Sliced, with stage costs: each slice's share of a microbatch's compute
  // as measured; empty: the plan's (its cuts' compute shares).
  std::vector<double> slice_cost;
  // A message: latency + bytes / bandwidth (0: bytes cost nothing); its
  // bytes the plan's largest activation (LargestMessageBytes), a slice's
  // its tokens' share.
  double latency = 0.0;
  double bandwidth = 0.0;
  // Empty, or ranks x ranks: what a message from rank a to rank b takes
  // beyond that (a slow wire, as the adaptive plans measure it), at
  // a x ranks + b (SimOptions' messages.link_delay).
  std::vector<double> link_delay;
  // The ranks' cores: ShareCores below, or the hosts `baton bench` found.
  CorePools cores;
  // Data parallelism: the replica group's all-reduce, one ring step's
  // latency and the bandwidth (both 0: the gradient sums are not priced).
  double allreduce_step_latency = 0.0;
  double allreduce_bandwidth = 0.0;
  // The optimizer's step: per stage, its update over the stage's whole
  // parameters (`update`), and the clip's pass over its gradients (`clip`:
  // their squares and their scaling); empty: not priced. PriceRun shares
  // them out over the replicas where each updates its shard (ZeRO 1-3),
  // takes the clip only where the plan clips, and prices the norm's
  // exchange over every rank (UpdateCosts, baton/sim.h).
  std::vector<double> update, clip;
  // The memory plan's (PlanMemory): each stage's ring slot, each rank's
  // static bytes; a sliced plan's slots are a slice's, so each slice holds
  // a whole one. Default: memory in units of M_B only.
  MemoryModel memory;
};

// The simulator's options for `plan` at `costs`: its compute, messages,
// memory, gradient sums, cores and slices. `plan` may be a shape (PlanShape,
// not lowered) unless the gradient sums are priced. record_timeline false.
SimOptions PriceRun(const RunPlan& plan, const RunCosts& costs);

// What a price needs of a schedule besides its costs: a run's plan gives
// it (PriceRun), and `baton simulate` gives it for a generated schedule
// with no model behind it, from its flags.
struct PriceShape {
  double message_bytes = 0;  // the largest message between two stages
  // Sliced (more than one share each): each slice's share of a whole
  // microbatch's compute, of its activations and of its message (SliceShares).
  std::vector<double> slice_cost, slice_memory, slice_message;
};
// The simulator's options for a schedule of `shape` at `costs`: compute,
// messages, memory, cores and slices (no collectives). record_timeline
// false. PriceRun is this with the plan's shape, and the collectives.
SimOptions PriceSchedule(const PriceShape& shape, const RunCosts& costs);

// How a run's ranks share a machine of `cores` CPUs with the model
// `machine`: p pipeline ranks x D replicas share them when p x D > cores
// (every pipeline rank in pool 0, of cores x p / (p x D) cores, the
// machine model applied); else a core each (no pools, and the machine
// model does not apply). `cores` 0: a core each.
CorePools ShareCores(const SharedCores& machine, int cores, int ranks, int replicas);

// The largest message between two stages of a placement: the activation
// (f32) entering each stage but the first, for `rows` samples.
double LargestMessageBytes(const ModelDesc& model, const std::vector<int>& bounds, int rows);

}  // namespace baton

#endif  // BATON_PRICE_H_
