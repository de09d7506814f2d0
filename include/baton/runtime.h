// The training runtime: `baton train` on every rank of an MPI job.
#ifndef BATON_RUNTIME_H_
#define BATON_RUNTIME_H_

#include <cstdint>
#include <string>
#include <vector>

#include "baton/comm.h"
#include "baton/config.h"

namespace baton {

struct TrainSummary {
  std::int64_t steps = 0;
  int epochs_done = 0;
  double last_loss = 0.0;       // mean loss of the last step (rank 0)
  double test_accuracy = -1.0;  // at the last evaluation (rank 0), -1 if none
  double seconds = 0.0;
};

// Runs the configured training on this rank. Collective: every rank of the
// transport calls it with the same config. Setup errors (sizes, schedule,
// data files) are agreed on by all ranks before anything runs: each rank
// throws the same or, if only some ranks failed, the others throw a short
// "another rank failed" error, so the job ends everywhere.
TrainSummary Train(const TrainConfig& config, Transport& transport);

}  // namespace baton

#endif  // BATON_RUNTIME_H_
