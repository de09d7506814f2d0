// Pricing a run from a profile (baton/price.h): each stage from its
// layers' profiled costs, the messages and the machine's cores as the run
// would meet them.
#include "baton/price.h"

#include <fmt/format.h>

#include <algorithm>

#include "baton/error.h"

namespace baton {

Costs Scaled(Costs c, double scale) {
  c.forward *= scale;
  c.backward_input *= scale;
  c.backward_weight *= scale;
  if (c.forward_backward) *c.forward_backward *= scale;
  return c;
}

double MessageLatency(const Profile& profile) { return profile.latency_s > 0 ? profile.latency_s : 20e-6; }

double LargestMessageBytes(const ModelDesc& model, const std::vector<int>& bounds, int rows) {
  double bytes = 0;
  for (std::size_t s = 1; s + 1 < bounds.size(); ++s) {
    const int a = model.top_begin[static_cast<std::size_t>(bounds[s])];
    bytes = std::max(bytes, double(rows) * model.seq * model.width[static_cast<std::size_t>(a)] * sizeof(float));
  }
  return bytes;
}

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

void ShareCores(int ranks, int replicas, int cores, std::vector<int>* core_pool, std::vector<double>* pool_cores) {
  core_pool->clear();
  pool_cores->clear();
  const int world = ranks * replicas;
  if (cores <= 0 || world <= cores) return;
  core_pool->assign(static_cast<std::size_t>(ranks), 0);
  pool_cores->assign(1, double(cores) * ranks / world);
}

SimOptions CostedSimOptions(std::vector<Costs> stage_costs, double latency, double bandwidth, double message_bytes,
                            std::vector<int> core_pool, std::vector<double> pool_cores) {
  SimOptions sim;
  sim.stage_costs = std::move(stage_costs);
  sim.comm = latency;
  sim.bandwidth = bandwidth;
  sim.message_bytes = message_bytes;
  sim.core_pool = std::move(core_pool);
  sim.pool_cores = std::move(pool_cores);
  return sim;
}

SimOptions ProfileSimOptions(const RunPlan& plan, const Profile& profile) {
  const std::vector<LayerProfile> layers = LayersAt(profile, plan.rows);
  std::vector<Costs> costs;
  for (int s = 0; s < plan.stages(); ++s) {
    costs.push_back(PriceStage(plan, layers, s, SplitsBackward(plan.lowered, s)).costs);
  }
  const double scale = SharedCoreCost(profile, plan.lowered.ranks, plan.replicas);
  for (Costs& c : costs) c = Scaled(c, scale);
  std::vector<int> pool;
  std::vector<double> cores;
  ShareCores(plan.lowered.ranks, plan.replicas, profile.identity.cores, &pool, &cores);
  SimOptions o = CostedSimOptions(std::move(costs), MessageLatency(profile), profile.bandwidth_Bps,
                                  LargestMessageBytes(plan.model, plan.bounds, plan.rows), std::move(pool),
                                  std::move(cores));
  o.waiting_share = profile.waiting_share;
  if (plan.slices > 1) {
    // A slice costs its share of a whole microbatch's profiled work, and
    // its messages carry its tokens.
    o.slice_cost = plan.slice_cost;
    o.slice_memory = plan.slice_token_share;
  }
  return o;
}

ProfilePrediction PredictFromProfile(const RunPlan& plan, const Profile& profile) {
  ProfilePrediction out;
  out.sim = Simulate(plan.lowered, ProfileSimOptions(plan, profile));
  // What the run allocates: the static bytes and every stage's ring.
  for (const RankMemory& m : PlanMemory(plan)) out.peak_bytes.push_back(static_cast<double>(m.total()));
  return out;
}

double SharedCoreCost(const Profile& profile, int ranks, int replicas) {
  std::vector<int> pool;
  std::vector<double> cores;
  ShareCores(ranks, replicas, profile.identity.cores, &pool, &cores);
  return pool.empty() ? 1.0 : profile.shared_core_cost;
}

}  // namespace baton
