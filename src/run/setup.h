// Setting up a run on every rank (schedule, stages, data, optimizers, the
// run's files) and the ranks' agreement that it worked; shared by training
// and benchmarking.
#ifndef BATON_RUNTIME_SETUP_H_
#define BATON_RUNTIME_SETUP_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "baton/comm.h"
#include "baton/config.h"
#include "baton/data.h"
#include "baton/env.h"
#include "baton/error.h"
#include "baton/files.h"
#include "baton/host.h"
#include "baton/plan.h"
#include "baton/profile.h"
#include "baton/stage_device.h"
#include "baton/train.h"
#include "checkpoint.h"
#include "executor.h"
#include "fault.h"
#include "params.h"

namespace baton {

// metrics.jsonl, written by rank 0: one JSON object per line, flushed, and
// locked (flock) against another run writing it. A line that cannot be
// written is an OutputError.
class MetricsLog {
 public:
  // Opens `path` (created with its folders if missing) through `env` (the
  // OS room's LogFile) and locks it; changes nothing in it. Throws
  // OutputError (unwritable, or another run holds it).
  // `take_over`: the survivors of a loss going on with the run: a file
  // still locked by a rank they excluded (paused, not dead) is copied to a
  // new file in its place, so that the excluded rank's late rows cannot
  // land in it.
  explicit MetricsLog(const std::string& path, const Env& env = Env::Default(), bool take_over = false);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  // Before the first Line: from scratch (0) the file is emptied; a run
  // resumed after step `resumed_after` keeps the rows of steps up to it
  // (the file is cut after them, never rewritten). OutputError.
  void Start(std::int64_t resumed_after);
  // A run resumed from the checkpoint of step `after` (--resume): the next
  // step row written carries "resumed_after": `after` (baton plot marks it).
  void MarkResume(std::int64_t after) { resumed_after_ = after; }
  // Rank 0's row to write with the next Line, before it, in the same write
  // (no agreement of its own: log.blame's late rows ride on the step's).
  void Hold(std::string_view row) {
    held_ += row;
    held_ += '\n';
  }
  // The held rows now, where no Line follows (the run's end, a stop).
  void WriteHeld();
  // Appends `json` and a line break (after any held rows), flushed.
  // Throws OutputError.
  void Line(std::string_view json);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::unique_ptr<LogFile> file_;
  std::int64_t resumed_after_ = 0;  // MarkResume's, until a step row carries it
  std::string held_;                // Hold's rows, each with its line break
};

// What the run's setup does besides planning and allocating.
struct SetupOptions {
  bool training = true;  // a training run: its metrics, checkpoints and weights (bench: false)
  bool resume = false;   // continue from a checkpoint
  std::string resume_from;  // a checkpoint folder or a step folder; "" = checkpoint.dir
  // checkpoint.resume: auto (or --resume auto): from checkpoint.dir's
  // newest complete checkpoint when there is one, else from scratch.
  bool resume_auto = false;
  // The plan may change between steps (adaptive plans, or a caller's
  // TrainOptions::next_plan): a fault at a re-plan can fire.
  bool replans = false;
  // The OS room's answers (host, node memory, the metrics file); null:
  // Env::Default().
  const Env* env = nullptr;
  std::vector<NamedPath> extra_outputs;  // files the caller writes after the run (bench's reports)
  // Going on inside the job after a lost rank (recovery.on_lost_rank:
  // shrink): the run `run_id` resumes after `step` from its ranks' state in
  // memory (KeptState), taking up its checkpoint folder and metrics file.
  struct Recovered {
    std::string run_id;
    std::int64_t step = 0;
    // A survivor of a replace (its rank the same): BATON_FAULT's faults of
    // this rank after this step are kept (-1: none is, the ranks
    // renumbered or this process new).
    std::int64_t keep_faults_after = -1;
  };
  std::optional<Recovered> recovered;
};

// Everything a rank runs with: the plan, and what was allocated from it.
struct RunSetup {
  RunPlan plan;                        // every rank's (the same on all)
  RankPlan rank_plan;                  // this rank's
  // BATON_FAULT's slow wire from this rank: the pipeline's transport, its
  // messages to the link's rank held (before device: the device sends on it).
  std::unique_ptr<LateWire> wire;
  HeldFifos held_outputs;  // rank 0: the outputs that are FIFOs, held open from the start to the end
  std::unique_ptr<RankDevice> device;  // before exec: the stages compute on it
  std::unique_ptr<Executor> exec;
  std::unique_ptr<ParamStore> params;  // the executor's stages' parameters, named, and their optimizer state
  Dataset train, test;
  std::unique_ptr<BatchLoader> loader;
  ArrangeBatch arrange;  // balanced: how the loader arranges each batch (the first plan's price); else none
  bool first_rank = false, last_rank = false;
  std::unique_ptr<MetricsLog> metrics;  // rank 0, training only
  const Env* env = &Env::Default();      // the OS room's (TrainOptions::env): folders, files, the host
  // BATON_FAULT as the setup reads and checks it, for testing; the run
  // fires it only through `faults`, its hooks (null: none, a real run).
  Fault fault;
  std::unique_ptr<RunFaults> faults;
  // The loop's named points (BATON_FAULT's "start", "evaluate",
  // "checkpoint"): a fault fires there if it is this rank's.
  void FaultAt(std::int64_t step, std::string_view point) const {
    if (faults) faults->At(step, point);
  }
  // The executor's hook from `faults` (none without): whenever the
  // executor is made anew.
  void ArmFaults() { exec->set_hook(faults ? faults->actions() : nullptr); }
  int replica = 0;                      // this rank's replica (data parallelism)
  bool evaluation = false;              // epochs end with an evaluation
  // This replica's share of the evaluation set: samples [eval_begin,
  // eval_end) of `test` (replica r of D: [r N / D, (r + 1) N / D)).
  std::int64_t eval_begin = 0, eval_end = 0;
  int world_rank = 0;
  std::int64_t total_steps = 0;  // the run's length
  std::int64_t first_step = 1;   // 1, or the step after the resumed checkpoint
  // Checkpoints: the run's record (its id on rank 0), the checkpoint it
  // resumes (rank 0 found it; LoadCheckpoint gives it to every rank), and
  // rank 0's claim on checkpoint.dir.
  CheckpointRun run;
  std::optional<ResumePoint> resume;
  CheckpointFolder checkpoints;
  // Where the run's checkpoints go and how many stay (checkpoint.dir,
  // checkpoint.keep, through the run's Env), fixed by the setup: a plan
  // change keeps them, and the step loop saves there without the config.
  CheckpointPlace checkpoint_place;
};

// An automatic placement (Partition::kAuto) searched on rank 0, from
// pipeline.profile or a short profile measured now, printed, and
// broadcast: the config with that placement on every rank (any other
// config as given). Collective over `world`; Train and Bench start with it.
TrainConfig PlaceStages(const TrainConfig& config, Transport& world);
// The profile a run plans from: pipeline.profile, or a short one measured
// now in this process (`source` says which). Rank 0's.
Profile RunProfile(const TrainConfig& config, std::string* source);

// Plans and builds `u` on every rank, in phases the ranks agree on one by
// one (a failure anywhere ends every rank: the lowest failing rank throws
// its error and the others PeerFailed):
//   1. the plan (PlanRun, PlanRank) and, on rank 0, the run's files checked
//      (CheckCommandFiles), the checkpoint to resume found and checked, and
//      checkpoint.dir claimed;
//   2. every node's memory against the plan's bytes for its ranks (device
//      cpu), before anything is allocated;
//   3. the device, the executor, the parameters (initial weights), the
//      data, the fault to inject (checked against the run);
//   4. rank 0 opens the metrics file.
// On failure nothing is left behind: no metrics file, no checkpoint folder
// the setup created.
void SetUpRun(const TrainConfig& config, const RunComms& comms, RunSetup& u, const SetupOptions& options = {});

// `u.loader`: this replica's share of every global batch under `c` (its
// rows after those of the replicas before it), from the batches' start.
void MakeLoader(const TrainConfig& c, RunSetup& u);

// Points the pipeline's and the replica group's deadlines at u.exec's
// flight record (flight-rank-N.json beside the metrics file); again after
// the executor is rebuilt.
void SetFlightRecords(const TrainConfig& config, const RunComms& comms, RunSetup& u);

}  // namespace baton

#endif  // BATON_RUNTIME_SETUP_H_
