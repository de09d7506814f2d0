#include "analyze.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <tuple>

#include "baton/price.h"
#include "baton/timing.h"
#include "cores.h"

namespace baton {
namespace {

double Mean(const std::vector<double>& v) {
  return v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

// Every step's makespan (the slowest rank's wall time) and measured bubble
// (the simulator's definition over the ranks' busy times).
struct StepTimes {
  std::vector<double> makespans, bubbles;
};
StepTimes TimeSteps(const std::vector<RankRecord>& records) {
  StepTimes t;
  const std::size_t steps = records.front().steps.size();
  const double p = static_cast<double>(records.size());
  for (std::size_t k = 0; k < steps; ++k) {
    double makespan = 0, busy = 0;
    for (const RankRecord& r : records) {
      makespan = std::max(makespan, r.steps[k].wall);
      busy += r.steps[k].busy;
    }
    t.makespans.push_back(makespan);
    t.bubbles.push_back(makespan > 0 ? 1 - busy / (p * makespan) : 0);
  }
  return t;
}

// The gradient sums over the replicas. Hidden: the part of a rank's sums
// before the step's last compute action on any rank ends (the pipeline's
// cool-down); exposed: the rest, which lengthens the step.
void AnalyzeReduction(const std::vector<RankRecord>& records, BenchReport& report) {
  std::vector<double> per_step, exposed_step;
  double total = 0, hidden = 0;
  const std::size_t steps = records.front().steps.size();
  for (std::size_t k = 0; k < steps; ++k) {
    double compute_end = 0, sum = 0, tail = 0;
    for (const RankRecord& r : records) {
      for (const ActionEvent& e : r.steps[k].events) {
        if (IsCompute(e.kind)) compute_end = std::max(compute_end, e.end);
      }
    }
    for (const RankRecord& r : records) {
      const StepRecord& sr = r.steps[k];
      const double length = sr.reduction_end - sr.reduction_start;
      sum += length;
      total += length;
      hidden += std::clamp(compute_end - sr.reduction_start, 0.0, length);
      tail = std::max(tail, sr.reduction_end - compute_end);
    }
    per_step.push_back(sum / static_cast<double>(records.size()));
    exposed_step.push_back(std::max(tail, 0.0));
  }
  report.reduction_s = Median(per_step);
  report.reduction_exposed_s = Median(exposed_step);
  report.reduction_hidden_fraction = total > 0 ? hidden / total : 0;
}

// Sharded data parallel's collectives: how many a stage has a step, the
// waits for the gathers, and their share hidden behind the actions.
void AnalyzeSharding(const BenchContext& c, const std::vector<RankRecord>& records, BenchReport& report) {
  const RunPlan& plan = *c.plan;
  report.zero = plan.zero;
  if (!plan.zero.has_actions()) return;
  const double alpha = records.front().allreduce_step_latency_s, bandwidth = records.front().allreduce_bandwidth_Bps;
  std::vector<double> waits;
  double predicted = 0;
  const std::size_t steps = records.front().steps.size();
  for (std::size_t k = 0; k < steps; ++k) {
    double wait = 0, gather = 0;
    for (const RankRecord& r : records) {
      std::map<std::pair<ActionKind, int>, int> counts;
      for (const ActionEvent& e : r.steps[k].events) {
        if (e.kind != ActionKind::kUnshard && e.kind != ActionKind::kReduceGrad) continue;
        if (e.microbatch == 0) {  // a collective's start
          ++counts[{e.kind, e.stage}];
          if (e.kind == ActionKind::kUnshard && bandwidth > 0) {
            gather += ShardCollectiveTime(plan.StageParamBytes(e.stage), c.layout.replicas, alpha, bandwidth);
          }
        } else if (e.kind == ActionKind::kUnshard) {
          wait += e.end - e.start;
        }
      }
      for (const auto& [key, n] : counts) {
        int& most = key.first == ActionKind::kUnshard ? report.gathers_per_stage : report.reduce_scatters_per_stage;
        most = std::max(most, n);
      }
    }
    waits.push_back(wait / static_cast<double>(records.size()));
    predicted += gather / static_cast<double>(records.size()) / static_cast<double>(steps);
  }
  report.gather_wait_s = Median(waits);
  report.predicted_gather_s = predicted;
  report.gather_hidden_fraction =
      predicted > 0 ? std::clamp(1.0 - report.gather_wait_s / predicted, 0.0, 1.0) : 0.0;
}

// The host's products: summed over the ranks, inside the actions and bare.
void AnalyzeProducts(const std::vector<RankRecord>& records, BenchReport& report) {
  double flop = 0, inside = 0, bare = 0;
  for (const RankRecord& r : records) {
    flop += r.gemm_flop_per_step;
    inside += r.gemm_inside_s;
    bare += r.gemm_bare_s;
  }
  if (inside > 0 && bare > 0) {
    report.gemm_gflop_per_step = flop / 1e9;
    report.gemm_gflops_inside = flop / 1e9 / inside;
    report.gemm_gflops_bare = flop / 1e9 / bare;
    report.gemm_inside_over_bare = bare / inside;
  }
}

// Forward, input and weight gradient FLOPs of each stage's matrix products
// for one step of the whole (global) batch.
std::vector<double> StageFlops(const RunPlan& plan) {
  std::vector<double> flops(static_cast<std::size_t>(plan.stages()));
  for (int s = 0; s < plan.stages(); ++s) {
    flops[static_cast<std::size_t>(s)] =
        3 * plan.model.GemmFlopsPerRow(plan.bounds[s], plan.bounds[s + 1]) * plan.global_batch * plan.model.seq;
  }
  return flops;
}

// Per rank: mean wall, busy, waiting and idle time (means, so that they add
// up exactly) and the GFLOP/s of its stages on its share of the batch.
void AnalyzeRanks(const BenchContext& c, const std::vector<RankRecord>& records, BenchReport& report) {
  const std::vector<double> stage_flops = StageFlops(*c.plan);
  for (const RankRecord& r : records) {
    BenchRank br;
    br.rank = r.rank;
    std::vector<double> wall, busy, waiting;
    for (const StepRecord& s : r.steps) {
      wall.push_back(s.wall);
      busy.push_back(s.busy);
      waiting.push_back(s.waiting);
    }
    br.wall_s = Mean(wall);
    br.busy_s = Mean(busy);
    br.waiting_s = Mean(waiting);
    br.idle_s = br.wall_s - br.busy_s - br.waiting_s;
    double flops = 0;
    for (int s = 0; s < c.plan->stages(); ++s) {
      // Its pipeline rank's stages, on 1/D of the batch.
      if (c.plan->lowered.stage_rank[s] == c.layout.PipelineRank(r.rank)) {
        flops += stage_flops[static_cast<std::size_t>(s)] / c.layout.replicas;
      }
    }
    br.gflops = flops / br.wall_s / 1e9;
    report.per_rank.push_back(br);
  }
}

// Throughput against the hardware's limit: all ranks' products over the
// median step, against the cores that compute at once (min(ranks, cores)
// where ranks share them) at the peak rate; and the rate while computing.
void AnalyzeCompute(const std::vector<RankRecord>& records, const CoreSharing& sharing, const StepTimes& times,
                    const std::vector<double>& stage_flops, BenchReport& report) {
  const int p = static_cast<int>(records.size());
  const int computing = sharing.shared ? std::min(p, sharing.cores) : p;
  const double total_flops = std::accumulate(stage_flops.begin(), stage_flops.end(), 0.0);
  const double steps = static_cast<double>(records.front().steps.size());
  report.gflops_total = total_flops / report.step_time_median_s / 1e9;
  report.fraction_of_peak = report.gflops_total / (computing * report.peak_gflops_one_core);
  // While computing: over the actions' wall time, or their CPU time where
  // the wall time includes waiting for a core.
  double busy = 0;
  for (const RankRecord& r : records) {
    for (const StepRecord& s : r.steps) {
      for (const ActionEvent& e : s.events) {
        if (IsCompute(e.kind)) busy += (sharing.shared ? e.cpu : e.end - e.start) / steps;
      }
    }
  }
  report.gflops_while_busy = busy > 0 ? total_flops / busy / 1e9 : 0;
  report.busy_fraction_of_peak = report.gflops_while_busy / report.peak_gflops_one_core;
  if (sharing.shared) {
    std::vector<double> idle;
    for (std::size_t k = 0; k < times.makespans.size(); ++k) {
      double cpu = 0;
      for (const RankRecord& r : records) cpu += r.steps[k].cpu;
      idle.push_back(times.makespans[k] > 0 ? 1 - cpu / (computing * times.makespans[k]) : 0);
    }
    report.core_idle_rate = Median(idle);
  }
  // With shared cores the cores' idle share is the bubble that limits the rate.
  report.goal_gflops = 0.95 * (1 - (sharing.shared ? report.core_idle_rate : report.bubble_rate)) * computing *
                       report.peak_gflops_one_core;
}

// Every compute action's measured cost by (stage, kind). With ranks sharing
// cores an action's wall time includes waiting for a core; the simulator
// shares them itself, so the cost is the CPU time, and the rank's CPU time
// outside its actions (polling, messages, sums) takes the same cores: it is
// charged to the rank's actions in proportion.
// Keyed by (stage, kind, slice): a sequence's slices cost more the later
// they are (their attention reads more keys); slice 0 without slices.
using CostSamples = std::map<std::tuple<int, ActionKind, int>, std::vector<double>>;
CostSamples ActionCosts(const std::vector<RankRecord>& records, const CoreSharing& sharing, int slices,
                        BenchReport& report) {
  CostSamples costs;
  for (const RankRecord& r : records) {
    double scale = 1.0;
    if (sharing.shared) {
      double in_actions = 0, in_steps = 0;
      for (const StepRecord& s : r.steps) {
        in_steps += s.cpu;
        for (const ActionEvent& e : s.events) {
          if (IsCompute(e.kind)) in_actions += e.cpu;
        }
      }
      if (in_actions > 0) scale = std::max(1.0, in_steps / in_actions);
      report.cpu_outside_actions = std::max(report.cpu_outside_actions, scale - 1.0);
    }
    for (const StepRecord& s : r.steps) {
      for (const ActionEvent& e : s.events) {
        if (IsCompute(e.kind)) {
          costs[{e.stage, e.kind, SliceOfUnit(e.microbatch, slices)}].push_back(sharing.shared ? scale * e.cpu : e.end - e.start);
        }
      }
    }
  }
  return costs;
}

// The price that predicts a step from measured costs: per stage,
// `statistic` of each kind's costs (B's as I with W = 0), each slice's
// share of them, the message latency, the replicas' gradient sums at the
// measured all-reduce, and the core pools.
template <typename Statistic>
SimOptions PredictionOptions(const RunPlan& plan, const CostSamples& costs, const CoreSharing& sharing,
                             const BenchReport& report, Statistic statistic) {
  // A whole microbatch's cost per stage: the sum of its slices'; each
  // slice's share of it, over every stage and kind. A stage that runs both
  // full backwards and split ones (DualPipeV: B inside its overlapped F&B
  // units, I and W in its cool-down) is priced by its I and W, and its
  // measured B goes into the overlapped unit's cost (F&B = F + B), where
  // the simulator charges it: added to I, it would count the backward
  // twice.
  RunCosts run;
  run.stage_costs.assign(static_cast<std::size_t>(plan.stages()), Costs{0, 0, 0});
  std::vector<double> slice_cost(static_cast<std::size_t>(plan.slices), 0.0);
  std::vector<char> split(static_cast<std::size_t>(plan.stages()), 0);
  for (const auto& [key, v] : costs) {
    if (std::get<1>(key) == ActionKind::kBackwardInput) split[static_cast<std::size_t>(std::get<0>(key))] = 1;
  }
  std::vector<double> fused(static_cast<std::size_t>(plan.stages()), -1.0);  // split stages: their B
  for (const auto& [key, v] : costs) {
    const auto [stage, kind, slice] = key;
    if (kind == ActionKind::kBackward && split[static_cast<std::size_t>(stage)]) {
      double& b = fused[static_cast<std::size_t>(stage)];
      b = std::max(b, 0.0) + statistic(v);
      continue;
    }
    Costs& cs = run.stage_costs[static_cast<std::size_t>(stage)];
    const double t = statistic(v);
    if (kind == ActionKind::kForward) cs.forward += t;
    if (kind == ActionKind::kBackward || kind == ActionKind::kBackwardInput) cs.backward_input += t;
    if (kind == ActionKind::kBackwardWeight) cs.backward_weight += t;
    slice_cost[static_cast<std::size_t>(slice)] += t;
  }
  for (std::size_t st = 0; st < fused.size(); ++st) {
    if (fused[st] >= 0.0) run.stage_costs[st].forward_backward = run.stage_costs[st].forward + fused[st];
  }
  if (plan.slices > 1) {
    const double total = std::accumulate(slice_cost.begin(), slice_cost.end(), 0.0);
    if (total > 0) {
      for (double& c : slice_cost) c = std::max(c / total, 1e-9);
      run.slice_cost = slice_cost;
    }
  }
  // The measured latency is an activation-sized message's: no bandwidth term.
  // Waiting ranks' share of shared cores is in the measured costs already
  // (ActionCosts charges each rank's CPU time outside its actions to them),
  // and so is what a rank costs the others: no machine model.
  run.latency = report.message_latency_s;
  run.cores.pool = sharing.core_pool;
  run.cores.pool_cores = sharing.pool_cores;
  run.allreduce_step_latency = report.allreduce_step_latency_s;
  run.allreduce_bandwidth = report.allreduce_bandwidth_Bps;
  SimOptions sim = PriceRun(plan, run);
  sim.record_timeline = true;
  return sim;
}

// The prediction from the measured median costs (the report's), from the
// means (which show how far the spread of action times stretches a real
// step past the sum of typical costs), and the spread itself.
SimResult Predict(const RunPlan& plan, const std::vector<RankRecord>& records, const CoreSharing& sharing,
                  BenchReport& report) {
  const CostSamples costs = ActionCosts(records, sharing, plan.slices, report);
  const SimOptions median = PredictionOptions(plan, costs, sharing, report, Median);
  report.stage_costs = median.compute.stages;
  for (double t : median.sums.stage_time) report.predicted_reduction_s = std::max(report.predicted_reduction_s, t);
  for (double t : median.shards.reduce_time) report.predicted_reduction_s = std::max(report.predicted_reduction_s, t);
  SimResult predicted = Simulate(plan.lowered, median);
  report.predicted_step_time_s = predicted.makespan;
  report.simulated_bubble_rate = predicted.bubble_rate;
  report.measured_over_predicted = report.step_time_median_s / predicted.makespan;
  SimOptions mean = PredictionOptions(plan, costs, sharing, report, Mean);
  mean.record_timeline = false;
  report.predicted_step_time_mean_costs_s = Simulate(plan.lowered, mean).makespan;
  std::vector<double> spread;
  for (const auto& [key, v] : costs) {
    std::vector<double> sorted = v;
    std::sort(sorted.begin(), sorted.end());
    const double med = Median(v);
    if (med > 0) spread.push_back((sorted[sorted.size() * 9 / 10] - sorted[sorted.size() / 10]) / med);
  }
  report.action_time_spread = Median(spread);
  if (sharing.shared) {
    // The simulated pipeline's cores: each pool's, as many as it has ranks at most.
    std::vector<int> ranks_in(sharing.pool_cores.size(), 0);
    for (int pool : sharing.core_pool) ++ranks_in[static_cast<std::size_t>(pool)];
    double cores = 0, work = 0;
    for (std::size_t k = 0; k < ranks_in.size(); ++k) cores += std::min<double>(sharing.pool_cores[k], ranks_in[k]);
    for (const RankResult& rr : predicted.per_rank) work += rr.work;
    report.simulated_core_idle_rate = predicted.makespan > 0 ? 1 - work / (cores * predicted.makespan) : 0;
  }
  return predicted;
}

// The report's settings and the probes' results (rank 0's, or the most any
// rank measured).
void Describe(const BenchContext& c, const std::vector<RankRecord>& records, BenchReport& report) {
  const RunPlan& plan = *c.plan;
  const RankRecord& root = records.front();
  report.schedule = plan.lowered.name;
  report.ranks = static_cast<int>(records.size());
  report.microbatches = plan.lowered.microbatches;
  report.chunks = plan.lowered.chunks();
  report.batch_size = plan.global_batch;
  report.warmup_steps = c.warmup_steps;
  report.steps = static_cast<int>(root.steps.size());
  report.replicas = c.layout.replicas;
  report.message_latency_s = root.message_latency_s;
  report.peak_gflops_one_core = root.peak_gflops;
  report.record_cost_per_event_s = root.record_cost_per_event_s;
  report.allreduce_step_latency_s = root.allreduce_step_latency_s;
  report.allreduce_bandwidth_Bps = root.allreduce_bandwidth_Bps;
  report.blas_core = c.blas_core;
  report.action_clock = c.action_clock;
  for (const RankRecord& r : records) {
    report.step_time_unrecorded_s = std::max(report.step_time_unrecorded_s, r.unrecorded_step_s);
  }
}

}  // namespace

BenchAnalysis AnalyzeBench(const BenchContext& c, const std::vector<RankRecord>& records) {
  BenchAnalysis out;
  BenchReport& report = out.report;
  Describe(c, records, report);
  AnalyzeProducts(records, report);
  if (c.layout.replicas > 1) AnalyzeReduction(records, report);
  if (c.layout.replicas > 1) AnalyzeSharding(c, records, report);
  const StepTimes times = TimeSteps(records);
  report.step_time_median_s = Median(times.makespans);
  report.step_times_s = times.makespans;
  report.step_time_min_s = *std::min_element(times.makespans.begin(), times.makespans.end());
  report.step_time_max_s = *std::max_element(times.makespans.begin(), times.makespans.end());
  report.samples_per_s = report.batch_size / report.step_time_median_s;
  report.tokens_per_s = report.samples_per_s * c.plan->model.seq;
  report.bubble_rate = Median(times.bubbles);
  AnalyzeRanks(c, records, report);
  // Ranks sharing cores compute at most on the cores there are.
  std::vector<std::string> signatures;
  for (const RankRecord& r : records) signatures.push_back(r.cores);
  const CoreSharing sharing = FindCoreSharing(signatures, c.layout);
  report.cores = sharing.cores;
  report.cores_shared = sharing.shared;
  AnalyzeCompute(records, sharing, times, StageFlops(*c.plan), report);
  out.predicted = Predict(*c.plan, records, sharing, report);
  // The step of median makespan (the upper middle one for an even count).
  std::vector<std::size_t> order(times.makespans.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return times.makespans[a] < times.makespans[b]; });
  out.median_step = order[order.size() / 2];
  return out;
}

}  // namespace baton
