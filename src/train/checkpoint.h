// Checkpoints: every rank writes its stages' parameters and optimizer state
// as a safetensors shard (PyTorch names; optimizer state as
// "{name}.exp_avg", ...), then rank 0 writes a manifest naming every shard
// with its size and CRC-32. Shards and manifest are written to temporary
// names, synced and renamed, and the manifest only after every shard is
// durable, so a crash at any moment leaves the previous checkpoint whole.
//
// Layout: DIR/step-00000004/{rank-00000.safetensors, ..., manifest.json}.
//
// With D replicas (data parallelism) the first replica's pipeline writes
// the shards, one per pipeline rank (the replicas hold the same weights);
// under ZeRO the replicas' optimizer shards are gathered into it first, so
// a checkpoint is the same whatever D wrote it, and a run with another D
// resumes from it.
#ifndef BATON_TRAIN_CHECKPOINT_H_
#define BATON_TRAIN_CHECKPOINT_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "baton/config.h"
#include "baton/plan.h"
#include "baton/train.h"
#include "params.h"

namespace baton {

// A fingerprint of what a checkpoint's numbers depend on: the model, the
// pipeline, the data and the optimizer (not the run's length or outputs, nor
// the replica count).
std::string ConfigDigest(const TrainConfig& config);

// What a checkpoint records of its run, and what a run must match to resume
// from one.
struct CheckpointRun {
  std::string digest;               // ConfigDigest of the run's config
  std::string schedule;             // the lowered schedule's name
  int ranks = 0;                    // of the pipeline
  int chunks = 0, microbatches = 0;
  std::vector<int> partition;       // first top-level layer of each stage
  int data_parallel = 1;            // replicas (recorded; another count resumes)
  bool zero = false;                // optimizer state sharded (recorded)
};
CheckpointRun CheckpointRunOf(const TrainConfig& config, const RunPlan& plan);

// Where checkpoints go and how many stay.
struct CheckpointPlace {
  std::string dir;
  int keep = 1;  // the newest complete checkpoints kept
};

// Collective: every rank of the first replica writes its shard of step
// `step` (the other replicas only lend their optimizer shards under ZeRO);
// rank 0 writes the manifest and keeps the newest `place.keep` complete
// checkpoints. `between` runs on every rank after the shards are durable
// and before the manifest (fault injection tests a crash there).
void SaveCheckpoint(const CheckpointPlace& place, const CheckpointRun& run, const RunComms& comms, ParamStore& store,
                    std::int64_t step, const std::function<void()>& between = {});

// Collective: loads the newest complete checkpoint under `dir` into the
// parameters and optimizers and returns its step. A checkpoint whose
// digest, ranks, schedule, chunks, microbatches or partition differ from
// `run` is refused with a ConfigError saying what differs; no checkpoint
// is an error too.
std::int64_t LoadCheckpoint(const std::string& dir, const CheckpointRun& run, const RunComms& comms,
                            ParamStore& store);

}  // namespace baton

#endif  // BATON_TRAIN_CHECKPOINT_H_
