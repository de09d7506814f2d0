// What the machine a rank runs on can give the run, read before anything is
// allocated: the node's memory against the plan's bytes for the ranks on it.
#ifndef BATON_TRAIN_RESOURCES_H_
#define BATON_TRAIN_RESOURCES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "baton/node_memory.h"

namespace baton {

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
