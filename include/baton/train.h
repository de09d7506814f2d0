// Training (src/train): `baton train` on every rank of an MPI job.
#ifndef BATON_TRAIN_H_
#define BATON_TRAIN_H_

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
  double validation_loss = -1.0;  // next-token data: nats per token at the last evaluation (rank 0)
  double seconds = 0.0;
  // Stopped early by a stop signal (SIGTERM, SIGUSR1) that every rank
  // agreed on at a step boundary: the signal, 0 if the run ran to its end;
  // the last finished step; and whether a checkpoint of it exists.
  int stop_signal = 0;
  std::int64_t stopped_after = 0;
  bool checkpointed = false;
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
struct TrainOptions {
  bool resume = false;     // continue from the newest complete checkpoint
  std::string resume_dir;  // where to look; "" = checkpoint.dir
  // --resume auto (or checkpoint.resume: auto): from checkpoint.dir's newest
  // complete checkpoint if there is one, else from scratch.
  bool resume_auto = false;
};
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
TrainSummary Train(const TrainConfig& config, const RunComms& comms, const TrainOptions& options = {});

}  // namespace baton

#endif  // BATON_TRAIN_H_
