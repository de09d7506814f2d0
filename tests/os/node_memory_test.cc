// The node's memory as the kernel and the cgroups report it, read through
// the OS room's Env.
#include "baton/node_memory.h"

#include <gtest/gtest.h>

#include <string>

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

}  // namespace
}  // namespace baton
