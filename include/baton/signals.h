// Signals a job is sent (the OS room, src/os): a scheduler's request to
// stop at the next step boundary, and the handler that ends a process told
// to stop outside a run's steps. One owner: nothing else in baton installs a
// signal handler.
#ifndef BATON_SIGNALS_H_
#define BATON_SIGNALS_H_

#include <string>

namespace baton {

// Preemption-safe stops. Clusters stop jobs with a signal and a grace
// period: Slurm sends SIGTERM on preemption and scancel, and the signal of
// `--signal=B:USR1@60` ahead of a time limit. While a StopSignals exists
// (Train holds one; `baton train` holds one from its start, so that a
// signal during start-up is kept too), SIGTERM and SIGUSR1 only set a flag
// (SA_RESTART: interrupted system calls go on). At every step boundary the
// ranks agree whether any rank has one, and if so they all stop there
// together (no rank alone, no collective half-done) after a checkpoint of
// the last finished step (TrainSummary::stop_signal); the command then
// exits with kExitStopped, EX_TEMPFAIL (sysexits.h): stopped on request,
// to be run again (the sbatch template requeues it, and
// `checkpoint.resume: auto` continues). The handlers before the first are
// put back when the last goes (ranks run as threads each hold one).
inline constexpr int kExitStopped = 75;
// A job that lost a rank and does not recover it inside the job (the
// launcher kept the survivors; they agreed and ended it).
inline constexpr int kExitLostRank = 4;
// A rank the others agreed was lost while it was only paused or stalled:
// it learns it is out of the job (RankWatch's fence) and exits with this,
// writing nothing.
inline constexpr int kExitExcluded = 6;
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  // The first stop signal received since the handlers were installed, or 0.
  static int Received();
  // Whether any StopSignals exists now.
  static bool Active();
};

// Outside a StopSignals' life (start-up, validate, bench), SIGINT and
// SIGTERM end the process at once: the file being written, if any, is
// removed (files.h RemoveUnfinishedFile), "baton: rank RANK: stopped before
// the run ended ... signal SIGNAL" is written to standard error (the
// signal's own name), and the process exits 128 + the signal. While a
// StopSignals exists, SIGTERM stops at the next step boundary instead;
// SIGINT (Ctrl-C) always ends at once. Call once, early, on every rank.
void EndOnSignals(int rank);

// A rank started by a launcher (mpirun's daemon, slurmstepd): when that
// parent ends (mpirun killed, or ending at a second Ctrl-C without
// waiting for its ranks), the rank is sent SIGTERM (Linux's
// PR_SET_PDEATHSIG), so an orphaned run stops at its next step boundary
// with a checkpoint, as at a scheduler's stop, instead of training on
// with nobody to wait for it; what it prints then is lost (SIGPIPE is
// ignored: a write to the launcher's closed pipe fails, it does not end
// the rank). Nothing elsewhere.
void StopWhenLauncherEnds();

// Ends this process's launcher when it is mpirun on this node (its parent:
// mpirun, orterun, mpiexec or prterun) with SIGTERM, so that it exits
// non-zero where it would not for its ranks' own exit codes (under
// orte_enable_recovery 1 it exits 0 whatever they return). Whether it did.
bool EndLauncher();
// Whether this process's parent is mpirun on this node (not its daemon on
// another: there EndLauncher cannot reach it).
bool LauncherIsParent();

// The job's exit code for a launcher that cannot pass it on: under
// orte_enable_recovery 1 mpirun exits 0 whatever its ranks return (75, a
// stop to run again, included), or 1 when told to end. Where the
// environment variable BATON_EXIT_FILE names a file, the job's lowest rank
// writes there, as the job ends, its exit code on the first line and what
// ended it on the second (written whole or not at all: a missing file
// means the job ended without saying, a failure), for the sbatch
// template to read (as torchelastic's TORCHELASTIC_ERROR_FILE). Nothing
// where it is unset; a file that cannot be written is said on standard
// error, never thrown.
inline constexpr const char* kExitFileVariable = "BATON_EXIT_FILE";
void LeaveExitRecord(int code, const std::string& why);
// From now on this process leaves no exit record: BATON_EXIT_FILE names a
// file the job reads or writes (found by its checks, which say so).
void RefuseExitRecord();

}  // namespace baton

#endif  // BATON_SIGNALS_H_
