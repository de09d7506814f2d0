#include "resources.h"

#include <algorithm>
#include <cstdlib>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "baton/error.h"

namespace baton {
namespace {

double MiB(std::uint64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

}  // namespace

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
