// Sequence slices (Seq1F1B): the generators' orders against hand-derived
// ones and closed forms, the slice order rules, the CSV header, and the
// sequence's cuts and shares against their formulas.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "baton/error.h"
#include "baton/schedule.h"
#include "baton/sim.h"
#include "baton/slices.h"

namespace baton {
namespace {

using Strings = std::vector<std::string>;

Strings Row(const Schedule& s, int rank) {
  Strings out;
  for (const Action& a : s.actions[rank]) out.push_back(ToString(a));
  return out;
}

Schedule Sliced(std::string_view name, int p, int m, int k) {
  GenerateOptions o;
  o.slices = k;
  return Generate(name, p, m, o);
}

std::string ErrorOf(const std::string& csv) {
  std::istringstream in(csv);
  try {
    CheckStructure(ReadCsv(in, "s.csv"));
  } catch (const ScheduleError& e) {
    return e.what();
  }
  return "";
}

TEST(Slices, Seq1F1BForwardsInOrderAndEachSequencesBackwardsLastSliceFirst) {
  const Schedule s = GenerateSeq1F1B(2, 2, 2);
  EXPECT_EQ(s.slices, 2);
  EXPECT_EQ(s.microbatches, 4);
  EXPECT_EQ(s.sequences(), 2);
  // Rank 0 warms up with p - r - 1 + k - 1 = 2 forwards; backwards go
  // 1, 0 (microbatch 0's slices 1 then 0), then 3, 2.
  EXPECT_EQ(Row(s, 0), (Strings{"0F0", "0F1", "0F2", "0B1", "0F3", "0B0", "0B3", "0B2"}));
  EXPECT_EQ(Row(s, 1), (Strings{"1F0", "1F1", "1B1", "1F2", "1B0", "1F3", "1B3", "1B2"}));
  // One slice is 1F1B.
  const Schedule whole = GenerateSeq1F1B(4, 8, 1);
  EXPECT_EQ(whole.actions, Generate1F1B(4, 8).actions);
}

// Unit costs F = 1, B = 2 a whole microbatch, each of k even slices 1/k of
// them: Seq1F1B is 1F1B over m k units of cost 3/k, so the step is
// (m k + p - 1) 3 / k and the bubble (p - 1) / (m k + p - 1); rank r holds
// at most p - r + k - 1 slices, (p - r + k - 1) / k of a microbatch.
TEST(Slices, Seq1F1BMatchesItsClosedForms) {
  for (int p : {1, 2, 4, 8}) {
    for (int m : {1, 4, 8}) {
      for (int k : {1, 2, 4, 8}) {
        SimOptions o;
        o.compute.uniform = {1.0, 1.0, 1.0};  // B = I + W = 2
        const SimResult r = Simulate(GenerateSeq1F1B(p, m, k), o);
        const int n = m * k;
        // With fewer units than the pipeline is deep, the warm-up is all of them.
        if (n < p) continue;
        EXPECT_NEAR(r.makespan, (n + p - 1) * 3.0 / k, 1e-9) << p << " " << m << " " << k;
        EXPECT_NEAR(r.bubble_rate, double(p - 1) / (n + p - 1), 1e-9) << p << " " << m << " " << k;
        for (int rank = 0; rank < p; ++rank) {
          EXPECT_NEAR(r.per_rank[rank].peak_memory, std::min(p - rank + k - 1, n) / double(k), 1e-9)
              << p << " " << m << " " << k << " rank " << rank;
        }
      }
    }
  }
}

TEST(Slices, EverySlicedScheduleIsValidAndItsLoweredFormTakesAsLong) {
  for (const GeneratorEntry& g : Generators()) {
    const std::string_view name = g.name;
    EXPECT_EQ(g.traits.slices, name != "1f1b") << name;
    if (!g.traits.slices) continue;
    for (int p : {1, 2, 3, 4}) {
      for (int m : {p, 2 * p, 3 * p + 1}) {
        // Whatever the generator makes of (p, m) whole, sliced.
        try {
          Generate(name, p, m);
        } catch (const ScheduleError&) {
          continue;
        }
        for (int k : {1, 2, 3, 4}) {
          const Schedule s = Sliced(name, p, m, k);
          ASSERT_EQ(s.slices, k) << name;
          ASSERT_NO_THROW(Validate(s)) << name << " " << p << " " << m << " " << k;
          const Schedule lowered = Lower(s);
          EXPECT_EQ(lowered.slices, k);
          ASSERT_NO_THROW(Validate(lowered)) << name << " " << p << " " << m << " " << k;
          SimOptions o;
          o.messages.latency = 0.1;
          EXPECT_NEAR(Simulate(s, o).makespan, Simulate(lowered, o).makespan, 1e-9) << name;
        }
      }
    }
  }
}

// Expanding a whole-microbatch order (every action into its slices in
// place) keeps its memory and shortens its fill and drain: GPipe over m k
// slices of 1/k takes (m k + p - 1) 3 / k with F = 1, B = 2, holds all m
// microbatches; 1F1B expanded holds p (Seq1F1B: (p + k - 1)/k).
TEST(Slices, ExpansionKeepsTheMemoryAndShortensTheFill) {
  SimOptions o;
  o.compute.uniform = {1.0, 1.0, 1.0};
  for (int k : {2, 4}) {
    const SimResult gpipe = Simulate(Sliced("gpipe", 4, 8, k), o);
    EXPECT_NEAR(gpipe.makespan, (8 * k + 3) * 3.0 / k, 1e-9);
    EXPECT_NEAR(gpipe.per_rank[0].peak_memory, 8.0, 1e-9);
    const Schedule expanded = ExpandSlices(Generate1F1B(4, 8), k);
    ASSERT_NO_THROW(Validate(expanded));
    EXPECT_NEAR(Simulate(expanded, o).per_rank[0].peak_memory, 4.0, 1e-9);
    EXPECT_NEAR(Simulate(GenerateSeq1F1B(4, 8, k), o).per_rank[0].peak_memory, (4.0 + k - 1) / k, 1e-9);
  }
  // In place: F(0, j) becomes F(0, jk..jk+k-1), B(0, j) the same last first.
  const Schedule one = ExpandSlices(GenerateGPipe(1, 2), 2);
  EXPECT_EQ(Row(one, 0), (Strings{"0F0", "0F1", "0F2", "0F3", "0B1", "0B0", "0B3", "0B2"}));
  // An overlapped unit pairs the forward's slice i with the backward's k-1-i.
  const Schedule dual = Sliced("dualpipev", 2, 4, 2);
  bool paired = false;
  for (const Action& a : dual.actions[0]) {
    if (a.kind != ActionKind::kOverlapFB) continue;
    EXPECT_EQ(a.microbatch % 2 + a.backward_microbatch % 2, 1) << ToString(a);
    paired = true;
  }
  EXPECT_TRUE(paired);
}

TEST(Slices, ZeroBubbleOverSlicesHasLessBubbleAndMemoryThanWholeSequences) {
  SimOptions o;
  o.compute.uniform = {1.0, 1.0, 1.0};
  const SimResult whole = Simulate(GenerateZbH1(4, 8), o);
  const SimResult sliced = Simulate(GenerateZbH1(4, 8, 4), o);
  EXPECT_LT(sliced.bubble_rate, whole.bubble_rate);
  EXPECT_LT(sliced.per_rank[0].peak_memory, whole.per_rank[0].peak_memory);
}

// Interleaved 1F1B over slices: Megatron's table over units, in groups of
// whole sequences (the fewest that span the p ranks: ceil(p/k) sequences
// here, m being a multiple of it), backwards last slice first. Rank r warms
// up with 2(p - r - 1) + (v - 1) G + k - 1 units (G the group's units, the
// last k - 1 for the first backward, a sequence's last slice), so with one
// more forward before its first backward it holds that many units of
// 1/(v k) M_B. Valid, lowered included, for v up to 4 and fewer
// microbatches than ranks where the units span them; and it holds less
// than the whole-microbatch order's (2(p - r - 1) + (v - 1) p + 1)/v.
TEST(Slices, InterleavedOverSlicesWarmsUpInUnits) {
  SimOptions o;
  o.compute.uniform = {1.0, 1.0, 1.0};
  for (int p : {1, 2, 3, 4}) {
    for (int v : {2, 3, 4}) {
      for (int k : {1, 2, 3, 4}) {
        const int g = (p + k - 1) / k;  // sequences a group
        for (int m : {g, 2 * g, 3 * g}) {
          if (m * k < p) continue;
          GenerateOptions go;
          go.chunks = v;
          go.slices = k;
          const Schedule s = Generate("interleaved_1f1b", p, m, go);
          ASSERT_EQ(s.slices, k);
          ASSERT_NO_THROW(Validate(s)) << p << " " << v << " " << k << " " << m;
          ASSERT_NO_THROW(Validate(Lower(s))) << p << " " << v << " " << k << " " << m;
          const SimResult r = Simulate(s, o);
          const int total = m * k * v;
          for (int rank = 0; rank < p; ++rank) {
            const int held = std::min(2 * (p - rank - 1) + (v - 1) * g * k + k, total);
            EXPECT_NEAR(r.per_rank[rank].peak_memory, static_cast<double>(held) / (v * k), 1e-9)
                << "p " << p << " v " << v << " k " << k << " m " << m << " rank " << rank;
          }
          if (k > 1 && p > 1 && m >= p) {
            go.slices = 1;
            EXPECT_LT(r.per_rank[0].peak_memory, Simulate(Generate("interleaved_1f1b", p, m, go), o).per_rank[0].peak_memory);
          }
        }
      }
    }
  }
  // Fewer units than ranks cannot span the pipeline: one clear error.
  GenerateOptions go;
  go.slices = 2;
  try {
    Generate("interleaved_1f1b", 4, 1, go);
    ADD_FAILURE() << "1 microbatch of 2 slices on 4 ranks was accepted";
  } catch (const ScheduleError& e) {
    EXPECT_NE(std::string(e.what()).find("the number of units (microbatches x 2 slices) must be at least the number "
                                         "of ranks (4)"),
              std::string::npos)
        << e.what();
  }
}

// ZB-V over slices runs its pattern over units, each chunk k - 1 units
// deeper: every rank holds less than the whole-microbatch ZB-V, with no
// more bubble (F = I = W = 1 a microbatch).
TEST(Slices, ZbvOverSlicesHoldsLessWithNoMoreBubble) {
  SimOptions o;
  o.compute.uniform = {1.0, 1.0, 1.0};
  for (int p : {2, 3, 4}) {
    for (int m : {2 * p, 3 * p}) {
      const SimResult whole = Simulate(GenerateZbv(p, m), o);
      for (int k : {2, 3, 4}) {
        const SimResult sliced = Simulate(GenerateZbv(p, m, 2, k), o);
        EXPECT_LE(sliced.bubble_rate, whole.bubble_rate + 1e-12) << p << " " << m << " " << k;
        for (int r = 0; r < p; ++r) {
          EXPECT_LT(sliced.per_rank[r].peak_memory, whole.per_rank[r].peak_memory) << p << " " << m << " " << k << " rank " << r;
        }
      }
    }
  }
}

TEST(Slices, SchedulesWithoutSlicesRefuseThemNamingThoseThatTakeThem) {
  try {
    Sliced("1f1b", 4, 8, 2);
    ADD_FAILURE() << "not refused";
  } catch (const ScheduleError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("1F1B does not run sequence slices"), std::string::npos) << msg;
    EXPECT_NE(msg.find("the schedules that do: gpipe, seq1f1b"), std::string::npos) << msg;
    EXPECT_NE(msg.find("1F1B over slices is seq1f1b"), std::string::npos) << msg;
  }
  EXPECT_THROW(GenerateSeq1F1B(4, 8, 0), ScheduleError);
  EXPECT_THROW(ExpandSlices(GenerateSeq1F1B(4, 8, 2), 2), ScheduleError);  // already sliced
}

TEST(Slices, ASliceForwardBeforeTheSliceBeforeItIsExplained) {
  // Slices 0 and 1 of microbatch 0 (units 0, 1): 0F1 before 0F0.
  const std::string msg = ErrorOf("# seq_slices: 2\n0F1,0F0,0B1,0B0\n1F0,1F1,1B1,1B0\n");
  EXPECT_NE(msg.find("0F1 (slice 1 of microbatch 0) runs forward before 0F0 (slice 0, position 1)"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("keys and values of the slices before it"), std::string::npos) << msg;
  EXPECT_NE(msg.find(">0F1<"), std::string::npos) << msg;
}

TEST(Slices, ASliceBackwardBeforeTheSliceAfterItIsExplained) {
  const std::string msg = ErrorOf("# seq_slices: 2\n0F0,0F1,0B1,0B0\n1F0,1F1,1B0,1B1\n");
  EXPECT_NE(msg.find("1B0 (slice 0 of microbatch 0) runs backward before 1B1 (slice 1, position 3)"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("sends gradients into this slice's keys and values"), std::string::npos) << msg;
  // The same order split into I and W: the I's order counts, W's is free.
  const std::string split = ErrorOf("# seq_slices: 2\n0F0,0F1,0I1,0I0,0W0,0W1\n1F0,1F1,1I0,1I1,1W1,1W0\n");
  EXPECT_NE(split.find("1I0 (slice 0 of microbatch 0) runs backward before 1I1"), std::string::npos) << split;
  EXPECT_EQ(ErrorOf("# seq_slices: 2\n0F0,0F1,0I1,0I0,0W0,0W1\n1F0,1F1,1I1,1I0,1W0,1W1\n"), "");
  // Without the header the same cells are two whole microbatches, in any order.
  EXPECT_EQ(ErrorOf("0F0,0F1,0B1,0B0\n1F0,1F1,1B0,1B1\n"), "");
}

TEST(Slices, TheCsvFormKeepsTheSlicesInItsHeaderLine) {
  const Schedule s = GenerateSeq1F1B(2, 3, 4);
  std::ostringstream out;
  WriteCsv(s, out);
  EXPECT_EQ(out.str().rfind("# seq_slices: 4\n", 0), 0u) << out.str();
  std::istringstream in(out.str());
  const Schedule back = ReadCsv(in, "s.csv");
  EXPECT_EQ(back.slices, 4);
  EXPECT_EQ(back.microbatches, 12);
  EXPECT_EQ(back.actions, s.actions);
  // Whole-sequence schedules keep PyTorch's form: no header line.
  std::ostringstream plain;
  WriteCsv(Generate1F1B(2, 3), plain);
  EXPECT_EQ(plain.str().find('#'), std::string::npos);
  for (const std::string bad : {"# seq_slices: 0\n", "# seq_slices: two\n", "# slices: 2\n", "# seq_slices: 2x\n"}) {
    std::istringstream b(bad + "0F0,0F1,0B1,0B0\n");
    try {
      ReadCsv(b, "b.csv");
      ADD_FAILURE() << "accepted " << bad;
    } catch (const ScheduleError& e) {
      EXPECT_NE(std::string(e.what()).find("b.csv: row 1:"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("\"# seq_slices: k\""), std::string::npos) << e.what();
    }
  }
  std::istringstream odd("# seq_slices: 2\n0F0,0F1,0F2,0B1,0B0,0B2\n");
  EXPECT_THROW(ReadCsv(odd, "o.csv"), ScheduleError);  // 3 units are not whole sequences of 2
}

double Triangle(int n) { return 0.5 * n * (n + 1.0); }

TEST(Slices, EvenCutsShareTheTokensAndTheCausalTriangle) {
  const SequenceSlices s = SliceSequence(1024, 4, SeqSplit::kEven, 0.0, 0.0);
  EXPECT_EQ(s.cuts, (std::vector<int>{0, 256, 512, 768, 1024}));
  for (double c : s.cost) EXPECT_NEAR(c, 0.25, 1e-12);
  // All compute quadratic: slice [b, e) costs (T(e) - T(b)) / T(L).
  const SequenceSlices q = SliceSequence(1024, 4, SeqSplit::kEven, 1.0, 0.5);
  for (int i = 0; i < 4; ++i) {
    const int b = q.cuts[i], e = q.cuts[i + 1];
    EXPECT_NEAR(q.cost[i], (Triangle(e) - Triangle(b)) / Triangle(1024), 1e-12);
    EXPECT_NEAR(q.memory[i], 0.5 * 0.25 + 0.5 * (Triangle(e) - Triangle(b)) / Triangle(1024), 1e-12);
  }
  EXPECT_NEAR(std::accumulate(q.cost.begin(), q.cost.end(), 0.0), 1.0, 1e-12);
  EXPECT_LT(q.cost[0], q.cost[3]);  // later slices attend to more keys
}

TEST(Slices, ComputeCutsGiveLaterSlicesFewerTokensAndAboutEqualCosts) {
  const SequenceSlices s = SliceSequence(1024, 4, SeqSplit::kCompute, 0.6, 0.0);
  ASSERT_EQ(s.cuts.size(), 5u);
  for (int i = 0; i < 3; ++i) EXPECT_GT(s.cuts[i + 1] - s.cuts[i], s.cuts[i + 2] - s.cuts[i + 1]);
  // Within one token's share of the sequence of a quarter each.
  for (double c : s.cost) EXPECT_NEAR(c, 0.25, 2.0 / 1024);
  // Nothing quadratic: the even cuts.
  EXPECT_EQ(SliceSequence(1000, 4, SeqSplit::kCompute, 0.0, 0.0).cuts, (std::vector<int>{0, 250, 500, 750, 1000}));
  // As many slices as tokens: one token each.
  EXPECT_EQ(SliceSequence(3, 3, SeqSplit::kCompute, 1.0, 0.0).cuts, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(CutsText(s.cuts).substr(0, 2), "0-");
}

TEST(Slices, CutsThatCannotBeMadeAreOneClearError) {
  EXPECT_THROW(SliceSequence(1000, 3, SeqSplit::kEven, 0, 0), ConfigError);  // 3 does not divide 1000
  EXPECT_THROW(SliceSequence(4, 5, SeqSplit::kCompute, 0, 0), ConfigError);  // more slices than tokens
  EXPECT_THROW(SliceSequence(8, 0, SeqSplit::kEven, 0, 0), ConfigError);
  EXPECT_THROW(SliceSequence(8, 2, SeqSplit::kEven, 1.5, 0), ConfigError);
  try {
    SliceSequence(1000, 3, SeqSplit::kEven, 0, 0);
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("an even split needs it to divide the sequence length 1000"),
              std::string::npos)
        << e.what();
  }
}

TEST(Slices, TheSimulatorChargesEachSliceItsShare) {
  const SequenceSlices sl = SliceSequence(4096, 4, SeqSplit::kEven, 0.8, 0.4);
  SimOptions o;
  o.compute.uniform = {1.0, 1.0, 1.0};
  o.slices.cost = sl.cost;
  o.slices.memory = sl.memory;
  const Schedule s = GenerateSeq1F1B(4, 8, 4);
  const SimResult r = Simulate(s, o);
  // Every rank does each microbatch's whole work once: busy = m (F + B).
  for (const RankResult& rr : r.per_rank) EXPECT_NEAR(rr.busy, 8 * 3.0, 1e-9);
  // The last rank holds microbatch j's slices one by one up to all of one
  // sequence: its peak is one whole microbatch.
  EXPECT_NEAR(r.per_rank[3].peak_memory, 1.0, 1e-9);
  // Slices costing more later stretch the step beyond the even split's.
  EXPECT_GT(r.makespan, Simulate(s, [] {
    SimOptions even;
    even.compute.uniform = {1.0, 1.0, 1.0};
    return even;
  }()).makespan);
  o.slices.cost = {0.5, 0.5};
  EXPECT_THROW(Simulate(s, o), ScheduleError);  // two shares for four slices
  o.slices.cost = {0.0, 0.5, 0.25, 0.25};
  EXPECT_THROW(Simulate(s, o), ScheduleError);  // a slice costing nothing
}

}  // namespace
}  // namespace baton
