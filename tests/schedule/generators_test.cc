#include <gtest/gtest.h>

#include <algorithm>

#include "baton/error.h"
#include "baton/schedule.h"
#include "baton/sim.h"

namespace baton {
namespace {

std::vector<std::string> Row(const Schedule& s, int rank) {
  std::vector<std::string> out;
  for (const Action& a : s.actions[rank]) out.push_back(ToString(a));
  return out;
}

using Strings = std::vector<std::string>;

TEST(Generators, GPipeRunsAllForwardsThenAllBackwards) {
  const Schedule s = GenerateGPipe(2, 3);
  EXPECT_EQ(Row(s, 0), (Strings{"0F0", "0F1", "0F2", "0B0", "0B1", "0B2"}));
  EXPECT_EQ(Row(s, 1), (Strings{"1F0", "1F1", "1F2", "1B0", "1B1", "1B2"}));
}

TEST(Generators, OneFOneBWarmsUpThenAlternates) {
  const Schedule s = Generate1F1B(4, 8);
  // Rank 0: warm-up p-r-1 = 3 forwards.
  EXPECT_EQ(Row(s, 0), (Strings{"0F0", "0F1", "0F2", "0F3", "0B0", "0F4", "0B1", "0F5", "0B2", "0F6", "0B3", "0F7",
                                "0B4", "0B5", "0B6", "0B7"}));
  EXPECT_EQ(Row(s, 3), (Strings{"3F0", "3B0", "3F1", "3B1", "3F2", "3B2", "3F3", "3B3", "3F4", "3B4", "3F5", "3B5",
                                "3F6", "3B6", "3F7", "3B7"}));
  // Fewer microbatches than ranks: warm-up is capped at m.
  const Schedule small = Generate1F1B(4, 2);
  EXPECT_EQ(Row(small, 0), (Strings{"0F0", "0F1", "0B0", "0B1"}));
}

TEST(Generators, InterleavedFollowsMegatronOrder) {
  const Schedule s = GenerateInterleaved1F1B(2, 4, 2);
  ASSERT_EQ(s.stages, 4);
  EXPECT_EQ(s.stage_rank, (std::vector<int>{0, 1, 0, 1}));  // loop placement
  // Rank 0: warm-up 2(p-r-1) + (v-1)p = 4 forwards; forward k runs chunk
  // (k mod 4) div 2 on microbatch (k div 4)*2 + k mod 2; backwards reversed.
  EXPECT_EQ(Row(s, 0), (Strings{"0F0", "0F1", "2F0", "2F1", "0F2", "2B0", "0F3", "2B1", "2F2", "0B0", "2F3", "0B1",
                                "2B2", "2B3", "0B2", "0B3"}));
  // Rank 1: warm-up 2 forwards.
  EXPECT_EQ(Row(s, 1), (Strings{"1F0", "1F1", "3F0", "3B0", "3F1", "3B1", "1F2", "1B0", "1F3", "1B1", "3F2", "3B2",
                                "3F3", "3B3", "1B2", "1B3"}));
}

TEST(Generators, ZbH1DefersWeightGradientsByRank) {
  const Schedule s = GenerateZbH1(4, 6);
  EXPECT_EQ(Row(s, 0), (Strings{"0F0", "0F1", "0F2", "0F3", "0I0", "0W0", "0F4", "0I1", "0W1", "0F5", "0I2", "0W2",
                                "0I3", "0W3", "0I4", "0W4", "0I5", "0W5"}));
  // Rank 2: warm-up 1; the W's start at iteration 2; two are left for the end.
  EXPECT_EQ(Row(s, 2), (Strings{"2F0", "2F1", "2I0", "2F2", "2I1", "2F3", "2I2", "2W0", "2F4", "2I3", "2W1", "2F5",
                                "2I4", "2W2", "2I5", "2W3", "2W4", "2W5"}));
}

TEST(Generators, ZbH2WarmsUpTwiceAsDeep) {
  const Schedule s = GenerateZbH2(2, 4);
  EXPECT_EQ(Row(s, 0), (Strings{"0F0", "0F1", "0F2", "0I0", "0W0", "0F3", "0I1", "0W1", "0I2", "0W2", "0I3", "0W3"}));
  EXPECT_EQ(Row(s, 1), (Strings{"1F0", "1I0", "1F1", "1I1", "1F2", "1I2", "1W0", "1F3", "1I3", "1W1", "1W2", "1W3"}));
}

TEST(Generators, ZbvUsesVPlacementAndHandcraftedOrder) {
  const Schedule s = GenerateZbv(2, 3);
  ASSERT_EQ(s.stages, 4);
  EXPECT_EQ(s.stage_rank, (std::vector<int>{0, 1, 1, 0}));
  // Rank 0 (stages 0 and 3): warm-up 3 chunk-0 F; then 2x (chunk-1 F, I, W);
  // steady once; cool-down 2x (chunk-0 I, W).
  EXPECT_EQ(Row(s, 0), (Strings{"0F0", "0F1", "0F2", "3F0", "3I0", "3W0", "3F1", "3I1", "3W1", "0I0", "0W0", "3F2",
                                "3I2", "3W2", "0I1", "0W1", "0I2", "0W2"}));
  // Rank 1 (stages 1 and 2): warm-up 1 chunk-0 F; once (chunk-1 F, chunk-0 F);
  // once (chunk-1 F, I, W); steady once; cool-down.
  EXPECT_EQ(Row(s, 1), (Strings{"1F0", "2F0", "1F1", "2F1", "2I0", "2W0", "1F2", "1I0", "1W0", "2F2", "2I1", "2W1",
                                "1I1", "2I2", "1I2", "1W1", "2W2", "1W2"}));
}

TEST(Generators, EveryGeneratorIsCompleteAndValidOverAGrid) {
  for (const std::string& name : GeneratorNames()) {
    for (int p : {1, 2, 3, 4, 8}) {
      for (int m : {1, 2, 3, 4, 7, 8, 16}) {
        const bool multi = name == "interleaved_1f1b" || name == "zbv";
        for (int v : multi ? std::vector<int>{2, 3} : std::vector<int>{1}) {
          if (name == "zbv" && v != 2) continue;
          if (name == "interleaved_1f1b" && m % p != 0) continue;
          if ((name == "zb_h1" || name == "zb_h2") && m < p) continue;
          SCOPED_TRACE(name + " p=" + std::to_string(p) + " m=" + std::to_string(m) + " v=" + std::to_string(v));
          const Schedule s = Generate(name, p, m, v);
          EXPECT_EQ(s.ranks, p);
          EXPECT_EQ(s.stages, p * v);
          EXPECT_EQ(s.microbatches, m);
          const bool split = name.rfind("zb", 0) == 0;
          EXPECT_EQ(s.CountActions(), static_cast<std::size_t>(p * v * m * (split ? 3 : 2)));
          EXPECT_NO_THROW(Validate(s));
          EXPECT_NO_THROW(Validate(Lower(s)));
        }
      }
    }
  }
}

std::string ErrorOf(const std::string& name, int p, int m, int v) {
  try {
    Generate(name, p, m, v);
  } catch (const ScheduleError& e) {
    return e.what();
  }
  return "";
}

TEST(Generators, ConstraintsSayTheRuleAndTheValue) {
  EXPECT_EQ(ErrorOf("interleaved_1f1b", 4, 6, 2),
            "interleaved_1f1b: the number of microbatches must be a multiple of the number of ranks (4) (got 6)");
  EXPECT_EQ(ErrorOf("zbv", 4, 8, 3), "zbv: ZB-V places exactly 2 chunks per rank (chunks must be 2) (got 3)");
  EXPECT_EQ(ErrorOf("zb_h1", 4, 3, 0), "zb_h1: needs at least as many microbatches as ranks (4) (got 3)");
  EXPECT_EQ(ErrorOf("zb_h2", 4, 2, 0), "zb_h2: needs at least as many microbatches as ranks (4) (got 2)");
  EXPECT_EQ(ErrorOf("1f1b", 0, 8, 0), "1f1b: the number of ranks must be at least 1 (got 0)");
  EXPECT_EQ(ErrorOf("gpipe", 4, 0, 0), "gpipe: the number of microbatches must be at least 1 (got 0)");
  EXPECT_EQ(ErrorOf("1f1b", 4, 8, 2), "1f1b: this schedule holds one chunk per rank (chunks must be 1) (got 2)");
  EXPECT_NE(ErrorOf("pipedream", 4, 8, 0).find("unknown schedule \"pipedream\""), std::string::npos);
}

}  // namespace
}  // namespace baton
