#include "resources.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "baton/error.h"

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

void CheckNodeMemory(const std::vector<RankNeed>& ranks) {
  std::map<std::string, std::vector<const RankNeed*>> nodes;
  for (const RankNeed& r : ranks) nodes[r.host].push_back(&r);
  for (const auto& [host, on] : nodes) {
    const NodeMemory& mem = on.front()->available;
    if (!mem.known) continue;
    std::uint64_t total = 0;
    const RankNeed* largest = on.front();
    std::vector<std::string> each;
    for (const RankNeed* r : on) {
      total += r->bytes;
      if (r->bytes > largest->bytes) largest = r;
      each.push_back(fmt::format("rank {} {:.1f} MiB", r->rank, MiB(r->bytes)));
    }
    if (total <= mem.bytes) continue;
    throw ResourceError(fmt::format(
        "the plan needs {:.1f} MiB on host {} ({}), but the host has {:.1f} MiB available ({}); the largest, "
        "rank {}: {}. Nothing was allocated. Lower the model's sizes or train.batch_size, add microbatches or "
        "ranks, checkpoint activations (pipeline.checkpointing), or shard the optimizer state (data_parallel.zero: 1)",
        MiB(total), host, fmt::join(each, ", "),
        MiB(mem.bytes), mem.source, largest->rank, largest->breakdown));
  }
}

std::string EncodeNeed(const RankNeed& n) {
  auto clean = [](std::string s) {
    std::replace(s.begin(), s.end(), '\t', ' ');
    std::replace(s.begin(), s.end(), '\n', ' ');
    return s;
  };
  return fmt::format("{}\t{}\t{}\t{}\t{}\t{}\t{}", n.rank, clean(n.host), n.bytes, clean(n.breakdown),
                     n.available.known ? 1 : 0, n.available.bytes, clean(n.available.source));
}

RankNeed DecodeNeed(const std::string& text) {
  std::vector<std::string> f;
  std::size_t start = 0;
  for (std::size_t tab; (tab = text.find('\t', start)) != std::string::npos; start = tab + 1) {
    f.push_back(text.substr(start, tab - start));
  }
  f.push_back(text.substr(start));
  if (f.size() != 7) throw Error("a rank's memory record is malformed: " + Quote(text));
  RankNeed n;
  n.rank = std::atoi(f[0].c_str());
  n.host = f[1];
  n.bytes = std::strtoull(f[2].c_str(), nullptr, 10);
  n.breakdown = f[3];
  n.available.known = f[4] == "1";
  n.available.bytes = std::strtoull(f[5].c_str(), nullptr, 10);
  n.available.source = f[6];
  return n;
}

}  // namespace baton
