// DualPipeV against DeepSeek's published figures and PyTorch's order.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "baton/error.h"
#include "baton/schedule.h"
#include "baton/sim.h"

namespace baton {
namespace {

using Strings = std::vector<std::string>;

Strings Row(const Schedule& s, int rank) {
  Strings out;
  for (const Action& a : s.actions[rank]) out.push_back(ToString(a));
  return out;
}

TEST(DualPipeV, FollowsPyTorchsScheduleDualPipeV) {
  // ScheduleDualPipeV(2 ranks, 4 microbatches).pipeline_order, as
  // torch.distributed.pipelining writes it (deepseek-ai/DualPipe's
  // dualpipev.py runs the same steps).
  const Schedule s = GenerateDualPipeV(2, 4);
  EXPECT_EQ(s.stage_rank, (std::vector<int>{0, 1, 1, 0}));
  EXPECT_EQ(Row(s, 0),
            (Strings{"0F0", "0F1", "0F2", "3F0", "3I0", "3W0", "3F1", "(0F3;3B1)OVERLAP_F_B", "(3F2;0B0)OVERLAP_F_B",
                     "3B2", "(3F3;0B1)OVERLAP_F_B", "3B3", "0I2", "0W2", "0I3", "0W3"}));
  EXPECT_EQ(Row(s, 1),
            (Strings{"1F0", "2F0", "1F1", "2F1", "1F2", "2B0", "(2F2;1B0)OVERLAP_F_B", "(1F3;2B1)OVERLAP_F_B",
                     "(2F3;1B1)OVERLAP_F_B", "2B2", "1B2", "2I3", "1I3", "2W3", "1W3"}));
}

struct ChunkCosts {
  double f, i, w, fb;  // one chunk: forward, input-backward, weight-backward, F&B
};

SimOptions PerChunk(int stages, const ChunkCosts& c) {
  SimOptions o;
  o.compute.stages.assign(stages, Costs{c.f, c.i, c.w});
  for (Costs& k : o.compute.stages) k.forward_backward = c.fb;
  return o;
}

TEST(DualPipeV, LargestIdleIsDeepSeeksPublishedBubble) {
  // DualPipe README, "Pipeline Bubbles and Memory Usage Comparison": the
  // bubble of DualPipe and DualPipeV is (PP/2 - 1)(F&B + B - 3W), PP the
  // number of stages (2p here), F, B, W one chunk's forward, full backward
  // and weight backward, F&B an overlapped forward and backward. Here the
  // bubble of a rank is its idle time in the step (makespan - busy); with
  // F = I and no communication the largest one equals the formula exactly.
  const ChunkCosts costs[] = {
      {1, 1, 1, 3},      // F&B = F + B: no gain from overlapping
      {1, 1, 1, 2.5},    // overlapping hides half a chunk
      {1, 1, 1, 2},      // F&B = B
      {1, 1, 0.5, 2.2},  // W shorter than F and I
      {2, 2, 1, 5},
  };
  for (const ChunkCosts& c : costs) {
    for (int p : {2, 3, 4, 8}) {
      for (int m : {2 * p, 2 * p + 1, 3 * p, 5 * p}) {
        SCOPED_TRACE("F,I,W,F&B=" + std::to_string(c.f) + "," + std::to_string(c.i) + "," + std::to_string(c.w) + "," +
                     std::to_string(c.fb) + " p=" + std::to_string(p) + " m=" + std::to_string(m));
        const Schedule s = GenerateDualPipeV(p, m);
        ASSERT_NO_THROW(Validate(s));
        const SimResult r = Simulate(s, PerChunk(2 * p, c));
        double largest_idle = 0;
        for (const RankResult& rr : r.per_rank) largest_idle = std::max(largest_idle, r.makespan - rr.busy);
        const int pp = 2 * p;
        const double b = c.i + c.w;
        EXPECT_NEAR(largest_idle, (pp / 2.0 - 1) * (c.fb + b - 3 * c.w), 1e-9);
      }
    }
  }
}

TEST(DualPipeV, PeakActivationsArePPPlusOneChunksOnEveryRank) {
  // Same table: activation memory PP + 1 chunks per device (PP = 2p
  // stages). A chunk is half a rank's M_B, so (2p + 1) / 2 M_B, on every
  // rank, whatever share of a microbatch the weight backward still holds.
  for (double ratio : {0.0, 0.5, 1.0}) {
    for (int p : {1, 2, 3, 4, 8}) {
      for (int m : {2 * p, 3 * p + 1, 6 * p}) {
        SCOPED_TRACE("ratio=" + std::to_string(ratio) + " p=" + std::to_string(p) + " m=" + std::to_string(m));
        SimOptions o = PerChunk(2 * p, {1, 1, 1, 2.5});
        o.memory.weight_ratio = ratio;
        const SimResult r = Simulate(GenerateDualPipeV(p, m), o);
        for (const RankResult& rr : r.per_rank) EXPECT_NEAR(rr.peak_memory, (2 * p + 1) / 2.0, 1e-9) << rr.rank;
      }
    }
  }
}

TEST(DualPipeV, OverlappedUnitsCarryTheSteadyState) {
  // Each rank overlaps m - 2p + r + 1 pairs in the main step (the last rank
  // one fewer) and p - r - 1 more after it.
  const int p = 4, m = 12;
  const Schedule s = GenerateDualPipeV(p, m);
  for (int r = 0; r < p; ++r) {
    const auto units = std::count_if(s.actions[r].begin(), s.actions[r].end(),
                                     [](const Action& a) { return a.kind == ActionKind::kOverlapFB; });
    const int main_step = m - 2 * p + r + 1;
    EXPECT_EQ(units, 2 * main_step - (r == p - 1 ? 1 : 0) + (p - r - 1)) << "rank " << r;
  }
}

TEST(DualPipeV, RefusesTooFewMicrobatchesWithTheRule) {
  try {
    GenerateDualPipeV(3, 5);
    FAIL() << "accepted m < 2p";
  } catch (const ScheduleError& e) {
    EXPECT_STREQ(e.what(), "dualpipev: needs at least as many microbatches as stages, 2 x ranks = 6 (got 5)");
  }
}

}  // namespace
}  // namespace baton
