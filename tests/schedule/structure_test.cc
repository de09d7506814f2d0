#include <gtest/gtest.h>

#include <sstream>

#include "baton/error.h"
#include "baton/schedule.h"

namespace baton {
namespace {

std::string ErrorOf(const std::string& csv) {
  std::istringstream in(csv);
  try {
    CheckStructure(ReadCsv(in, "s.csv"));
  } catch (const ScheduleError& e) {
    return e.what();
  }
  return "";
}

void ExpectError(const std::string& csv, const std::string& part, const std::string& marked) {
  const std::string msg = ErrorOf(csv);
  EXPECT_NE(msg.find(part), std::string::npos) << "message:\n" << msg;
  if (!marked.empty()) {
    EXPECT_NE(msg.find(">" + marked + "<"), std::string::npos) << "message:\n" << msg;
    EXPECT_NE(msg.find("<-- here"), std::string::npos) << "message:\n" << msg;
  }
  EXPECT_NE(msg.find("rank 0"), std::string::npos) << "the grid header is missing:\n" << msg;
}

TEST(Structure, GeneratedSchedulesPass) {
  for (const std::string& name : GeneratorNames()) {
    EXPECT_NO_THROW(CheckStructure(Generate(name, 4, 8)));
    EXPECT_NO_THROW(CheckStructure(Lower(Generate(name, 4, 8))));
  }
}

TEST(Structure, MissingForward) {
  ExpectError("0F0,0B0,0B1\n1F0,1B0,1F1,1B1\n",
              "microbatch 1 never runs forward through stage 0: 0F1 is missing from rank 0", "");
}

TEST(Structure, MissingBackward) {
  ExpectError("0F0,0F1,0B0\n1F0,1B0,1F1,1B1\n", "microbatch 1 never runs backward through stage 0: rank 0 needs 0B1, or 0I1 and 0W1", "");
}

TEST(Structure, DuplicateAction) {
  ExpectError("0F0,0F1,0B0,0B1,0F1\n1F0,1B0,1F1,1B1\n", "0F1 appears twice on rank 0: at positions 1 and 4", "0F1");
}

TEST(Structure, FullAndSplitBackwardTogether) {
  ExpectError("0F0,0B0,0I0,0W0\n1F0,1B0\n", "has a full backward 0B0 and also a split one (0I0)", "0B0");
}

TEST(Structure, SplitBackwardWithoutW) {
  ExpectError("0F0,0I0\n1F0,1B0\n", "microbatch 0 of stage 0 has 0I0 but no 0W0", "");
}

TEST(Structure, BackwardBeforeForward) {
  ExpectError("0B0,0F0\n1F0,1B0\n", "the backward of microbatch 0 comes before its forward 0F0 (position 1)", "0B0");
}

TEST(Structure, WeightBeforeInput) {
  ExpectError("0F0,0W0,0I0\n1F0,1B0\n", "0W0 comes before 0I0 (position 2)", "0W0");
}

TEST(Structure, ActionOnTheWrongRank) {
  Schedule s = Generate1F1B(2, 2);
  s.actions[1][0] = {0, ActionKind::kForward, 0};
  s.actions[0][0] = {1, ActionKind::kForward, 0};
  try {
    CheckStructure(s);
    FAIL() << "accepted";
  } catch (const ScheduleError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0, position 0 (1F0): stage 1 lives on rank 1, so its actions cannot "
                                         "run on rank 0"),
              std::string::npos)
        << e.what();
  }
}

TEST(Structure, MicrobatchOutOfRange) {
  Schedule s = Generate1F1B(2, 2);
  s.actions[0][1].microbatch = 5;
  EXPECT_THROW(CheckStructure(s), ScheduleError);
}

TEST(Structure, LoweredMissingSend) {
  ExpectError("0F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n"
              "1RECV_F0,1F0,1RECV_F1,1B0,1SEND_B0,1F1,1B1,1SEND_B1\n",
              "0F0 crosses to rank 1 but is never sent: 0SEND_F0 is missing after it", "0F0");
}

TEST(Structure, LoweredSendBeforeCompute) {
  ExpectError("0SEND_F0,0F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n"
              "1RECV_F0,1F0,1RECV_F1,1B0,1SEND_B0,1F1,1B1,1SEND_B1\n",
              "0SEND_F0 is sent before it is computed by 0F0 at position 1", "0SEND_F0");
}

TEST(Structure, LoweredMissingReceive) {
  ExpectError("0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n"
              "1F0,1RECV_F1,1B0,1SEND_B0,1F1,1B1,1SEND_B1\n",
              "1F0 needs a message from rank 0 but 1RECV_F0 is missing before it", "1F0");
}

TEST(Structure, MessageBetweenStagesOnOneRank) {
  // Two stages on one rank hand over locally.
  ExpectError("0F0,0SEND_F0,1F0,1B0,0B0\n", "stages 0 and 1 are both on rank 0 and hand over locally, with no message",
              "0SEND_F0");
}

}  // namespace
}  // namespace baton
