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

std::string Slurp(const char* path) {
  std::ifstream in(path);
  if (!in) return "";
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

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

NodeMemory NodeMemoryFrom(std::string_view meminfo, std::string_view cgroup_limit, std::string_view cgroup_usage) {
  NodeMemory m;
  const std::size_t at = meminfo.find("MemAvailable:");
  std::uint64_t kib = 0;
  if (at != std::string_view::npos && Number(meminfo.substr(at + 13), &kib)) {
    m.bytes = kib * 1024;
    m.source = "MemAvailable in /proc/meminfo";
  }
  std::uint64_t limit = 0, usage = 0;
  if (Number(cgroup_limit, &limit) && limit < (std::uint64_t{1} << 60)) {  // v1 writes "no limit" as ~2^63
    Number(cgroup_usage, &usage);
    const std::uint64_t room = limit > usage ? limit - usage : 0;
    if (m.bytes == 0 || room < m.bytes) {
      m.bytes = room;
      m.source = fmt::format("the cgroup's memory limit {:.0f} MiB less its use {:.0f} MiB", MiB(limit), MiB(usage));
    }
  }
  return m;
}

NodeMemory ReadNodeMemory() {
  std::string limit = Slurp("/sys/fs/cgroup/memory.max"), usage = Slurp("/sys/fs/cgroup/memory.current");
  if (limit.empty()) {
    limit = Slurp("/sys/fs/cgroup/memory/memory.limit_in_bytes");
    usage = Slurp("/sys/fs/cgroup/memory/memory.usage_in_bytes");
  }
  return NodeMemoryFrom(Slurp("/proc/meminfo"), limit, usage);
}

std::string HostName() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "localhost";
  return name;
}

void CheckNodeMemory(const std::vector<RankNeed>& ranks) {
  std::map<std::string, std::vector<const RankNeed*>> nodes;
  for (const RankNeed& r : ranks) nodes[r.host].push_back(&r);
  for (const auto& [host, on] : nodes) {
    const NodeMemory& mem = on.front()->available;
    if (mem.bytes == 0) continue;
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
  return fmt::format("{}\t{}\t{}\t{}\t{}\t{}", n.rank, clean(n.host), n.bytes, clean(n.breakdown), n.available.bytes,
                     clean(n.available.source));
}

RankNeed DecodeNeed(const std::string& text) {
  std::vector<std::string> f;
  std::size_t start = 0;
  for (std::size_t tab; (tab = text.find('\t', start)) != std::string::npos; start = tab + 1) {
    f.push_back(text.substr(start, tab - start));
  }
  f.push_back(text.substr(start));
  if (f.size() != 6) throw Error("a rank's memory record is malformed: " + Quote(text));
  RankNeed n;
  n.rank = std::atoi(f[0].c_str());
  n.host = f[1];
  n.bytes = std::strtoull(f[2].c_str(), nullptr, 10);
  n.breakdown = f[3];
  n.available.bytes = std::strtoull(f[4].c_str(), nullptr, 10);
  n.available.source = f[5];
  return n;
}

}  // namespace baton
