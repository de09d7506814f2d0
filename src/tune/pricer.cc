// The tune room's pricer (pricer.h).
#include "pricer.h"

#include <fmt/format.h>

#include <algorithm>

#include "baton/error.h"

namespace baton {

ProfilePricer::ProfilePricer(const TrainConfig& config, const Profile& profile, Slowdown slowdown)
    : config_(config),
      profile_(profile),
      model_(DescribeModel(config.model.layers, config.model.input, config.model.seq)),
      slowdown_(std::move(slowdown.ranks)) {
  base_.link_delay = std::move(slowdown.links);
  base_.latency = MessageLatency(profile);
  base_.bandwidth = profile.bandwidth_Bps;
  base_.cores = ShareCores(profile.machine.shared, profile.identity.cores, config.pipeline.ranks,
                           config.data_parallel.size);
  // Memory as baton's runs hold it: each stage's ring of slots allocated at
  // setup, a slot held until its W (the search sums the rings' peaks).
  base_.memory.weight_ratio = 1.0;
  // Replicas: their collectives (the gradient sums, ZeRO's gathers and
  // reduce-scatters) as rings of the profile's messages, a step each.
  if (config.data_parallel.size > 1) {
    base_.allreduce_step_latency = base_.latency;
    base_.allreduce_bandwidth = base_.bandwidth;
  }
}

CandidateCosts ProfilePricer::operator()(const Candidate& c) {
  CandidateCosts out;
  const int p = config_.pipeline.ranks, batch = config_.train.batch_size / config_.data_parallel.size;
  if (batch % c.microbatches != 0) {
    out.invalid = fmt::format("{} microbatches do not divide the batch of {}", c.microbatches, batch);
    return out;
  }
  Shape* shape = ShapeOf(c, p * c.chunks, &out.invalid);
  if (shape == nullptr) return out;
  if (!c.bounds.empty()) shape->plan.bounds = c.bounds;
  const GeneratorTraits traits = TraitsOf(c.schedule);
  RunCosts costs = base_;
  for (int s = 0; s < shape->plan.stages(); ++s) {
    const StagePrice& price = shape->Price(s, traits.split_backward);
    costs.stage_costs.push_back(price.costs);
    if (!slowdown_.empty()) {
      costs.stage_costs.back() =
          Scaled(price.costs, slowdown_[static_cast<std::size_t>(StageRank(traits.placement, s, p))]);
    }
    // A slice holds a slice's slot; its sequence a key/value slot.
    costs.memory.stage_bytes.push_back(price.slot_bytes);
    if (c.slices > 1) costs.memory.stage_sequence_bytes.push_back(price.sequence_bytes);
  }
  costs.memory.rank_static_bytes = shape->statics(shape->plan, traits.placement, p, traits.split_backward);
  out.price = PriceRun(shape->plan, costs);
  out.ring_memory = true;
  if (shape->plan.zero.has_actions()) {
    out.summed_at_end = shape->plan.SummedAtEnd();
    for (int s = 0; s < shape->plan.stages(); ++s) out.parameter_bytes.push_back(shape->plan.StageParamBytes(s));
  }
  return out;
}

ProfilePricer::Shape* ProfilePricer::ShapeOf(const Candidate& c, int stages, std::string* invalid) {
  const auto key = std::make_tuple(c.microbatches, static_cast<int>(c.checkpointing), stages, c.slices,
                                   static_cast<int>(c.seq_split), c.zero.number());
  auto it = shapes_.find(key);
  if (it != shapes_.end()) return it->second.get();
  TrainConfig planned = config_;
  planned.pipeline.microbatches = c.microbatches;
  planned.pipeline.checkpointing = c.checkpointing;
  planned.pipeline.seq_slices = c.slices;
  planned.pipeline.seq_split = c.seq_split;
  planned.data_parallel.zero = c.zero;
  planned.pipeline.keep =
      c.checkpointing == Checkpointing::kSelective ? SelectiveKeep(config_) : std::vector<LayerType>{};
  // A placement the search sets, or the config's (auto: balanced until searched).
  if (!c.bounds.empty() || planned.pipeline.partition == Partition::kAuto) {
    planned.pipeline.partition = Partition::kBalanced;
  }
  auto shape = std::make_unique<Shape>();
  try {
    shape->plan = PlanShape(planned, model_, stages);
  } catch (const ConfigError& e) {
    *invalid = e.what();
    return nullptr;
  }
  shape->layers = LayersAt(profile_, shape->plan.rows);
  return shapes_.emplace(key, std::move(shape)).first->second.get();
}

}  // namespace baton
