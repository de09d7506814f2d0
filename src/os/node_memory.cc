// The memory a node's processes can still take (baton/node_memory.h), read
// through the Env.
#include "baton/node_memory.h"

#include <fmt/format.h>

namespace baton {
namespace {

// A whole number at the start of `text` (after blanks); false if none.
bool Number(std::string_view text, std::uint64_t* out) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  if (text.empty() || text.front() < '0' || text.front() > '9') return false;
  std::uint64_t v = 0;
  while (!text.empty() && text.front() >= '0' && text.front() <= '9') {
    v = v * 10 + static_cast<std::uint64_t>(text.front() - '0');
    text.remove_prefix(1);
  }
  *out = v;
  return true;
}

double MiB(std::uint64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

}  // namespace

NodeMemory NodeMemoryFrom(std::string_view meminfo, const std::vector<CgroupMemory>& cgroups) {
  NodeMemory m;
  const std::size_t at = meminfo.find("MemAvailable:");
  std::uint64_t kib = 0;
  if (at != std::string_view::npos && Number(meminfo.substr(at + 13), &kib)) {
    m.known = true;
    m.bytes = kib * 1024;
    m.source = "MemAvailable in /proc/meminfo";
  }
  for (const CgroupMemory& g : cgroups) {
    std::uint64_t limit = 0, usage = 0, inactive = 0;
    // "max" (v2) or a number near 2^63 (v1): no limit here.
    if (!Number(g.limit, &limit) || limit >= (std::uint64_t{1} << 60) || !Number(g.usage, &usage)) continue;
    const std::size_t line = g.stat.find("inactive_file ");
    if (line != std::string::npos && (line == 0 || g.stat[line - 1] == '\n')) {
      Number(std::string_view(g.stat).substr(line + 14), &inactive);
    }
    const std::uint64_t used = usage > inactive ? usage - inactive : 0;
    const std::uint64_t room = limit > used ? limit - used : 0;
    if (!m.known || room < m.bytes) {
      m.known = true;
      m.bytes = room;
      m.source = fmt::format("the memory limit {:.0f} MiB of cgroup {} less its use {:.0f} MiB", MiB(limit), g.where,
                             MiB(used));
    }
  }
  return m;
}

namespace {

// The process's cgroups with a memory controller, its own first, then each
// one above it, as they are mounted here.
std::vector<CgroupMemory> OwnCgroups(const Env& env) {
  const std::string self = env.ReadSystemFile("/proc/self/cgroup");
  std::string v2, v1;  // the process's paths
  std::size_t start = 0;
  for (std::size_t end; (end = self.find('\n', start)) != std::string::npos; start = end + 1) {
    const std::string line = self.substr(start, end - start);
    const std::size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (line.compare(0, 2, "0:") == 0 && controllers.empty()) v2 = path;
    if (("," + controllers + ",").find(",memory,") != std::string::npos) v1 = path;
  }
  std::vector<CgroupMemory> out;
  auto walk = [&](const std::string& mount, std::string path, const char* limit, const char* usage) {
    for (;;) {
      const std::string dir = mount + (path == "/" ? "" : path);
      CgroupMemory g{path, env.ReadSystemFile(dir + "/" + limit), env.ReadSystemFile(dir + "/" + usage),
                     env.ReadSystemFile(dir + "/memory.stat")};
      if (!g.limit.empty()) out.push_back(std::move(g));
      if (path.empty() || path == "/") break;
      const std::size_t slash = path.rfind('/');
      path = slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
    }
  };
  if (!v1.empty()) walk("/sys/fs/cgroup/memory", v1, "memory.limit_in_bytes", "memory.usage_in_bytes");
  if (!v2.empty()) walk("/sys/fs/cgroup", v2, "memory.max", "memory.current");
  return out;
}

}  // namespace

NodeMemory ReadNodeMemory(const Env& env) {
  return NodeMemoryFrom(env.ReadSystemFile("/proc/meminfo"), OwnCgroups(env));
}

}  // namespace baton
