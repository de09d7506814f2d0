// The adaptive plans' measure and decisions, in-process, on made-up
// timings: each rank's factor from a sliding median (an outlier moves
// nothing; a slowdown shows at its third step), a move only when it pays
// over the steps left, a rank that recovers moved back.
#include "adapt.h"

#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "baton/placement.h"
#include "baton/profile_price.h"

namespace baton {
namespace {

// The tiny GPT with eight blocks on two ranks, and a profile of it: every
// block alike (1 ms of forward), the embedding and the head cheaper.
TrainConfig Gpt() {
  return LoadTrainConfig(BATON_SOURCE_DIR "/tests/mpi/tiny_gpt.yaml",
                         {"pipeline.ranks=2", "model.blocks=8", "pipeline.adapt=on", "train.steps=200"});
}

Profile Flat(const TrainConfig& c) {
  const ModelDesc model = DescribeModel(c.model.layers, c.model.input, c.model.seq);
  Profile p;
  p.identity = IdentityOf(c, model, "test machine", 64);
  ProfileRows pr;
  pr.rows = c.train.batch_size / c.pipeline.microbatches;
  for (int t = 0; t < model.top_layers(); ++t) {
    const bool block = t > 0 && t + 1 < model.top_layers();
    LayerProfile l;
    l.forward = block ? 1e-3 : 2e-4;
    l.backward_input = l.forward;
    l.backward_weight = l.forward;
    l.backward = 2 * l.forward;
    const auto [first, last] = model.OpRange(t, t + 1);
    for (int k = first; k < last; ++k) l.op_forward.push_back(l.forward / (last - first));
    pr.layers.push_back(l);
  }
  p.rows.push_back(pr);
  return p;
}

// Each rank's priced compute a step at full speed.
std::vector<double> Priced(const RunPlan& plan, const Profile& p) {
  std::vector<double> out;
  for (const RankResult& r : PredictFromProfile(plan, p).sim.per_rank) out.push_back(r.busy);
  return out;
}

TEST(SpeedMeter, AMedianOfTheWindowCalibratedOnTheFirst) {
  AdaptSettings s;
  SpeedMeter m(s);
  m.Expect({1.0, 2.0});
  // This machine runs the price 1.5 times slower: that is the calibration, not a slowdown.
  for (int step = 0; step < s.settle + s.window; ++step) {
    EXPECT_TRUE(m.Factors().empty());
    m.Observe({1.5, 3.0});
  }
  ASSERT_EQ(m.Factors().size(), 2u);
  EXPECT_DOUBLE_EQ(m.Factors()[0], 1.0);
  // One step of noise on rank 0 (a neighbour's burst) moves nothing.
  m.Observe({6.0, 3.0});
  EXPECT_DOUBLE_EQ(m.Factors()[0], 1.0);
  // Rank 1 slows 2x: seen at its third slow step, not before.
  m.Observe({1.5, 6.0});
  m.Observe({1.5, 6.0});
  EXPECT_DOUBLE_EQ(m.Factors()[1], 1.0);
  m.Observe({1.5, 6.0});
  EXPECT_DOUBLE_EQ(m.Factors()[1], 2.0);
  // A new plan, chosen for these factors: the window starts again after the
  // settling steps, and calibrates each rank at them (its new layers' time
  // against their price may differ: here rank 1's 1.2 times more).
  m.Expect({1.5, 1.0}, {1.0, 2.0});
  for (int step = 0; step < s.settle + s.window - 1; ++step) m.Observe({2.25, 3.6});
  EXPECT_TRUE(m.Factors().empty());
  m.Observe({2.25, 3.6});
  EXPECT_DOUBLE_EQ(m.Factors()[0], 1.0);
  EXPECT_DOUBLE_EQ(m.Factors()[1], 2.0);
  // Rank 1 recovers: seen at its third fast step.
  for (int step = 0; step < 3; ++step) m.Observe({2.25, 1.8});
  EXPECT_DOUBLE_EQ(m.Factors()[1], 1.0);
}

// A busy machine's noise moved the plan (rank 0 measured 1.3 slow) just
// before rank 1 slowed 4x, from the new plan's first calibrated step: its
// calibration would take the slowness for its layers' mix and read 1.0 for
// as long as it lasts. Off the plan before's by more than kDrift, it keeps
// the calibration before, and the slowdown shows; a mix within it (here
// 1.2) is calibrated as before.
TEST(SpeedMeter, ASlowdownAsAMovedPlanCalibratesShowsInItsFactor) {
  AdaptSettings s;
  SpeedMeter m(s);
  m.Expect({1.0, 1.0});
  for (int step = 0; step < s.settle + s.window; ++step) m.Observe({1.5, 1.5});
  m.Expect({1.0, 1.0}, {1.3, 1.0});
  for (int step = 0; step < s.settle + s.window; ++step) m.Observe({1.5, 6.0});
  ASSERT_EQ(m.Factors().size(), 2u);
  EXPECT_NEAR(m.Factors()[0], 1.3, 1e-12);  // the noise gone: back at 1 once the planner asks
  EXPECT_DOUBLE_EQ(m.Factors()[1], 4.0);
  // Recovered as the next plan calibrates: the calibration before again.
  m.Expect({1.0, 1.0}, {1.0, 4.0});
  for (int step = 0; step < s.settle + s.window; ++step) m.Observe({1.5, 1.5});
  EXPECT_DOUBLE_EQ(m.Factors()[1], 1.0);
  // A layers' mix within kDrift is the new calibration.
  m.Expect({1.0, 1.0});
  for (int step = 0; step < s.settle + s.window; ++step) m.Observe({1.5, 1.8});
  EXPECT_DOUBLE_EQ(m.Factors()[1], 1.0);
  m.Observe({1.5, 3.6});
  m.Observe({1.5, 3.6});
  m.Observe({1.5, 3.6});
  EXPECT_DOUBLE_EQ(m.Factors()[1], 2.0);
}

// One run's steps: rank 1 at `slow` from step `from` to step `until`; each
// rank's compute what the price says at its speed (times 1.5, this machine).
struct Trace {
  std::vector<std::pair<std::int64_t, RunPlan>> moves;  // after which step, to what plan
  std::vector<std::string> schedules;                   // each move's schedule
  std::vector<std::vector<double>> factors;             // each move's ranks' factors, as measured
  std::vector<std::int64_t> failed;                     // the steps after which a move failed
};

// The top-level layers a plan places on rank `rank`.
int LayersOn(const RunPlan& plan, int rank) {
  int n = 0;
  for (int s = 0; s < plan.stages(); ++s) {
    if (plan.lowered.stage_rank[static_cast<std::size_t>(s)] == rank) n += plan.bounds[s + 1] - plan.bounds[s];
  }
  return n;
}
// With `wire` > 0, instead of a slow rank, the link from rank 0 to rank 1
// late by `wire` seconds over the same steps; each link's shortest message
// time otherwise 50 us, with 20 us of noise.
// With `compute_s` > 0 the machine is that much faster: rank 1's compute
// a step takes `compute_s` healthy.
// With `again` > 0 rank 1 is slow again from that step on; with
// `failing` > 0 the first `failing` moves proposed fail (a rank could not
// build them): the run stays on its plan.
// With `lazy`, the profile is measured at the first slowdown (the
// default), not given at the start.
Trace Simulated(double slow, std::int64_t from, std::int64_t until, std::int64_t total, double wire = 0,
                double compute_s = 0, std::int64_t again = 0, int failing = 0, bool lazy = false) {
  TrainConfig c = Gpt();
  const Profile profile = Flat(c);
  AdaptivePlanner planner = lazy ? AdaptivePlanner([profile] { return profile; }) : AdaptivePlanner(profile);
  RunPlan plan = PlanRun(c);
  planner.Start(plan);
  const double machine = compute_s > 0 ? compute_s / (1.5 * Priced(plan, profile)[1]) : 1.0;
  Trace t;
  for (std::int64_t step = 1; step <= total; ++step) {
    const bool in_window = (step >= from && step < until) || (again > 0 && step >= again);
    std::vector<double> speed = {1.0, in_window && wire == 0 ? slow : 1.0};
    std::vector<double> priced = Priced(plan, profile), seconds;
    for (std::size_t r = 0; r < priced.size(); ++r) seconds.push_back(machine * 1.5 * priced[r] * speed[r]);
    const double late = in_window ? wire : 0.0;
    const double noise = 20e-6 * static_cast<double>((step * 7919) % 13) / 12.0;
    const std::vector<double> transits = {-1, 50e-6 + noise + late, 50e-6 + noise, -1};
    const double step_s =
        machine * 1.5 * PredictFromProfile(plan, profile, Slowdown(speed, {0, late / 1.5, 0, 0})).sim.makespan;
    if (std::optional<Replan> r = planner.Observe(c, plan, step, total, seconds, step_s, transits)) {
      EXPECT_GT(r->step_before, r->step_after);
      if (static_cast<int>(t.failed.size()) < failing) {
        t.failed.push_back(step);
        planner.Failed(*r);
        planner.Start(plan);
        continue;
      }
      c.pipeline.schedule = r->schedule;
      c.pipeline.chunks = r->chunks;
      c = WithPlacement(c, plan.model, r->bounds);
      plan = PlanRun(c);
      t.moves.emplace_back(step, plan);
      t.schedules.push_back(r->schedule);
      t.factors.push_back(r->factors);
      planner.Moved(2 * step_s);
      planner.Start(plan);
    }
  }
  return t;
}

TEST(AdaptivePlanner, MovesLayersOffASlowRankAndBackWhenItRecovers) {
  const Trace t = Simulated(2.0, 20, 60, 200);
  ASSERT_EQ(t.moves.size(), 2u);
  EXPECT_EQ(t.moves[0].first, 22);  // the third slow step
  const RunPlan healthy = PlanRun(Gpt());
  EXPECT_LT(LayersOn(t.moves[0].second, 1), LayersOn(healthy, 1));
  EXPECT_EQ(t.moves[1].first, 62);
  EXPECT_EQ(LayersOn(t.moves[1].second, 1), LayersOn(healthy, 1));  // the layers back
}

// A profile measured at the first slowdown prices the running plan from
// then on: its meter's window and calibration carried into the profile's
// unit, so the factors after the move are the rank's speeds (they read
// tens before), and the layers come back when it recovers.
TEST(AdaptivePlanner, AProfileMeasuredAtTheFirstSlowdownMovesAsOneGivenAtTheStart) {
  const Trace t = Simulated(2.0, 20, 60, 200, 0, 0, 0, 0, /*lazy=*/true);
  ASSERT_EQ(t.moves.size(), 2u);
  EXPECT_EQ(t.moves[0].first, 22);
  EXPECT_EQ(t.moves[1].first, 62);
  EXPECT_EQ(LayersOn(t.moves[1].second, 1), LayersOn(PlanRun(Gpt()), 1));
  ASSERT_EQ(t.factors[1].size(), 2u);
  EXPECT_NEAR(t.factors[0][1], 2.0, 1e-9);
  EXPECT_NEAR(t.factors[1][0], 1.0, 1e-9);  // recovered: both at full speed
  EXPECT_NEAR(t.factors[1][1], 1.0, 1e-9);
}

TEST(SpeedMeter, ARepricedPlanKeepsItsFactors) {
  AdaptSettings s;
  SpeedMeter m(s);
  m.Expect({1.0, 1.0});
  for (int step = 0; step < s.settle + s.window; ++step) m.Observe({0.03, 0.02});
  m.Observe({0.03, 0.04});
  m.Reprice({0.01, 0.005});
  m.Observe({0.03, 0.04});
  m.Observe({0.03, 0.04});
  ASSERT_EQ(m.Factors().size(), 2u);
  EXPECT_NEAR(m.Factors()[0], 1.0, 1e-12);
  EXPECT_NEAR(m.Factors()[1], 2.0, 1e-12);
  EXPECT_NEAR(m.HealthySeconds()[1], 0.02, 1e-12);
}

TEST(AdaptivePlanner, NoMoveThatTheStepsLeftCannotPayFor) {
  EXPECT_TRUE(Simulated(2.0, 195, 200, 200).moves.empty());  // 3 steps left when seen: they cannot pay for a move
  EXPECT_TRUE(Simulated(1.1, 20, 200, 200).moves.empty());    // 10% slower: within the noise a run tolerates
  EXPECT_TRUE(Simulated(1.0, 1, 1, 1000).moves.empty());      // healthy: nothing moves
  // A rank computing 0.4 ms a step, 2x slower: 0.4 ms a step is the
  // machine's noise for so short a step (AdaptSettings::min_seconds), not a
  // slowdown worth a move; at 4 ms a step it moves.
  EXPECT_TRUE(Simulated(2.0, 20, 200, 200, 0, 0.4e-3).moves.empty());
  EXPECT_FALSE(Simulated(2.0, 20, 200, 200, 0, 4e-3).moves.empty());
}

// A wire from rank 0 to rank 1 late by about two forwards of a stage: seen
// at its third step, the plan changes to one that hides it (predicted
// faster); a wire late by 1% of the step moves nothing.
TEST(AdaptivePlanner, ALateWireChangesThePlanToOneThatHidesIt) {
  const Trace t = Simulated(1.0, 20, 60, 200, 0.012);
  ASSERT_GE(t.moves.size(), 1u);
  EXPECT_EQ(t.moves[0].first, 22);
  EXPECT_NE(t.schedules[0], "1f1b");
  EXPECT_FALSE(t.schedules[0].empty());
  EXPECT_TRUE(Simulated(1.0, 20, 200, 200, 0.0008).moves.empty());
}

// A rank slowed 3x whose compute at full speed is 1.2 ms a step: the move
// leaves it 4 of its 10 layers, about 0.5 ms, and its recovery, worth 2 x
// 0.5 = 1 ms on that share, would hide under the 1 ms floor; weighed on
// its share in the first plan (2 x 1.2 ms) the layers go back.
TEST(AdaptivePlanner, ARecoveryAfterAMoveThatLeftTheRankLittleIsWorthItsLayersBack) {
  const Trace t = Simulated(3.0, 20, 60, 200, 0, 1.2e-3);
  ASSERT_EQ(t.moves.size(), 2u);
  const RunPlan healthy = PlanRun(Gpt());
  EXPECT_EQ(t.moves[0].first, 22);
  EXPECT_LT(LayersOn(t.moves[0].second, 1), LayersOn(healthy, 1));
  EXPECT_EQ(t.moves[1].first, 62);
  EXPECT_EQ(LayersOn(t.moves[1].second, 1), LayersOn(healthy, 1));
}

// A move a rank could not build (out of memory) is not proposed again:
// rank 1 slow, the move fails; the rank recovers (the run moves to the
// plan best at full speed, as a run whose move went through does) and
// slows again as before: where that run moves to the same plan as the
// first time, the failed one stays untried.
TEST(AdaptivePlanner, AMoveThatFailedIsNotTriedAgain) {
  const Trace moving = Simulated(2.0, 20, 60, 200, 0, 0, 100);
  ASSERT_EQ(moving.moves.size(), 3u);
  EXPECT_EQ(moving.moves[0].first, 22);
  EXPECT_EQ(moving.moves[1].first, 62);
  EXPECT_EQ(moving.moves[2].first, 102);
  EXPECT_EQ(moving.moves[2].second.bounds, moving.moves[0].second.bounds);
  EXPECT_EQ(moving.schedules[2], moving.schedules[0]);
  const Trace t = Simulated(2.0, 20, 60, 200, 0, 0, 100, 1);
  ASSERT_EQ(t.failed, std::vector<std::int64_t>{22});
  ASSERT_EQ(t.moves.size(), 1u);
  EXPECT_EQ(t.moves[0].first, 62);
  EXPECT_EQ(t.moves[0].second.bounds, moving.moves[1].second.bounds);
}

}  // namespace
}  // namespace baton
