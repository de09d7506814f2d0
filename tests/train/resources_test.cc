// The node's memory as the kernel and the cgroup report it, and the check
// of the plan's bytes against it.
#include "resources.h"

#include <gtest/gtest.h>

#include <string>

#include "baton/error.h"

namespace baton {
namespace {

constexpr const char* kMeminfo = "MemTotal:       24000000 kB\nMemFree:  100 kB\nMemAvailable:   20000000 kB\n";

TEST(NodeMemory, TheLeastOfMemAvailableAndEachCgroupsRoom) {
  NodeMemory m = NodeMemoryFrom(kMeminfo, {{"/job", "max\n", "123", ""}});
  EXPECT_TRUE(m.known);
  EXPECT_EQ(m.bytes, 20000000ull * 1024);
  EXPECT_EQ(m.source, "MemAvailable in /proc/meminfo");
  // The job's cgroup: 4 GiB, 1 GiB used of which 256 MiB is file cache the kernel would drop.
  m = NodeMemoryFrom(kMeminfo, {{"/job", "4294967296\n", "1073741824\n", "cache 1\ninactive_file 268435456\n"}});
  EXPECT_EQ(m.bytes, (4ull << 30) - (768ull << 20));
  EXPECT_NE(m.source.find("the memory limit 4096 MiB of cgroup /job less its use 768 MiB"), std::string::npos)
      << m.source;
  // A tighter limit above it wins; cgroup v1 writes "no limit" as a huge number.
  m = NodeMemoryFrom(kMeminfo, {{"/job/step", "9223372036854771712", "5", ""}, {"/job", "2147483648", "0", ""}});
  EXPECT_EQ(m.bytes, 2ull << 30);
  // At its limit: known, and nothing left.
  m = NodeMemoryFrom(kMeminfo, {{"/job", "1048576", "2097152", ""}});
  EXPECT_TRUE(m.known);
  EXPECT_EQ(m.bytes, 0u);
  EXPECT_FALSE(NodeMemoryFrom("", {}).known);
}

// Read through the OS room's fake: the process's cgroup (v2) from
// /proc/self/cgroup, then the limits of it and of each cgroup above it.
TEST(NodeMemory, ReadThroughTheEnvFromTheProcesssCgroupUp) {
  FakeMachine m;
  m.files = {{"/proc/meminfo", kMeminfo},
             {"/proc/self/cgroup", "0::/job/step\n"},
             {"/sys/fs/cgroup/job/step/memory.max", "max\n"},
             {"/sys/fs/cgroup/job/step/memory.current", "10\n"},
             {"/sys/fs/cgroup/job/memory.max", "3221225472\n"},
             {"/sys/fs/cgroup/job/memory.current", "1073741824\n"},
             {"/sys/fs/cgroup/job/memory.stat", "inactive_file 0\n"}};
  const NodeMemory mem = ReadNodeMemory(*MakeFakeEnv(m));
  EXPECT_TRUE(mem.known);
  EXPECT_EQ(mem.bytes, 2ull << 30);
  EXPECT_NE(mem.source.find("cgroup /job less its use 1024 MiB"), std::string::npos) << mem.source;
  EXPECT_FALSE(ReadNodeMemory(*MakeFakeEnv({})).known);
}

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
