// Sharded data parallel as schedule actions: the rules CheckStructure
// enforces for UNSHARD, RESHARD and REDUCE_GRAD (CheckSharding), each
// error naming its rank and position; and the simulator's price of them
// (SimOptions::shards) against hand-computed timelines.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "baton/error.h"
#include "baton/schedule.h"
#include "baton/sim.h"

namespace baton {
namespace {

Schedule Csv(const std::string& text) {
  std::istringstream in(text);
  return ReadCsv(in, "sharded.csv");
}

std::string ErrorOf(const std::string& text) {
  try {
    CheckStructure(Csv(text));
  } catch (const ScheduleError& e) {
    return e.what();
  }
  return "";
}

// ZeRO-3 on a 2-rank GPipe: each stage gathered for its forwards, freed,
// gathered again for its backwards, freed, its gradients reduce-scattered
// after its last backward. And ZeRO-2: the reduce-scatter alone.
TEST(Sharding, GatheredUsesAndSumsAfterTheLastBackwardPass) {
  EXPECT_EQ(ErrorOf("0UNSHARD,0F0,0F1,0RESHARD,0UNSHARD,0B0,0B1,0RESHARD,0REDUCE_GRAD\n"
                    "1UNSHARD,1F0,1F1,1B0,1B1,1RESHARD,1REDUCE_GRAD\n"),
            "");
  EXPECT_EQ(ErrorOf("0F0,0F1,0B0,0B1,0REDUCE_GRAD\n1F0,1F1,1B0,1B1,1REDUCE_GRAD\n"), "");
  // Split backward: the last W writes the gradients last.
  EXPECT_EQ(ErrorOf("0F0,0I0,0W0,0REDUCE_GRAD\n"), "");
  // A gather still held at the end of the list is freed with the step (PyTorch's files end so).
  EXPECT_EQ(ErrorOf("0UNSHARD,0F0,0B0,0REDUCE_GRAD\n"), "");
}

TEST(Sharding, AStageUsedWhileResharedIsRefusedNamingThePosition) {
  const std::string e = ErrorOf("0UNSHARD,0F0,0RESHARD,0B0\n");
  EXPECT_NE(e.find("sharded.csv: rank 0, position 3 (0B0): 0B0 uses stage 0 while its parameters are a shard"),
            std::string::npos)
      << e;
  // An UNSHARD anywhere makes the stage sharded from the start.
  EXPECT_NE(ErrorOf("0F0,0UNSHARD,0B0,0RESHARD\n").find("position 0 (0F0)"), std::string::npos);
}

TEST(Sharding, GatherTwiceOrFreeWhatIsNotGatheredIsRefused) {
  const std::string twice = ErrorOf("0UNSHARD,0F0,0UNSHARD,0B0,0RESHARD\n");
  EXPECT_NE(twice.find("rank 0, position 2 (0UNSHARD): stage 0 is gathered already (UNSHARD at position 0"),
            std::string::npos)
      << twice;
  const std::string free = ErrorOf("0UNSHARD,0F0,0B0,0RESHARD,0RESHARD\n");
  EXPECT_NE(free.find("rank 0, position 4 (0RESHARD): stage 0 is not gathered here"), std::string::npos) << free;
}

TEST(Sharding, AGradientSumBeforeTheLastBackwardOrTwiceIsRefused) {
  const std::string early = ErrorOf("0F0,0F1,0B0,0REDUCE_GRAD,0B1\n");
  EXPECT_NE(early.find("rank 0, position 3 (0REDUCE_GRAD): stage 0's gradients are summed before its last "
                       "backward: 1 more B or W of it follow on this rank"),
            std::string::npos)
      << early;
  EXPECT_NE(ErrorOf("0F0,0I0,0REDUCE_GRAD,0W0\n").find("summed before its last backward"), std::string::npos);
  const std::string twice = ErrorOf("0F0,0B0,0REDUCE_GRAD,0REDUCE_GRAD\n");
  EXPECT_NE(twice.find("position 3 (0REDUCE_GRAD): stage 0's gradients are summed twice (REDUCE_GRAD at position 2"),
            std::string::npos)
      << twice;
}

// ZeRO 2's all-gather after the optimizer step is part of the step's
// price: after the rank's last collective, its stages' one after another
// (hand-computed: F 1 and B 2 each, so the compute ends at 6, the
// reduce-scatter at 8, the after-step gather at 8 + 1.5).
TEST(Sharding, TheCollectivesAfterTheOptimizerStepEndTheStep) {
  const Schedule s = Csv("0F0,0F1,0B0,0B1,0REDUCE_GRAD\n");
  SimOptions o;
  o.compute.uniform = {1.0, 1.0, 1.0};
  o.shards.reduce_time = {2.0};
  o.shards.after_step = {1.5};
  const SimResult r = Simulate(s, o);
  EXPECT_DOUBLE_EQ(r.per_rank[0].end, 6.0);
  EXPECT_DOUBLE_EQ(r.per_rank[0].reduce_end, 9.5);
  EXPECT_DOUBLE_EQ(r.makespan, 9.5);
  o.shards.after_step = {1.5, 1.0};  // one per stage, or none
  EXPECT_THROW(Simulate(s, o), ScheduleError);
}

// One rank, one stage, two microbatches, F = 1 and B = 2; a gather of 3 and
// a reduce-scatter of 2. The forwards wait for the gather (0-3): F 3-4,
// 4-5, B 5-7, 7-9; the reduce-scatter starts when the rank reaches it (9)
// and ends at 11, exposed. Memory: 10 bytes a microbatch's activations and
// 100 gathered: the peak 100 + 2 x 10.
TEST(Sharding, TheSimulatorChargesGathersAndReduceScattersOnTheCommunicationResource) {
  const Schedule s = Csv("0UNSHARD,0F0,0F1,0B0,0B1,0RESHARD,0REDUCE_GRAD\n");
  SimOptions o;
  o.compute.uniform = {1.0, 1.0, 1.0};
  o.shards.gather_time = {3.0};
  o.shards.reduce_time = {2.0};
  o.shards.gathered_bytes = {100.0};
  o.memory.stage_bytes = {10.0};
  const SimResult r = Simulate(s, o);
  EXPECT_DOUBLE_EQ(r.per_rank[0].start, 3.0);
  EXPECT_DOUBLE_EQ(r.per_rank[0].end, 9.0);
  EXPECT_DOUBLE_EQ(r.per_rank[0].reduce_end, 11.0);
  EXPECT_DOUBLE_EQ(r.per_rank[0].exposed_reduce, 2.0);
  EXPECT_DOUBLE_EQ(r.makespan, 11.0);
  EXPECT_DOUBLE_EQ(r.per_rank[0].peak_memory_bytes, 120.0);
  // The collectives are in the timeline beside the compute, and in a Chrome
  // trace on the rank's communication thread (tid ranks + rank).
  ASSERT_EQ(r.timeline[0].size(), 6u);
  EXPECT_EQ(r.timeline[0].front().action, (Action{0, ActionKind::kUnshard}));
  EXPECT_DOUBLE_EQ(r.timeline[0].front().end, 3.0);
  EXPECT_EQ(r.timeline[0].back().action, (Action{0, ActionKind::kReduceGrad}));
  EXPECT_DOUBLE_EQ(r.timeline[0].back().start, 9.0);
  std::ostringstream trace;
  WriteChromeTrace(r, trace);
  EXPECT_NE(trace.str().find(R"("name":"UNSHARD","cat":"communication","ph":"X","ts":0,"dur":3000,"pid":0,"tid":1)"),
            std::string::npos)
      << trace.str();
  EXPECT_NE(trace.str().find(R"("name":"REDUCE_GRAD","cat":"communication","ph":"X","ts":9000,"dur":2000)"),
            std::string::npos);
  // The picture draws them as a strip along the bottom of the rank's row, in the legend.
  std::ostringstream svg;
  WriteSvg(r, svg);
  EXPECT_NE(svg.str().find("<g class=\"collectives\">"), std::string::npos);
  EXPECT_NE(svg.str().find("<title>0UNSHARD 0-3</title>"), std::string::npos);
  EXPECT_NE(svg.str().find("<title>0REDUCE_GRAD 9-11</title>"), std::string::npos);
  EXPECT_NE(svg.str().find("REDUCE_GRAD  reduce-scatter"), std::string::npos);
  // Without the sharding costs the actions cost nothing: the plain step.
  SimOptions plain;
  plain.compute.uniform = {1.0, 1.0, 1.0};
  EXPECT_DOUBLE_EQ(Simulate(s, plain).makespan, 6.0);
}

// Two stages on one rank (m = 1), each gathered ahead: the collectives run
// one after another (0-2, 2-4), so the second stage's F waits for the
// second gather. F 2-3, F 4-5, B 5-7, B 7-9. The gathered copies: both at
// once from 2 to the first RESHARD, 2 x 50 on top of the activations.
TEST(Sharding, GathersRunOneAfterAnotherAndHideBehindCompute) {
  Schedule two;
  two.name = "two.csv";
  two.ranks = 1;
  two.stages = 2;
  two.microbatches = 1;
  two.stage_rank = {0, 0};
  two.actions = {{{0, ActionKind::kUnshard}, {1, ActionKind::kUnshard}, {0, ActionKind::kForward, 0},
                  {1, ActionKind::kForward, 0}, {1, ActionKind::kBackward, 0}, {0, ActionKind::kBackward, 0},
                  {1, ActionKind::kReshard}, {0, ActionKind::kReshard}}};
  CheckStructure(two);
  SimOptions o;
  o.compute.stages = {{1.0, 1.0, 1.0}, {1.0, 1.0, 1.0}};
  o.shards.gather_time = {2.0, 2.0};
  o.shards.gathered_bytes = {50.0, 50.0};
  const SimResult r = Simulate(two, o);
  EXPECT_DOUBLE_EQ(r.per_rank[0].start, 2.0);
  EXPECT_DOUBLE_EQ(r.makespan, 9.0);
  EXPECT_DOUBLE_EQ(r.per_rank[0].busy, 6.0);
  EXPECT_DOUBLE_EQ(r.per_rank[0].peak_memory_bytes, 100.0);  // no activation sizes: the copies alone
  // Given once per stage, or not at all.
  o.shards.gather_time = {2.0};
  EXPECT_THROW(Simulate(two, o), ScheduleError);
  o.shards.gather_time = {2.0, -1.0};
  EXPECT_THROW(Simulate(two, o), ScheduleError);
}


// The pass's placement against every placement of the gathers: for small
// interleaved and 1F1B schedules with random costs, each stage's UNSHARD at
// every position up to its first use (its RESHARD after its last use, its
// REDUCE_GRAD after its last backward, as the pass puts them): no placement
// gives a shorter step than the pass's.
TEST(Sharding, ThePassesGathersGiveTheShortestStepOfEveryPlacement) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> cost(0.5, 2.0), gather(0.2, 3.0);
  for (const auto& [name, chunks] : {std::pair{"interleaved_1f1b", 2}, std::pair{"1f1b", 1}, std::pair{"zbv", 2}}) {
    for (int trial = 0; trial < 4; ++trial) {
      GenerateOptions g;
      g.chunks = chunks;
      const Schedule s = Generate(name, 2, 4, g);
      SimOptions o;
      for (int st = 0; st < s.stages; ++st) {
        o.compute.stages.push_back({cost(rng), cost(rng), cost(rng)});
        o.shards.gather_time.push_back(gather(rng));
        o.shards.reduce_time.push_back(gather(rng));
      }
      o.messages.latency = 0.1;
      const Schedule placed = AddShardingActions(s, ZeroStage(3), o);
      ASSERT_NO_THROW(CheckStructure(placed)) << name;
      const double step = Simulate(placed, o).makespan;
      // Every placement: per rank, per stage in order of first use, a position <= its first use.
      std::vector<std::vector<std::pair<int, int>>> choices(static_cast<std::size_t>(s.ranks));  // (stage, first)
      for (int r = 0; r < s.ranks; ++r) {
        std::vector<int> first(static_cast<std::size_t>(s.stages), -1);
        for (int i = 0; i < static_cast<int>(s.actions[r].size()); ++i) {
          ForEachPart(s.actions[r][i], [&](const Action& a) {
            if (IsCompute(a.kind) && first[a.stage] < 0) first[a.stage] = i;
          });
        }
        for (int st = 0; st < s.stages; ++st) {
          if (first[st] >= 0) choices[r].push_back({st, first[st]});
        }
        std::sort(choices[r].begin(), choices[r].end(), [](auto a, auto b) { return a.second < b.second; });
      }
      std::vector<std::pair<int, int>> all;  // (rank, index into choices)
      for (int r = 0; r < s.ranks; ++r) {
        for (int k = 0; k < static_cast<int>(choices[r].size()); ++k) all.push_back({r, k});
      }
      std::vector<int> at(all.size(), 0);
      double best = 1e300;
      std::function<void(std::size_t)> search = [&](std::size_t n) {
        if (n == all.size()) {
          Schedule t = placed;  // its frees and sums where the pass put them; gathers moved
          for (int r = 0; r < s.ranks; ++r) {
            auto& row = t.actions[r];
            std::erase_if(row, [](const Action& a) { return a.kind == ActionKind::kUnshard; });
          }
          // Insert from the back of each list, so earlier positions stay put.
          for (std::size_t q = all.size(); q-- > 0;) {
            const auto [r, k] = all[q];
            const int stage = choices[r][static_cast<std::size_t>(k)].first;
            // Position among the original actions: count non-inserted actions.
            auto& row = t.actions[r];
            int seen = 0;
            std::size_t pos = 0;
            while (pos < row.size() && seen < at[q]) {
              const ActionKind kind = row[pos].kind;
              if (kind != ActionKind::kReshard && kind != ActionKind::kReduceGrad && kind != ActionKind::kUnshard) ++seen;
              ++pos;
            }
            row.insert(row.begin() + static_cast<std::ptrdiff_t>(pos), Action{stage, ActionKind::kUnshard});
          }
          best = std::min(best, Simulate(t, o).makespan);
          return;
        }
        const auto [r, k] = all[n];
        const int first = choices[r][static_cast<std::size_t>(k)].second;
        const int from = k > 0 && all[n - 1].first == r ? at[n - 1] : 0;  // gathers in order of first use
        for (int p = from; p <= first; ++p) {
          at[n] = p;
          search(n + 1);
        }
      };
      search(0);
      EXPECT_LE(step, best + 1e-9) << name << " trial " << trial;
    }
  }
}

// Without a pipeline (one rank, its stages groups of layers), a stage
// whose forwards and backwards are apart is gathered for each and freed
// between, one group ahead, so that at most two are gathered at once; the
// last chunk, whose forwards run into its backwards, once. With a pipeline
// every stage is gathered once a step.
TEST(Sharding, OneRankGathersEachGroupForItsForwardsAndAgainForItsBackwards) {
  SimOptions o;
  o.shards.gather_time.assign(4, 0.25);  // one forward of a stage (unit costs: a rank's F 1 over its 4 stages)
  const Schedule placed = AddShardingActions(GenerateLoopedBfs(1, 3, 4), ZeroStage(3), o);
  EXPECT_NO_THROW(CheckStructure(placed));
  std::vector<int> gathers(4, 0);
  int held = 0, most = 0;
  for (const Action& a : placed.actions[0]) {
    if (a.kind == ActionKind::kUnshard) {
      ++gathers[static_cast<std::size_t>(a.stage)];
      most = std::max(most, ++held);
    }
    if (a.kind == ActionKind::kReshard) --held;
  }
  EXPECT_EQ(gathers, (std::vector<int>{2, 2, 2, 1}));
  EXPECT_EQ(most, 2);
  EXPECT_EQ(held, 0);
  const Schedule pipelined = AddShardingActions(GenerateLoopedBfs(2, 3, 2), ZeroStage(3), o);
  for (const auto& row : pipelined.actions) {
    EXPECT_EQ(std::count_if(row.begin(), row.end(), [](const Action& a) { return a.kind == ActionKind::kUnshard; }), 2);
  }
}

// ZeRO-2 alone: a gradient sum after each stage's last backward, nothing else.
TEST(Sharding, TheSecondStagePlacesOnlyTheGradientSums) {
  const Schedule s = Generate("zb_h1", 3, 6);
  const Schedule placed = AddShardingActions(s, ZeroStage(2), SimOptions{});
  EXPECT_NO_THROW(CheckStructure(placed));
  for (int r = 0; r < s.ranks; ++r) {
    ASSERT_EQ(placed.actions[r].size(), s.actions[r].size() + 1);
    EXPECT_EQ(placed.actions[r].back(), (Action{r, ActionKind::kReduceGrad}));
  }
  EXPECT_THROW(AddShardingActions(s, ZeroStage(1), SimOptions{}), ScheduleError);
}

}  // namespace
}  // namespace baton
