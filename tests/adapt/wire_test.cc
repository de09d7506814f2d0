// What the adaptive plans send between ranks (src/adapt/wire.h): each
// encoding reads back what was written, and a text that is not one is one
// error naming what was being read.
#include "wire.h"

#include <gtest/gtest.h>

#include "baton/error.h"

namespace baton {
namespace {

TEST(Wire, MessageTimesReadBackExactly) {
  RankMessageTimes t{3, 1, {{true, 2, 17, 0.125}, {false, 4, (std::int64_t{1} << 40) + 5, 1.0 / 3.0}}, 0.1};
  const RankMessageTimes back = ParseMessageTimes(MessageTimesJson(t));
  EXPECT_EQ(back.rank, 3);
  EXPECT_EQ(back.replica, 1);
  EXPECT_EQ(back.compute_s, 0.1);
  ASSERT_EQ(back.times.size(), 2u);
  EXPECT_TRUE(back.times[0].sent);
  EXPECT_FALSE(back.times[1].sent);
  EXPECT_EQ(back.times[1].peer, 4);
  EXPECT_EQ(back.times[1].key, (std::int64_t{1} << 40) + 5);
  EXPECT_EQ(back.times[1].seconds, 1.0 / 3.0);  // every bit: a link's time is a difference of two
  EXPECT_TRUE(ParseMessageTimes(MessageTimesJson({0, 0, {}, 0})).times.empty());
}

TEST(Wire, ADecisionReadsBack) {
  const ReplanDecision d{"interleaved_1f1b", 2, {0, 3, 5, 9, 12}, {5, 3}};
  const ReplanDecision back = ParseDecision(DecisionJson(d));
  EXPECT_EQ(back.schedule, d.schedule);
  EXPECT_EQ(back.chunks, 2);
  EXPECT_EQ(back.bounds, d.bounds);
  EXPECT_EQ(back.split, d.split);
  EXPECT_TRUE(ParseDecision(DecisionJson({"1f1b", 1, {0, 4}, {}})).split.empty());
}

TEST(Wire, TensorNamesAndMovesReadBackWhateverTheNames) {
  // Names with the characters a line format would split on.
  const TensorNames n{{"blocks.0.attn\tq", "a\nb"}, {"head \"tied\""}};
  const TensorNames back = ParseTensorNames(TensorNamesJson(n));
  EXPECT_EQ(back.held, n.held);
  EXPECT_EQ(back.wanted, n.wanted);
  const std::vector<Move> moves{{"w\t1", 0, 3}, {"b", 2, 2}};
  const std::vector<Move> read = ParseMoves(MovesJson(moves));
  ASSERT_EQ(read.size(), 2u);
  EXPECT_EQ(read[0].name, "w\t1");
  EXPECT_EQ(read[0].from, 0);
  EXPECT_EQ(read[0].to, 3);
  EXPECT_EQ(read[1].from, 2);
}

TEST(Wire, TextThatIsNotTheEncodingIsOneError) {
  try {
    ParseDecision("1f1b 1 0 4 /");  // the line format this encoding replaced
    FAIL() << "no error";
  } catch (const RunError& e) {
    EXPECT_NE(std::string(e.what()).find("a re-plan decision is not what a rank sends"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ParseMessageTimes("{\"rank\": 0}"), RunError);
  EXPECT_THROW(ParseMoves("[{\"name\": \"w\"}]"), RunError);
  EXPECT_THROW(ParseTensorNames("[]"), RunError);
}

}  // namespace
}  // namespace baton
