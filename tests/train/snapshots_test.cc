// A pure pipeline's snapshots (recovery.on_lost_rank: replace with
// data_parallel.size 1): the interval auto chooses from the measured copy
// and step, against its closed form; and which losses the ranks left can
// rebuild (each lost rank's snapshot is on the next rank).
#include "kept_state.h"

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
      if (n > 1) {
        EXPECT_GT(copy / (n - 1), 0.05 * step) << copy << " " << step;
      }
    }
  }
  // Nothing measured (no copy yet, or no step): every step.
  EXPECT_EQ(SnapshotEvery(0, 0.1), 1);
  EXPECT_EQ(SnapshotEvery(0.01, 0), 1);
}

// Rank r's snapshot is on rank r + 1 (wrapping) in a pure pipeline, on
// the same pipeline rank of the next replica with replicas: a loss is
// rebuilt unless a lost rank's holder is lost too; a one-rank job holds
// none.
TEST(KeptStateNeighbours, HoldEveryLostRankUnlessItsHolderIsLostToo) {
  const ReplicaLayout pure{4, 1};
  EXPECT_EQ(SnapshotHolder(pure, 2), 3);
  EXPECT_EQ(SnapshotHolder(pure, 3), 0);
  EXPECT_TRUE(KeptState::NeighboursHold({2}, pure));
  EXPECT_TRUE(KeptState::NeighboursHold({3}, pure));  // on rank 0
  EXPECT_TRUE(KeptState::NeighboursHold({0, 2}, pure));
  EXPECT_TRUE(KeptState::NeighboursHold({1}, ReplicaLayout{2, 1}));
  EXPECT_FALSE(KeptState::NeighboursHold({1, 2}, pure));
  EXPECT_FALSE(KeptState::NeighboursHold({0, 3}, pure));  // 3's snapshot was on 0
  EXPECT_FALSE(KeptState::NeighboursHold({0, 1}, ReplicaLayout{2, 1}));
  EXPECT_FALSE(KeptState::NeighboursHold({0}, ReplicaLayout{1, 1}));
  // 2 pipeline ranks x 3 replicas: world rank p x 3 + d.
  const ReplicaLayout three{2, 3};
  EXPECT_EQ(SnapshotHolder(three, 0), 1);  // pipeline rank 0: replica 0 -> 1
  EXPECT_EQ(SnapshotHolder(three, 2), 0);  // replica 2 -> 0
  EXPECT_EQ(SnapshotHolder(three, 5), 3);  // pipeline rank 1, replica 2 -> replica 0
  EXPECT_TRUE(KeptState::NeighboursHold({0, 3}, three));   // the same replica, both pipeline ranks
  EXPECT_FALSE(KeptState::NeighboursHold({0, 2}, three));  // 2's snapshot was on 0
  EXPECT_FALSE(KeptState::NeighboursHold({1, 2}, three));  // 1's snapshot was on 2
}

}  // namespace
}  // namespace baton
