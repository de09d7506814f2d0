// Pricing a run from a profile (baton/price.h): each stage from its
// layers' profiled costs, the messages and the machine's cores as the run
// would meet them.
#include "baton/profile_price.h"

#include <fmt/format.h>

#include <algorithm>

#include "baton/error.h"

namespace baton {

double MessageLatency(const Profile& profile) { return profile.latency_s > 0 ? profile.latency_s : 20e-6; }

StagePrice PriceStage(const RunPlan& shape, const std::vector<LayerProfile>& layers, int stage, bool split_backward) {
  const StagePlan st = PlanStageAlone(shape, stage, split_backward);
  const ModelDesc& model = shape.model;
  StagePrice out;
  double f = 0, i = 0, w = 0, b = 0;
  for (int t = st.first_layer; t < st.last_layer; ++t) {
    const LayerProfile& l = layers[static_cast<std::size_t>(t)];
    f += l.forward;
    i += l.backward_input;
    w += l.backward_weight;
    b += l.backward;
  }
  // What the policy drops: op k's output, redone from its input.
  for (int k = 0; k + 1 < st.ops(); ++k) {
    if (st.kept[k + 1]) continue;
    const int op = st.first_op + k;
    const int top = model.ops[static_cast<std::size_t>(op)].top;
    const LayerProfile& l = layers[static_cast<std::size_t>(top)];
    const auto within = static_cast<std::size_t>(op - model.top_begin[static_cast<std::size_t>(top)]);
    if (within < l.op_forward.size()) out.recompute += l.op_forward[within];
  }
  if (!split_backward && i + w > 0) {
    // One B: the measured B, in I and W's proportions.
    i *= b / (i + w);
    w = b - i;
  }
  out.costs = Costs{f, i + out.recompute, w + (split_backward ? out.recompute : 0.0)};
  out.slot_bytes = static_cast<double>(st.slot_bytes);
  out.sequence_bytes = static_cast<double>(st.sequence_bytes);
  return out;
}

RunCosts ProfileRunCosts(const RunPlan& plan, const Profile& profile) {
  RunCosts costs;
  const std::vector<LayerProfile> layers = LayersAt(profile, plan.rows);
  for (int s = 0; s < plan.stages(); ++s) {
    costs.stage_costs.push_back(PriceStage(plan, layers, s, SplitsBackward(plan.lowered, s)).costs);
  }
  // The optimizer's step, where the profile measured the run's optimizer:
  // each stage's layers' update and clip pass.
  if (!profile.update.empty() && profile.optimizer == EnumName(plan.optimizer)) {
    for (int s = 0; s < plan.stages(); ++s) {
      double update = 0, clip = 0;
      for (int t = plan.bounds[static_cast<std::size_t>(s)]; t < plan.bounds[static_cast<std::size_t>(s) + 1]; ++t) {
        update += profile.update[static_cast<std::size_t>(t)];
        clip += profile.clip[static_cast<std::size_t>(t)];
      }
      costs.update.push_back(update);
      costs.clip.push_back(clip);
    }
  }
  costs.latency = MessageLatency(profile);
  costs.bandwidth = profile.bandwidth_Bps;
  costs.cores = ShareCores(profile.machine.shared, profile.identity.cores, plan.lowered.ranks, plan.replicas);
  // Replicas: their collectives as rings of the profile's messages (as the
  // tune room's pricer prices them).
  if (plan.replicas > 1) {
    costs.allreduce_step_latency = costs.latency;
    costs.allreduce_bandwidth = costs.bandwidth;
  }
  return costs;
}

ProfilePrediction PredictFromProfile(const RunPlan& plan, const Profile& profile, const Slowdown& slowdown) {
  ProfilePrediction out;
  RunCosts costs = ProfileRunCosts(plan, profile);
  if (!slowdown.ranks.empty()) {
    for (int s = 0; s < plan.stages(); ++s) {
      Costs& c = costs.stage_costs[static_cast<std::size_t>(s)];
      c = Scaled(c, slowdown.ranks[static_cast<std::size_t>(plan.lowered.stage_rank[static_cast<std::size_t>(s)])]);
    }
  }
  costs.link_delay = slowdown.links;
  SimOptions o = PriceRun(plan, costs);
  o.record_timeline = true;
  out.sim = Simulate(plan.lowered, o);
  // What the run allocates: the static bytes and every stage's ring.
  out.memory = PlanMemory(plan);
  for (const RankMemory& m : out.memory) out.peak_bytes.push_back(static_cast<double>(m.total()));
  return out;
}

double SharedCoreCost(const Profile& profile, int ranks, int replicas) {
  return ShareCores(profile.machine.shared, profile.identity.cores, ranks, replicas).Factor();
}

}  // namespace baton
