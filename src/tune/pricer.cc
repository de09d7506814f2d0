// The tune room's pricer (pricer.h).
#include "pricer.h"

#include <fmt/format.h>

#include "baton/error.h"

namespace baton {

ProfilePricer::ProfilePricer(const TrainConfig& config, const Profile& profile)
    : config_(config), profile_(profile), model_(DescribeModel(config.model.layers, config.model.input, config.model.seq)) {
  ShareCores(config.pipeline.ranks, config.data_parallel.size, profile.identity.cores, &core_pool_, &pool_cores_);
  cost_scale_ = SharedCoreCost(profile, config.pipeline.ranks, config.data_parallel.size);
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
  for (int s = 0; s < shape->plan.stages(); ++s) {
    const StagePrice& price = shape->Price(s, traits.split_backward);
    out.stage_costs.push_back(Scaled(price.costs, cost_scale_));
    out.activation_bytes.push_back(price.slot_bytes);
    if (c.slices > 1) {
      // A slice holds a slice's slot; its sequence a key/value slot.
      out.slot_bytes.push_back(price.slot_bytes);
      out.sequence_bytes.push_back(price.sequence_bytes);
    }
  }
  out.static_bytes = shape->statics(shape->plan, traits.placement, p, traits.split_backward);
  if (c.slices > 1) {
    // A slice costs its share of the microbatch's profiled work and sends its tokens.
    out.slice_cost = shape->plan.slice_cost;
    out.slice_memory = shape->plan.slice_token_share;
  }
  out.weight_memory_ratio = 1.0;  // a ring slot is held until its W
  out.ring_memory = true;         // each stage's ring as deep as its peak, allocated at setup
  out.latency = MessageLatency(profile_);
  out.bandwidth = profile_.bandwidth_Bps;
  out.message_bytes = LargestMessageBytes(model_, shape->plan.bounds, shape->plan.rows);
  out.core_pool = core_pool_;
  out.pool_cores = pool_cores_;
  out.waiting_share = profile_.waiting_share;
  return out;
}

ProfilePricer::Shape* ProfilePricer::ShapeOf(const Candidate& c, int stages, std::string* invalid) {
  const auto key = std::make_tuple(c.microbatches, static_cast<int>(c.checkpointing), stages, c.slices,
                                   static_cast<int>(c.seq_split));
  auto it = shapes_.find(key);
  if (it != shapes_.end()) return it->second.get();
  TrainConfig planned = config_;
  planned.pipeline.microbatches = c.microbatches;
  planned.pipeline.checkpointing = c.checkpointing;
  planned.pipeline.seq_slices = c.slices;
  planned.pipeline.seq_split = c.seq_split;
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
