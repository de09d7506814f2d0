// `baton profile CONFIG`, profiles for `baton tune` and `baton validate`,
// and the automatic placement (pipeline.partition: auto, pipeline.layout:
// auto) at a run's start.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <vector>

#include "baton/bench.h"
#include "baton/comm.h"
#include "baton/config.h"
#include "baton/error.h"
#include "baton/files.h"
#include "baton/plan.h"
#include "baton/profile.h"
#include "baton/schedule.h"
#include "baton/timing.h"
#include "commands.h"
#include "profile_measure.h"

namespace baton {
namespace {

std::string Mib(double bytes) { return fmt::format("{:.1f}", bytes / (1024.0 * 1024.0)); }

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

// Ranks sharing cores (more processes than CPUs): what a rank costs the
// others beyond its actions (polling and yielding while it waits, its
// messages, the caches they share) depends on how the system schedules
// the processes, which the probe's two pinned processes do not reproduce.
// So the config's own pipeline runs `steps` measured steps (after three
// untimed) on every rank, as `baton bench` runs them; so does a
// zero-bubble order of it (OtherOrder), whose ranks wait in other places,
// and, where that is another placement, the config's own with its stages'
// costs evened out (OtherPlacement), whose ranks wait less. Rank 0 fits
// the factor on every action's profiled cost (Profile::shared_core_cost)
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
  std::string apart_text;
  if (world.rank() == 0) {
    if (const std::optional<std::vector<int>> bounds = OtherPlacement(own, plans.front(), p)) {
      apart_text = fmt::format("{}", fmt::join(*bounds, ","));
    }
  }
  world.BroadcastString(&apart_text);
  if (!apart_text.empty()) {
    std::vector<int> bounds;
    for (const int b : WholeNumbers(apart_text, "calibration placement")) bounds.push_back(b);
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
  p.shared_core_cost = 1.0;
  p.probed_waiting_share = p.waiting_share;
  p.calibration.clear();
  for (std::size_t k = 0; k < runs.size(); ++k) {
    const TrainConfig& run = runs[k];
    p.calibration.push_back(Profile::Calibration{
        fmt::format("{} m{} v{} {} {}", run.pipeline.schedule, run.pipeline.microbatches, plans[k].lowered.chunks(),
                    EnumName(run.pipeline.checkpointing), LayoutText(run, plans[k].model, plans[k].bounds)),
        measured[k], PredictFromProfile(plans[k], p).sim.makespan, 0.0});
  }
  const SharedCoresFit fit = FitSharedCores(plans, p, measured);
  p.shared_core_cost = fit.scale;
  p.waiting_share = fit.waiting_share;
  for (std::size_t k = 0; k < runs.size(); ++k) {
    p.calibration[k].fitted_step_s = PredictFromProfile(plans[k], p).sim.makespan;
  }
}

}  // namespace

Profile ProfileFor(const TrainConfig& config, const std::string& path, std::string* source) {
  const ModelDesc model = DescribeModel(config.model.layers, config.model.input, config.model.seq);
  if (!path.empty()) {
    Profile p = ReadProfile(path);
    CheckProfile(p, ThisMachineIdentity(config, model), path);
    *source = fmt::format("the profile {}", path);
    const double scale = SharedCoreCost(p, config.pipeline.ranks, config.data_parallel.size);
    if (scale != 1.0) {
      *source += fmt::format(" ({} processes sharing {} CPUs: each action at {:.3f}x its profiled time, as fitted to "
                             "the profile's calibration runs)",
                             config.pipeline.ranks * config.data_parallel.size, p.identity.cores, scale);
    }
    return p;
  }
  std::unique_ptr<Transport> solo = MakeSoloTransport();
  Profile p = MeasureProfile(config, *solo, ProfileOptions{});
  *source = fmt::format(
      "a profile measured now ({:.2f} s, one process: messages at 20 us, and waiting ranks take no share of cores "
      "they share; mpirun -np 2 baton profile measures both)",
      p.seconds);
  return p;
}

TrainConfig ResolvePlacement(const TrainConfig& config, Transport& world) {
  if (config.pipeline.partition != Partition::kAuto) return config;
  const ModelDesc model = DescribeModel(config.model.layers, config.model.input, config.model.seq);
  std::string bounds_text;
  Agree(world, "rank 0 placing the stages (partition: auto)", [&] {
    if (world.rank() != 0) return;
    const double start = MonotonicSeconds();
    std::string source;
    Profile profile;
    if (!config.pipeline.profile.empty()) {
      profile = ProfileFor(config, config.pipeline.profile, &source);
    } else {
      // A short profile at the run's own microbatch.
      ProfileOptions o;
      o.rows = {config.train.batch_size / config.data_parallel.size / config.pipeline.microbatches};
      o.warmup = 1;
      o.repetitions = 3;
      std::unique_ptr<Transport> solo = MakeSoloTransport();
      profile = MeasureProfile(config, *solo, o);
      source = fmt::format("a profile measured at start-up in {:.2f} s", profile.seconds);
    }
    const PlacementChoice choice = ChoosePlacement(config, profile);
    std::vector<std::string> peaks;
    for (double b : choice.peak_bytes) peaks.push_back(Mib(b));
    std::printf(
        "placement: %s %s (searched %zu placements, %zu simulated, in %.3f s; costs from %s): predicted step %.2f ms, "
        "peak memory per rank [%s] MiB (%.2f s in all)\n",
        config.model.gpt ? "layout" : "partition", choice.layout.c_str(), choice.layouts, choice.simulated,
        choice.seconds, source.c_str(), choice.step_s * 1e3, fmt::format("{}", fmt::join(peaks, ", ")).c_str(),
        MonotonicSeconds() - start);
    std::fflush(stdout);
    bounds_text = fmt::format("{}", fmt::join(choice.bounds, ","));
  });
  world.BroadcastString(&bounds_text);
  std::vector<int> bounds;
  for (const int b : WholeNumbers(bounds_text, "placement")) bounds.push_back(b);
  return WithPlacement(config, model, bounds);
}

void AddProfileCommand(CLI::App& app) {
  struct Flags {
    std::string config, out = "out/profile.json", rows;
    std::vector<std::string> set;
    ProfileOptions options;
    int calibrate_steps = 10;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand(
      "profile",
      "Measure each top-level layer's F, I, W, B and recomputation on the configured device (and, under mpirun -np "
      "2, the messages between ranks): the costs baton tune and automatic placement plan with");
  cmd->add_option("config", f->config, "YAML training config")->required();
  cmd->add_option("--set", f->set, "override a key (repeatable)");
  cmd->add_option("--out", f->out, "the profile's JSON file (default out/profile.json)");
  cmd->add_option("--rows", f->rows,
                  "samples per microbatch to profile, e.g. 4,8,16 (default: those of p, 2p, 4p, 8p microbatches and "
                  "the config's own)");
  cmd->add_option("--warmup", f->options.warmup, "untimed calls before each median (default 2)");
  cmd->add_option("--repetitions", f->options.repetitions, "timed calls a median (default 7)");
  cmd->add_option("--calibrate-steps", f->calibrate_steps,
                  "with more processes than CPUs: measured steps of the config's own pipeline that the cost of "
                  "actions on shared cores is fitted to (default 10; 0: no fit, factor 1)");
  cmd->callback([f] {
    ProfileOptions o = f->options;
    o.rows = WholeNumbers(f->rows, "profile: --rows");
    auto job = [&](Transport& world, const TrainConfig& config, const std::string&) {
      if (f->calibrate_steps < 0) throw ConfigError("profile: --calibrate-steps must be >= 0");
      Profile p = MeasureProfile(config, world, o);
      if (p.cpu_clock && f->calibrate_steps > 0) CalibrateSharing(world, config, f->calibrate_steps, p);
      if (world.rank() != 0) return;
      WriteOutput(f->out, ProfileJson(p));
      std::cout << DescribeProfile(p) << "wrote " << f->out << "\n";
    };
    // Not started by mpirun: one process, without MPI (errors go to main).
    if (std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr && std::getenv("PMIX_RANK") == nullptr) {
      const std::unique_ptr<Transport> solo = MakeSoloTransport();
      job(*solo, LoadTrainConfig(f->config, f->set), "");
      return;
    }
    const int code = RunOnAnyRanks(f->config, f->set, job);
    if (code != 0) std::exit(code);
  });
}

}  // namespace baton
