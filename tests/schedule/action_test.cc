#include "baton/action.h"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace baton
