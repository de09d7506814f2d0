// Which ranks share cores: a host running more ranks than the CPUs they
// may use shares them, and `baton bench` simulates that (SimOptions's core
// pools) instead of assuming a core per rank.
#ifndef BATON_RUNTIME_CORES_H_
#define BATON_RUNTIME_CORES_H_

#include <string>
#include <vector>

#include "baton/comm.h"

namespace baton {

// This rank's host and the CPUs it may run on: "host 0,1,".
std::string CoreSignature();

struct CoreSharing {
  bool shared = false;  // some host runs more ranks than its CPUs
  int cores = 0;        // CPUs of all hosts (the union of their ranks' sets)
  // When shared, for the simulated pipeline: per pipeline rank its pool
  // (its host), and per pool its cores; else empty.
  std::vector<int> core_pool;
  std::vector<double> pool_cores;
};

// From every world rank's CoreSignature (in world order), for `layout`'s
// pipeline replicated D times (world rank = pipeline rank x D + replica).
// Pipeline rank k is simulated in the pool of the host of its first
// replica's world rank; a pool's cores are its host's scaled by the pipeline
// ranks simulated there over the world ranks running there (a simulated
// rank stands for its D replicas).
CoreSharing FindCoreSharing(const std::vector<std::string>& signatures, const ReplicaLayout& layout);

}  // namespace baton

#endif  // BATON_RUNTIME_CORES_H_
