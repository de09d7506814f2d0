// Tuning a config: `baton tune`'s search over schedule x microbatches x
// chunks x checkpointing policy x placement x ZeRO stage for a config's model on its
// ranks, each candidate priced from a profile. Returns the tuner core's
// report (baton/tune.h); the command formats it and writes the winner.
#ifndef BATON_TUNE_CONFIG_H_
#define BATON_TUNE_CONFIG_H_

#include <string>
#include <vector>

#include "baton/choices.h"
#include "baton/config.h"
#include "baton/profile.h"
#include "baton/tune.h"

namespace baton {

// Searches schedule x microbatches x chunks x checkpointing policy x
// placement for the config's model on its ranks with the simulator
// (baton/tune.h), from the profile's costs (PriceStage) and each stage's
// memory from its plan (PlanShape, PlanStageAlone, StaticBytesCache: the
// sums PlanMemory makes).
struct TuneRequest {
  double memory_bytes = 0;              // per-rank budget, > 0
  std::vector<std::string> schedules;   // empty: every generator
  std::vector<int> microbatches;        // empty: p, 2p, 4p, 8p that divide the batch
  std::vector<int> chunks;              // empty: 2, 4
  std::vector<Checkpointing> policies;  // empty: none, selective, full
  // Sequence slices to try (a GPT; the schedules that run them) and their splits;
  // empty: the config's own.
  std::vector<int> slices;
  std::vector<SeqSplit> seq_splits;
  // ZeRO stages to try (data_parallel.zero); empty: with replicas 0-3 on
  // the CPU (0 and 1 on a GPU), without them 0.
  std::vector<int> zero;
  bool placement = true;                // search the placement (false: the config's partition)
};
// The microbatch counts tune tries by default: p, 2p, 4p, 8p that divide
// the batch (each replica's share), and the config's own.
std::vector<int> DefaultMicrobatches(const TrainConfig& config);
// Every candidate simulated and ranked (TuneReport). Throws ConfigError
// for a bad request; nothing fitting is not an error: the report's
// `smallest` says the least memory any candidate needs, and which.
TuneReport TuneConfig(const TrainConfig& config, const TuneRequest& request, const Profile& profile);

}  // namespace baton

#endif  // BATON_TUNE_CONFIG_H_
