// The check of the plan's bytes against each node's memory (the memory
// itself: tests/os/node_memory_test).
#include "resources.h"

#include <gtest/gtest.h>

#include <string>

#include "baton/error.h"

namespace baton {
namespace {

TEST(NodeMemory, RanksOnANodeThatNeedMoreThanItHasAreRefused) {
  const NodeMemory mem{true, 1000ull << 20, "MemAvailable in /proc/meminfo"};
  std::vector<RankNeed> needs = {{0, "a", 600ull << 20, "parameters 500 MiB", mem},
                                 {1, "a", 300ull << 20, "parameters 250 MiB", mem},
                                 {2, "b", 900ull << 20, "parameters 800 MiB", mem}};
  EXPECT_NO_THROW(CheckNodeMemory(needs));
  needs[1].bytes = 500ull << 20;
  try {
    CheckNodeMemory(needs);
    FAIL() << "node a over its memory";
  } catch (const ResourceError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("the plan needs 1100.0 MiB on host a (rank 0 600.0 MiB, rank 1 500.0 MiB)"), std::string::npos)
        << m;
    EXPECT_NE(m.find("but the host has 1000.0 MiB available (MemAvailable in /proc/meminfo)"), std::string::npos) << m;
    EXPECT_NE(m.find("the largest, rank 0: parameters 500 MiB"), std::string::npos) << m;
  }
  needs[0].available.known = needs[1].available.known = false;  // unknown: not checked
  EXPECT_NO_THROW(CheckNodeMemory(needs));
}

TEST(NodeMemory, ANeedTravelsAsOneLine) {
  const RankNeed n{3, "node\t7", 12345, "parameters\n1 MiB", {true, 999, "MemAvailable"}};
  const RankNeed back = DecodeNeed(EncodeNeed(n));
  EXPECT_EQ(back.rank, 3);
  EXPECT_EQ(back.host, "node 7");
  EXPECT_EQ(back.bytes, 12345u);
  EXPECT_EQ(back.breakdown, "parameters 1 MiB");
  EXPECT_TRUE(back.available.known);
  EXPECT_EQ(back.available.bytes, 999u);
  EXPECT_THROW(DecodeNeed("1\t2"), Error);
}

}  // namespace
}  // namespace baton
