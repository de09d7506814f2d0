// What the machine a rank runs on can give the run, read before anything is
// allocated: the node's memory against the plan's bytes for the ranks on it.
#ifndef BATON_TRAIN_RESOURCES_H_
#define BATON_TRAIN_RESOURCES_H_

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

// One rank's need, as rank 0 gathers them.
struct RankNeed {
  int rank = 0;
  std::string host;
  std::uint64_t bytes = 0;     // the plan's (RankMemoryOf(...).total())
  std::string breakdown;       // "parameters 1.2 MiB, gradients ..."
  NodeMemory available;        // as that rank read it
};
// Rank 0: throws ResourceError if the ranks on some node need more than the
// node has, naming the node, its ranks and their bytes, the largest rank's
// breakdown, the memory and its source, and what to change. A node whose
// memory is unknown is not checked.
void CheckNodeMemory(const std::vector<RankNeed>& ranks);

// A record of a RankNeed as text and back (one line, tab-separated fields),
// for gathering over the transport.
std::string EncodeNeed(const RankNeed& need);
RankNeed DecodeNeed(const std::string& text);

}  // namespace baton

#endif  // BATON_TRAIN_RESOURCES_H_
