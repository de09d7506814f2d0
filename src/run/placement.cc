// The automatic placement at a run's start (setup.h): rank 0 profiles the
// model (or reads pipeline.profile), the tune room searches the
// placements, and every rank plans the one it chose.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "baton/comm.h"
#include "baton/placement.h"
#include "baton/timing.h"
#include "baton/measure_profile.h"
#include "setup.h"

namespace baton {
namespace {

std::string Mib(double bytes) { return fmt::format("{:.1f}", bytes / (1024.0 * 1024.0)); }

}  // namespace

Profile RunProfile(const TrainConfig& config, std::string* source) {
  if (!config.pipeline.profile.empty()) return ProfileFor(config, config.pipeline.profile, source);
  // A short profile at the run's own microbatch.
  ProfileOptions o;
  o.rows = {config.train.batch_size / config.data_parallel.size / config.pipeline.microbatches};
  o.warmup = 1;
  o.repetitions = 3;
  std::unique_ptr<Transport> solo = MakeSoloTransport();
  Profile profile = MeasureProfile(config, *solo, o);
  *source = fmt::format("a profile measured at start-up in {:.2f} s", profile.seconds);
  return profile;
}

TrainConfig PlaceStages(const TrainConfig& config, Transport& world) {
  if (config.pipeline.partition != Partition::kAuto) return config;
  const ModelDesc model = DescribeModel(config.model.layers, config.model.input, config.model.seq);
  std::vector<int> bounds;
  Agree(world, "rank 0 placing the stages (partition: auto)", [&] {
    if (world.rank() != 0) return;
    const double start = MonotonicSeconds();
    std::string source;
    const Profile profile = RunProfile(config, &source);
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
    bounds = choice.bounds;
  });
  BroadcastInts(world, &bounds);
  return WithPlacement(config, model, bounds);
}

}  // namespace baton
