// V-Min, V-Half and V-ZB against "Pipeline Parallelism with Controllable
// Memory" (Qi, Wan, Amar, Lin; NeurIPS 2024) and its authors' code.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

#include "baton/error.h"
#include "baton/schedule.h"
#include "baton/sim.h"

namespace baton {
namespace {

std::string Csv(const Schedule& s) {
  std::ostringstream out;
  WriteCsv(s, out);
  return out.str();
}

double PeakMemory(const Schedule& s, double weight_memory_ratio) {
  SimOptions o;
  o.memory.weight_ratio = weight_memory_ratio;
  o.record_timeline = false;
  double peak = 0;
  for (const RankResult& rr : Simulate(s, o).per_rank) peak = std::max(peak, rr.peak_memory);
  return peak;
}

TEST(VSchedules, FollowTheAuthorsOrder) {
  // The orders the authors' zbv_greedy.py (V-Min, V-Half) and zbv.py (V-ZB,
  // F = B = W, no communication) produce for 3 ranks, written as baton
  // actions (their B is the input gradient, I here).
  EXPECT_EQ(Csv(GenerateVMin(3, 4)),
            "0F0,0F1,0F2,5F0,5I0,5W0,5F1,0I0,5I1,5W1,0W0,5F2,0F3,0I1,5I2,5W2,0W1,5F3,5I3,0I2,5W3,0W2,0I3,0W3\n"
            "1F0,1F1,4F0,4F1,4I0,4W0,1I0,1F2,1W0,4I1,4F2,4W1,1I1,1F3,1W1,4I2,4F3,4W2,1I2,4I3,4W3,1W2,1I3,1W3\n"
            "2F0,3F0,2F1,3F1,3I0,2I0,3W0,2W0,2F2,3F2,3I1,2I1,3W1,2W1,2F3,3F3,3I2,2I2,3W2,2W2,3I3,2I3,3W3,2W3\n");
  EXPECT_EQ(Csv(GenerateVHalf(3, 4)),
            "0F0,0F1,0F2,5F0,5I0,5W0,5F1,5I1,5W1,0I0,0W0,0F3,5F2,5I2,5W2,0I1,0W1,5F3,5I3,0I2,5W3,0W2,0I3,0W3\n"
            "1F0,1F1,4F0,4F1,4I0,4W0,1F2,1I0,4I1,4W1,4F2,1W0,1F3,1I1,4I2,4W2,4F3,1W1,1I2,4I3,4W3,1W2,1I3,1W3\n"
            "2F0,3F0,2F1,3F1,3I0,3W0,2I0,2W0,2F2,3F2,3I1,2I1,3W1,2F3,2W1,3F3,3I2,2I2,3W2,2W2,3I3,2I3,3W3,2W3\n");
  EXPECT_EQ(Csv(GenerateVZb(3, 6, {})),
            "0F0,0F1,0F2,0F3,0F4,5F0,5I0,5W0,5F1,5I1,5W1,5F2,5I2,5W2,0F5,0I0,0W0,5F3,5I3,5W3,0I1,0W1,5F4,5I4,5W4,"
            "0I2,0W2,5F5,5I5,0I3,5W5,0I4,0W3,0I5,0W4,0W5\n"
            "1F0,1F1,1F2,4F0,1F3,4F1,4I0,4W0,4F2,4I1,4W1,1F4,1I0,1W0,4F3,4I2,4W2,1F5,1I1,1W1,4F4,4I3,4W3,1I2,1W2,"
            "4F5,4I4,1I3,4I5,1I4,4W4,1I5,1W3,4W5,1W4,1W5\n"
            "2F0,3F0,2F1,3F1,2F2,3F2,3I0,3W0,2F3,2I0,2W0,3F3,3I1,3W1,2F4,2I1,2W1,3F4,3I2,3W2,2F5,2I2,2W2,3F5,3I3,"
            "2I3,3I4,2I4,3I5,2I5,3W3,2W3,3W4,2W4,3W5,2W5\n");
}

TEST(VSchedules, VMinAndVHalfHoldAThirdAndAHalfOfOneFOneBsMemory) {
  // The paper's V-Min and V-Half keep about 1/3 and 1/2 of 1F1B's peak
  // activation memory (p M_B), plus a constant from the building block's
  // start-up: measured here, at most 4/3 M_B (V-Min) and 1 M_B (V-Half). The
  // paper counts a microbatch's activations as held until its W, which is
  // M_W / M_B = 1; releasing part at I only lowers the peaks.
  for (int p : {2, 3, 4, 5, 6, 8, 12, 16, 24}) {
    for (int m : {p, 2 * p, 4 * p + 1}) {
      SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
      const Schedule v_min = GenerateVMin(p, m), v_half = GenerateVHalf(p, m);
      ASSERT_NO_THROW(Validate(v_min));
      ASSERT_NO_THROW(Validate(v_half));
      const double one_f1b = PeakMemory(Generate1F1B(p, m), 1.0);
      EXPECT_NEAR(one_f1b, std::min(p, m), 1e-9);
      if (m < p) continue;
      const double min_peak = PeakMemory(v_min, 1.0), half_peak = PeakMemory(v_half, 1.0);
      EXPECT_GE(min_peak, one_f1b / 3 - 1e-9);
      EXPECT_LE(min_peak, one_f1b / 3 + 4.0 / 3 + 1e-9);
      EXPECT_GE(half_peak, one_f1b / 2 - 1e-9);
      EXPECT_LE(half_peak, one_f1b / 2 + 1 + 1e-9);
      EXPECT_LE(PeakMemory(v_min, 0.5), min_peak + 1e-9);
      EXPECT_LE(PeakMemory(v_half, 0.5), half_peak + 1e-9);
    }
  }
  // For 24 ranks: 9 and 13 M_B against 1F1B's 24, ratios 0.375 and 0.54.
  EXPECT_NEAR(PeakMemory(GenerateVMin(24, 96), 1.0) / 24, 1.0 / 3, 0.05);
  EXPECT_NEAR(PeakMemory(GenerateVHalf(24, 96), 1.0) / 24, 1.0 / 2, 0.05);
}

TEST(VSchedules, VMinAndVHalfBubbleLessThanOneFOneB) {
  // Uniform costs: the authors list V-Half's bubble at about half of
  // 1F1B's and V-Min's at about two thirds (plus an O(n) overhead); both
  // stay below 1F1B's.
  for (int p : {2, 4, 8, 16}) {
    for (int m : {p, 2 * p, 8 * p}) {
      const double one_f1b = Simulate(Generate1F1B(p, m)).bubble_rate;
      EXPECT_LT(Simulate(GenerateVMin(p, m)).bubble_rate, one_f1b) << p << " " << m;
      EXPECT_LT(Simulate(GenerateVHalf(p, m)).bubble_rate, one_f1b) << p << " " << m;
    }
  }
}

TEST(VSchedules, VZbHasNoBubbleAtOneFOneBsMemoryWithUniformCosts) {
  // The paper's V-ZB (ZB-V found by search): zero bubble with F = B = W
  // and enough microbatches, at 1F1B's p M_B.
  for (int p : {2, 3, 4, 8}) {
    for (int m : {2 * p, 3 * p, 6 * p}) {
      SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
      const Schedule s = GenerateVZb(p, m, {});
      ASSERT_NO_THROW(Validate(s));
      EXPECT_NEAR(Simulate(s).span_bubble_rate, 0.0, 1e-9);
      EXPECT_LE(PeakMemory(s, 0.5), p + 1e-9);
    }
  }
}

TEST(VSchedules, VZbKeepsItsMemoryLimitOrSaysItCannot) {
  GenerateOptions o;
  o.costs = {2, 3, 1.5};
  o.comm = 0.2;
  for (double limit : {4.0, 5.0, 6.0, 8.0}) {
    o.memory_limit = limit;
    const Schedule s = GenerateVZb(4, 16, o);
    ASSERT_NO_THROW(Validate(s)) << limit;
    EXPECT_LE(PeakMemory(s, 0.5), limit + 1e-9) << limit;
  }
  // Below 1F1B's p M_B the authors' search cannot place its warm-up.
  o.memory_limit = 3.5;
  try {
    GenerateVZb(4, 16, o);
    FAIL() << "accepted";
  } catch (const ScheduleError& e) {
    EXPECT_NE(std::string(e.what()).find("v_zb: no schedule keeps every rank within the memory limit of 3.5 M_B"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace baton
