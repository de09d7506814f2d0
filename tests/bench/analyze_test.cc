// `baton bench`'s analysis and pictures without MPI: records made here from
// a 1F1B step whose times follow the closed form, checked against it.
//
// 1F1B on p ranks with m microbatches, forward F and backward B per stage
// and messages that take no time: the first forward of the last stage
// starts after (p - 1) F, the last stage then runs m (F + B) back to back,
// and the last backward reaches rank 0 after (p - 1) B more:
//   makespan = (m + p - 1)(F + B).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "analyze.h"
#include "baton/config.h"
#include "baton/plan.h"
#include "baton/sim.h"
#include "render.h"

namespace baton {
namespace {

constexpr int kRanks = 2, kMicrobatches = 8;
constexpr double kF = 1e-3, kB = 2e-3;

double ClosedForm(double f, double b) { return (kMicrobatches + kRanks - 1) * (f + b); }

RunPlan TinyPlan() {
  return PlanRun(LoadTrainConfig(BATON_SOURCE_DIR "/tests/mpi/tiny.yaml",
                                 {"pipeline.ranks=2", "pipeline.schedule=1f1b"}));
}

// Step k's costs are (1 + k / 10) times F and B: the steps' makespans differ
// and the median is step 1's.
std::vector<RankRecord> MakeRecords(const RunPlan& plan, int steps) {
  std::vector<RankRecord> records(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    records[r].rank = r;
    records[r].cores = "host " + std::to_string(r) + ",";
    records[r].unrecorded_step_s = 0.01 * (r + 1);
    records[r].gemm_flop_per_step = 1e9;
    records[r].gemm_inside_s = 0.5;
    records[r].gemm_bare_s = 0.25;
  }
  records[0].peak_gflops = 10;
  for (int k = 0; k < steps; ++k) {
    const double scale = 1 + 0.1 * k;
    SimOptions o;
    o.compute.uniform = {kF * scale, kB * scale, 0};
    const SimResult sim = Simulate(plan.lowered, o);
    for (int r = 0; r < kRanks; ++r) {
      StepRecord s;
      for (const TimedAction& t : sim.timeline[r]) {
        s.events.push_back({t.action.kind, t.action.stage, t.action.microbatch, t.start, t.end, t.end - t.start});
        s.busy += t.end - t.start;
      }
      s.wall = sim.per_rank[r].end;
      s.cpu = s.busy;
      records[r].steps.push_back(s);
    }
  }
  return records;
}

BenchContext Context(const RunPlan& plan) {
  BenchContext c;
  c.plan = &plan;
  c.layout = {kRanks, 1};
  c.warmup_steps = 2;
  c.blas_core = "test";
  return c;
}

TEST(BenchAnalysis, StepTimesBubbleAndPredictionFollowTheClosedForm) {
  const RunPlan plan = TinyPlan();
  const std::vector<RankRecord> records = MakeRecords(plan, 3);
  const BenchAnalysis a = AnalyzeBench(Context(plan), records);
  const BenchReport& r = a.report;
  EXPECT_EQ(r.schedule, "1f1b");
  EXPECT_EQ(r.ranks, kRanks);
  EXPECT_EQ(r.steps, 3);
  EXPECT_EQ(r.warmup_steps, 2);
  EXPECT_EQ(r.batch_size, 32);
  const double median = ClosedForm(kF * 1.1, kB * 1.1);
  EXPECT_NEAR(r.step_time_median_s, median, 1e-12);
  EXPECT_NEAR(r.step_time_min_s, ClosedForm(kF, kB), 1e-12);
  EXPECT_NEAR(r.step_time_max_s, ClosedForm(kF * 1.2, kB * 1.2), 1e-12);
  EXPECT_EQ(a.median_step, 1u);
  EXPECT_NEAR(r.samples_per_s, 32 / median, 1e-9);
  // Each rank computes m (F + B) of the step.
  const double busy = kMicrobatches * (kF + kB) * 1.1;
  EXPECT_NEAR(r.bubble_rate, 1 - busy / median, 1e-12);
  // The median costs are step 1's: the prediction is the closed form again.
  EXPECT_NEAR(r.predicted_step_time_s, median, 1e-12);
  EXPECT_NEAR(r.measured_over_predicted, 1.0, 1e-12);
  EXPECT_NEAR(r.simulated_bubble_rate, r.bubble_rate, 1e-12);
  // The mean costs are step 1's too (1.0, 1.1, 1.2).
  EXPECT_NEAR(r.predicted_step_time_mean_costs_s, median, 1e-12);
  EXPECT_NEAR(r.action_time_spread, 0.2 / 1.1, 1e-9);
  // Per rank: means over the steps; busy + waiting + idle = wall.
  ASSERT_EQ(r.per_rank.size(), 2u);
  for (const BenchRank& br : r.per_rank) {
    EXPECT_NEAR(br.busy_s, busy, 1e-12);
    EXPECT_NEAR(br.busy_s + br.waiting_s + br.idle_s, br.wall_s, 1e-15);
  }
  // Probes: rank 0's; the slowest rank's unrecorded median; products summed.
  EXPECT_EQ(r.message_latency_s, 0.0);
  EXPECT_EQ(r.peak_gflops_one_core, 10);
  EXPECT_EQ(r.step_time_unrecorded_s, 0.02);
  EXPECT_NEAR(r.gemm_gflop_per_step, 2.0, 1e-12);
  EXPECT_NEAR(r.gemm_gflops_inside, 2.0, 1e-12);
  EXPECT_NEAR(r.gemm_gflops_bare, 4.0, 1e-12);
  EXPECT_NEAR(r.gemm_inside_over_bare, 0.5, 1e-12);
  EXPECT_EQ(r.blas_core, "test");
  EXPECT_FALSE(r.cores_shared);
  // Throughput: the stages' products over the median step.
  double flops = 0;
  for (int s = 0; s < plan.stages(); ++s) flops += 3 * plan.model.GemmFlopsPerRow(plan.bounds[s], plan.bounds[s + 1]) * 32;
  EXPECT_NEAR(r.gflops_total, flops / median / 1e9, 1e-9);
  EXPECT_NEAR(r.fraction_of_peak, r.gflops_total / (2 * 10.0), 1e-12);
}

// DualPipeV runs full backwards inside its overlapped F&B units and split
// ones (I, W) in its cool-down, the executor each unit as its F and its B:
// a stage's I and W come from the split ones and its units' cost from F and
// the full B, so the prediction of a step that ran so is that step, where
// adding B to I counted the backward twice.
TEST(BenchAnalysis, AStageWithFullAndSplitBackwardsIsPricedByEach) {
  const RunPlan plan = PlanRun(LoadTrainConfig(BATON_SOURCE_DIR "/tests/mpi/tiny.yaml",
                                               {"pipeline.ranks=2", "pipeline.schedule=dualpipev"}));
  constexpr double f = 1e-3, i = 1.5e-3, w = 0.5e-3, fused = 1.6e-3;  // B < I + W
  SimOptions o;
  o.compute.stages.assign(static_cast<std::size_t>(plan.stages()), Costs{f, i, w, f + fused});
  const SimResult sim = Simulate(plan.lowered, o);
  std::vector<RankRecord> records(kRanks);
  bool full = false, split = false;
  for (int r = 0; r < kRanks; ++r) {
    records[r].rank = r;
    records[r].cores = "host " + std::to_string(r) + ",";
    for (int k = 0; k < 3; ++k) {
      StepRecord s;
      for (const TimedAction& t : sim.timeline[r]) {
        const Action& a = t.action;
        if (a.kind == ActionKind::kOverlapFB) {
          s.events.push_back({ActionKind::kForward, a.stage, a.microbatch, t.start, t.start + f, f});
          s.events.push_back({ActionKind::kBackward, a.backward_stage, a.backward_microbatch, t.start + f, t.end, fused});
          full = true;
        } else {
          s.events.push_back({a.kind, a.stage, a.microbatch, t.start, t.end, t.end - t.start});
          split = split || a.kind == ActionKind::kBackwardInput;
        }
        s.busy += t.end - t.start;
      }
      s.wall = sim.per_rank[r].end;
      s.cpu = s.busy;
      records[r].steps.push_back(s);
    }
  }
  ASSERT_TRUE(full && split) << "dualpipev should run both kinds of backward here";
  const BenchReport r = AnalyzeBench(Context(plan), records).report;
  EXPECT_NEAR(r.step_time_median_s, sim.makespan, 1e-12);
  EXPECT_NEAR(r.predicted_step_time_s, sim.makespan, 1e-9);
  EXPECT_NEAR(r.measured_over_predicted, 1.0, 1e-6);
}

// The measured latency between ranks (rank 0's probe) delays every message
// of the prediction: it is the simulator's with the median costs and that
// latency.
TEST(BenchAnalysis, PredictionCarriesTheMeasuredLatency) {
  const RunPlan plan = TinyPlan();
  std::vector<RankRecord> records = MakeRecords(plan, 3);
  records[0].message_latency_s = 1e-4;
  const BenchReport r = AnalyzeBench(Context(plan), records).report;
  SimOptions o;
  o.compute.uniform = {kF * 1.1, kB * 1.1, 0};
  o.messages.latency = 1e-4;
  const double expected = Simulate(plan.lowered, o).makespan;
  EXPECT_GT(expected, ClosedForm(kF * 1.1, kB * 1.1) + 2 * 1e-4 - 1e-12);  // at least the fill's and drain's hops
  EXPECT_NEAR(r.predicted_step_time_s, expected, 1e-12);
  EXPECT_NEAR(r.measured_over_predicted, ClosedForm(kF * 1.1, kB * 1.1) / expected, 1e-12);
}

TEST(BenchAnalysis, GradientSumsHiddenBehindTheCoolDownAndExposedAfterIt) {
  const RunPlan plan = PlanRun(LoadTrainConfig(BATON_SOURCE_DIR "/tests/mpi/tiny.yaml",
                                               {"pipeline.ranks=1", "data_parallel.size=2"}));
  // Two replicas of a one-rank pipeline, two steps: compute ends at 10 ms;
  // rank 0's sums run from 8 to 14 ms (2 hidden, 4 exposed), rank 1's from
  // 9 to 11 (1 hidden, 1 exposed).
  std::vector<RankRecord> records(2);
  for (int r = 0; r < 2; ++r) {
    records[r].rank = r;
    records[r].cores = "host " + std::to_string(r) + ",";
    for (int k = 0; k < 2; ++k) {
      StepRecord s;
      s.events.push_back({ActionKind::kForward, 0, 0, 0.0, 4e-3, 4e-3});
      s.events.push_back({ActionKind::kBackward, 0, 0, 4e-3, 10e-3, 6e-3});
      s.busy = 10e-3;
      s.reduction_start = r == 0 ? 8e-3 : 9e-3;
      s.reduction_end = r == 0 ? 14e-3 : 11e-3;
      s.wall = s.reduction_end;
      records[r].steps.push_back(s);
    }
  }
  records[0].allreduce_step_latency_s = 1e-5;
  records[0].allreduce_bandwidth_Bps = 1e9;
  BenchContext c = Context(plan);
  c.layout = {1, 2};
  const BenchReport r = AnalyzeBench(c, records).report;
  EXPECT_EQ(r.replicas, 2);
  EXPECT_NEAR(r.reduction_s, (6e-3 + 2e-3) / 2, 1e-15);
  EXPECT_NEAR(r.reduction_exposed_s, 4e-3, 1e-15);
  EXPECT_NEAR(r.reduction_hidden_fraction, 3.0 / 8.0, 1e-12);
}

TEST(BenchRender, TraceHoldsEveryEventAndTheSvgBothTimelines) {
  const RunPlan plan = TinyPlan();
  std::vector<RankRecord> records = MakeRecords(plan, 2);
  // A wait on rank 1 in step 0.
  records[1].steps[0].events.push_back({ActionKind::kRecvF, 1, 0, 0.0, 1e-3});
  const BenchContext c = Context(plan);
  const BenchAnalysis a = AnalyzeBench(c, records);
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / "bench_render";
  std::filesystem::create_directories(dir);
  WriteBenchTrace((dir / "t.json").string(), "1f1b", records);
  WriteBenchSvg((dir / "s.svg").string(), c, a, records);
  std::ifstream tin(dir / "t.json");
  const nlohmann::json t = nlohmann::json::parse(tin);
  std::size_t compute = 0, waits = 0;
  std::set<int> steps;
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] != "X") continue;
    (e["cat"] == "wait" ? waits : compute) += 1;
    if (e["cat"] == "wait") {
      EXPECT_EQ(e["name"], "wait RECV_F");
    }
    steps.insert(e["args"]["step"].get<int>());
  }
  EXPECT_EQ(compute, 2u * 2 * 2 * kMicrobatches);  // 2 steps x 2 ranks x (F + B) x m
  EXPECT_EQ(waits, 1u);
  EXPECT_EQ(steps, (std::set<int>{0, 1}));
  std::ifstream sin(dir / "s.svg");
  const std::string svg((std::istreambuf_iterator<char>(sin)), std::istreambuf_iterator<char>());
  EXPECT_NE(svg.find("1f1b: measured step 1 (ms)"), std::string::npos);
  EXPECT_NE(svg.find("1f1b: simulated from the measured costs (ms)"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace baton
