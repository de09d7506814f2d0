// A job's ranks watching one another, and what the survivors of a lost
// rank do (the launch's side of recovery.on_lost_rank): RunOnAllRanks
// makes one where mpirun keeps the survivors.
#ifndef BATON_SRC_TRAIN_SURVIVORS_H_
#define BATON_SRC_TRAIN_SURVIVORS_H_

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "baton/comm.h"
#include "baton/files.h"
#include "baton/train.h"
#include "baton/watch.h"
#include "setup.h"

namespace baton {

class JobWatch final : public Survivors {
 public:
  // Collective over `comms.world`: every rank starts watching the others,
  // and every wait of this thread ends with RankLost once one is lost.
  // `epoch`: the job's membership epoch the world was agreed in (0 as
  // launched; a new process in a lost rank's place: the survivors').
  JobWatch(const RunComms& comms, double timeout_s, int epoch = 0);

  // What a replacement process is started with: the train command's
  // config (its text, passed on to it) and overrides.
  struct Command {
    std::string config_path, config_text;
    std::vector<std::string> set;
  };
  void set_command(Command c) { command_ = std::move(c); }
  // A new process's: the ranks the survivors excluded that may still run.
  void set_excluded(std::vector<WatchMember> m) { maybe_running_ = std::move(m); }
  ~JobWatch() override;

  // The agreement, then: the ranks of a replica that lost one exit (0); the
  // others build a world of their own (MakeMpiSurvivors), watched anew.
  // A rank lost while the new world is built (its MPI calls would wait for
  // it for good: Open MPI has no ULFM), or that world not made within the
  // deadline, ends the job as End does (RegroupGuard).
  Shrunk Shrink(const RankLost& seen, const ReplicaLayout& layout, const RecoveryHook& at) override;
  // The agreement, then MakeMpiReplaced: a `baton train --replacement`
  // for each lost rank, the payload (ReplacementPayload) telling it the
  // run, the config and its place. The survivors' world is made from
  // the world now (the job's, or the last recovery's, which holds the new
  // processes of an earlier replace), so a job recovers again and again.
  Shrunk Replace(const RankLost& seen, const ReplicaLayout& layout, const std::string& run_id,
                 const RecoveryHook& at, bool from_snapshots) override;

  // The end of a job that lost a rank and does not go on: the survivors
  // agree, the lowest says which rank and how, and each exits
  // kExitLostRank after telling its mpirun to end (which exits 1 then,
  // where it keeps the survivors: it exits 0 for ranks that only exit
  // non-zero, or call MPI_Abort, under orte_enable_recovery 1).
  // `why`: why the job cannot go on, in the message (by default: stop was
  // asked, or no replica is left whole).
  [[noreturn]] void End(const RankLost& seen, const std::string& why = "");

  // The end of a job that went on after a loss (epoch() > 0) and then
  // failed (`e`: a setup of the survivors', a takeover, a checkpoint): the
  // job ends with one line naming it, the exit record `code`, and mpirun
  // told to end, without MPI_Finalize (the old communicators hold requests
  // to the lost ranks). `agreed`: every rank has it (Agree: the rank that
  // failed says it, the others hold PeerFailed, the lowest leaves the
  // record); else it is this rank's alone, which says it and leaves it.
  [[noreturn]] void Fail(const std::exception& e, bool agreed, int code);

  // This rank is done: it says goodbye to every other, whose watch then
  // takes its end for no loss.
  void Finish();

  // This rank's number in the world now (after losses, the survivors').
  int rank() const { return comms_->world.rank(); }
  // The job's membership epoch now: each agreed loss starts the next.
  int epoch() const { return epoch_; }
  // RankWatch::Fence: a rank the job went on without ends here, saying so.
  void Fence() const {
    if (watch_) watch_->Fence();
  }

  // The end of a job that went on after a loss, on its lowest rank, once
  // its exit record is written: a rank it excluded that is still stopped
  // on this machine is woken (SIGCONT, as mpirun would before ending it),
  // reads its fence and exits by itself; one that still runs 2 s later, or
  // on another machine, is ended with mpirun (EndLauncher), which would
  // wait for it. Whether it had to.
  bool EndExcludedRanks();
  // The first part of it: those stopped on this machine woken, given 2 s
  // to read their fence and exit; the processes (pids) still running, or
  // on another machine, after it.
  std::vector<int> WakeExcluded();

 private:
  // How long the survivors' agreement and their new world may take: 30 s,
  // or pipeline.wait_timeout_s if shorter.
  double RecoveryDeadline() const { return std::min(timeout_s_, 30.0); }
  void Watch();
  // The start of a recovery: BATON_FAULT's "recovery" point, then the
  // survivors' agreement on the lost ranks (End when none comes).
  Shrunk Agree(const RankLost& seen, std::chrono::steady_clock::time_point start, const RecoveryHook& at);
  // The replicas (sorted, once each) that hold a rank of `lost`.
  static std::vector<int> ReplicasLosing(const std::vector<int>& lost, const ReplicaLayout& layout);
  // `w` (laid out as `layout`) is the world now: its communicators are
  // this rank's (comms_); the worlds before are kept (see Shrink).
  void TakeWorld(MpiWorld w, const ReplicaLayout& layout);
  double timeout_s_;
  const RunComms* comms_;             // the communicators now
  std::vector<MpiWorld> survivors_;   // the worlds made after losses (never freed: see Shrink)
  std::vector<std::unique_ptr<RunComms>> shrunk_comms_;
  std::unique_ptr<ReplicaGroup> solo_;  // a world of one replica's replica group
  std::unique_ptr<RankWatch> watch_;
  std::optional<LostRankInterrupt> interrupt_;
  std::optional<WriteFence> fence_;  // this rank's writes checked against its exclusion
  Command command_;
  int epoch_ = 0;
  // The ranks agreed lost whose end this rank did not see (silent: paused,
  // stalled, or a node gone): they may still run.
  std::vector<WatchMember> maybe_running_;
  std::string left_out_ = "a lost rank";  // the last agreed lost ranks ("rank 3", "ranks 1, 3")
};

// The survivors' message to the processes they start (JSON): the run, the
// config and overrides, the loss, and each new process's world rank.
std::string ReplacementPayload(const JobWatch::Command& command, const std::string& run_id,
                               const std::vector<int>& lost, const std::string& how, double agreed_s,
                               double seen_unix_s, int epoch, const std::vector<WatchMember>& excluded = {});
struct Replacement {
  JobWatch::Command command;
  JoinedRun run;
  int place = -1;  // this process's world rank
  std::string exit_file;  // the job's BATON_EXIT_FILE (LeaveExitRecord), "" if unset
  int epoch = 0;          // the job's membership epoch the survivors started
  std::vector<WatchMember> excluded;  // the ranks they agreed lost that may still run (JobWatch::EndExcludedRanks)
};
// A new process's reading of ReplacementPayload; `index`: its rank among the new ones.
Replacement ReadReplacementPayload(const std::string& payload, int index);

// A run's own state at its last two step boundaries, in memory, for going
// on after a lost rank (recovery.on_lost_rank: shrink or replace), or for
// writing it as a checkpoint before stopping (stop, with replicas:
// SavesOnLoss). Kept at each step's start, before the ranks' agreement
// there: a rank that has kept step k knows every rank finished step k - 1
// and kept it, so the survivors can always agree on a step each still
// holds (the least of their latest).
//
// Where a rank's state exists nowhere else (replace in a pure pipeline,
// data_parallel.size 1; or with replicas under ZeRO 1-3, whose shards each
// replica keeps alone: HoldNeighbours), each kept state is this rank's own
// part (ParamStore::OwnFloats), also copied to the rank that holds its
// snapshot (SnapshotHolder: the next pipeline rank, or the next replica of
// the same pipeline rank); and states are kept only every N steps
// (recovery.snapshot_every; auto: the least N that keeps the copy's price
// within 5% of the step, measured on the run's first steps), the steps
// since replayed after a loss.
// The least interval N (steps) that keeps a snapshot's copy, taking
// `copy_s`, within `share` of the `step_s`-long steps: copy / N <= share x
// step. A replay after a loss is then at most N steps, about copy / share.
int SnapshotEvery(double copy_s, double step_s, double share = 0.05);

// The world rank that holds a snapshot of world rank `rank`'s state: in a
// pure pipeline the next rank (wrapping), with replicas the same pipeline
// rank of the next replica (wrapping).
int SnapshotHolder(const ReplicaLayout& layout, int rank);

class KeptState {
 public:
  // Snapshots on their holders (SnapshotHolder) every `every` steps (0:
  // auto), over `ring`: the pipeline in a pure pipeline, else the world
  // (then given the two requests a copy takes, `timeout_s` its deadline).
  void HoldNeighbours(Transport& ring, const ReplicaLayout& layout, int every, double timeout_s);
  // This rank's stages' parameters and optimizer state after `step`, when
  // a state is due then (every step, or with HoldNeighbours every N steps
  // and at `first`, the first boundary of the steps after a start or a
  // recovery). With HoldNeighbours collective over the ring.
  void Keep(RunSetup& u, ReplicaGroup& replicas, std::int64_t step, bool first = false);
  bool any() const { return latest() >= 0; }
  std::int64_t latest() const;
  // The last step boundary Keep was called at (kept or not): the survivors'
  // greatest is the step the loss interrupted, less one.
  std::int64_t seen() const { return seen_; }
  // The state after `step` back into `u`'s stages, and the data where it
  // stood. ConfigError when this rank keeps no such step.
  void Restore(RunSetup& u, std::int64_t step) const;
  // The tensors kept of `step` (a stage's whole state), or null; null too
  // with HoldNeighbours, whose kept states are this rank's own part, flat.
  const std::vector<NamedTensor>* Find(std::int64_t step) const;
  // `tensors`, a stage state after `step`, into `u`'s stages (`what` names
  // where it came from in errors), and the data where it stood.
  static void Put(RunSetup& u, const std::vector<NamedTensor>& tensors, std::int64_t step, const char* what);
  // The same for a rank's own part (ParamStore::OwnTensorsToFill's tensors).
  static void PutOwn(RunSetup& u, const std::vector<NamedTensor>& tensors, std::int64_t step, const char* what);

  // With HoldNeighbours, after new processes took the places of `lost`,
  // over the new world's `ring` (as HoldNeighbours): the snapshot interval
  // agreed (a new process knows none), every survivor restores its own
  // state after `step`, and each new process takes the one its holder
  // keeps. Collective over `ring`.
  void HandBack(RunSetup& u, Transport& ring, const std::vector<int>& lost, std::int64_t step);
  // Whether the ranks left after losing `lost` still hold a snapshot of
  // every lost rank: no lost rank's holder lost too.
  static bool NeighboursHold(const std::vector<int>& lost, const ReplicaLayout& layout);
  // Steps between kept states (0 while auto has not chosen).
  int every() const { return every_; }
  // The snapshots' price as rank 0 said it, once chosen ("" before).
  const std::string& said() const { return said_; }
  std::string run_id;  // the run's (every rank knows it)

 private:
  struct Slot {
    std::int64_t step = -1;
    std::vector<NamedTensor> tensors;  // without HoldNeighbours: the stages' whole state
    std::vector<float> own;            // with HoldNeighbours: this rank's own part (ParamStore::OwnFloats)
    std::vector<float> previous;       // with HoldNeighbours: the previous rank's own part after `step`
  };
  // A copy's buffers while it is on the wire: kept to the process's end
  // when a loss interrupts it (MPI may still write into them).
  struct Wire {
    std::int64_t count_out = 0, count_in = 0;
    std::vector<float> out, in;
  };
  // A snapshot over `t`: `wire.out` to rank `to` and one from rank `from`
  // into `wire.in` (-1: none that way), each its size first. `sent` and
  // `received` name the two waits in a deadline's message (kept strings).
  static void Exchange(Transport& t, Wire& wire, int to, int from, const char* sent, const char* received);
  // This rank's state (`mine`, sent from where it lies and left there) to
  // the next rank, the previous rank's back.
  std::vector<float> PassOn(std::vector<float>& mine);
  // At the boundary the interval is chosen (auto) or its price said.
  void Choose();
  Slot slots_[2];
  int next_ = 0;
  Transport* ring_ = nullptr;
  ReplicaLayout layout_;
  bool world_ring_ = false;  // the ring is the world's transport (replicas): it takes two requests
  double timeout_s_ = 0;
  int every_ = 1;
  bool chosen_ = true;
  std::int64_t seen_ = -1, choose_at_ = -1;
  double last_start_ = -1, last_copy_s_ = 0, copy_s_ = 0;
  std::vector<double> steps_s_;  // the steps' own time, without the copies
  std::vector<std::unique_ptr<Wire>> abandoned_;
  std::string said_;
};

}  // namespace baton

#endif  // BATON_SRC_TRAIN_SURVIVORS_H_
