// Checkpoints: every rank writes its stages' parameters and optimizer state
// as a safetensors shard (PyTorch names; optimizer state as
// "{name}.exp_avg", ...), then rank 0 writes a manifest naming every shard
// with its size and CRC-32. Shards and manifest are written to temporary
// names, synced and renamed, and the manifest only after every shard is
// durable, so a crash at any moment leaves the previous checkpoint whole.
//
// Layout: DIR/step-00000004/{rank-00000.safetensors, ..., manifest.json},
// and DIR/.baton-lock, which the run writing into DIR holds (flock).
//
// A run owns its checkpoints. Every manifest records the run's identity (an
// id drawn when the run starts from scratch, kept by every resumption) and
// the settings its numbers depend on (MathSettings). A run starting from
// scratch refuses a folder that holds checkpoints already; a resumed run
// continues only the run it resumes, refuses a folder holding another run's
// checkpoints, and prunes only its own.
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
#include <optional>
#include <string>
#include <vector>

#include "baton/config.h"
#include "baton/env.h"
#include "baton/files.h"
#include "baton/plan.h"
#include "baton/train.h"
#include "params.h"

namespace baton {

// A checkpoint's folder: "step-00000004", and DIR/step-00000004.
std::string StepName(std::int64_t step);
std::string StepDir(const std::string& dir, std::int64_t step);

// The settings a checkpoint's numbers depend on, as DescribeTrainConfig's
// YAML with the others left out: the model, the pipeline's schedule and
// shape, the data, the optimizer, the device and the run's length
// (train.steps, train.epochs). Left out, so they may change on resume: the
// deadline (pipeline.wait_timeout_s), the automatic placement's inputs and
// the adaptive plans' switch, evaluation, logging, checkpointing and the
// replica count. The placement is recorded here but not compared on
// resume (CheckResumable): every placement trains the same floats, and
// LoadCheckpoint reads tensors by name from whichever shards hold them.
std::string MathSettings(const TrainConfig& config);
// A fingerprint of MathSettings (64-bit FNV-1a, hex).
std::string ConfigDigest(const TrainConfig& config);

// What a checkpoint records of its run, and what a run must match to resume
// from one.
struct CheckpointRun {
  std::string run_id;               // the run's identity (NewRunId, or the resumed run's)
  std::string digest;               // ConfigDigest of the run's config
  std::string settings;             // MathSettings of the run's config
  std::string schedule;             // the lowered schedule's name
  int ranks = 0;                    // of the pipeline
  int chunks = 0, microbatches = 0;
  std::vector<int> partition;       // first top-level layer of each stage
  std::int64_t total_steps = 0;     // the run's length
  int data_parallel = 1;            // replicas (recorded; another count resumes)
  int zero = 0;                     // the ZeRO stage in effect (recorded)
};
// `run_id` is left empty: the caller sets it (a new id, or the resumed run's).
CheckpointRun CheckpointRunOf(const TrainConfig& config, const RunPlan& plan, std::int64_t total_steps);
// 16 hex digits from the system's random source.
std::string NewRunId();

// A complete checkpoint to resume from.
struct ResumePoint {
  std::string folder;    // DIR/step-NNNNNNNN
  std::int64_t step = 0;
  std::string manifest;  // its manifest.json, as read
  std::string run_id;
};
// Rank 0: the checkpoint `from` names — a step folder holding a manifest,
// or the newest complete checkpoint in a folder of them. ConfigError if
// there is none, the step folder is incomplete, or the manifest is not a
// baton checkpoint manifest of this format.
ResumePoint FindResumePoint(const std::string& from, const Env& env = Env::Default());
// Rank 0, checkpoint.resume: auto: the newest complete checkpoint in the
// folder `dir`, or none when it is missing or holds none (its manifest
// read and checked as FindResumePoint's).
std::optional<ResumePoint> NewestCheckpoint(const std::string& dir, const Env& env = Env::Default());
// Rank 0: ConfigError, saying exactly what differs (one line a setting),
// unless `point` is a checkpoint of a run like `run`.
void CheckResumable(const ResumePoint& point, const CheckpointRun& run);

// checkpoint.dir, claimed by a run (rank 0) before it trains: locked, and
// holding no checkpoint of another run.
class CheckpointFolder {
 public:
  CheckpointFolder() = default;
  // Creates `dir` if missing and takes its lock; then a run from scratch
  // (`resumed` null) refuses any step folder already there, naming them,
  // and a resumed run refuses another run's complete checkpoints.
  // ConfigError or OutputError; on error nothing is left of what it created.
  // Changes nothing that is there, except that a run from scratch under
  // checkpoint.resume: auto (`auto_resume`: it found no complete checkpoint)
  // first moves the unfinished step folders a stopped run left (no
  // manifest: never a checkpoint) aside as unfinished-step-NNNNNNNN.
  // `take_over`: the survivors of a loss going on with the run, whose lock
  // a rank they excluded may still hold (paused): the agreement is the
  // authority, and the lock file is made anew (the excluded holder keeps a
  // lock on a file no longer there, and its writes are fenced).
  // Every folder and file operation through `env` (the OS room), which
  // must outlive the folder.
  static CheckpointFolder Claim(const std::string& dir, const std::string& run_id, const ResumePoint* resumed,
                                bool auto_resume = false, bool take_over = false, const Env& env = Env::Default());
  // Setup failed after the claim: releases the lock, removes the lock file
  // if Claim created it, and the folder if Claim created it and it is empty.
  void Abandon();
  // Once the resumed checkpoint is loaded: this run's complete checkpoints
  // after `step` belong to a future being replaced; each is moved aside as
  // superseded-step-NNNNNNNN (kept, never again the newest). Returns what it
  // moved ("step-00000700 -> superseded-step-00000700"). OutputError.
  std::vector<std::string> SupersedeAfter(std::int64_t step, const std::string& run_id);
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  const Env* env_ = &Env::Default();
  FileLock lock_;
  bool created_ = false;       // Claim made the folder
  bool lock_created_ = false;  // ... or its lock file
};

// Where checkpoints go and how many stay.
struct CheckpointPlace {
  std::string dir;
  int keep = 1;  // the newest complete checkpoints of this run kept
  const Env* env = nullptr;  // its folders' operations (null: Env::Default())
};

// Collective: every rank of the first replica writes its shard of step
// `step` (the other replicas only lend their optimizer shards under ZeRO);
// rank 0 writes the manifest and keeps the newest `place.keep` complete
// checkpoints of this run (run.run_id), removing older ones of this run and
// its unfinished older step folders; other runs' are never touched.
// `between` runs on every rank after the shards are durable and before the
// manifest (fault injection tests a crash there).
void SaveCheckpoint(const CheckpointPlace& place, const CheckpointRun& run, const RunComms& comms, ParamStore& store,
                    std::int64_t step, const std::function<void()>& between = {});

// Collective: loads `point` (found and checked by rank 0, whose manifest
// text every rank is given) into the parameters and optimizers: each rank
// its own pipeline rank's shard, or, where another placement wrote the
// checkpoint, its tensors by name from every shard. A shard
// that is missing, damaged or unreadable is a ConfigError naming it, agreed
// by every rank.
void LoadCheckpoint(const ResumePoint& point, const RunComms& comms, ParamStore& store,
                    const Env& env = Env::Default());

}  // namespace baton

#endif  // BATON_TRAIN_CHECKPOINT_H_
