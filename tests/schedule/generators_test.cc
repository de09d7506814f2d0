#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

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

std::vector<std::string> KindsOnRank(const Schedule& s, int rank, ActionKind kind) {
  std::vector<std::string> out;
  for (const Action& a : s.actions[rank]) {
    if (a.kind == kind) out.push_back(ToString(a));
  }
  return out;
}

TEST(Generators, InterleavedWithMicrobatchGroupsFollowsMegatronsTable) {
  // Megatron-LM's get_schedule_table docstring: "PP2 N3M5 with VP2",
  //   virtual_microbatch_id | 0 1 2 3 4 5 6 7 8 9
  //   microbatch_id         | 0 1 2 0 1 2 3 4 3 4
  //   model_chunk_id        | 0 0 0 1 1 1 0 0 1 1
  // so rank 0 (stages 0 and 2) runs its forwards in that order and its
  // backwards in the same order with the chunks reversed.
  GenerateOptions o;
  o.chunks = 2;
  o.microbatch_group = 3;
  const Schedule s = GenerateInterleaved1F1B(2, 5, o);
  EXPECT_EQ(KindsOnRank(s, 0, ActionKind::kForward),
            (Strings{"0F0", "0F1", "0F2", "2F0", "2F1", "2F2", "0F3", "0F4", "2F3", "2F4"}));
  EXPECT_EQ(KindsOnRank(s, 0, ActionKind::kBackward),
            (Strings{"2B0", "2B1", "2B2", "0B0", "0B1", "0B2", "2B3", "2B4", "0B3", "0B4"}));
  // Warm-up 2(p-r-1) + (v-1)g = 5 forwards on rank 0, then one F per B.
  EXPECT_EQ(Row(s, 0)[5], "2F2");
  EXPECT_EQ(Row(s, 0)[6], "2B0");
  EXPECT_NO_THROW(Validate(s));
}

TEST(Generators, InterleavedAcceptsAnyMicrobatchCountFromRanksUp) {
  // With m not a multiple of p the default group size g is the smallest
  // from p up whose last group (Megatron's m mod g) is empty or still spans
  // the p ranks: p=5, m=7: 7 mod 5 = 2, 7 mod 6 = 1, so one group of 7;
  // p=4, m=10: groups of 5; p=4, m=9: 9 mod 5 = 4, groups 5 and 4;
  // p=3, m=11: 11 mod 4 = 3, groups 4, 4, 3.
  struct Case {
    int p, m, group;
  };
  for (const Case c : {Case{5, 7, 7}, Case{4, 10, 5}, Case{4, 9, 5}, Case{4, 8, 4}, Case{3, 11, 4}}) {
    SCOPED_TRACE("p=" + std::to_string(c.p) + " m=" + std::to_string(c.m));
    const Schedule s = GenerateInterleaved1F1B(c.p, c.m, 2);
    GenerateOptions o;
    o.chunks = 2;
    o.microbatch_group = c.group;
    EXPECT_EQ(s.actions, GenerateInterleaved1F1B(c.p, c.m, o).actions);
    EXPECT_NO_THROW(Validate(s));
  }
}

TEST(Generators, InterleavedWarmUpKeepsAMemoryLimit) {
  // Each forward in flight holds 1/v M_B; the warm-up is cut so that no
  // rank holds more than the limit, down to the least that can run
  // ((v-1)g + 1 forwards), and the bubble grows as the limit shrinks.
  for (int v : {2, 3}) {
    for (int p : {2, 4, 8}) {
      const int m = 2 * p;
      double previous_makespan = 0;
      const double least = ((v - 1.0) * p + 1) / v;
      for (double limit : {2.0 * p + 2, 1.0 * p, least + 1, least}) {
        SCOPED_TRACE("v=" + std::to_string(v) + " p=" + std::to_string(p) + " limit=" + std::to_string(limit));
        GenerateOptions o;
        o.chunks = v;
        o.memory_limit = limit;
        const Schedule s = GenerateInterleaved1F1B(p, m, o);
        ASSERT_NO_THROW(Validate(s));
        const SimResult r = Simulate(s);
        for (const RankResult& rr : r.per_rank) EXPECT_LE(rr.peak_memory, limit + 1e-12) << "rank " << rr.rank;
        EXPECT_GE(r.makespan, previous_makespan - 1e-12);
        previous_makespan = r.makespan;
      }
    }
  }
  // No limit and a limit above Megatron's warm-up give the same schedule.
  GenerateOptions o;
  o.chunks = 2;
  o.memory_limit = 100;
  EXPECT_EQ(GenerateInterleaved1F1B(4, 8, o).actions, GenerateInterleaved1F1B(4, 8, 2).actions);
}

TEST(Generators, InterleavedZbFollowsPyTorchsOrder) {
  // PyTorch's ScheduleInterleavedZeroBubble for 2 ranks, 4 microbatches, 2
  // stages per rank (its pipeline_order with the idle slots dropped).
  const Schedule s = GenerateInterleavedZb(2, 4, 2);
  EXPECT_EQ(Row(s, 0), (Strings{"0F0", "0F1", "2F0", "2F1", "2I0", "2W0", "0F2", "2I1", "2W1", "0F3", "0I0", "0W0",
                                "2F2", "0I1", "0W1", "2F3", "2I2", "2W2", "2I3", "2W3", "0I2", "0W2", "0I3", "0W3"}));
  EXPECT_EQ(Row(s, 1), (Strings{"1F0", "1F1", "3F0", "3I0", "3F1", "3I1", "3W0", "1F2", "1I0", "3W1", "1F3", "1I1",
                                "1W0", "3F2", "3I2", "1W1", "3F3", "3I3", "3W2", "1I2", "3W3", "1I3", "1W2", "1W3"}));
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

// Compute actions a schedule holds: F and B, or F, I and W, per stage and
// microbatch; an OVERLAP_F_B unit is one action holding an F and a B.
std::size_t ExpectedActions(const Schedule& s) {
  std::size_t units = 0, split = 0;
  for (const auto& row : s.actions) {
    for (const Action& a : row) {
      units += a.kind == ActionKind::kOverlapFB;
      split += a.kind == ActionKind::kBackwardInput;
    }
  }
  const std::size_t pairs = static_cast<std::size_t>(s.stages) * s.microbatches;
  return 2 * pairs + split - units;  // each I adds a W; each unit merges an F and a B
}

TEST(Generators, EveryGeneratorIsCompleteAndValidOverAGrid) {
  for (const std::string& name : GeneratorNames()) {
    const GeneratorTraits traits = TraitsOf(name);
    for (int p : {1, 2, 3, 4, 5, 8}) {
      for (int m : {1, 2, 3, 4, 7, 8, 10, 16, 17}) {
        const std::vector<int> chunks = traits.any_chunks ? std::vector<int>{1, 2, 3} : std::vector<int>{0};
        for (int v : chunks) {
          SCOPED_TRACE(name + " p=" + std::to_string(p) + " m=" + std::to_string(m) + " v=" + std::to_string(v));
          Schedule s;
          try {
            s = Generate(name, p, m, v);
          } catch (const ScheduleError& e) {
            // Only the documented constraints may refuse a point of the grid.
            const bool known = (name == "zb_h1" || name == "zb_h2") ? m < p
                               : name == "dualpipev"                ? m < 2 * p
                               : name == "interleaved_1f1b"         ? v > 1 && m < p
                               : name == "interleaved_zb"           ? m % std::max(1, m / p) != 0
                                                                    : false;
            EXPECT_TRUE(known) << e.what();
            continue;
          }
          const int resolved = v == 0 ? traits.default_chunks : v;
          EXPECT_EQ(s.ranks, p);
          EXPECT_EQ(s.stages, p * resolved);
          EXPECT_EQ(s.microbatches, m);
          for (int stage = 0; stage < s.stages; ++stage) {
            EXPECT_EQ(s.stage_rank[stage], StageRank(traits.placement, stage, p));
          }
          EXPECT_EQ(s.CountActions(), ExpectedActions(s));
          EXPECT_NO_THROW(Validate(s));
          EXPECT_NO_THROW(Validate(Lower(s)));
        }
      }
    }
  }
}

// The registry's traits say what the generated schedules hold: a split
// backward exactly when I actions appear, overlapped units exactly when
// OVERLAP_F_B does, the default chunk count, and the placement.
TEST(Generators, RegistryTraitsDescribeWhatEachGeneratorMakes) {
  ASSERT_EQ(Generators().size(), GeneratorNames().size());
  for (const GeneratorEntry& g : Generators()) {
    SCOPED_TRACE(std::string(g.name));
    EXPECT_EQ(FindGenerator(g.name), &g);
    EXPECT_FALSE(g.title.empty());
    const Schedule s = Generate(g.name, 4, 16, 0);
    EXPECT_EQ(s.chunks(), g.traits.default_chunks);
    bool split = false, overlapped = false;
    for (const auto& row : s.actions) {
      for (const Action& a : row) {
        split |= a.kind == ActionKind::kBackwardInput;
        overlapped |= a.kind == ActionKind::kOverlapFB;
      }
    }
    EXPECT_EQ(split, g.traits.split_backward);
    EXPECT_EQ(overlapped, g.traits.overlapped_units);
    for (int stage = 0; stage < s.stages; ++stage) {
      EXPECT_EQ(s.stage_rank[stage], StageRank(g.traits.placement, stage, 4));
    }
  }
  EXPECT_EQ(FindGenerator("pipedream"), nullptr);
  EXPECT_THROW(GeneratorOf("pipedream"), ScheduleError);
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
  EXPECT_EQ(ErrorOf("interleaved_1f1b", 4, 3, 2),
            "interleaved_1f1b: with 2 chunks the number of microbatches must be at least the number of ranks (4) "
            "(got 3)");
  EXPECT_EQ(ErrorOf("interleaved_zb", 4, 9, 2),
            "interleaved_zb: the number of microbatches must be a multiple of the number of rounds "
            "max(1, m div p) = 2 (got 9)");
  EXPECT_EQ(ErrorOf("dualpipev", 4, 7, 0),
            "dualpipev: needs at least as many microbatches as stages, 2 x ranks = 8 (got 7)");
  EXPECT_EQ(ErrorOf("dualpipev", 4, 8, 3),
            "dualpipev: DualPipeV places exactly 2 chunks per rank (chunks must be 2) (got 3)");
  EXPECT_EQ(ErrorOf("v_min", 4, 8, 1), "v_min: V-Min places exactly 2 chunks per rank (chunks must be 2) (got 1)");
  EXPECT_EQ(ErrorOf("zb_auto", 4, 8, 2), "zb_auto: this schedule holds one chunk per rank (chunks must be 1) (got 2)");
  EXPECT_EQ(ErrorOf("zbv", 4, 8, 3), "zbv: ZB-V places exactly 2 chunks per rank (chunks must be 2) (got 3)");
  EXPECT_EQ(ErrorOf("zb_h1", 4, 3, 0), "zb_h1: needs at least as many microbatches as ranks (4) (got 3)");
  EXPECT_EQ(ErrorOf("zb_h2", 4, 2, 0), "zb_h2: needs at least as many microbatches as ranks (4) (got 2)");
  EXPECT_EQ(ErrorOf("1f1b", 0, 8, 0), "1f1b: the number of ranks must be at least 1 (got 0)");
  EXPECT_EQ(ErrorOf("gpipe", 4, 0, 0), "gpipe: the number of microbatches must be at least 1 (got 0)");
  EXPECT_EQ(ErrorOf("1f1b", 4, 8, 2), "1f1b: this schedule holds one chunk per rank (chunks must be 1) (got 2)");
  EXPECT_NE(ErrorOf("pipedream", 4, 8, 0).find("unknown schedule \"pipedream\""), std::string::npos);
}

std::string ErrorOf(const std::string& name, int p, int m, const GenerateOptions& o) {
  try {
    Generate(name, p, m, o);
  } catch (const ScheduleError& e) {
    return e.what();
  }
  return "";
}

TEST(Generators, OptionConstraintsSayTheRuleAndTheValue) {
  GenerateOptions o;
  o.microbatch_group = 5;
  EXPECT_EQ(ErrorOf("interleaved_1f1b", 5, 7, o),
            "interleaved_1f1b: with 7 microbatches in groups of 5 the last group holds 2, fewer than the 5 ranks it "
            "must span; choose a group size whose remainder m mod g is 0 or at least 5 (got 5)");
  o.microbatch_group = 3;
  EXPECT_EQ(ErrorOf("interleaved_1f1b", 4, 8, o),
            "interleaved_1f1b: the microbatch group size must be between the number of ranks (4) and of "
            "microbatches (8) (got 3)");
  o = {};
  o.memory_limit = 2;  // 2 chunks: chunk 1 of microbatch 0 needs 4 + 1 forwards, 2.5 M_B
  EXPECT_EQ(ErrorOf("interleaved_1f1b", 4, 8, o),
            "interleaved_1f1b: the memory limit must be at least 2.5 M_B: the first backward of the last chunk "
            "needs 5 forwards of 1/2 M_B each in flight (got 2)");
  o.memory_limit = 0.5;
  EXPECT_EQ(ErrorOf("zb_auto", 4, 8, o),
            "zb_auto: the memory limit must be at least 1 M_B (one microbatch's activations), as ZB-1p is p and "
            "ZB-2p 2p (got 0.5)");
}

// pipeline.adapt: full gives the replicas other microbatch counts, so
// their schedules differ; each replica's rank starts a stage's gradient
// sum after the stage's last gradient writer (B, W, or an overlapped
// unit's B), and the replicas' collectives must start in one order. Every
// generator keeps that order whatever the microbatch count: a rank's
// stages' last writers come in the same order for 1 to 16 microbatches
// (2, 3 and 4 ranks; 2 and 3 chunks where the generator takes them).
TEST(Generators, ARanksStagesLastGradientsComeInOneOrderWhateverTheMicrobatches) {
  auto order = [](const Schedule& s) {
    std::vector<std::vector<int>> out;
    for (const std::vector<Action>& list : s.actions) {
      std::vector<int> stages;
      auto wrote = [&](int stage) {
        stages.erase(std::remove(stages.begin(), stages.end(), stage), stages.end());
        stages.push_back(stage);
      };
      for (const Action& a : list) {
        if (a.kind == ActionKind::kBackward || a.kind == ActionKind::kBackwardWeight) wrote(a.stage);
        if (a.kind == ActionKind::kOverlapFB) wrote(a.backward_stage);
      }
      out.push_back(std::move(stages));
    }
    return out;
  };
  int multi = 0;  // cases of several stages a rank checked
  for (const GeneratorEntry& g : Generators()) {
    for (int p = 2; p <= 4; ++p) {
      for (int chunks : {0, 2, 3}) {
        std::vector<std::vector<int>> first;
        int first_m = 0;
        for (int m = 1; m <= 16; ++m) {
          Schedule s;
          try {
            s = Generate(g.name, p, m, chunks);
          } catch (const Error&) {
            continue;  // a count or chunks this generator does not take
          }
          if (s.chunks() < 2) continue;
          ++multi;
          if (first.empty()) {
            first = order(s);
            first_m = m;
            continue;
          }
          EXPECT_EQ(order(s), first) << g.name << " " << p << " ranks, " << s.chunks() << " chunks: " << m
                                     << " microbatches against " << first_m;
        }
      }
    }
  }
  EXPECT_GT(multi, 300);
}

}  // namespace
}  // namespace baton
