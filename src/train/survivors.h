// A job's ranks watching one another, and what the survivors of a lost
// rank do (the launch's side of recovery.on_lost_rank): RunOnAllRanks
// makes one where mpirun keeps the survivors.
#ifndef BATON_SRC_TRAIN_SURVIVORS_H_
#define BATON_SRC_TRAIN_SURVIVORS_H_

#include <memory>
#include <optional>
#include <vector>

#include "baton/comm.h"
#include "baton/train.h"
#include "baton/watch.h"
#include "setup.h"

namespace baton {

class JobWatch final : public Survivors {
 public:
  // Collective over `comms.world`: every rank starts watching the others,
  // and every wait of this thread ends with RankLost once one is lost.
  JobWatch(const RunComms& comms, double timeout_s);
  ~JobWatch() override;

  // The agreement, then: the ranks of a replica that lost one exit (0); the
  // others build a world of their own (MakeMpiSurvivors), watched anew.
  // A rank lost while the new world is built (its MPI calls would wait for
  // it for good: Open MPI has no ULFM), or that world not made within the
  // deadline, ends the job as End does (RegroupGuard).
  Shrunk Shrink(const RankLost& seen, const ReplicaLayout& layout, const RecoveryHook& at) override;

  // The end of a job that lost a rank and does not go on: the survivors
  // agree, the lowest says which rank and how, and each exits
  // kExitLostRank after telling its mpirun to end (which exits 1 then,
  // where it keeps the survivors: it exits 0 for ranks that only exit
  // non-zero, or call MPI_Abort, under orte_enable_recovery 1).
  [[noreturn]] void End(const RankLost& seen);

  // This rank is done: it says goodbye to every other, whose watch then
  // takes its end for no loss.
  void Finish();

  // This rank's number in the world now (after losses, the survivors').
  int rank() const { return comms_->world.rank(); }

 private:
  void Watch();
  double timeout_s_;
  const RunComms* comms_;             // the communicators now
  std::vector<int> mpi_ranks_;        // MPI_COMM_WORLD's rank of each rank of the world now
  std::vector<MpiWorld> survivors_;   // the worlds made after losses (never freed: see Shrink)
  std::vector<std::unique_ptr<RunComms>> shrunk_comms_;
  std::unique_ptr<ReplicaGroup> solo_;  // a world of one replica's replica group
  std::unique_ptr<RankWatch> watch_;
  std::optional<LostRankInterrupt> interrupt_;
};

// A run's own state at its last two step boundaries, in memory, for going
// on after a lost rank (recovery.on_lost_rank: shrink), or for writing it
// as a checkpoint before stopping (stop, with replicas: SavesOnLoss). Kept at each step's
// start, before the ranks' agreement there: a rank that has kept step k
// knows every rank finished step k - 1 and kept it, so the survivors can
// always agree on a step each still holds (the least of their latest).
class KeptState {
 public:
  // This rank's stages' parameters and optimizer state after `step`.
  void Keep(RunSetup& u, ReplicaGroup& replicas, std::int64_t step);
  bool any() const { return latest() >= 0; }
  std::int64_t latest() const;
  // The state after `step` back into `u`'s stages, and the data where it
  // stood. ConfigError when this rank keeps no such step.
  void Restore(RunSetup& u, std::int64_t step) const;
  std::string run_id;  // the run's (every rank knows it)

 private:
  struct Slot {
    std::int64_t step = -1;
    std::vector<NamedTensor> tensors;
  };
  Slot slots_[2];
  int next_ = 0;
};

}  // namespace baton

#endif  // BATON_SRC_TRAIN_SURVIVORS_H_
