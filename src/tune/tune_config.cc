// Tuning a config (baton/tune_config.h): the tuner core's search over the
// config's candidates, each priced from a profile by the tune room's
// pricer.
#include "baton/tune_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>

#include "baton/error.h"
#include "baton/placement.h"
#include "pricer.h"

namespace baton {
namespace {

TuneSpace SpaceOf(const TrainConfig& config, const ModelDesc& model, const TuneRequest& req) {
  TuneSpace space;
  space.ranks = config.pipeline.ranks;
  // Every generator by default, less those that without slices are another
  // one's schedule (seq1f1b: 1f1b).
  if (req.schedules.empty()) {
    for (const GeneratorEntry& g : Generators()) {
      if (g.traits.one_slice_is.empty()) space.schedules.emplace_back(g.name);
    }
  } else {
    space.schedules = req.schedules;
  }
  space.microbatches = req.microbatches.empty() ? DefaultMicrobatches(config) : req.microbatches;
  space.chunks = req.chunks.empty() ? std::vector<int>{2, 4} : req.chunks;
  space.checkpointing = req.policies.empty() ? std::vector<Checkpointing>{Checkpointing::kNone, Checkpointing::kSelective,
                                                                            Checkpointing::kFull}
                                             : req.policies;
  // Limits a config can state: the schedules' own (an overlay names no limit).
  space.memory_limits = {0.0};
  space.slices = req.slices.empty() ? std::vector<int>{config.pipeline.seq_slices} : req.slices;
  space.seq_splits = req.seq_splits.empty() ? std::vector<SeqSplit>{config.pipeline.seq_split} : req.seq_splits;
  // The ZeRO stage, where there are replicas to shard over.
  std::vector<int> stages = req.zero;
  if (stages.empty()) {
    stages = config.data_parallel.size == 1       ? std::vector<int>{0}
             : config.device == Device::kCuda ? std::vector<int>{0, 1}
                                              : std::vector<int>{0, 1, 2, 3};
  }
  space.zero.clear();
  for (const int number : stages) {
    if (!ZeroStage::Valid(number)) {
      throw ConfigError(fmt::format("tune: --zero takes ZeRO stages 0 to {}, got {}", ZeroStage::kLast, number));
    }
    const ZeroStage z(number);
    if (z.shards_gradients() && config.device == Device::kCuda) {
      throw ConfigError(fmt::format("tune: ZeRO stage {} runs on the CPU only so far (device: cuda)", number));
    }
    if (z.shards_optimizer() && config.data_parallel.size == 1) {
      throw ConfigError(fmt::format("tune: ZeRO stage {} shards over replicas, and the config has none "
                                    "(data_parallel.size 1)",
                                    number));
    }
    space.zero.push_back(z);
  }
  if (req.placement || config.pipeline.partition == Partition::kAuto) {
    space.cuts = PlacementCuts(config, model);
    space.layers = model.top_layers();
  }
  return space;
}

}  // namespace

std::vector<int> DefaultMicrobatches(const TrainConfig& config) {
  const int p = config.pipeline.ranks, batch = config.train.batch_size / config.data_parallel.size;
  std::vector<int> out;
  for (int k : {1, 2, 4, 8}) {
    if (batch % (k * p) == 0) out.push_back(k * p);
  }
  if (batch % config.pipeline.microbatches == 0 &&
      std::find(out.begin(), out.end(), config.pipeline.microbatches) == out.end()) {
    out.push_back(config.pipeline.microbatches);
    std::sort(out.begin(), out.end());
  }
  return out;
}

TuneReport TuneConfig(const TrainConfig& config, const TuneRequest& req, const Profile& profile) {
  if (!(req.memory_bytes > 0)) throw ConfigError("tune: --memory-bytes must be a number of bytes > 0");
  ProfilePricer pricer(config, profile);
  TuneOptions options;
  options.memory_bytes = req.memory_bytes;
  return Tune(SpaceOf(config, pricer.model(), req), std::ref(pricer), options);
}

}  // namespace baton
