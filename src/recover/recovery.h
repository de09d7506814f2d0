// Recovery inside the job from a lost rank (recovery.on_lost_rank), as one
// owner beside the training loop. It owns what the mode allows
// (RecoveryMode), the state every rank keeps at step boundaries
// (KeptState), the communicators of the world now, the setups a loss left
// behind, and the record of the loss until it is said; the launch's
// Survivors (baton/train.h) owns the watch, the survivors' agreement and
// the making of their new world. The loop asks it three things: keep this
// boundary, a loss happened (the config and world to go on with), and the
// state to go on from once the run is set up again.
#ifndef BATON_SRC_TRAIN_RECOVERY_H_
#define BATON_SRC_TRAIN_RECOVERY_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "baton/comm.h"
#include "baton/config.h"
#include "baton/train.h"
#include "baton/watch.h"
#include "kept_state.h"
#include "setup.h"

namespace baton {

// What a job does when it loses a rank, from the config and the launch:
// one value, asked (never recovery.on_lost_rank compared in the loop).
class RecoveryMode {
 public:
  // recovery.on_lost_rank of `c`; `survivors`: the launch keeps the
  // survivors of a lost rank (TrainOptions::survivors given).
  RecoveryMode(const TrainConfig& c, bool survivors);
  // A lost rank ends the job at once: no survivors kept, or stop with
  // nothing the survivors could write (SavesOnLoss).
  bool ends_job() const { return kind_ == Kind::kEnd; }
  // Every rank keeps its state at the last step boundaries (KeptState).
  bool keeps_state() const { return kind_ != Kind::kEnd; }
  // stop, with replicas: the survivors write the last step boundary they
  // all keep as a checkpoint, then stop (exit 75).
  bool saves_then_stops() const { return kind_ == Kind::kSaveThenStop; }
  // The run goes on after a loss: with fewer replicas (shrink) or with new
  // processes in the lost ranks' places (replace).
  bool goes_on() const { return kind_ == Kind::kShrink || kind_ == Kind::kReplace; }
  bool replaces() const { return kind_ == Kind::kReplace; }
  // replace where a rank's state exists nowhere else (a pure pipeline, or
  // replicas under ZeRO 1-3): each rank's own part is kept on its
  // neighbour every N steps (KeptState::HoldNeighbours), the steps since
  // replayed after a loss.
  bool snapshots() const { return snapshots_; }
  // "stop", "shrink" or "replace", for messages and metrics rows.
  std::string_view name() const;

 private:
  enum class Kind { kEnd, kSaveThenStop, kShrink, kReplace };
  Kind kind_ = Kind::kEnd;
  bool snapshots_ = false;
};

// recovery.on_lost_rank: stop under a launch that keeps the survivors:
// whether they can write the last step boundary as a checkpoint before
// they stop (a checkpoint folder, replicas holding their stages whole
// (ZeRO 0) on the CPU, and the global batch's microbatches shared evenly
// by however many replicas are left).
bool SavesOnLoss(const TrainConfig& c);

// The config of the replicas that go on: the same global batch over
// `replicas` replicas, in microbatches of the same size (recovery's config
// check makes them divide).
TrainConfig ShrunkConfig(TrainConfig c, int replicas);

class Recovery {
 public:
  // For a run of `c` on `comms` (a new process in a lost rank's place:
  // options.joined, collective with the survivors' Regroup). Where the
  // mode snapshots, every rank starts holding its neighbour's.
  Recovery(const TrainConfig& c, const RunComms& comms, const TrainOptions& options);
  Recovery(const Recovery&) = delete;
  Recovery& operator=(const Recovery&) = delete;

  const RecoveryMode& mode() const { return mode_; }
  // The communicators of the world now: the job's, or the last regroup's.
  const RunComms& comms() const { return *comms_; }
  // Going on from a loss whose line and row are not said yet.
  bool recovering() const { return loss_.has_value(); }
  // After a replace the job has its size again: its start was said.
  bool replaced() const { return loss_.has_value() && mode_.replaces(); }

  // What SetUpRun is told of a loss the run goes on from (none: a start or
  // a resume).
  std::optional<SetupOptions::Recovered> ForSetup() const;
  // Once the run is set up on comms(): after a loss, the state of the step
  // the survivors agreed on put back into `u` (each rank's own kept state,
  // a whole replica's, or a neighbour's snapshot), and that step returned;
  // else every rank learns the run's id (should it become rank 0) and
  // none is returned. Collective over comms().
  std::optional<std::int64_t> TakeUp(const TrainConfig& c, RunSetup& u);

  // At the boundary after step `step` (`first`: the first of this setup's
  // steps): this rank's state kept, where the mode keeps it. Collective
  // over the snapshot ring where the mode snapshots.
  void Keep(RunSetup& u, std::int64_t step, bool first);

  // Whether the loss's line and row are due once step `step` has finished:
  // the step it interrupted is done again.
  bool SayAfter(std::int64_t step) const { return loss_.has_value() && step >= loss_->interrupted; }
  // Rank 0's line and every rank's agreed metrics row of the loss (the
  // lost ranks, how they were seen, where the run went on from, the time
  // since the loss); the loss is said. Collective over comms().world.
  void SayRecovered(RunSetup& u, std::int64_t step, bool tty);

  // saves_then_stops after a loss: the survivors are to write the kept
  // step as a checkpoint and stop (SaveAndStop) instead of training on.
  bool stops_now() const { return loss_.has_value() && mode_.saves_then_stops(); }
  // The kept step as a checkpoint (unless it was written whole before the
  // loss), then one line and a metrics row; every rank returns once every
  // file is written. Collective over comms().world.
  void SaveAndStop(RunSetup& u, TrainSummary& summary);

  // After `seen`: whether the survivors can go on or stop with a
  // checkpoint (the mode keeps state and some boundary is kept); if not,
  // the launch ends the job.
  bool CanRecover() const { return mode_.keeps_state() && kept_.any(); }
  // REQUIRES: CanRecover(). The setup `old` is let go of its files and
  // kept to the process's end (MPI may still write into its buffers: a
  // receive posted before the loss cannot be taken back); the survivors
  // agree on the lost ranks and make their new world (Survivors: Shrink,
  // or Replace), and on the step every one of them keeps. Returns the
  // config of the run that goes on (fewer replicas after a shrink).
  TrainConfig Regroup(const RankLost& seen, const TrainConfig& c, std::unique_ptr<RunSetup> old);

 private:
  using Clock = std::chrono::steady_clock;
  // A loss the run goes on from, said and recorded once the step it
  // interrupted has finished again.
  struct Loss {
    std::vector<int> lost;  // the agreed lost ranks, in the world before
    std::string how;        // how they were seen (DescribeLost)
    int replicas_before = 0, replicas_after = 0;
    std::int64_t after_step = 0;   // the state the run goes on from
    std::int64_t interrupted = 0;  // the step the loss interrupted
    Clock::time_point seen;
    double agreed_s = 0;
    double regroup_s = 0;      // the slowest survivor's, from the agreement to the new world
    std::vector<int> holders;  // snapshots: the rank that held each lost one's
    bool joined = false;       // this process is a new one, in a lost rank's place
  };
  // The replicas' ring the snapshots go round: the pipeline in a pure
  // pipeline, else the world.
  Transport& Ring() const;
  // replace with a whole replica: the state of the step gone on from,
  // in each replica group that holds a new rank from the lowest replica
  // that lost none; the other groups restore their own.
  void TakeFromAWholeReplica(const TrainConfig& c, RunSetup& u) const;

  RecoveryMode mode_;
  Survivors* survivors_;
  const RunComms* comms_;
  int replicas_ = 1;  // data_parallel.size of the world now
  KeptState kept_;
  std::optional<Loss> loss_;
  std::vector<std::unique_ptr<RunSetup>> left_;  // the setups losses left (see Regroup)
};

}  // namespace baton

#endif  // BATON_SRC_TRAIN_RECOVERY_H_
