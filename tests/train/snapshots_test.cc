// A pure pipeline's snapshots (recovery.on_lost_rank: replace with
// data_parallel.size 1): the interval auto chooses from the measured copy
// and step, against its closed form; and which losses the ranks left can
// rebuild (each lost rank's snapshot is on the next rank).
#include "survivors.h"

#include <gtest/gtest.h>

#include <vector>

namespace baton {
namespace {

// N is the least whole number with copy / N <= 5% of the step.
TEST(SnapshotEvery, IsTheLeastIntervalThatKeepsTheCopyWithinItsShareOfTheStep) {
  EXPECT_EQ(SnapshotEvery(0.001, 0.1), 1);     // 1% of the step: every step
  EXPECT_EQ(SnapshotEvery(0.005, 0.1), 1);     // exactly 5%
  EXPECT_EQ(SnapshotEvery(0.0051, 0.1), 2);    // just over: every other step
  EXPECT_EQ(SnapshotEvery(0.04, 0.1), 8);      // 40%: 8 steps, 5% each
  EXPECT_EQ(SnapshotEvery(0.3, 0.02), 300);    // a copy of 15 steps
  EXPECT_EQ(SnapshotEvery(0.04, 0.1, 0.01), 40);
  for (const double copy : {0.0003, 0.002, 0.017, 0.25}) {
    for (const double step : {0.001, 0.03, 0.4}) {
      const int n = SnapshotEvery(copy, step);
      EXPECT_LE(copy / n, 0.05 * step * (1 + 1e-12)) << copy << " " << step;
      if (n > 1) EXPECT_GT(copy / (n - 1), 0.05 * step) << copy << " " << step;
    }
  }
  // Nothing measured (no copy yet, or no step): every step.
  EXPECT_EQ(SnapshotEvery(0, 0.1), 1);
  EXPECT_EQ(SnapshotEvery(0.01, 0), 1);
}

// Rank r's snapshot is on rank r + 1 (wrapping): a loss is rebuilt unless
// a lost rank's next rank is lost too; a one-rank job holds none.
TEST(KeptStateNeighbours, HoldEveryLostRankUnlessTwoNeighboursAreLost) {
  EXPECT_TRUE(KeptState::NeighboursHold({2}, 4));
  EXPECT_TRUE(KeptState::NeighboursHold({3}, 4));  // on rank 0
  EXPECT_TRUE(KeptState::NeighboursHold({0, 2}, 4));
  EXPECT_TRUE(KeptState::NeighboursHold({1}, 2));
  EXPECT_FALSE(KeptState::NeighboursHold({1, 2}, 4));
  EXPECT_FALSE(KeptState::NeighboursHold({0, 3}, 4));  // 3's snapshot was on 0
  EXPECT_FALSE(KeptState::NeighboursHold({0, 1}, 2));
  EXPECT_FALSE(KeptState::NeighboursHold({0}, 1));
}

}  // namespace
}  // namespace baton
