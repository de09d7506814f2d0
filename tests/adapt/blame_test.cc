// log.blame's judge, in-process, on made-up timings: a step later than its
// price is blamed on the rank whose compute grew, the link whose messages
// arrived late, or the data whose step costs more; healthy steps, noise
// in the step alone, and the calibrating steps name nothing.
#include "blame.h"

#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "baton/error.h"
#include "baton/schedule.h"
#include "support/thread_ranks.h"

namespace baton {
namespace {

// Two ranks, 12 compute actions each a step: 10 ms of compute on each, a
// step of 24 ms, each link's shortest message 50 us (with 10 us of
// spread in the calibration).
struct Steps {
  StepBlame judge{2, 12};
  int step = 0;
  std::optional<Late> Step(std::vector<double> seconds, double step_s, std::vector<double> transits,
                           double work = 1.0) {
    ++step;
    return judge.Observe(seconds, step_s, transits, work);
  }
  std::optional<Late> Healthy(double work = 1.0) {
    const double noise = 10e-6 * (step % 2);
    // Compute seconds per unit of the step's work (MeasureStep's).
    return Step({10e-3, 10e-3}, 24e-3 * work, {-1, 50e-6 + noise, 50e-6 + noise, -1}, work);
  }
  void Calibrate() {
    const BlameSettings s;
    for (int k = 0; k < s.settle + s.window; ++k) EXPECT_FALSE(Healthy()) << "calibrating";
    ASSERT_TRUE(judge.calibrated());
  }
};

TEST(StepBlame, ASlowRankIsNamedByTheSecondsItMadeTheStepLate) {
  Steps r;
  r.Calibrate();
  EXPECT_FALSE(r.Healthy());
  // Rank 1 computes 1.5x: 5 ms more, the step 4 ms later than its price.
  const std::optional<Late> late = r.Step({10e-3, 15e-3}, 28e-3, {-1, 50e-6, 50e-6, -1});
  ASSERT_TRUE(late);
  EXPECT_EQ(late->what, "rank");
  EXPECT_EQ(late->rank, 1);
  EXPECT_NEAR(late->by_s, 4e-3, 1e-12);
  EXPECT_EQ(LateJson(*late), R"({"what": "rank", "rank": 1, "by_s": 0.004})");
  EXPECT_EQ(LateText(*late), "rank 1");
  // The same rank 1.5x on a step that is not late (its share of the step
  // hidden by the other's waits): nothing named.
  EXPECT_FALSE(r.Step({10e-3, 15e-3}, 24.5e-3, {-1, 50e-6, 50e-6, -1}));
}

TEST(StepBlame, ALateWireIsNamedAndARankBusyBesideItIsNamedFirst) {
  Steps r;
  r.Calibrate();
  // Messages from 0 to 1 arrive 1 ms late (a mean action is 0.83 ms).
  const std::optional<Late> late = r.Step({10e-3, 10e-3}, 30e-3, {-1, 1.05e-3, 50e-6, -1});
  ASSERT_TRUE(late);
  EXPECT_EQ(late->what, "link");
  EXPECT_EQ(late->from, 0);
  EXPECT_EQ(late->to, 1);
  EXPECT_NEAR(late->by_s, 6e-3, 1e-12);
  EXPECT_EQ(LateJson(*late), R"({"what": "link", "from": 0, "to": 1, "by_s": 0.006})");
  // Within the calibration's spread (three times 10 us): not a late wire.
  EXPECT_FALSE(r.Step({10e-3, 10e-3}, 30e-3, {-1, 75e-6, 50e-6, -1}));
  // A rank 25% over its calibration (a busy neighbour on its core) whose
  // 2.5 ms explain less than half of a step 10 ms late: the wire's.
  const std::optional<Late> wire = r.Step({10e-3, 12.5e-3}, 34e-3, {-1, 1.05e-3, 50e-6, -1});
  ASSERT_TRUE(wire);
  EXPECT_EQ(wire->what, "link");
  // A slow rank takes longer to see its messages arrive: the rank is named.
  const std::optional<Late> both = r.Step({10e-3, 20e-3}, 34e-3, {-1, 1.05e-3, 50e-6, -1});
  ASSERT_TRUE(both);
  EXPECT_EQ(both->what, "rank");
  EXPECT_EQ(both->rank, 1);
}

TEST(StepBlame, AStepOfCostlierMicrobatchesIsTheDatas) {
  Steps r;
  r.Calibrate();
  // A packed step with 1.5 times the work of the run's typical step: its
  // time is its price, late only against the typical step, by 12 ms.
  const std::optional<Late> late = r.Healthy(1.5);
  ASSERT_TRUE(late);
  EXPECT_EQ(late->what, "data");
  EXPECT_NEAR(late->by_s, 12e-3, 1e-12);
  EXPECT_EQ(LateJson(*late), R"({"what": "data", "by_s": 0.012})");
  // Lighter steps are never late for their data.
  EXPECT_FALSE(r.Healthy(0.7));
  // A slow rank on a costly step is the rank's (compute per unit of work).
  const std::optional<Late> slow = r.Step({10e-3, 15e-3}, 45e-3, {-1, 50e-6, 50e-6, -1}, 1.5);
  ASSERT_TRUE(slow);
  EXPECT_EQ(slow->what, "rank");
  EXPECT_EQ(slow->rank, 1);
  EXPECT_NEAR(slow->by_s, 9e-3, 1e-12);
}

TEST(StepBlame, NoiseInTheStepAloneNamesNothingAndAPlanChangeCalibratesAgain) {
  Steps r;
  r.Calibrate();
  // 50% late with every rank and link as healthy (a neighbour's process
  // took the core): nothing to blame.
  EXPECT_FALSE(r.Step({10e-3, 10e-3}, 36e-3, {-1, 50e-6, 50e-6, -1}));
  // A rank 1.1x (under the trigger) on a late step: nothing.
  EXPECT_FALSE(r.Step({10e-3, 11e-3}, 36e-3, {-1, 50e-6, 50e-6, -1}));
  // A new plan: rank 1 computes 16 ms a step from here, its new normal.
  r.judge.Restart();
  EXPECT_FALSE(r.judge.calibrated());
  const BlameSettings s;
  for (int k = 0; k < s.settle + s.window; ++k) {
    EXPECT_FALSE(r.Step({10e-3, 16e-3}, 30e-3, {-1, 50e-6, 50e-6 + 10e-6 * (k % 2), -1}));
  }
  EXPECT_TRUE(r.judge.calibrated());
  EXPECT_FALSE(r.Step({10e-3, 16e-3}, 30e-3, {-1, 50e-6, 50e-6, -1}));
  const std::optional<Late> late = r.Step({10e-3, 24e-3}, 38e-3, {-1, 50e-6, 50e-6, -1});
  ASSERT_TRUE(late);
  EXPECT_EQ(late->rank, 1);
}

// The critical path's model: 1F1B on 2 ranks, 6 microbatches, each rank
// 18 units a step (6 F of one unit, 6 B of two): at a unit a second the
// step is (m + p - 1) (F + B) = 21 s; a wire's delay lengthens it.
TEST(StepModel, TheSimulatedStepIsTheCriticalPathsLength) {
  const StepModel model(Lower(Generate("1f1b", 2, 6)));
  EXPECT_EQ(model.ranks(), 2);
  EXPECT_NEAR(model.Step({18, 18}, {}), 21.0, 1e-9);
  EXPECT_NEAR(model.Step({36, 36}, {-1, -1, -1, -1}), 42.0, 1e-9);
  EXPECT_GE(model.Step({18, 18}, {-1, 0.5, 0.5, -1}), 22.0 - 1e-9);
}

// With the critical path (StepModel): rank 1 computes half what rank 0
// does, so its extra compute mostly waits for rank 0's; when it computes
// 1.4x while rank 0's messages to it arrive 1 ms late, the step was made
// late by the wire, which the judge names, where the extra compute alone
// (the judge without a model) would name rank 1. A slow rank 0, on the
// path, is still named, also where the step is later than the path shows
// (ranks sharing a core), but not for a step late by noise.
TEST(StepBlame, OnTheCriticalPathARankWhoseExtraComputeWaitedIsNotNamed) {
  const StepModel model(Lower(Generate("1f1b", 2, 6)));
  StepBlame with(2, 12), without(2, 12);
  with.SetModel(model, 1);
  const std::vector<double> healthy_links = {-1, 50e-6, 50e-6, -1};
  const double healthy_step = model.Step({10e-3, 5e-3}, healthy_links);
  const BlameSettings s;
  for (int k = 0; k < s.settle + s.window; ++k) {
    const std::vector<double> links = {-1, 50e-6 + 10e-6 * (k % 2), 50e-6, -1};
    EXPECT_FALSE(with.Observe({10e-3, 5e-3}, healthy_step, links, 1.0));
    EXPECT_FALSE(without.Observe({10e-3, 5e-3}, healthy_step, links, 1.0));
  }
  ASSERT_TRUE(with.calibrated());
  const std::vector<double> seconds = {10e-3, 7e-3}, late_links = {-1, 1.05e-3, 50e-6, -1};
  const double step = model.Step(seconds, late_links);
  const std::optional<Late> wire = with.Observe(seconds, step, late_links, 1.0);
  ASSERT_TRUE(wire) << "step " << step << " s against " << healthy_step << " s";
  EXPECT_EQ(wire->what, "link");
  EXPECT_EQ(wire->from, 0);
  EXPECT_EQ(wire->to, 1);
  const std::optional<Late> rank = without.Observe(seconds, step, late_links, 1.0);
  ASSERT_TRUE(rank);
  EXPECT_EQ(rank->what, "rank");
  EXPECT_EQ(rank->rank, 1);
  // Rank 0 at 1.5x, on the path.
  const std::vector<double> slow = {15e-3, 5e-3};
  const std::optional<Late> on_path = with.Observe(slow, model.Step(slow, healthy_links), healthy_links, 1.0);
  ASSERT_TRUE(on_path);
  EXPECT_EQ(on_path->what, "rank");
  EXPECT_EQ(on_path->rank, 0);
  // Ranks sharing a core: the step late by 2.2 times what rank 0's extra
  // compute costs the path (its core-mate's wall time lost too): still
  // rank 0's, its cost set against the path's lateness.
  const double path_late = model.Step(slow, healthy_links) - healthy_step;
  const std::optional<Late> shared = with.Observe(slow, healthy_step + 2.2 * path_late, healthy_links, 1.0);
  ASSERT_TRUE(shared);
  EXPECT_EQ(shared->what, "rank");
  EXPECT_EQ(shared->rank, 0);
  // But a step late by noise that rank 0's 25% more compute (past its
  // trigger) covers less than a quarter of: nothing.
  EXPECT_FALSE(with.Observe({12.5e-3, 5e-3}, healthy_step + 12e-3, healthy_links, 1.0));
  // A model of another world size is refused.
  StepBlame four(4, 12);
  EXPECT_THROW(four.SetModel(model, 1), Error);
}

// The adaptive plans' reduced measure of a step (each pipeline's measures
// at its rank 0, their largest over the replicas) is what the whole
// gather gives, reduced at rank 0 (SlowestReplica, SlowestTransits), and
// the closed form: 3 replicas of a 3-rank pipeline, rank p of replica d
// computing 1 + p + 0.1 d, its message to rank p + 1 arriving 0.01 (p + 1)
// + 0.001 d after it was sent (twice, the shorter counted), and replica
// 1's rank 0 also sending to rank 2 (a link only one pipeline uses).
TEST(GatherMeasures, TheReducedMeasureIsTheWholeOnesSlowestReplicaAndSlowestLinks) {
  constexpr int kRanks = 3, kReplicas = 3;
  auto ranks = MakeThreadRanks({kRanks, kReplicas}, 30);
  std::vector<StepMeasures> whole(kRanks * kReplicas), reduced(kRanks * kReplicas);
  const auto errors = baton_test::RunRanks(ranks, [&](int w, ThreadRank& me) {
    const int p = me.pipeline->rank(), d = me.replicas->rank();
    RankMessageTimes mine{p, d, {}, 1.0 + p + 0.1 * d};
    for (std::int64_t key = 0; key < 2; ++key) {
      const double late = 0.01 * (p + 1) + 0.001 * d + 0.0005 * static_cast<double>(key == 0);
      if (p + 1 < kRanks) mine.times.push_back({true, p + 1, key, 1.0 * static_cast<double>(key)});
      if (p > 0) mine.times.push_back({false, p - 1, key, 1.0 * static_cast<double>(key) + late - 0.01});
    }
    if (p == 0 && d == 1) mine.times.push_back({true, 2, 7, 3.0});
    if (p == 2 && d == 1) mine.times.push_back({false, 0, 7, 3.25});
    const RunComms comms{*me.world, *me.pipeline, *me.replicas};
    whole[static_cast<std::size_t>(w)] = GatherMeasures(comms, mine, true);
    reduced[static_cast<std::size_t>(w)] = GatherMeasures(comms, mine, false);
  });
  for (const std::string& e : errors) ASSERT_EQ(e, "");
  const StepMeasures& all = whole[0];
  const StepMeasures& r = reduced[0];
  ASSERT_TRUE(all.whole);
  ASSERT_FALSE(r.whole);
  EXPECT_EQ(r.slowest, SlowestReplica(all.seconds, kReplicas));
  EXPECT_EQ(r.transits, SlowestTransits(all.ranks, kRanks, kReplicas));
  // The whole gather gives them too (what the plans decide by either way).
  EXPECT_EQ(all.slowest, r.slowest);
  EXPECT_EQ(all.transits, r.transits);
  ASSERT_EQ(r.slowest.size(), 3u);
  for (int p = 0; p < kRanks; ++p) EXPECT_DOUBLE_EQ(r.slowest[static_cast<std::size_t>(p)], 1.0 + p + 0.2);
  ASSERT_EQ(r.transits.size(), 9u);
  // Link p - 1 > p: received 0.01 p + 0.001 d after it was sent (the
  // second message, without the first's extra 0.5 ms), slowest in replica
  // d = 2; link 0 > 2 only in replica 1, 0.25.
  EXPECT_NEAR(r.transits[0 * 3 + 1], 0.012, 1e-12);
  EXPECT_NEAR(r.transits[1 * 3 + 2], 0.022, 1e-12);
  EXPECT_NEAR(r.transits[0 * 3 + 2], 0.25, 1e-12);
  for (const std::size_t l : {0, 1 * 3 + 0, 1 * 3 + 1, 2 * 3 + 0, 2 * 3 + 1, 2 * 3 + 2}) {
    EXPECT_LT(r.transits[l], 0) << l;
  }
  // Everywhere else: nothing (world rank 0's alone).
  for (std::size_t w = 1; w < reduced.size(); ++w) {
    EXPECT_TRUE(reduced[w].slowest.empty() && reduced[w].transits.empty()) << w;
    EXPECT_TRUE(whole[w].seconds.empty()) << w;
  }
}

}  // namespace
}  // namespace baton
