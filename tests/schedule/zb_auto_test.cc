// zb_auto against the zero-bubble paper's published bubble rates.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "baton/error.h"
#include "baton/schedule.h"
#include "baton/sim.h"

namespace baton {
namespace {

// "Zero Bubble Pipeline Parallelism" (Qi, Wan, Huang, Lin; ICLR 2024,
// arXiv 2401.10241). Its Table 5 gives bubble rates computed from the
// profiled T_F, T_B, T_W and T_comm of its four GPT-3-like models (Table 3:
// 1.5B on 8 stages, 6.2B on 8, 14.6B on 16, 28.3B on 32; microbatches 24,
// 32, 64 / 48, 64, 128 / 96, 128, 256), which its Appendix D table lists
// per setting (milliseconds). The bubble rate is (cost - m(T_F + T_B +
// T_W)) / cost with cost the longest stage's execution time, which is
// baton's span_bubble_rate when every stage does the same work. ZB-1p is
// their automatic schedule with the memory limit p M_B, ZB-2p with 2p M_B.
// M_W / M_B follows their Table 1: M_B = sb(34h + 5as), M_W = 32sbh.
struct Setting {
  const char* model;
  int p, m;
  double t_f, t_b, t_w, t_comm;                // Appendix D
  double one_f1b, zb_h1, zb_h2, zb_1p, zb_2p;  // Table 5
  int hidden, heads;                           // Table 3 (sequence length 1024)
};
constexpr Setting kTable5[] = {
    {"1.5B", 8, 24, 18.522, 18.086, 9.337, 0.601, 0.2431, 0.1585, 0.1083, 0.1585, 0.0433, 2304, 24},
    {"1.5B", 8, 32, 18.513, 18.086, 9.331, 0.626, 0.1985, 0.1242, 0.0837, 0.1242, 0.0039, 2304, 24},
    {"1.5B", 8, 64, 18.546, 18.097, 9.321, 0.762, 0.1240, 0.0674, 0.0444, 0.0674, 0.0026, 2304, 24},
    {"6.2B", 8, 24, 29.718, 29.444, 19.927, 0.527, 0.2347, 0.1323, 0.0698, 0.1323, 0.0029, 4096, 32},
    {"6.2B", 8, 32, 29.802, 29.428, 19.530, 0.577, 0.1898, 0.1045, 0.0559, 0.1045, 0.0022, 4096, 32},
    {"6.2B", 8, 64, 29.935, 29.621, 19.388, 0.535, 0.1091, 0.0554, 0.0294, 0.0554, 0.0010, 4096, 32},
    {"14.6B", 16, 48, 11.347, 11.248, 8.132, 0.377, 0.2552, 0.1397, 0.0672, 0.1397, 0.0066, 5120, 40},
    {"14.6B", 16, 64, 11.307, 11.254, 8.101, 0.379, 0.2082, 0.1088, 0.0516, 0.1088, 0.0054, 5120, 40},
    {"14.6B", 16, 128, 11.325, 11.308, 8.109, 0.378, 0.1251, 0.0576, 0.0266, 0.0576, 0.0028, 5120, 40},
    {"28.3B", 32, 96, 10.419, 10.207, 7.715, 0.408, 0.2646, 0.1421, 0.0641, 0.1421, 0.0038, 6144, 48},
    {"28.3B", 32, 128, 10.408, 10.204, 7.703, 0.408, 0.2168, 0.1106, 0.0490, 0.1106, 0.0029, 6144, 48},
    {"28.3B", 32, 256, 10.402, 10.248, 7.698, 0.460, 0.1352, 0.0594, 0.0257, 0.0594, 0.0018, 6144, 48},
};

double WeightMemoryRatio(const Setting& s) {
  const double h = s.hidden, a = s.heads, seq = 1024;
  return 32 * h / (34 * h + 5 * a * seq);
}

TEST(ZbAuto, ReproducesTheZeroBubblePapersTable5) {
  constexpr double kTolerance = 0.01;  // the bound; every row comes out within 5e-5
  for (const Setting& t : kTable5) {
    SCOPED_TRACE(std::string(t.model) + " p=" + std::to_string(t.p) + " m=" + std::to_string(t.m));
    SimOptions sim;
    sim.compute.uniform = {t.t_f, t.t_b, t.t_w};
    sim.messages.latency = t.t_comm;
    sim.memory.weight_ratio = WeightMemoryRatio(t);
    sim.record_timeline = false;
    GenerateOptions o;
    o.costs = sim.compute.uniform;
    o.comm = t.t_comm;
    o.weight_memory_ratio = sim.memory.weight_ratio;
    o.memory_limit = t.p;
    const Schedule zb_1p = GenerateZbAuto(t.p, t.m, o);
    o.memory_limit = 2 * t.p;
    const Schedule zb_2p = GenerateZbAuto(t.p, t.m, o);
    ASSERT_NO_THROW(Validate(zb_1p));
    ASSERT_NO_THROW(Validate(zb_2p));
    const SimResult r1 = Simulate(zb_1p, sim), r2 = Simulate(zb_2p, sim);
    EXPECT_NEAR(r1.span_bubble_rate, t.zb_1p, kTolerance);
    EXPECT_NEAR(r2.span_bubble_rate, t.zb_2p, kTolerance);
    // Rounded to the table's four decimals they are the table's numbers.
    EXPECT_NEAR(r1.span_bubble_rate, t.zb_1p, 5e-5);
    EXPECT_NEAR(r2.span_bubble_rate, t.zb_2p, 5e-5);
    // The memory limits hold on every rank (in M_B).
    for (const RankResult& rr : r1.per_rank) EXPECT_LE(rr.peak_memory, t.p + 1e-9);
    for (const RankResult& rr : r2.per_rank) EXPECT_LE(rr.peak_memory, 2 * t.p + 1e-9);
    // The same table's handcrafted columns check the timing model they share.
    EXPECT_NEAR(Simulate(Generate1F1B(t.p, t.m), sim).span_bubble_rate, t.one_f1b, 5e-5);
    EXPECT_NEAR(Simulate(GenerateZbH1(t.p, t.m), sim).span_bubble_rate, t.zb_h1, 5e-5);
    EXPECT_NEAR(Simulate(GenerateZbH2(t.p, t.m), sim).span_bubble_rate, t.zb_h2, 5e-5);
  }
}

TEST(ZbAuto, IsAtLeastAsGoodAsTheHandcraftedSchedulesWithUniformCosts) {
  // With F = I = W the paper's handcrafted ZB-H1 (p M_B) and ZB-H2
  // ((2p - 1) M_B) are what its search should find or beat.
  for (int p : {2, 3, 4, 8}) {
    for (int m : {p, 2 * p, 3 * p + 1}) {
      SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
      GenerateOptions o;
      o.memory_limit = p;
      const double one_p = Simulate(GenerateZbAuto(p, m, o)).makespan;
      o.memory_limit = 2 * p;
      const double two_p = Simulate(GenerateZbAuto(p, m, o)).makespan;
      EXPECT_LE(one_p, Simulate(GenerateZbH1(p, m)).makespan + 1e-9);
      EXPECT_LE(two_p, Simulate(GenerateZbH2(p, m)).makespan + 1e-9);
      EXPECT_LE(two_p, one_p + 1e-9);
    }
  }
}

TEST(ZbAuto, KeepsAnyMemoryLimitAndPlansWithPerStageCosts) {
  // A slow last stage and a heavier first one: the order adapts, every rank
  // stays within the limit, and the output is the same every time.
  GenerateOptions o;
  o.stage_costs = {{1.2, 1.3, 0.9}, {1, 1, 1}, {1, 1, 1}, {1.5, 1.6, 1.2}};
  o.comm = 0.1;
  o.weight_memory_ratio = 0.4;
  for (double limit : {1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0}) {
    SCOPED_TRACE("limit " + std::to_string(limit));
    o.memory_limit = limit;
    const Schedule s = GenerateZbAuto(4, 12, o);
    ASSERT_NO_THROW(Validate(s));
    SimOptions sim;
    sim.compute.stages = o.stage_costs;
    sim.messages.latency = o.comm;
    sim.memory.weight_ratio = o.weight_memory_ratio;
    for (const RankResult& rr : Simulate(s, sim).per_rank) EXPECT_LE(rr.peak_memory, limit + 1e-9);
    EXPECT_EQ(GenerateZbAuto(4, 12, o).actions, s.actions);
  }
}

TEST(ZbAuto, DefaultsToZb1pAndRefusesALimitBelowOneMicrobatch) {
  GenerateOptions o;
  const Schedule fallback = GenerateZbAuto(4, 8, o);
  o.memory_limit = 4;
  EXPECT_EQ(fallback.actions, GenerateZbAuto(4, 8, o).actions);
  o.memory_limit = 0.99;
  try {
    GenerateZbAuto(4, 8, o);
    FAIL() << "accepted";
  } catch (const ScheduleError& e) {
    EXPECT_STREQ(e.what(),
                 "zb_auto: the memory limit must be at least 1 M_B (one microbatch's activations), as ZB-1p is p "
                 "and ZB-2p 2p (got 0.99)");
  }
}

}  // namespace
}  // namespace baton
