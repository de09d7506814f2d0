// The simulator against closed-form results.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include "baton/error.h"
#include "baton/schedule.h"
#include "baton/sim.h"

namespace baton {
namespace {

constexpr double kEps = 1e-9;

SimOptions WithCosts(double f, double i, double w) {
  SimOptions o;
  o.compute.uniform = {f, i, w};
  return o;
}

double MaxPeakMemory(const SimResult& r) {
  double peak = 0;
  for (const RankResult& rr : r.per_rank) peak = std::max(peak, rr.peak_memory);
  return peak;
}

struct Shape {
  int p, m;
};
const Shape kShapes[] = {{1, 1}, {2, 2}, {2, 5}, {4, 4}, {4, 8}, {4, 16}, {8, 8}, {8, 32}, {3, 7}};
const Costs kCostSets[] = {{1, 1, 1}, {1, 0.5, 0.5}, {2, 1.5, 2.5}, {1, 1, 0}};

TEST(Simulator, GPipeAndOneFOneBBubbleIsClosedForm) {
  for (const char* name : {"gpipe", "1f1b"}) {
    for (const Shape sh : kShapes) {
      for (const Costs c : kCostSets) {
        SCOPED_TRACE(std::string(name) + " p=" + std::to_string(sh.p) + " m=" + std::to_string(sh.m));
        const SimResult r = Simulate(Generate(name, sh.p, sh.m), WithCosts(c.forward, c.backward_input, c.backward_weight));
        const double expected = double(sh.p - 1) / (sh.m + sh.p - 1);
        EXPECT_NEAR(r.bubble_rate, expected, kEps);
        EXPECT_NEAR(r.span_bubble_rate, expected, kEps);
        const double fb = c.forward + c.backward_input + c.backward_weight;
        EXPECT_NEAR(r.makespan, (sh.m + sh.p - 1) * fb, kEps);
      }
    }
  }
}

// A slow wire (messages.link_delay): GPipe sends its forwards back to
// back, so a delay d on the link from rank 0 to rank 1 (or on the way
// back) shifts its stream once: the step is (m + p - 1)(F + B) + d. 1F1B
// waits for it at every steady cycle: it loses more.
TEST(Simulator, ALinkDelayShiftsGPipeOnceAndOneFOneBAtEveryCycle) {
  const int p = 2, m = 6;
  const double d = 0.75;
  for (const std::size_t link : {std::size_t{1}, std::size_t{2}}) {  // 0 -> 1, 1 -> 0
    SimOptions o = WithCosts(1, 1, 1);
    o.messages.link_delay.assign(p * p, 0.0);
    o.messages.link_delay[link] = d;
    EXPECT_NEAR(Simulate(Generate("gpipe", p, m), o).makespan, (m + p - 1) * 3.0 + d, kEps) << link;
    EXPECT_GT(Simulate(Generate("1f1b", p, m), o).makespan, (m + p - 1) * 3.0 + 2 * d) << link;
  }
  SimOptions bad = WithCosts(1, 1, 1);
  bad.messages.link_delay.assign(3, 0.0);
  EXPECT_THROW(Simulate(Generate("gpipe", p, m), bad), ScheduleError);
}

// A tied head's exchange (SimOptions::tied): both ranks are done when the
// later one's gradient has crossed, x = its bytes over the bandwidth after
// the ranks' ends. GPipe's rank 0 ends at T = (m + p - 1)(F + B) (+ d
// with a delay d either way), rank 1 ends B before it (B + d with the delay
// on the way back), so the step is T + x, T + 2d + x with the delay from 0
// to 1 (rank 0's part waits out the wire after its end), and T + x with it
// from 1 to 0 (rank 1's part leaves d before rank 0 ends). Stages on one
// rank exchange nothing.
TEST(Simulator, ATiedHeadsExchangeEndsTheStepAfterTheSlowerSideCrossesTheWire) {
  const int p = 2, m = 6;
  const double d = 0.75, x = 0.5, t = (m + p - 1) * 3.0;
  SimOptions o = WithCosts(1, 1, 1);
  o.messages.bandwidth = 1.0;  // activations: 0 bytes, free
  o.tied = {0, 1, x};
  const SimResult healthy = Simulate(Generate("gpipe", p, m), o);
  EXPECT_NEAR(healthy.makespan, t + x, kEps);
  for (int r = 0; r < p; ++r) EXPECT_NEAR(healthy.per_rank[r].reduce_end, t + x, kEps) << r;
  EXPECT_NEAR(healthy.per_rank[1].exposed_reduce, 2.0 + x, kEps);
  for (const auto& [link, want] : {std::pair{std::size_t{1}, t + 2 * d + x}, std::pair{std::size_t{2}, t + d + x}}) {
    o.messages.link_delay.assign(p * p, 0.0);
    o.messages.link_delay[link] = d;
    EXPECT_NEAR(Simulate(Generate("gpipe", p, m), o).makespan, want, kEps) << link;
  }
  o.messages.link_delay.clear();
  o.tied = {0, 0, x};  // one rank: a local sum
  EXPECT_NEAR(Simulate(Generate("gpipe", p, m), o).makespan, t, kEps);
}

TEST(Simulator, PeakInFlightIsOneFOneBsWarmUpAndGPipesAll) {
  for (const Shape sh : kShapes) {
    const SimResult one = Simulate(Generate1F1B(sh.p, sh.m));
    const SimResult gpipe = Simulate(GenerateGPipe(sh.p, sh.m));
    for (int r = 0; r < sh.p; ++r) {
      ASSERT_EQ(one.per_rank[r].peak_in_flight.size(), 1u);
      EXPECT_EQ(one.per_rank[r].peak_in_flight[0], std::min(sh.p - r, sh.m)) << "rank " << r;
      EXPECT_EQ(gpipe.per_rank[r].peak_in_flight[0], sh.m);
      EXPECT_NEAR(one.per_rank[r].peak_memory, std::min(sh.p - r, sh.m), kEps);
      EXPECT_NEAR(gpipe.per_rank[r].peak_memory, sh.m, kEps);
    }
  }
  // Also for m < p.
  const SimResult r = Simulate(Generate1F1B(4, 2));
  EXPECT_EQ(r.per_rank[0].peak_in_flight[0], 2);
  EXPECT_EQ(r.per_rank[3].peak_in_flight[0], 1);
}

TEST(Simulator, ZbH1MakespanIsClosedForm) {
  // Paper form m(F+I+W) + (p-1)(F+I-W), which holds while W <= I.
  const Costs costs[] = {{1, 1, 1}, {1, 1, 0.5}, {2, 3, 1}, {1, 2, 1}, {1, 1, 0}};
  for (const Shape sh : kShapes) {
    if (sh.m < sh.p) continue;
    for (const Costs c : costs) {
      const double f = c.forward, i = c.backward_input, w = c.backward_weight;
      ASSERT_LE(w, i);
      const SimResult r = Simulate(GenerateZbH1(sh.p, sh.m), WithCosts(f, i, w));
      EXPECT_NEAR(r.makespan, sh.m * (f + i + w) + (sh.p - 1) * (f + i - w), kEps)
          << "p=" << sh.p << " m=" << sh.m << " F,I,W=" << f << "," << i << "," << w;
      // Same peak as 1F1B: p x M_B, on rank 0.
      const SimResult one = Simulate(Generate1F1B(sh.p, sh.m), WithCosts(f, i, w));
      EXPECT_NEAR(MaxPeakMemory(r), MaxPeakMemory(one), kEps);
      EXPECT_NEAR(r.per_rank[0].peak_memory, sh.p, kEps);
    }
  }
}

TEST(Simulator, ZbH1WithWeightGradientLongerThanInputGradient) {
  // For I < W <= F+I the paper form would drop below a hard lower bound: the
  // last rank cannot start before (p-1)F and then has m(F+I+W) of work. ZB-H1
  // meets that bound exactly, so its bubble is (p-1)F there.
  const Costs costs[] = {{1, 1, 2}, {2, 1, 3}, {1, 0.5, 1}};
  for (const Shape sh : kShapes) {
    if (sh.m < sh.p) continue;
    for (const Costs c : costs) {
      const double f = c.forward, i = c.backward_input, w = c.backward_weight;
      const SimResult r = Simulate(GenerateZbH1(sh.p, sh.m), WithCosts(f, i, w));
      EXPECT_NEAR(r.makespan, sh.m * (f + i + w) + (sh.p - 1) * f, kEps)
          << "p=" << sh.p << " m=" << sh.m << " F,I,W=" << f << "," << i << "," << w;
    }
  }
}

TEST(Simulator, ZbH1BubbleIsSmallerThanOneFOneBs) {
  const SimResult zb = Simulate(GenerateZbH1(4, 8));
  const SimResult one = Simulate(Generate1F1B(4, 8));
  // (p-1)(F+I-W) = 3 against (p-1)(F+B) = 9.
  EXPECT_NEAR(zb.makespan - 24, 3, kEps);
  EXPECT_NEAR(one.makespan - 24, 9, kEps);
}

TEST(Simulator, InterleavedBubbleShrinksByChunks) {
  for (int p : {2, 4, 8}) {
    for (int mult : {1, 2, 4}) {
      for (int v : {1, 2, 3, 4}) {
        const int m = p * mult;
        for (const Costs c : {Costs{1, 1, 1}, Costs{1, 0.5, 1.5}}) {
          const double fb = c.forward + c.backward_input + c.backward_weight;
          const SimResult r =
              Simulate(GenerateInterleaved1F1B(p, m, v), WithCosts(c.forward, c.backward_input, c.backward_weight));
          // Total bubble (p-1)(F+B)/v on every rank.
          EXPECT_NEAR(r.makespan, m * fb + (p - 1) * fb / v, 1e-9)
              << "p=" << p << " m=" << m << " v=" << v;
          const double bubble = (p - 1) * fb / v;
          EXPECT_NEAR(r.bubble_rate, bubble / (m * fb + bubble), 1e-9);
        }
      }
    }
  }
}

TEST(Simulator, ZbH2HasZeroSpanBubbleWithUniformCosts) {
  for (int p : {2, 3, 4, 8}) {
    for (int m : {2 * p, 3 * p, 4 * p}) {
      const SimResult r = Simulate(GenerateZbH2(p, m), WithCosts(1, 1, 1));
      EXPECT_NEAR(r.span_bubble_rate, 0.0, kEps) << "p=" << p << " m=" << m;
      for (const RankResult& rr : r.per_rank) EXPECT_NEAR(rr.span, 3.0 * m, kEps);
    }
  }
}

TEST(Simulator, ZbvHasZeroSpanBubbleAndPMicrobatchesOfMemory) {
  for (int p : {2, 3, 4, 8}) {
    for (int m : {2 * p - 1, 2 * p, 3 * p, 4 * p + 1}) {
      SCOPED_TRACE("p=" + std::to_string(p) + " m=" + std::to_string(m));
      const SimResult r = Simulate(GenerateZbv(p, m), WithCosts(1, 1, 1));
      EXPECT_NEAR(r.span_bubble_rate, 0.0, kEps);
      for (const RankResult& rr : r.per_rank) {
        EXPECT_NEAR(rr.peak_memory, p, kEps) << "rank " << rr.rank;
        EXPECT_NEAR(rr.busy, 3.0 * m, kEps);  // two chunks of half a rank each
      }
    }
  }
}

TEST(Simulator, LoweredAndComputeOnlyFormsGiveTheSameTimes) {
  for (const std::string& name : GeneratorNames()) {
    const Schedule s = Generate(name, 4, 8);
    for (double comm : {0.0, 0.25, 3.0}) {
      SimOptions o = WithCosts(1, 0.75, 0.5);
      o.messages.latency = comm;
      const SimResult a = Simulate(s, o);
      const SimResult b = Simulate(Lower(s), o);
      EXPECT_NEAR(a.makespan, b.makespan, kEps) << name << " comm " << comm;
      for (int r = 0; r < 4; ++r) {
        EXPECT_NEAR(a.per_rank[r].end, b.per_rank[r].end, kEps);
        EXPECT_NEAR(a.per_rank[r].peak_memory, b.per_rank[r].peak_memory, kEps);
      }
    }
  }
}

TEST(Simulator, CommunicationAddsLatencyPlusBytesOverBandwidthPerHop) {
  // GPipe, uniform: the forward chain and the backward chain each cross p-1
  // ranks, so makespan = (m+p-1)(F+B) + 2(p-1)c.
  for (const Shape sh : kShapes) {
    SimOptions o = WithCosts(1, 1, 1);
    o.messages.latency = 0.5;
    o.messages.bandwidth = 1000;
    o.messages.bytes = 250;  // + 0.25 per message
    const SimResult r = Simulate(GenerateGPipe(sh.p, sh.m), o);
    EXPECT_NEAR(r.makespan, (sh.m + sh.p - 1) * 3.0 + 2 * (sh.p - 1) * 0.75, kEps);
    // span_bubble_rate uses the longest span: rank 0's, which is the makespan.
    EXPECT_NEAR(r.per_rank[0].span, r.makespan, kEps);
  }
}

TEST(Simulator, MetricsFollowTheirDefinitions) {
  SimOptions o = WithCosts(1, 1, 1);
  o.messages.latency = 1;
  const SimResult r = Simulate(GenerateZbH2(4, 8), o);
  double busy = 0, max_span = 0, makespan = 0;
  for (const RankResult& rr : r.per_rank) {
    EXPECT_NEAR(rr.span, rr.end - rr.start, kEps);
    busy += rr.busy;
    max_span = std::max(max_span, rr.span);
    makespan = std::max(makespan, rr.end);
    EXPECT_NEAR(rr.busy, 24, kEps);
  }
  EXPECT_NEAR(r.makespan, makespan, kEps);
  EXPECT_NEAR(r.bubble_rate, 1 - busy / (4 * makespan), kEps);
  EXPECT_NEAR(r.span_bubble_rate, 1 - busy / (4 * max_span), kEps);
  // The timeline holds every compute action once, in order, without overlap.
  for (const auto& row : r.timeline) {
    ASSERT_EQ(row.size(), 24u);
    for (std::size_t i = 1; i < row.size(); ++i) EXPECT_GE(row[i].start, row[i - 1].end - kEps);
  }
}

TEST(Simulator, WeightMemoryRatioSetsWhatIReleases) {
  // One rank: F0 I0 F1 I1 F2 W0 ... memory after F0 1, I0 1-(1-r), F1 ...
  Schedule s;
  s.name = "hand";
  s.ranks = 1;
  s.stages = 1;
  s.microbatches = 2;
  s.stage_rank = {0};
  s.actions = {{{0, ActionKind::kForward, 0},
                {0, ActionKind::kBackwardInput, 0},
                {0, ActionKind::kForward, 1},
                {0, ActionKind::kBackwardInput, 1},
                {0, ActionKind::kBackwardWeight, 0},
                {0, ActionKind::kBackwardWeight, 1}}};
  Validate(s);
  for (double ratio : {0.0, 0.25, 0.5, 1.0}) {
    SimOptions o;
    o.memory.weight_ratio = ratio;
    o.memory.microbatch_bytes = 1 << 20;
    const SimResult r = Simulate(s, o);
    EXPECT_NEAR(r.per_rank[0].peak_memory, 1 + ratio, kEps);
    EXPECT_NEAR(r.per_rank[0].peak_memory_bytes, (1 + ratio) * (1 << 20), 1e-6);
    EXPECT_EQ(r.per_rank[0].peak_in_flight[0], 2);  // held until W
  }
}

TEST(Simulator, PerStageCostsOverrideRankCosts) {
  SimOptions o;
  o.compute.stages = {{1, 2, 3}, {10, 20, 30}};
  const SimResult r = Simulate(GenerateGPipe(2, 1), o);
  // F0, F1, B1 = I1 + W1, B0 = I0 + W0 in a chain.
  EXPECT_NEAR(r.makespan, 1 + 10 + 50 + 5, kEps);
  EXPECT_NEAR(r.per_rank[1].busy, 60, kEps);
  o.compute.stages.pop_back();
  EXPECT_THROW(Simulate(GenerateGPipe(2, 1), o), ScheduleError);
}

TEST(Simulator, ChunksShareTheRankCost) {
  // Interleaved with v chunks: each chunk costs 1/v of the rank's F, I, W.
  const SimResult r = Simulate(GenerateInterleaved1F1B(2, 2, 2), WithCosts(2, 2, 2));
  for (const auto& row : r.timeline) {
    for (const TimedAction& t : row) {
      EXPECT_NEAR(t.end - t.start, t.action.kind == ActionKind::kForward ? 1.0 : 2.0, kEps);
    }
  }
}

TEST(Simulator, RejectsBadOptions) {
  const Schedule s = Generate1F1B(2, 2);
  SimOptions o;
  o.compute.uniform.forward = -1;
  EXPECT_THROW(Simulate(s, o), ScheduleError);
  o = {};
  o.memory.weight_ratio = 1.5;
  EXPECT_THROW(Simulate(s, o), ScheduleError);
  o = {};
  o.messages.latency = std::numeric_limits<double>::infinity();
  EXPECT_THROW(Simulate(s, o), ScheduleError);
}

std::string DeadlockError(const Schedule& s) {
  try {
    Validate(s);
  } catch (const ScheduleError& e) {
    return e.what();
  }
  return "";
}

TEST(Simulator, DeadlockNamesEveryStuckRankAndMarksTheGrid) {
  // Rank 0 wants microbatch 0's gradient before sending microbatch 1 forward;
  // rank 1 wants microbatch 1 forward before returning microbatch 0's gradient.
  std::istringstream csv("0F0,0B0,0F1,0B1\n1F1,1B1,1F0,1B0\n");
  const Schedule s = ReadCsv(csv, "deadlock.csv");
  const std::string msg = DeadlockError(s);
  EXPECT_NE(msg.find("deadlock.csv: the schedule deadlocks"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank 0, position 1 (0B0): waits for the input gradient of stage 1 microbatch 0 (rank 1)"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("rank 1, position 0 (1F1): waits for 0F1 on rank 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find(">0B0<"), std::string::npos) << msg;
  EXPECT_NE(msg.find("<-- here"), std::string::npos) << msg;

  // The lowered form deadlocks the same way, and Lower() itself refuses it.
  EXPECT_THROW(Lower(s), ScheduleError);
}

TEST(Simulator, LoweredDeadlockFromLateReceive) {
  // Valid pairing, but rank 1 posts its receive for microbatch 1 only after
  // waiting on microbatch 1: caught by the structure check as a late RECV.
  std::istringstream csv(
      "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n"
      "1RECV_F0,1F0,1B0,1SEND_B0,1F1,1RECV_F1,1B1,1SEND_B1\n");
  const Schedule s = ReadCsv(csv, "late.csv");
  const std::string msg = DeadlockError(s);
  EXPECT_NE(msg.find("1F1 waits for 1RECV_F1, which comes later on the same rank (position 5)"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find(">1F1<"), std::string::npos) << msg;
}

}  // namespace
}  // namespace baton

namespace baton {
namespace {

// Data parallelism: each stage's gradient sum starts at its last B or W and
// runs beside the compute; a rank's sums run one after another.
TEST(SimulatorGradientSums, StartAtEachStagesLastBackwardAndRunOneAfterAnother) {
  const Schedule s = Generate("1f1b", 2, 4);
  SimOptions o;  // F = I = W = 1, so B = 2
  const SimResult plain = Simulate(s, o);
  o.sums.stage_time = {0.5, 0.5};
  const SimResult r = Simulate(s, o);
  // 1F1B's last action on each rank is its stage's last B.
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_DOUBLE_EQ(r.per_rank[rank].reduce_end, plain.per_rank[rank].end + 0.5);
    EXPECT_DOUBLE_EQ(r.per_rank[rank].exposed_reduce, 0.5);
  }
  // The last stage's sum hides behind the first stage's cool-down (one B,
  // 2 units, later); the first stage's sum is the step's tail.
  EXPECT_LT(r.per_rank[1].reduce_end, plain.makespan);
  EXPECT_DOUBLE_EQ(r.makespan, plain.makespan + 0.5);

  // Two stages on one rank (ZB-V): the first stage done sums first, the
  // other after it, not before its own last W.
  const Schedule v = Generate("zbv", 1, 2);
  SimOptions ov;
  const SimResult vplain = Simulate(v, ov);
  ov.sums.stage_time = {100.0, 0.25};
  const SimResult vr = Simulate(v, ov);
  EXPECT_GE(vr.per_rank[0].reduce_end, vplain.per_rank[0].end);
  EXPECT_DOUBLE_EQ(vr.makespan, vr.per_rank[0].reduce_end);
  // A stage summed at the rank's end (a tied copy) starts there.
  o.sums.at_end = {1, 0};
  const SimResult at_end = Simulate(s, o);
  EXPECT_DOUBLE_EQ(at_end.per_rank[0].reduce_end, plain.per_rank[0].end + 0.5);
}

TEST(SimulatorGradientSums, AlphaBetaPerBucket) {
  // 4 replicas, 10 MB in 4 MB buckets (3 buckets): 3 x 2 x 3 steps of
  // latency, 2 x 3/4 of the bytes over the bandwidth.
  EXPECT_DOUBLE_EQ(GradientSumTime(10e6, 4, 4e6, 1e-5, 1e9), 3 * 6 * 1e-5 + 1.5 * 10e6 / 1e9);
  EXPECT_DOUBLE_EQ(GradientSumTime(10e6, 1, 4e6, 1e-5, 1e9), 0.0);
  EXPECT_THROW(Simulate(Generate("1f1b", 2, 4), SimOptions{.sums = {.stage_time = {1.0}}}), ScheduleError);
}

// ---- The optimizer's step (SimOptions::update) ----

TEST(SimulatorUpdate, EachRankUpdatesWhenDoneUnlessTheClipMakesItWaitForTheNorm) {
  const Schedule s = Generate("1f1b", 2, 4);
  SimOptions o;  // F = I = W = 1
  const SimResult plain = Simulate(s, o);
  const double e0 = plain.per_rank[0].end, e1 = plain.per_rank[1].end;
  ASSERT_DOUBLE_EQ(e1, e0 - 2.0);  // 1F1B: the first stage's last B comes after the last stage's
  // Without a clip each rank updates as soon as it is done: the last
  // stage's long update runs in the first stage's cool-down.
  o.update.stage_time = {0.5, 3.0};
  const SimResult own = Simulate(s, o);
  EXPECT_DOUBLE_EQ(own.per_rank[0].update_end, e0 + 0.5);
  EXPECT_DOUBLE_EQ(own.per_rank[1].update_end, e1 + 3.0);
  EXPECT_DOUBLE_EQ(own.makespan, e0 + 1.0);
  EXPECT_DOUBLE_EQ(own.per_rank[1].clip_wait, 0.0);
  EXPECT_DOUBLE_EQ(own.per_rank[1].busy, plain.per_rank[1].busy + 3.0);
  EXPECT_DOUBLE_EQ(own.bubble_rate,
                   1.0 - (plain.per_rank[0].busy + plain.per_rank[1].busy + 3.5) / (2 * own.makespan));
  // With a clip every rank takes its pass, then waits for the slowest
  // rank's pass and the norm's exchange, then updates.
  o.update.clip = {0.25, 0.25};
  o.update.exchange = 0.1;
  const SimResult clipped = Simulate(s, o);
  const double norm = e0 + 0.25 + 0.1;
  EXPECT_DOUBLE_EQ(clipped.per_rank[0].update_end, norm + 0.5);
  EXPECT_DOUBLE_EQ(clipped.per_rank[1].update_end, norm + 3.0);
  EXPECT_NEAR(clipped.per_rank[0].clip_wait, 0.1, 1e-12);
  EXPECT_NEAR(clipped.per_rank[1].clip_wait, 2.1, 1e-12);  // e0 - e1 = 2, and the exchange
  EXPECT_DOUBLE_EQ(clipped.makespan, norm + 3.0);
  EXPECT_DOUBLE_EQ(clipped.per_rank[1].busy, plain.per_rank[1].busy + 3.25);
  // After the gradient sums: a rank is done when its sums are.
  SimOptions summed;
  summed.sums.stage_time = {0.5, 0.5};
  const SimResult sums = Simulate(s, summed);
  summed.update.stage_time = {1.0, 1.0};
  const SimResult both = Simulate(s, summed);
  for (int r = 0; r < 2; ++r) EXPECT_DOUBLE_EQ(both.per_rank[r].update_end, sums.per_rank[r].reduce_end + 1.0);
  EXPECT_DOUBLE_EQ(both.makespan, sums.makespan + 1.0);
  // Not one a stage, or negative: refused.
  EXPECT_THROW(Simulate(s, SimOptions{.update = {.stage_time = {1.0}}}), ScheduleError);
  EXPECT_THROW(Simulate(s, SimOptions{.update = {.stage_time = {1.0, 1.0}, .clip = {1.0, -1.0}}}), ScheduleError);
}

// ---- Ranks sharing cores (processor sharing) ----

double TotalWork(const SimResult& r) {
  double work = 0;
  for (const auto& row : r.timeline) {
    for (const TimedAction& a : row) work += a.end - a.start;
  }
  return work;
}

SimOptions OnePool(SimOptions o, int ranks, double cores) {
  o.cores.pool.assign(ranks, 0);
  o.cores.pool_cores = {cores};
  return o;
}

TEST(SimulatorSharedCores, OneCoreRunsAllTheWorkBackToBack) {
  // With one core and no communication cost some rank can always compute,
  // so the core never idles: the step is the sum of every action's cost.
  for (const char* name : {"gpipe", "1f1b", "zb_h1", "zbv", "interleaved_1f1b"}) {
    for (const Shape sh : {Shape{2, 4}, Shape{4, 8}, Shape{3, 6}}) {
      if (std::string(name) == "interleaved_1f1b" && sh.m % sh.p != 0) continue;
      for (const Costs& c : kCostSets) {
        const Schedule s = Generate(name, sh.p, sh.m);
        SimOptions o = WithCosts(c.forward, c.backward_input, c.backward_weight);
        const SimResult alone = Simulate(s, o);
        const SimResult shared = Simulate(s, OnePool(o, sh.p, 1.0));
        EXPECT_NEAR(shared.makespan, TotalWork(alone), kEps * TotalWork(alone)) << name << " " << sh.p << "x" << sh.m;
        // Work is the costs either way; busy is the work only alone.
        double work = 0;
        for (int r = 0; r < sh.p; ++r) {
          work += shared.per_rank[r].work;
          EXPECT_NEAR(alone.per_rank[r].work, alone.per_rank[r].busy, kEps) << name;
        }
        EXPECT_NEAR(work, TotalWork(alone), kEps * TotalWork(alone)) << name;
        const SimResult lowered = Simulate(Lower(s), OnePool(o, sh.p, 1.0));
        EXPECT_NEAR(lowered.makespan, shared.makespan, kEps * shared.makespan) << name;
      }
    }
  }
}

TEST(SimulatorSharedCores, AWaitingRankTakesItsShareOfTheCore) {
  // Two ranks on one core, one microbatch: F0, F1, B1, B0 one after
  // another. While one computes the other waits (it has work left) and
  // takes `share` of the core, until rank 1 is done: B0 runs alone.
  for (const char* name : {"gpipe", "1f1b"}) {
    for (double share : {0.0, 0.25, 1.0}) {
      SimOptions o = OnePool(WithCosts(1, 1, 1), 2, 1.0);
      o.cores.shared.waiting_share = share;
      const SimResult r = Simulate(Generate(name, 2, 1), o);
      EXPECT_NEAR(r.makespan, (1 + 1 + 2) * (1 + share) + 2, kEps) << name << " share " << share;
    }
  }
  SimOptions bad = OnePool(WithCosts(1, 1, 1), 2, 1.0);
  bad.cores.shared.waiting_share = 1.5;
  EXPECT_THROW(Simulate(Generate("1f1b", 2, 1), bad), ScheduleError);
}

TEST(SimulatorSharedCores, HalfACoreEachDoublesEveryTime) {
  // Every rank alone in a pool of half a core runs at half speed: with the
  // latency doubled too, every time doubles.
  for (const char* name : {"1f1b", "zb_h1", "zbv"}) {
    const Schedule s = Lower(Generate(name, 4, 8));
    SimOptions o = WithCosts(1, 0.7, 0.4);
    o.messages.latency = 0.3;
    const SimResult alone = Simulate(s, o);
    o.messages.latency = 0.6;
    o.cores.pool = {0, 1, 2, 3};
    o.cores.pool_cores = {0.5, 0.5, 0.5, 0.5};
    const SimResult shared = Simulate(s, o);
    EXPECT_NEAR(shared.makespan, 2 * alone.makespan, kEps) << name;
    for (int r = 0; r < 4; ++r) {
      ASSERT_EQ(shared.timeline[r].size(), alone.timeline[r].size());
      for (std::size_t k = 0; k < alone.timeline[r].size(); ++k) {
        EXPECT_NEAR(shared.timeline[r][k].start, 2 * alone.timeline[r][k].start, kEps) << name;
        EXPECT_NEAR(shared.timeline[r][k].end, 2 * alone.timeline[r][k].end, kEps) << name;
      }
    }
    EXPECT_NEAR(shared.bubble_rate, alone.bubble_rate, kEps) << name;
  }
}

TEST(SimulatorSharedCores, TwoRanksOnOneCoreShareItEvenly) {
  // Two ranks on one core, each starting at once (gpipe, 2 stages, first
  // microbatch on rank 0 only; then F(1,0) on rank 1 beside F(0,1) on rank
  // 0): a closed-form timeline. F = 1, B = 0 (weightless stages).
  const Schedule s = Generate("gpipe", 2, 2);
  SimOptions o = WithCosts(1, 0, 0);
  const SimResult r = Simulate(s, OnePool(o, 2, 1.0));
  // 0F0 alone [0, 1]; 0F1 and 1F0 together at half speed [1, 3]; 1F1 alone [3, 4].
  ASSERT_GE(r.timeline[0].size(), 2u);
  EXPECT_NEAR(r.timeline[0][0].end, 1, kEps);
  EXPECT_NEAR(r.timeline[0][1].start, 1, kEps);
  EXPECT_NEAR(r.timeline[0][1].end, 3, kEps);
  EXPECT_NEAR(r.timeline[1][0].start, 1, kEps);
  EXPECT_NEAR(r.timeline[1][0].end, 3, kEps);
  EXPECT_NEAR(r.timeline[1][1].end, 4, kEps);
}

TEST(SimulatorSharedCores, BetweenAloneAndTheWorkOverTheCores) {
  // 4 ranks on 2 cores: each rank runs at least at half speed, so the step
  // is at most twice the step alone, at least that step, and at least the
  // whole work over two cores.
  for (const char* name : {"1f1b", "zb_h1", "zbv", "gpipe"}) {
    for (const Costs& c : kCostSets) {
      const Schedule s = Generate(name, 4, 8);
      SimOptions o = WithCosts(c.forward, c.backward_input, c.backward_weight);
      o.messages.latency = 0.05;
      const SimResult alone = Simulate(s, o);
      const SimResult shared = Simulate(s, OnePool(o, 4, 2.0));
      EXPECT_GE(shared.makespan, alone.makespan - kEps) << name;
      EXPECT_GE(shared.makespan, TotalWork(alone) / 2 - kEps) << name;
      EXPECT_LE(shared.makespan, 2 * alone.makespan + kEps) << name;
    }
  }
}

TEST(SimulatorSharedCores, EnoughCoresChangeNothing) {
  const Schedule s = Generate("zb_h1", 4, 8);
  SimOptions o = WithCosts(1, 0.5, 0.7);
  o.messages.latency = 0.1;
  const SimResult alone = Simulate(s, o);
  o.cores.pool = {0, 0, 1, 1};
  o.cores.pool_cores = {2, 3};
  EXPECT_DOUBLE_EQ(Simulate(s, o).makespan, alone.makespan);
}

TEST(SimulatorSharedCores, DeadlocksAreStillNamed) {
  std::istringstream csv("0F0,0B0,0F1,0B1\n1F1,1B1,1F0,1B0\n");
  const Schedule s = ReadCsv(csv, "deadlock.csv");
  try {
    Simulate(s, OnePool(SimOptions{}, 2, 1.0));
    FAIL() << "no deadlock reported";
  } catch (const ScheduleError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1, position 0 (1F1): waits for 0F1 on rank 0"), std::string::npos)
        << e.what();
  }
}

TEST(SimulatorSharedCores, BadPoolsAreRefused) {
  const Schedule s = Generate("1f1b", 2, 4);
  auto error = [&](SimOptions o) {
    try {
      Simulate(s, o);
    } catch (const ScheduleError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  SimOptions o;
  o.cores.pool = {0};
  o.cores.pool_cores = {1};
  EXPECT_NE(error(o).find("1 core pools given for the ranks, but the schedule has 2 ranks"), std::string::npos);
  o.cores.pool = {0, 1};
  EXPECT_NE(error(o).find("rank 1 is in core pool 1, but there are 1 pools"), std::string::npos);
  o.cores.pool = {0, 0};
  o.cores.pool_cores = {0};
  EXPECT_NE(error(o).find("core pool 0 must have a finite number of cores > 0, got 0"), std::string::npos);
  o.cores.pool = {};
  EXPECT_NE(error(o).find("pool_cores given without core_pool"), std::string::npos);
}

}  // namespace
}  // namespace baton
