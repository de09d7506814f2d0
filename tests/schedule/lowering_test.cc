#include <gtest/gtest.h>

#include <algorithm>

#include "baton/schedule.h"
#include "baton/sim.h"

namespace baton {
namespace {

int Count(const Schedule& s, ActionKind kind) {
  int n = 0;
  for (const auto& row : s.actions) n += std::count_if(row.begin(), row.end(), [&](const Action& a) { return a.kind == kind; });
  return n;
}

// Hand-overs between consecutive stages that live on different ranks.
int CrossingHandOvers(const Schedule& s) {
  int n = 0;
  for (int st = 0; st + 1 < s.stages; ++st) n += s.stage_rank[st] != s.stage_rank[st + 1];
  return n;
}

TEST(Lowering, OneMessageEachWayPerCrossingHandOverAndMicrobatch) {
  for (const std::string& name : GeneratorNames()) {
    for (int p : {1, 2, 4}) {
      const Schedule s = Generate(name, p, 2 * p);
      const Schedule l = Lower(s);
      const int expected = CrossingHandOvers(s) * s.microbatches;
      EXPECT_EQ(Count(l, ActionKind::kSendF), expected) << name << " p=" << p;
      EXPECT_EQ(Count(l, ActionKind::kRecvF), expected);
      EXPECT_EQ(Count(l, ActionKind::kSendB), expected);
      EXPECT_EQ(Count(l, ActionKind::kRecvB), expected);
      EXPECT_EQ(ComputeOnly(l).actions, s.actions);
      EXPECT_NO_THROW(CheckStructure(l));
    }
  }
}

TEST(Lowering, NoMessageBetweenStagesOnTheSameRank) {
  // ZB-V: stages p-1 and p are both on rank p-1.
  const Schedule l = Lower(GenerateZbv(4, 8));
  for (const auto& row : l.actions) {
    for (const Action& a : row) {
      EXPECT_FALSE(a.kind == ActionKind::kSendF && a.stage == 3) << ToString(a);
      EXPECT_FALSE(a.kind == ActionKind::kSendB && a.stage == 4) << ToString(a);
    }
  }
  EXPECT_EQ(Count(l, ActionKind::kSendF), 6 * 8);
}

TEST(Lowering, SendFollowsItsProducerAndReceivesArePlacedBySender) {
  const Schedule l = Lower(Generate1F1B(2, 2));
  auto row = [&](int r) {
    std::vector<std::string> out;
    for (const Action& a : l.actions[r]) out.push_back(ToString(a));
    return out;
  };
  using V = std::vector<std::string>;
  EXPECT_EQ(row(0), (V{"0F0", "0SEND_F0", "0F1", "0SEND_F1", "0RECV_B0", "0B0", "0RECV_B1", "0B1"}));
  EXPECT_EQ(row(1), (V{"1RECV_F0", "1F0", "1RECV_F1", "1B0", "1SEND_B0", "1F1", "1B1", "1SEND_B1"}));
}

TEST(Lowering, LoweringALoweredScheduleChangesNothing) {
  const Schedule l = Lower(GenerateZbH1(4, 4));
  EXPECT_EQ(Lower(l).actions, l.actions);
}

}  // namespace
}  // namespace baton
