// The simulator with microbatches of uneven size (SimOptions::microbatches)
// against closed forms and against the same schedule at scaled costs.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "baton/error.h"
#include "baton/schedule.h"
#include "baton/sim.h"

namespace baton {
namespace {

constexpr double kEps = 1e-9;

SimOptions Uniform(double f, double i, double w) {
  SimOptions o;
  o.compute.uniform = {f, i, w};
  o.record_timeline = false;
  return o;
}

std::vector<double> RandomShares(int m, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> pick(0.05, 1.0);
  std::vector<double> out(static_cast<std::size_t>(m));
  for (double& x : out) x = pick(rng);
  return out;
}

// A proportionate flow shop: with only forwards costing (B free), a job's
// time the same on every stage, GPipe's step is the sum of the jobs'
// times plus (p - 1) times the longest, in any order.
TEST(UnevenMicrobatches, GPipeForwardsAreAProportionateFlowShop) {
  for (int p : {1, 2, 4, 8}) {
    for (int m : {1, 3, 8, 17}) {
      SimOptions o = Uniform(1.0, 0.0, 0.0);
      o.microbatches.cost = RandomShares(m, static_cast<unsigned>(p * 100 + m));
      const double sum = std::accumulate(o.microbatches.cost.begin(), o.microbatches.cost.end(), 0.0);
      const double longest = *std::max_element(o.microbatches.cost.begin(), o.microbatches.cost.end());
      const SimResult r = Simulate(GenerateGPipe(p, m), o);
      EXPECT_NEAR(r.makespan, sum + (p - 1) * longest, kEps) << "p=" << p << " m=" << m;
    }
  }
}

// One rank runs its microbatches back to back: the step is their costs' sum.
TEST(UnevenMicrobatches, OneRankSumsItsMicrobatches) {
  SimOptions o = Uniform(1.0, 2.0, 0.5);
  o.microbatches.cost = {0.25, 1.0, 0.5, 0.125};
  EXPECT_NEAR(Simulate(GenerateZbH1(1, 4), o).makespan, 1.875 * 3.5, kEps);
}

// Shares of 1 are no shares; equal shares c are every cost times c.
TEST(UnevenMicrobatches, EqualSharesAreScaledCosts) {
  for (const char* name : {"gpipe", "1f1b", "interleaved_1f1b", "zb_h1", "zb_h2", "zbv", "dualpipev", "seq1f1b"}) {
    SCOPED_TRACE(name);
    GenerateOptions g;
    if (std::string(name) == "seq1f1b") g.slices = 2;
    const Schedule s = Generate(name, 4, 8, g);
    SimOptions o = Uniform(1.0, 0.75, 0.5);
    o.messages.latency = 0.0;
    const double plain = Simulate(s, o).makespan;
    o.microbatches.cost.assign(static_cast<std::size_t>(s.sequences()), 1.0);
    EXPECT_NEAR(Simulate(s, o).makespan, plain, kEps);
    o.microbatches.cost.assign(static_cast<std::size_t>(s.sequences()), 0.5);
    const double halved = Simulate(s, o).makespan;
    EXPECT_NEAR(halved, Simulate(s, Uniform(0.5, 0.375, 0.25)).makespan, kEps);
    // Per stage, every stage at the same share: the same.
    o.microbatches.cost.assign(static_cast<std::size_t>(s.sequences() * s.stages), 0.5);
    EXPECT_NEAR(Simulate(s, o).makespan, halved, kEps);
  }
}

// Two ranks, one microbatch: each stage at its own share, and the message
// at its share of the bytes.
TEST(UnevenMicrobatches, PerStageSharesAndMessageShares) {
  SimOptions o;
  o.record_timeline = false;
  o.compute.stages = {{1.0, 1.0, 1.0}, {2.0, 2.0, 2.0}};
  o.messages.latency = 0.5;
  o.messages.bandwidth = 1.0;
  o.messages.bytes = 8.0;
  o.microbatches.cost = {0.5, 0.25};  // stage 0 at 0.5, stage 1 at 0.25
  o.microbatches.message = {0.25};    // 2 bytes: 0.5 + 2
  // F0 0.5, message 2.5, F1 0.5, B1 1.0, message 2.5, B0 1.0.
  EXPECT_NEAR(Simulate(Generate1F1B(2, 1), o).makespan, 0.5 + 2.5 + 0.5 + 1.0 + 2.5 + 1.0, kEps);
}

// A sliced schedule: a slice costs its share of its microbatch's share.
TEST(UnevenMicrobatches, SlicesTakeTheirShareOfTheirMicrobatch) {
  const Schedule s = GenerateSeq1F1B(2, 2, 2);
  SimOptions o = Uniform(1.0, 1.0, 1.0);
  o.slices.cost = {0.25, 0.75};
  o.microbatches.cost = {1.0, 0.0};  // the second microbatch costs nothing
  SimOptions alone = Uniform(1.0, 1.0, 1.0);
  alone.slices.cost = {0.25, 0.75};
  EXPECT_NEAR(Simulate(s, o).makespan, Simulate(GenerateSeq1F1B(2, 1, 2), alone).makespan, kEps);
}

// Each unit's own share (packed sequences whose slices end at their real
// length): the product of its slice's and its microbatch's given as unit
// shares is the same step; per stage too; and a unit of no cost and no
// bytes (a slice past its sequence's end) takes no time: one rank's step
// is the sum of its units' F, I and W at their shares.
TEST(UnevenMicrobatches, UnitSharesStandInForTheSlicesTimesTheMicrobatches) {
  const Schedule s = GenerateSeq1F1B(3, 4, 2);
  SimOptions product = Uniform(1.0, 2.0, 0.5);
  product.messages = {0.1, 1.0, 2.0};
  product.slices.cost = {0.3, 0.7};
  product.slices.message = {0.5, 0.5};
  product.microbatches.cost = RandomShares(4, 3);
  product.microbatches.message = RandomShares(4, 4);
  SimOptions units = product;
  units.microbatches = {};
  for (int u = 0; u < 8; ++u) {
    units.microbatches.unit_cost.push_back(product.slices.cost[u % 2] * product.microbatches.cost[u / 2]);
    units.microbatches.unit_message.push_back(product.slices.message[u % 2] * product.microbatches.message[u / 2]);
  }
  EXPECT_NEAR(Simulate(s, units).makespan, Simulate(s, product).makespan, kEps);
  SimOptions staged = units;
  staged.microbatches.unit_cost.clear();
  for (int u = 0; u < 8; ++u) {
    for (int st = 0; st < 3; ++st) staged.microbatches.unit_cost.push_back(units.microbatches.unit_cost[u]);
  }
  EXPECT_NEAR(Simulate(s, staged).makespan, Simulate(s, product).makespan, kEps);
  // Two sequences of two slices on one rank: sequence 1's second slice runs nothing.
  SimOptions cut = Uniform(1.0, 2.0, 0.5);
  cut.microbatches.unit_cost = {0.5, 0.5, 0.25, 0.0};
  cut.microbatches.unit_message = {0.5, 0.5, 0.5, 0.0};
  EXPECT_NEAR(Simulate(GenerateSeq1F1B(1, 2, 2), cut).makespan, 3.5 * (0.5 + 0.5 + 0.25), kEps);
  SimOptions wrong = units;
  wrong.microbatches.unit_cost.pop_back();
  EXPECT_THROW(Simulate(s, wrong), ScheduleError);
  wrong = units;
  wrong.microbatches.unit_message[0] = -1;
  EXPECT_THROW(Simulate(s, wrong), ScheduleError);
}

TEST(UnevenMicrobatches, SharesOfTheWrongCountOrSignAreRefused) {
  const Schedule s = Generate1F1B(2, 4);
  SimOptions o;
  o.microbatches.cost = {1.0, 1.0, 1.0};
  EXPECT_THROW(Simulate(s, o), ScheduleError);
  o.microbatches.cost = {1.0, -1.0, 1.0, 1.0};
  EXPECT_THROW(Simulate(s, o), ScheduleError);
  o.microbatches.cost = {};
  o.microbatches.message = {1.0, 1.0};
  EXPECT_THROW(Simulate(s, o), ScheduleError);
}

}  // namespace
}  // namespace baton
