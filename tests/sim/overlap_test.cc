// OVERLAP_F_B units through lowering, checks, the simulator and exporters.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "baton/error.h"
#include "baton/schedule.h"
#include "baton/sim.h"

namespace baton {
namespace {

constexpr double kEps = 1e-9;

Schedule FromCsv(const std::string& text, const std::string& name = "overlap.csv") {
  std::istringstream in(text);
  return ReadCsv(in, name);
}

// One rank, two stages, two microbatches; the unit runs F of microbatch 1
// through stage 0 together with B of microbatch 0 through stage 1.
const char* kOneRank = "0F0,1F0,(0F1;1B0)OVERLAP_F_B,1F1,0B0,1B1,0B1\n";

TEST(Overlap, UnitCostsItsForwardBackwardTerm) {
  const Schedule s = FromCsv(kOneRank);
  ASSERT_NO_THROW(Validate(s));
  for (double fb : {1.0, 2.5, 3.0}) {
    SimOptions o;
    o.compute.uniform = {2, 2, 2};  // per rank: each of the two chunks costs half
    o.compute.uniform.forward_backward = fb * 2;
    const SimResult r = Simulate(s, o);
    ASSERT_EQ(r.timeline[0].size(), 7u);
    const TimedAction& unit = r.timeline[0][2];
    EXPECT_EQ(unit.action, OverlapFB(0, 1, 1, 0));
    EXPECT_NEAR(unit.end - unit.start, fb, kEps);
    // F 1 + F 1 + unit + F 1 + B 2 + B 2 + B 2.
    EXPECT_NEAR(r.makespan, 3 + fb + 6, kEps);
  }
  // Unset: the F and the B back to back.
  const SimResult plain = Simulate(s, SimOptions{});
  EXPECT_NEAR(plain.timeline[0][2].end - plain.timeline[0][2].start, 0.5 + 1.0, kEps);
}

TEST(Overlap, StagesWithDifferentCostsShareTheSaving) {
  // F of stage a with B of stage b costs F_a + B_b less half of each
  // stage's saving F + B - F&B.
  const Schedule s = FromCsv(kOneRank);
  SimOptions o;
  o.compute.stages = {{1, 1, 1}, {3, 2, 2}};
  o.compute.stages[0].forward_backward = 2.0;  // saves 1 + 2 - 2 = 1
  o.compute.stages[1].forward_backward = 5.0;  // saves 3 + 4 - 5 = 2
  const SimResult r = Simulate(s, o);
  const TimedAction& unit = r.timeline[0][2];
  EXPECT_NEAR(unit.end - unit.start, 1 + 4 - 0.5 * (1 + 2), kEps);
}

TEST(Overlap, UnitWaitsForBothPartsAndReleasesBothAtItsEnd) {
  // Two ranks, two stages, three microbatches. Rank 1's unit needs F(1,1)'s
  // input from rank 0 (comm 10 after 0F1 ends at 2) and B(1,0)'s own forward.
  const Schedule s = FromCsv(
      "0F0,0F1,0F2,0B0,0B1,0B2\n"
      "1F0,(1F1;1B0)OVERLAP_F_B,(1F2;1B1)OVERLAP_F_B,1B2\n");
  ASSERT_NO_THROW(Validate(s));
  SimOptions o;
  o.compute.uniform = {1, 1, 1, 1.5};
  o.messages.latency = 10;
  const SimResult r = Simulate(s, o);
  const TimedAction& unit = r.timeline[1][1];
  EXPECT_NEAR(unit.start, 2 + 10, kEps);  // input of 1F1
  EXPECT_NEAR(unit.end, 13.5, kEps);
  // 0B0 on rank 0 needs B(1,0): the unit's end plus comm.
  EXPECT_NEAR(r.timeline[0][3].start, 13.5 + 10, kEps);
  // The lowered form places each part's SEND after the unit and gives the
  // same times.
  const Schedule lowered = Lower(s);
  ASSERT_NO_THROW(Validate(lowered));
  const std::vector<Action>& row = lowered.actions[1];
  const auto at = std::find(row.begin(), row.end(), OverlapFB(1, 1, 1, 0)) - row.begin();
  ASSERT_LT(at + 1, static_cast<long>(row.size()));
  EXPECT_EQ(row[at + 1], (Action{1, ActionKind::kSendB, 0}));
  EXPECT_EQ(row[at - 1], (Action{1, ActionKind::kRecvF, 1}));
  const SimResult rl = Simulate(lowered, o);
  EXPECT_NEAR(rl.makespan, r.makespan, kEps);
}

TEST(Overlap, MemoryAddsTheForwardBeforeTheBackwardFrees) {
  const Schedule s = FromCsv(kOneRank);
  SimOptions o;
  o.memory.microbatch_bytes = 100;
  const SimResult r = Simulate(s, o);
  // Two chunks of 1/2 M_B: after 0F0, 1F0 one M_B; the unit's F adds half
  // before its B frees half, so the peak is 1.5.
  EXPECT_NEAR(r.per_rank[0].peak_memory, 1.5, kEps);
  EXPECT_NEAR(r.per_rank[0].peak_memory_bytes, 150, kEps);
  EXPECT_EQ(r.per_rank[0].peak_in_flight, (std::vector<int>{2, 1}));
}

TEST(Overlap, PerStageBytesGiveThePeakInBytes) {
  const Schedule s = FromCsv(kOneRank);
  SimOptions o;
  o.memory.stage_bytes = {100, 40};
  const SimResult r = Simulate(s, o);
  // 0F0 100, 1F0 140, unit: +100 (0F1) = 240, then -40 (1B0) = 200.
  EXPECT_NEAR(r.per_rank[0].peak_memory_bytes, 240, kEps);
  o.memory.stage_bytes = {1};
  EXPECT_THROW(Simulate(s, o), ScheduleError);
}

TEST(Overlap, AUnitCannotHoldTheForwardItsBackwardNeeds) {
  const Schedule s = FromCsv("0F1,(0F0;0B0)OVERLAP_F_B,0B1\n");
  try {
    Validate(s);
    FAIL() << "accepted";
  } catch (const ScheduleError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("rank 0, position 1 ((0F0;0B0)OVERLAP_F_B): this OVERLAP_F_B unit runs both the forward "
                       "and the backward of microbatch 0 of stage 0"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find(">(0F0;0B0)OVERLAP_F_B<"), std::string::npos) << msg;
  }
}

TEST(Overlap, DeadlockNamesThePartThatWaits) {
  // Rank 1's unit needs 0F1 (never sent before rank 0 waits for 1B0, which
  // is inside that unit).
  const Schedule s = FromCsv(
      "0F0,0B0,0F1,0B1\n"
      "1F0,(1F1;1B0)OVERLAP_F_B,1B1\n");
  try {
    Validate(s);
    FAIL() << "accepted";
  } catch (const ScheduleError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("rank 1, position 1 ((1F1;1B0)OVERLAP_F_B): its forward part waits for 0F1 on rank 0"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("rank 0, position 1 (0B0): waits for the input gradient of stage 1 microbatch 0 (rank 1)"),
              std::string::npos)
        << msg;
  }
  EXPECT_THROW(Lower(s), ScheduleError);
}

TEST(Overlap, TraceAndPictureShowTheUnit) {
  const SimResult r = Simulate(FromCsv(kOneRank));
  std::ostringstream trace;
  WriteChromeTrace(r, trace);
  const nlohmann::json j = nlohmann::json::parse(trace.str());
  int units = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["name"] == "F&B") {
      ++units;
      EXPECT_EQ(e["args"]["stage"], 0);
      EXPECT_EQ(e["args"]["microbatch"], 1);
      EXPECT_EQ(e["args"]["backward_stage"], 1);
      EXPECT_EQ(e["args"]["backward_microbatch"], 0);
    }
  }
  EXPECT_EQ(units, 1);
  std::ostringstream svg;
  WriteSvg(r, svg);
  const std::string picture = svg.str();
  EXPECT_NE(picture.find("<g class=\"overlap\""), std::string::npos);
  EXPECT_NE(picture.find("OVERLAP_F_B unit"), std::string::npos);  // the legend
  EXPECT_NE(picture.find("0F1 on rank 0"), std::string::npos);     // its halves' tooltips
  EXPECT_NE(picture.find("1B0 on rank 0"), std::string::npos);
}

}  // namespace
}  // namespace baton
