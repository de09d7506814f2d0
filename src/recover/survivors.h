// A job's ranks watching one another, and what the survivors of a lost
// rank do (the launch's side of recovery.on_lost_rank): the watch, the
// survivors' agreement and epochs, their new world, and every end of a job
// that lost a rank. Written once over a JobHost: the ranks as processes
// under mpirun (MakeProcessHost: RunOnAllRanks makes one where mpirun keeps
// the survivors), or as threads of one process (thread_job.h, for tests).
#ifndef BATON_SRC_TRAIN_SURVIVORS_H_
#define BATON_SRC_TRAIN_SURVIVORS_H_

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "baton/comm.h"
#include "baton/files.h"
#include "baton/train.h"
#include "baton/watch.h"

namespace baton {

// What a replacement rank is started with: the train command's config
// (its text, passed on to it) and overrides.
struct TrainCommand {
  std::string config_path, config_text;
  std::vector<std::string> set;
};

// What the survivors need of how the job's ranks run: how a world of
// survivors is made, how new ranks are started, how a rank ends and the
// job's exit record is left. Every call is this rank's (its thread's).
class JobHost {
 public:
  virtual ~JobHost() = default;
  // This rank's number in the job as launched (BATON_FAULT's recovery
  // faults and the excluded line name it).
  virtual int JobRank() const = 0;
  // A world of the ranks `members` of `base` (new rank i is members[i]),
  // laid out as `layout` (no groups when layout.replicas is 1). Collective
  // over `members`: it waits for each (the caller guards that wait).
  virtual RankWorld Survivors(Transport& base, const std::vector<int>& members, const ReplicaLayout& layout,
                              double timeout_s) = 0;
  // The survivors `members` of `base` and one new rank for each of `lost`,
  // started with `command` and told `payload` (ReplacementPayload): the
  // world in the ranks' old order (a new rank in its lost one's place),
  // laid out as `layout`. Collective over `members` and the new ranks.
  // Throws Error when a new rank cannot start.
  virtual RankWorld Replaced(Transport& base, const std::vector<int>& members, const std::vector<int>& lost,
                             const TrainCommand& command, const std::string& payload, const ReplicaLayout& layout,
                             double timeout_s) = 0;
  // Leaves the job's exit record (BATON_EXIT_FILE: the job's lowest rank).
  virtual void LeaveRecord(int code, const std::string& record) = 0;
  // Tells the launcher to end the job (where it would wait on, or exit 0
  // for ranks that exit non-zero), after a moment for it to pass on what
  // the ranks printed. Whether it was told.
  virtual bool EndLauncher() = 0;
  // What becomes of the launcher at the job's end, for messages ("";
  // "; mpirun, told to end, exits 1").
  virtual std::string LauncherNote() const = 0;
  // This rank ends with `code`: a process exits without MPI_Finalize (the
  // old communicators hold requests to the lost ranks); a thread throws
  // RankEnded. Called off the rank's thread (RegroupGuard), a thread host
  // ends the thread job instead and returns.
  virtual void Exit(int code) = 0;
  // What a rank does once told it is excluded (on the watch's thread): a
  // process says one line and exits kExitExcluded; null: its next wait or
  // write fence throws RankExcluded.
  virtual std::function<void(int epoch)> OnExcluded() = 0;
  // At the end of a job that went on after a loss, on its lowest rank:
  // the ranks agreed lost that may still run (`members`: paused, stalled)
  // woken where that helps, given a moment to read their fence and exit;
  // the processes (pids) still running after it.
  virtual std::vector<int> WakeExcluded(const std::vector<WatchMember>& members) = 0;
};

// The job's ranks as processes: MPI worlds (MakeMpiSurvivors,
// MakeMpiReplaced with `baton train --replacement`), the exit record in
// BATON_EXIT_FILE, mpirun told to end (EndLauncher), std::_Exit.
std::unique_ptr<JobHost> MakeProcessHost();

// A rank that ended inside its thread (a thread host's Exit): the code it
// ended with. Not an Error: nothing catches it on the way up.
struct RankEnded {
  int code = 0;
};

class JobWatch final : public Survivors {
 public:
  // Collective over `comms.world`: every rank starts watching the others,
  // and every wait of this thread ends with RankLost once one is lost.
  // `epoch`: the job's membership epoch the world was agreed in (0 as
  // launched; a new rank in a lost one's place: the survivors'). `host`
  // outlives the watch.
  // `silent_s`: recovery.silent_s, the silence that makes a rank lost.
  JobWatch(const RunComms& comms, double timeout_s, double silent_s, JobHost& host, int epoch = 0);
  ~JobWatch() override;

  void set_command(TrainCommand c) { command_ = std::move(c); }
  // A new rank's: the ranks the survivors excluded that may still run.
  void set_excluded(std::vector<WatchMember> m) { maybe_running_ = std::move(m); }

  // The agreement, then: the ranks of a replica that lost one leave the
  // job (Exit 0); the others build a world of their own (JobHost::
  // Survivors), watched anew. A rank lost while the new world is built (its
  // calls wait for every member: Open MPI has no ULFM), or that world not
  // made within the deadline, ends the job as End does (RegroupGuard).
  Shrunk Shrink(const RankLost& seen, const ReplicaLayout& layout, const RecoveryHook& at) override;
  // The agreement, then JobHost::Replaced: a new rank for each lost one,
  // the payload (ReplacementPayload) telling it the run, the config and
  // its place. The survivors' world is made from the world now (the
  // job's, or the last recovery's, which holds the new ranks of an
  // earlier replace), so a job recovers again and again.
  Shrunk Replace(const RankLost& seen, const ReplicaLayout& layout, const std::string& run_id, const RecoveryHook& at,
                 bool from_snapshots) override;

  // The end of a job that lost a rank and does not go on: the survivors
  // agree, the lowest says which rank and how, and each ends
  // kExitLostRank after telling the launcher to end. `why`: why the job
  // cannot go on, in the message (by default: stop was asked, or no
  // replica is left whole).
  [[noreturn]] void End(const RankLost& seen, const std::string& why = "");

  // The end of a job that went on after a loss (epoch() > 0) and then
  // failed (`e`: a setup of the survivors', a takeover, a checkpoint): the
  // job ends with one line naming it, the exit record `code`, and the
  // launcher told to end. `agreed`: every rank has it (Agree: the rank
  // that failed says it, the others hold PeerFailed, the lowest leaves the
  // record); else it is this rank's alone, which says it and leaves it.
  [[noreturn]] void Fail(const std::exception& e, bool agreed, int code);

  // The end of a run that went on after a loss, or stopped after one, once
  // its files are written: the exit record (`code`, `record`) on the
  // lowest, a goodbye to every rank; the lowest wakes a rank it excluded that
  // is still stopped (it reads its fence and exits by itself) and tells
  // the launcher to end for one still running (or, `tell_launcher`,
  // always: a stop, which the launcher would report as 0); then this rank
  // ends with `code`.
  [[noreturn]] void Finished(int code, const std::string& record, bool tell_launcher);

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
  // For tests on thread ranks (thread_job.h): this rank's watch ends as
  // its process's death would (RankWatch::Die), or pauses as a stopped
  // process's would (RankWatch::Pause).
  // Both the watch now and, while the survivors regroup, the old one.
  void Die();
  void Pause(double seconds);

 private:
  // How long the survivors' agreement and their new world may take: 30 s,
  // or pipeline.wait_timeout_s if shorter.
  double RecoveryDeadline() const { return std::min(timeout_s_, 30.0); }
  void Watch();
  // The start of a recovery: BATON_FAULT's "recovery" point, then the
  // survivors' agreement on the lost ranks (End when none comes).
  Shrunk Agree(const RankLost& seen, std::chrono::steady_clock::time_point start, const RecoveryHook& at);
  // `w` (laid out as `layout`) is the world now: its communicators are
  // this rank's (comms_); the worlds before are kept (see Shrink).
  void TakeWorld(RankWorld w, const ReplicaLayout& layout);
  // The new world made by `make` while a RegroupGuard reads the old watch
  // (the lost ranks `lost`, the ranks `staying` of the world now); watched
  // anew, the old watch's goodbye said after. Returns its seconds (the
  // recovered row's regroup_s).
  double Regroup(const std::vector<int>& lost, const std::vector<int>& staying, const RecoveryHook& at,
                 const std::function<void()>& make);
  // The one end of a job that cannot go on: the rank that `say`s it
  // prints `line` (if any) and leaves the exit record; the launcher is
  // told to end; the rank ends with `code`.
  void EndJob(bool say, int code, const std::string& line, const std::string& record);
  // The end of a job whose survivors cannot go on, with the checkpoints
  // written so far: `say`s why (the one rank that says it).
  void EndTheJob(bool say, const std::string& why);
  friend class RegroupGuard;

  double timeout_s_;
  double silent_s_;  // recovery.silent_s
  JobHost& host_;
  const RunComms* comms_;              // the communicators now
  std::vector<RankWorld> survivors_;   // the worlds made after losses (never freed: see Shrink)
  std::vector<std::unique_ptr<RunComms>> shrunk_comms_;
  std::vector<std::unique_ptr<ReplicaGroup>> solos_;  // a one-replica world's replica group
  std::unique_ptr<RankWatch> watch_;
  std::unique_ptr<RankWatch> old_watch_;  // while the survivors regroup: the world before's, for the guard
  std::optional<LostRankInterrupt> interrupt_;
  std::optional<WriteFence> fence_;  // this rank's writes checked against its exclusion
  TrainCommand command_;
  int epoch_ = 0;
  // The ranks agreed lost whose end this rank did not see (silent: paused,
  // stalled, or a node gone): they may still run.
  std::vector<WatchMember> maybe_running_;
  std::string left_out_ = "a lost rank";  // the last agreed lost ranks ("rank 3", "ranks 1, 3")
};


// The errors every rank agreed on and one rank explained (a config,
// schedule, output, resource or run error): said once, exit 2. Any other
// is one rank's own, mid-step.
bool Explained(const std::exception& e);

// What a job's exit record says of a run that ended with `code` 0 or
// kExitStopped ("finished: 200 steps", "stopped on SIGTERM after step 60
// with a checkpoint: run it again to resume").
std::string EndedRecord(int code, const TrainSummary& summary);

// The survivors' message to the ranks they start (JSON): the run, the
// config and overrides, the loss, the epoch, and the ranks they excluded
// that may still run.
std::string ReplacementPayload(const TrainCommand& command, const std::string& run_id, const std::vector<int>& lost,
                               const std::string& how, double agreed_s, double seen_unix_s, int epoch,
                               const std::vector<WatchMember>& excluded = {});
struct Replacement {
  TrainCommand command;
  JoinedRun run;
  int place = -1;          // this rank's world rank
  std::string exit_file;   // the job's BATON_EXIT_FILE (LeaveExitRecord), "" if unset
  int epoch = 0;           // the job's membership epoch the survivors started
  std::vector<WatchMember> excluded;  // the ranks they agreed lost that may still run (JobHost::WakeExcluded)
};
// A new rank's reading of ReplacementPayload; `index`: its rank among the new ones.
Replacement ReadReplacementPayload(const std::string& payload, int index);

}  // namespace baton

#endif  // BATON_SRC_TRAIN_SURVIVORS_H_
