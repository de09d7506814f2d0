// A run's own state at its last step boundaries, kept in memory for going
// on after a lost rank (recovery.on_lost_rank), and the snapshots of it
// that a rank's neighbour holds where the state exists nowhere else.
#ifndef BATON_SRC_TRAIN_KEPT_STATE_H_
#define BATON_SRC_TRAIN_KEPT_STATE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "baton/comm.h"
#include "setup.h"

namespace baton {

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

#endif  // BATON_SRC_TRAIN_KEPT_STATE_H_
