#include "cores.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <sstream>

namespace baton {

std::string CoreSignature() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::string out = host;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return out + " ?";
  out += ' ';
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) out += std::to_string(c) + ",";
  }
  return out;
}

CoreSharing FindCoreSharing(const std::vector<std::string>& signatures, const ReplicaLayout& layout) {
  CoreSharing c;
  const int pipeline_ranks = layout.pipeline_ranks;
  if (signatures.size() != static_cast<std::size_t>(pipeline_ranks) * static_cast<std::size_t>(layout.replicas)) {
    return c;
  }
  std::vector<std::string> hosts;
  std::vector<std::set<int>> cpus;
  std::vector<int> world_ranks, host_of(signatures.size());
  for (std::size_t w = 0; w < signatures.size(); ++w) {
    const std::string& sig = signatures[w];
    const std::size_t space = sig.rfind(' ');
    const std::string host = sig.substr(0, space);
    std::size_t h = std::find(hosts.begin(), hosts.end(), host) - hosts.begin();
    if (h == hosts.size()) {
      hosts.push_back(host);
      cpus.emplace_back();
      world_ranks.push_back(0);
    }
    host_of[w] = static_cast<int>(h);
    ++world_ranks[h];
    std::istringstream list(sig.substr(space + 1));
    for (std::string id; std::getline(list, id, ',');) {
      if (!id.empty() && id != "?") cpus[h].insert(std::stoi(id));
    }
  }
  std::vector<int> simulated(hosts.size(), 0);
  // Pipeline rank k is simulated where its first replica runs.
  auto host_of_pipeline_rank = [&](int k) { return host_of[static_cast<std::size_t>(layout.World(k, 0))]; };
  for (int k = 0; k < pipeline_ranks; ++k) ++simulated[host_of_pipeline_rank(k)];
  std::vector<int> pool_of_host(hosts.size(), -1);
  for (std::size_t h = 0; h < hosts.size(); ++h) {
    const int n = std::max<int>(1, static_cast<int>(cpus[h].size()));
    c.cores += n;
    if (world_ranks[h] > n) c.shared = true;
    if (simulated[h] == 0) continue;  // only other replicas run there
    pool_of_host[h] = static_cast<int>(c.pool_cores.size());
    c.pool_cores.push_back(double(n) * simulated[h] / world_ranks[h]);
  }
  for (int k = 0; k < pipeline_ranks; ++k) {
    c.core_pool.push_back(pool_of_host[static_cast<std::size_t>(host_of_pipeline_rank(k))]);
  }
  if (!c.shared) {
    c.core_pool.clear();
    c.pool_cores.clear();
  }
  return c;
}

}  // namespace baton
