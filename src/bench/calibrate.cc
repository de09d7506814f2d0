// Calibrating a profile's shared-core model (baton/bench.h): the config's
// pipeline and two others measured as `baton bench` measures them, and
// the tune room's fit to their steps.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "baton/bench.h"
#include "baton/placement.h"
#include "baton/plan.h"
#include "baton/profile_price.h"
#include "baton/schedule.h"
#include "baton/train.h"
#include "measure.h"

namespace baton {
namespace {

// The calibration's second run: the config's pipeline with the other kind
// of backward at the same microbatches, policy and placement: zb_h1 (its
// input and weight gradients apart, its ranks waiting less) for a schedule
// that runs B whole, 1F1B (seq1f1b over slices) for one that splits it.
// None for more than one chunk a rank, or where that schedule does not
// plan the config.
std::optional<TrainConfig> OtherOrder(const TrainConfig& own, const RunPlan& plan) {
  if (plan.lowered.chunks() != 1) return std::nullopt;
  const GeneratorEntry* g = FindGenerator(own.pipeline.schedule);
  if (g == nullptr || g->traits.other_backward.empty()) return std::nullopt;
  const GeneratorEntry* other_order =
      own.pipeline.seq_slices > 1 ? SlicedFormOf(g->traits.other_backward) : FindGenerator(g->traits.other_backward);
  if (other_order == nullptr) return std::nullopt;
  try {
    TrainConfig other = WithPlacement(own, plan.model, plan.bounds);
    other.pipeline.schedule = std::string(other_order->name);
    PlanRun(other);
    return other;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// The calibration's third run: the config's pipeline with its layers
// placed to even out the stages' profiled costs (BottleneckPlacement),
// where that is another placement; its ranks wait differently, which
// tells how much a waiting rank takes of a shared core. None for more than
// one chunk a rank.
std::optional<std::vector<int>> OtherPlacement(const TrainConfig& own, const RunPlan& plan, const Profile& p) {
  if (plan.lowered.chunks() != 1) return std::nullopt;
  const std::vector<int> bounds =
      BottleneckPlacement(own, plan.model, LayersAt(p, plan.rows), static_cast<int>(plan.bounds.size()) - 1);
  if (bounds.empty() || bounds == plan.bounds) return std::nullopt;
  try {
    PlanRun(WithPlacement(own, plan.model, bounds));
    return bounds;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace

// Ranks sharing cores (more processes than CPUs): what a rank costs the
// others beyond its actions (polling and yielding while it waits, its
// messages, the caches they share) depends on how the system schedules
// the processes, which the probe's two pinned processes do not reproduce.
// So the config's own pipeline runs `steps` measured steps (after three
// untimed) on every rank, as `baton bench` runs them; so does a
// zero-bubble order of it (OtherOrder), whose ranks wait in other places,
// and, where that is another placement, the config's own with its stages'
// costs evened out (OtherPlacement), whose ranks wait less. Rank 0 fits
// the factor on every action's profiled cost (the machine model's action_cost)
// and, with the third run, the waiting share to the measured median steps
// (FitSharedCores). An automatic placement is calibrated at the balanced
// one.
void CalibrateSharing(Transport& world, const TrainConfig& config, int steps, Profile& p) {
  if (world.size() != config.pipeline.ranks || config.data_parallel.size != 1) return;
  TrainConfig own = config;
  if (own.pipeline.partition == Partition::kAuto) own.pipeline.partition = Partition::kBalanced;
  std::vector<RunPlan> plans{PlanRun(own)};
  std::vector<TrainConfig> runs{own};
  if (std::optional<TrainConfig> other = OtherOrder(own, plans.front())) {
    plans.push_back(PlanRun(*other));
    runs.push_back(*std::move(other));
  }
  // Rank 0's profile chooses it (each rank measured its own), for all.
  std::vector<int> bounds;
  if (world.rank() == 0) {
    if (const std::optional<std::vector<int>> apart = OtherPlacement(own, plans.front(), p)) bounds = *apart;
  }
  BroadcastInts(world, &bounds);
  if (!bounds.empty()) {
    runs.push_back(WithPlacement(own, plans.front().model, bounds));
    plans.push_back(PlanRun(runs.back()));
  }
  const std::unique_ptr<ReplicaGroup> solo = MakeSoloReplicaGroup();
  const RunComms comms{world, world, *solo};
  BenchOptions bench;
  bench.warmup_steps = 3;
  bench.steps = steps;
  bench.quiet = true;
  std::vector<double> measured;
  for (const TrainConfig& run : runs) measured.push_back(Bench(run, comms, bench).step_time_median_s);
  if (world.rank() != 0) return;
  p.machine.shared.action_cost = 1.0;
  p.machine.probed_waiting_share = p.machine.shared.waiting_share;
  p.machine.calibration.clear();
  for (std::size_t k = 0; k < runs.size(); ++k) {
    const TrainConfig& run = runs[k];
    p.machine.calibration.push_back(MachineModel::Calibration{
        fmt::format("{} m{} v{} {} {}", run.pipeline.schedule, run.pipeline.microbatches, plans[k].lowered.chunks(),
                    EnumName(run.pipeline.checkpointing), LayoutText(run, plans[k].model, plans[k].bounds)),
        measured[k], PredictFromProfile(plans[k], GradientsOnly(p)).sim.makespan, 0.0});
  }
  // Bench's steps end at their gradients: fitted to a price without the optimizer's step.
  const SharedCoresFit fit = FitSharedCores(plans, GradientsOnly(p), measured);
  p.machine.shared.action_cost = fit.scale;
  p.machine.shared.waiting_share = fit.waiting_share;
  for (std::size_t k = 0; k < runs.size(); ++k) {
    p.machine.calibration[k].fitted_step_s = PredictFromProfile(plans[k], GradientsOnly(p)).sim.makespan;
  }
}

}  // namespace baton
