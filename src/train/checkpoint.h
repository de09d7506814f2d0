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
#ifndef BATON_RUNTIME_CHECKPOINT_H_
#define BATON_RUNTIME_CHECKPOINT_H_

#include <cstdint>
#include <string>

#include "setup.h"

namespace baton {

// A fingerprint of what a checkpoint's numbers depend on: the model, the
// pipeline, the data and the optimizer (not the run's length or outputs, nor
// the replica count).
std::string ConfigDigest(const TrainConfig& config);

// Collective: every rank writes its shard of step `step`; rank 0 writes the
// manifest and keeps the newest `checkpoint.keep` complete checkpoints.
void SaveCheckpoint(const TrainConfig& config, const RunComms& comms, RunSetup& u, std::int64_t step);

// Collective: loads the newest complete checkpoint under `dir` into the
// stages and optimizers and returns its step. A checkpoint whose digest,
// ranks, schedule, chunks or partition differ from this run is refused with
// a ConfigError saying what differs; no checkpoint is an error too.
std::int64_t LoadCheckpoint(const TrainConfig& config, const RunComms& comms, RunSetup& u, const std::string& dir);

}  // namespace baton

#endif  // BATON_RUNTIME_CHECKPOINT_H_
