// The memory a node's processes can still take, read before a run
// allocates anything (the OS room, src/os): through the Env, so tests read
// a fake machine's files.
#ifndef BATON_NODE_MEMORY_H_
#define BATON_NODE_MEMORY_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "baton/env.h"

namespace baton {

// The memory this node's processes can still take: the least of the
// kernel's estimate (MemAvailable, /proc/meminfo) and the room left under
// the limit of the process's own cgroup and of each cgroup above it (v2
// memory.max less memory.current; v1 memory.limit_in_bytes less
// memory.usage_in_bytes; the file cache the kernel would drop,
// inactive_file in memory.stat, counted as room); `source` names which.
struct NodeMemory {
  bool known = false;       // false: nothing readable, not checked
  std::uint64_t bytes = 0;  // known: what the ranks can still have (0: nothing)
  std::string source;
};
// Read through `env` (the process's, or a test's fake): /proc/meminfo,
// /proc/self/cgroup and the cgroup files.
NodeMemory ReadNodeMemory(const Env& env = Env::Default());
// One cgroup's files, as read (tests): its limit ("max", or a number),
// usage and memory.stat text.
struct CgroupMemory {
  std::string where;  // the cgroup's path, for the message
  std::string limit, usage, stat;
};
// The same from the files' texts: meminfo, and the cgroups from the
// process's own up to the root.
NodeMemory NodeMemoryFrom(std::string_view meminfo, const std::vector<CgroupMemory>& cgroups);

}  // namespace baton

#endif  // BATON_NODE_MEMORY_H_
