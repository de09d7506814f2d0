// Training (src/train): `baton train` on every rank of an MPI job.
#ifndef BATON_TRAIN_H_
#define BATON_TRAIN_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "baton/comm.h"
#include "baton/config.h"
#include "baton/data.h"
#include "baton/files.h"
#include "baton/plan.h"
#include "baton/profile_price.h"
#include "baton/signals.h"

namespace baton {

struct TrainSummary {
  std::int64_t steps = 0;
  int epochs_done = 0;
  double last_loss = 0.0;       // mean loss of the last step (rank 0)
  double test_accuracy = -1.0;  // at the last evaluation (rank 0), -1 if none
  double validation_loss = -1.0;  // next-token data: nats per token at the last evaluation (rank 0)
  double seconds = 0.0;
  // Stopped early by a stop signal (SIGTERM, SIGUSR1) that every rank
  // agreed on at a step boundary: the signal, 0 if the run ran to its end;
  // the last finished step; and whether a checkpoint of it exists.
  int stop_signal = 0;
  std::int64_t stopped_after = 0;
  bool checkpointed = false;
  int replans = 0;  // placements moved by the adaptive plans (pipeline.adapt: on)
  int late_steps = 0;  // steps log.blame named what made late (rank 0)
  int recoveries = 0;  // lost ranks the run went on without (recovery.on_lost_rank: shrink)
  // recovery.on_lost_rank: stop under a launch that keeps the survivors:
  // they wrote the last step boundary (stopped_after) as a checkpoint and
  // stopped.
  bool stopped_for_lost_rank = false;
};

// The communicators of a run (baton/comm.h): the world (setup, agreement,
// logging, checkpoints), this rank's pipeline (its stages' messages; every
// message of a step) and its replica group (the gradient sums of data
// parallelism). Without data parallelism the pipeline may be the world and
// the group a solo one (MakeSoloReplicaGroup).
struct RunComms {
  Transport& world;
  Transport& pipeline;
  ReplicaGroup& replicas;
};

// Runs the configured training on this rank. Collective: every rank of the
// world calls it with the same config. Setup errors (sizes, schedule,
// data files) are agreed on by all ranks before anything runs: each rank
// throws the same or, if only some ranks failed, the others throw a short
// "another rank failed" error, so the job ends everywhere.
class RankLost;  // baton/watch.h

// The launch's side of recovery.on_lost_rank: shrink (RunOnAllRanks gives
// one where mpirun keeps the survivors of a lost rank): the survivors'
// agreement and the communicators of the replicas that go on.
class Survivors {
 public:
  virtual ~Survivors() = default;
  struct Shrunk {
    std::vector<int> lost;  // the agreed lost ranks, in the world before
    int replicas = 0;       // the replicas that go on
    double agreed_s = 0;    // from the call to the agreement
    double regroup_s = 0;   // from the agreement to this rank's new communicators
    const RunComms* comms = nullptr;  // this rank's, over them
    int epoch = 0;          // the job's membership epoch this agreement started
  };
  // After `seen`: the survivors agree on the lost ranks (their own
  // agreement, without the old communicators), the replicas that lost a
  // rank leave the job (their ranks exit here, 0), and the others get a
  // world of their own laid out as `layout` with fewer replicas. Throws
  // `seen` again when no replica is whole. `at`, where given, is called at
  // two points of it with the job's rank of this process (its rank at
  // launch): "recovery" before the agreement, "regroup" after it, while the
  // new world is built (BATON_FAULT's faults in a recovery fire there).
  using RecoveryHook = std::function<void(std::string_view point, int job_rank)>;
  virtual Shrunk Shrink(const RankLost& seen, const ReplicaLayout& layout, const RecoveryHook& at) = 0;
  // After `seen` (recovery.on_lost_rank: replace): the survivors agree on
  // the lost ranks, start a new process for each, and the world goes on at
  // full size laid out as `layout`, each new process in a lost rank's
  // place (it learns `run_id` and the loss, and takes its state from a
  // whole replica, or with `from_snapshots` from the snapshot its holder
  // keeps). Ends the job when no replica is whole (or, with snapshots, a
  // lost rank's holder is lost too).
  virtual Shrunk Replace(const RankLost& seen, const ReplicaLayout& layout, const std::string& run_id,
                         const RecoveryHook& at, bool from_snapshots) = 0;
};

// A new process in a lost rank's place (recovery.on_lost_rank: replace):
// what the survivors told it.
struct JoinedRun {
  std::string run_id;
  std::vector<int> lost;  // the world ranks it and the others took
  std::string how;        // how the loss was seen
  double agreed_s = 0;
  double since_loss_s = 0;  // from the loss to this process's reading of the survivors' message
};

struct TrainOptions {
  bool resume = false;     // continue from the newest complete checkpoint
  std::string resume_dir;  // where to look; "" = checkpoint.dir
  // --resume auto (or checkpoint.resume: auto): from checkpoint.dir's newest
  // complete checkpoint if there is one, else from scratch.
  bool resume_auto = false;
  // Between steps, after step `done` of a run now planned by `running`: the
  // config to plan the next steps by (another placement of the same model,
  // schedule and ranks; the state moves to the ranks that hold it, the
  // training stays the same floats), or none to go on. Called on every rank,
  // which must get the same answer. Null: the plan never changes.
  std::function<std::optional<TrainConfig>(std::int64_t done, const TrainConfig& running)> next_plan;
  // The OS room's answers (baton/env.h): the stop signals asked at every
  // step boundary, the host and node memory, the metrics file. Null:
  // Env::Default(), the process's own; tests give a fake.
  const Env* env = nullptr;
  // The launch's survivors, where it keeps them (null: a lost rank ends
  // the job): shrink goes on with them; stop with replicas has them write
  // the last step boundary as a checkpoint first.
  Survivors* survivors = nullptr;
  // Set in a new process that takes a lost rank's place: the run goes on
  // from the survivors' kept step, its state from a whole replica.
  std::optional<JoinedRun> joined;
};
// Stops on a scheduler's signal: StopSignals and kExitStopped (signals.h).

// One split of the configured dataset, as a run's rank reads it: only the
// inputs and labels wanted (packed documents' starts and targets always),
// packed as data.packing says over global batches of `batch_size`
// (balanced: at `square`, a pair's cost in a token's, GptPairCost). The
// held-out split: fortunes' validation, Fashion-MNIST's test, a token
// file's data.validation_path; empty for a dataset without one.
enum class Split { kTraining, kHeldOut };
// The training split's batches by tokens where the config asks
// (train.batch_tokens, TokenBatches), the held-out split's always by samples.
Dataset LoadSplit(const DataConfig& data, Split split, int batch_size, double square, bool want_inputs,
                  bool want_labels, const TokenBatches& by = {});
// train.batch_tokens over data_parallel.size replicas.
TokenBatches TokenBatchesOf(const TrainConfig& config);
// data.packing: balanced's arrangement of each global batch into the
// steps of `plan` (ArrangeBalanced, baton/profile_price.h; the batch
// loader arranges each batch as it gathers it, MakeBatchLoader), priced by
// pipeline.profile where the config names one, else by `square`; none for
// another packing. `cores`: priced for ranks sharing that many CPUs (0: a
// core each) instead of the profile's own machine (`baton simulate
// --cores`: the step on a machine other than the one profiled).
ArrangeBatch BalancedArrangement(const TrainConfig& config, const RunPlan& plan, double square,
                                 std::optional<int> cores = std::nullopt);

// A packed run's steps [first, first + count) (0-based) as its loaders
// hand them out: every replica's slice of each global batch, packed and
// arranged as the run packs and arranges them; per step, per replica, its
// microbatches (PackedMicrobatchesOf). `arranged` batches took
// `arrange_seconds` to arrange (balanced). Throws ConfigError for a
// dataset without packed documents. `cores` as BalancedArrangement's.
struct PackedRunSteps {
  std::vector<std::vector<std::vector<PackedMicrobatch>>> steps;
  std::int64_t arranged = 0;
  double arrange_seconds = 0;
};
PackedRunSteps PackedSteps(const TrainConfig& config, const RunPlan& plan, std::int64_t first, int count,
                           std::optional<int> cores = std::nullopt);

// The files a training run of `config` on `world` ranks reads and writes
// (its config file is config.source), plus `extra_outputs` (bench's
// reports), for the OS room's one check (CheckCommandFiles) that a run
// never overwrites its own inputs or loses one output to another.
CommandFiles FilesOf(const TrainConfig& config, int world, const std::vector<NamedPath>& extra_outputs = {});
// What any command that reads `config` reads: the config file, its schedule
// file, initial weights, profile (and the machine models beside it) and
// data (files, or the fortunes folder whose every file is an input).
CommandFiles RunInputsOf(const TrainConfig& config);
TrainSummary Train(const TrainConfig& config, const RunComms& comms, const TrainOptions& options = {});

// ---- Launch: what `baton train` and the other MPI commands call ----
// Every rank of the MPI job (one process without mpirun): MPI started,
// SIGINT/SIGTERM end the process with a message (EndOnSignals), rank 0
// reads the config and broadcasts it, every rank parses it, then runs
// `job(world, config, config_text)`. Returns 0, or 2 after an error the
// ranks agreed on (a config, schedule, output, resource or run error: one
// rank prints it); aborts the job on anything else, so no rank hangs.
int RunOnAnyRanks(const std::string& config_path, const std::vector<std::string>& set,
                  const std::function<void(Transport&, const TrainConfig&, const std::string&)>& job);
// RunOnAnyRanks, then the job's size checked against pipeline.ranks x
// data_parallel.size and the world split into each rank's pipeline and
// replica group (sub-communicators) before `job(comms, config, text)`.
int RunOnAllRanks(const std::string& config_path, const std::vector<std::string>& set,
                  const std::function<void(const RunComms&, const TrainConfig&, const std::string&)>& job);
// `baton train`: Train on every rank, a stop signal noted from the start.
// Returns the job's exit code: 0, 2 (an agreed error), or kExitStopped
// after a stop at a step boundary with its checkpoint.
int TrainJob(const std::string& config_path, const std::vector<std::string>& set, const TrainOptions& options);
// `baton train --replacement` (started by the survivors of a lost rank,
// recovery.on_lost_rank: replace, never by hand): joins their job in a
// lost rank's place (the config and the run come from them) and trains
// to the end with them. Does not return.
[[noreturn]] int JoinTrainJob(const std::vector<std::string>& set, const TrainOptions& options);

}  // namespace baton

#endif  // BATON_TRAIN_H_
