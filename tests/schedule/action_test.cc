#include "baton/action.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "baton/error.h"

namespace baton {
namespace {

TEST(Action, ParsesEveryKindInPyTorchForm) {
  struct Case {
    const char* text;
    Action action;
  };
  const Case cases[] = {
      {"2F0", {2, ActionKind::kForward, 0}},
      {"1B3", {1, ActionKind::kBackward, 3}},
      {"1I3", {1, ActionKind::kBackwardInput, 3}},
      {"1W3", {1, ActionKind::kBackwardWeight, 3}},
      {"0SEND_F1", {0, ActionKind::kSendF, 1}},
      {"1RECV_F1", {1, ActionKind::kRecvF, 1}},
      {"12SEND_B105", {12, ActionKind::kSendB, 105}},
      {"0RECV_B7", {0, ActionKind::kRecvB, 7}},
      {"0UNSHARD", {0, ActionKind::kUnshard, kNoMicrobatch}},
      {"3RESHARD", {3, ActionKind::kReshard, kNoMicrobatch}},
      {"1REDUCE_GRAD", {1, ActionKind::kReduceGrad, kNoMicrobatch}},
  };
  for (const Case& c : cases) {
    const Action a = ParseAction(c.text, "test");
    EXPECT_EQ(a, c.action) << c.text;
    EXPECT_EQ(ToString(a), c.text);
  }
}

TEST(Action, EmptyCellIsIdleAndBlanksAreIgnored) {
  EXPECT_EQ(ParseAction("", "t").kind, ActionKind::kIdle);
  EXPECT_EQ(ParseAction("   ", "t").kind, ActionKind::kIdle);
  EXPECT_EQ(ParseAction(" 1F0 ", "t"), (Action{1, ActionKind::kForward, 0}));
  EXPECT_EQ(ToString(Action{}), "");
}

std::string ErrorOf(const std::string& cell) {
  try {
    ParseAction(cell, "sched.csv: row 2 (rank 1), column 4");
  } catch (const ScheduleError& e) {
    return e.what();
  }
  return "";
}

TEST(Action, RejectsMalformedCellsQuotingCellAndPlace) {
  const char* bad[] = {"1F-1", "-1F0", "+1F0", "0X3", "2F0abc", "F0", "1F", "0UNSHARD3",
                       "99999999999F0", "1F99999999999", "1SEND_F", "1f0", "1 F0", "1F0 1B0"};
  for (const char* cell : bad) {
    const std::string msg = ErrorOf(cell);
    ASSERT_FALSE(msg.empty()) << cell << " was accepted";
    EXPECT_NE(msg.find(std::string("\"") + cell + "\""), std::string::npos) << msg;
    EXPECT_NE(msg.find("row 2 (rank 1), column 4"), std::string::npos) << msg;
  }
  EXPECT_NE(ErrorOf("0X3").find("unknown kind \"X\""), std::string::npos);
  EXPECT_NE(ErrorOf("2F0abc").find("trailing characters \"abc\""), std::string::npos);
  EXPECT_NE(ErrorOf("1F-1").find("sign"), std::string::npos);
  EXPECT_NE(ErrorOf("99999999999F0").find("out of range"), std::string::npos);
  EXPECT_NE(ErrorOf("0UNSHARD3").find("takes no microbatch"), std::string::npos);
  EXPECT_NE(ErrorOf("1F").find("needs a microbatch"), std::string::npos);
}

TEST(Action, OverlapIsPyTorchsSubActionForm) {
  // PyTorch's _Action with sub_actions prints "(" + ";".join(reprs) + ")"
  // + "OVERLAP_F_B"; ScheduleDualPipeV pairs an F with a full backward B.
  const Action a = ParseAction("(0F3;7B2)OVERLAP_F_B", "t");
  EXPECT_EQ(a, OverlapFB(0, 3, 7, 2));
  EXPECT_EQ(a.kind, ActionKind::kOverlapFB);
  EXPECT_EQ(a.stage, 0);
  EXPECT_EQ(a.microbatch, 3);
  EXPECT_EQ(a.backward_stage, 7);
  EXPECT_EQ(a.backward_microbatch, 2);
  EXPECT_EQ(ToString(a), "(0F3;7B2)OVERLAP_F_B");
  EXPECT_EQ(KindName(ActionKind::kOverlapFB), "OVERLAP_F_B");
  EXPECT_TRUE(IsCompute(a.kind));
  EXPECT_EQ(ParseAction(" (12F105; 3B0 )OVERLAP_F_B ", "t"), OverlapFB(12, 105, 3, 0));
  // Its parts, in order, are what every pass tracks.
  std::vector<Action> parts;
  ForEachPart(a, [&](const Action& part) { parts.push_back(part); });
  EXPECT_EQ(parts, (std::vector<Action>{{0, ActionKind::kForward, 3}, {7, ActionKind::kBackward, 2}}));
  // A plain action is its own only part; the other fields keep their defaults.
  parts.clear();
  ForEachPart(Action{1, ActionKind::kBackwardInput, 4}, [&](const Action& part) { parts.push_back(part); });
  EXPECT_EQ(parts, (std::vector<Action>{{1, ActionKind::kBackwardInput, 4}}));
  EXPECT_EQ(ParseAction("2F0", "t").backward_stage, -1);
}

TEST(Action, RejectsMalformedOverlapsNamingTheRule) {
  struct Case {
    const char* cell;
    const char* why;
  };
  const Case cases[] = {
      {"(0F3;1B2)", "must be followed by OVERLAP_F_B, not \"\""},
      {"(0F3;1B2)OVERLAP_F_Bx", "not \"OVERLAP_F_Bx\""},
      {"(0F3;1B2", "never closed"},
      {"(0F3)OVERLAP_F_B", "exactly two actions separated by ';'"},
      {"(0F3;1B2;2F0)OVERLAP_F_B", "exactly two actions separated by ';'"},
      {"(1B2;0F3)OVERLAP_F_B", "a forward F then a full backward B (PyTorch's DualPipeV form), not B then F"},
      {"(0F3;1I2)OVERLAP_F_B", "not F then I"},
      {"(0F3;1SEND_B2)OVERLAP_F_B", "not F then SEND_B"},
      {"(;1B2)OVERLAP_F_B", "exactly two single actions"},
      {"((0F3;1B2)OVERLAP_F_B;1B2)OVERLAP_F_B", "must be followed by OVERLAP_F_B"},
      {"0OVERLAP_F_B3", "OVERLAP_F_B is written as its two parts in parentheses"},
      {"(0F3;1B-2)OVERLAP_F_B", "sign"},
  };
  for (const Case& c : cases) {
    const std::string msg = ErrorOf(c.cell);
    ASSERT_FALSE(msg.empty()) << c.cell << " was accepted";
    EXPECT_NE(msg.find(c.why), std::string::npos) << c.cell << ": " << msg;
    EXPECT_NE(msg.find("row 2 (rank 1), column 4"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace baton
