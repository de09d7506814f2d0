// A run's state kept at step boundaries, and the neighbours' snapshots (kept_state.h).
#include "kept_state.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <fmt/format.h>

#include "baton/error.h"
#include "baton/timing.h"
#include "migrate.h"

namespace baton {

int SnapshotEvery(double copy_s, double step_s, double share) {
  if (!(copy_s > 0) || !(step_s > 0)) return 1;
  const double n = std::ceil(copy_s / (share * step_s));
  return static_cast<int>(std::clamp(n, 1.0, 1e6));
}

namespace {
// Request ids and tag of a snapshot's copy: nothing else is in flight at a
// step boundary.
constexpr int kSnapshotSendId = 0, kSnapshotRecvId = 1, kSnapshotTag = 1;
}  // namespace

int SnapshotHolder(const ReplicaLayout& layout, int rank) {
  if (layout.replicas <= 1) return (rank + 1) % layout.pipeline_ranks;
  return layout.World(layout.PipelineRank(rank), (layout.Replica(rank) + 1) % layout.replicas);
}

void KeptState::HoldNeighbours(Transport& ring, const ReplicaLayout& layout, int every, double timeout_s) {
  ring_ = &ring;
  layout_ = layout;
  world_ring_ = layout.replicas > 1;
  timeout_s_ = timeout_s;
  if (world_ring_) ring.Configure(2, timeout_s);
  every_ = every;
  chosen_ = false;  // auto chooses, or a given interval's price is said, after the first steps
}

void KeptState::Keep(RunSetup& u, ReplicaGroup& replicas, std::int64_t step, bool first) {
  const double start = MonotonicSeconds();
  if (ring_ != nullptr && last_start_ >= 0 && !first) steps_s_.push_back(start - last_start_ - last_copy_s_);
  seen_ = step;
  if (ring_ != nullptr && !chosen_ && choose_at_ < 0) choose_at_ = step + 3;
  if (ring_ != nullptr && !chosen_ && step == choose_at_) Choose();
  const bool due = ring_ == nullptr || first || every_ == 0 || step % every_ == 0;
  last_start_ = start;
  last_copy_s_ = 0;
  if (!due) return;
  u.params->Pull();
  // With snapshots, this rank's own part (its shards under ZeRO), copied
  // once into the buffer it is sent from and kept in; else the stages'
  // whole state (with replicas under ZeRO 0 every replica holds it).
  std::vector<NamedTensor> tensors;
  std::vector<float> own, previous;
  if (ring_ != nullptr) {
    own = u.params->OwnFloats();
  } else {
    tensors = u.params->CheckpointTensors(u.params->WholeState(replicas));
  }
  u.params->Settle();
  if (ring_ != nullptr) previous = PassOn(own);
  // The slot already holding `step` (a recovery keeps its step again), or the older.
  Slot& slot = slots_[0].step == step ? slots_[0] : slots_[1].step == step ? slots_[1] : slots_[next_];
  if (&slot == &slots_[next_]) next_ = 1 - next_;
  slot.step = step;
  slot.tensors = std::move(tensors);
  slot.own = std::move(own);
  slot.previous = std::move(previous);
  last_copy_s_ = MonotonicSeconds() - start;
  copy_s_ = last_copy_s_;
}

void KeptState::Exchange(Transport& t, Wire& wire, int to, int from, const char* sent, const char* received) {
  // Its size first: a new process knows no size of what it takes.
  wire.count_out = static_cast<std::int64_t>(wire.out.size());
  if (from >= 0) t.Irecv(kSnapshotRecvId, &wire.count_in, sizeof wire.count_in, from, kSnapshotTag);
  if (to >= 0) t.Isend(kSnapshotSendId, &wire.count_out, sizeof wire.count_out, to, kSnapshotTag);
  if (to >= 0) t.Wait(kSnapshotSendId, {"SEND of a snapshot's size", -1, -1, to});
  if (from >= 0) t.Wait(kSnapshotRecvId, {"RECV of a snapshot's size", -1, -1, from});
  if (from >= 0) {
    wire.in.resize(static_cast<std::size_t>(wire.count_in));
    t.Irecv(kSnapshotRecvId, wire.in.data(), wire.in.size() * sizeof(float), from, kSnapshotTag);
  }
  if (to >= 0) t.Isend(kSnapshotSendId, wire.out.data(), wire.out.size() * sizeof(float), to, kSnapshotTag);
  if (to >= 0) t.Wait(kSnapshotSendId, {sent, -1, -1, to});
  if (from >= 0) t.Wait(kSnapshotRecvId, {received, -1, -1, from});
}

std::vector<float> KeptState::PassOn(std::vector<float>& mine) {
  Transport& t = *ring_;
  const int next = SnapshotHolder(layout_, t.rank());
  int prev = 0;
  while (SnapshotHolder(layout_, prev) != t.rank()) ++prev;
  auto wire = std::make_unique<Wire>();
  wire->out = std::move(mine);  // MPI reads it from here: on a loss it stays with the wire
  try {
    Exchange(t, *wire, next, prev, "SEND of a snapshot of this rank's state",
             "RECV of a snapshot of the previous rank's state");
  } catch (...) {
    abandoned_.push_back(std::move(wire));
    throw;
  }
  mine = std::move(wire->out);
  return std::move(wire->in);
}

void KeptState::Choose() {
  chosen_ = true;
  std::vector<double> steps = steps_s_;
  double step_s = 0;
  if (!steps.empty()) {
    std::nth_element(steps.begin(), steps.begin() + static_cast<std::ptrdiff_t>(steps.size() / 2), steps.end());
    step_s = steps[steps.size() / 2];
  }
  // Every rank's slowest copy and step, in microseconds.
  auto us = [](double s) { return static_cast<int>(std::clamp(s * 1e6, 0.0, 2e9)); };
  const double copy = ring_->AllMax(us(copy_s_), "every rank's snapshot copy time") * 1e-6;
  const double each = ring_->AllMax(us(step_s), "every rank's step time") * 1e-6;
  const bool chose = every_ == 0;
  if (chose) every_ = SnapshotEvery(copy, each);
  // Two boundaries of this rank's state and the previous rank's.
  const Slot& newest = slots_[0].step >= slots_[1].step ? slots_[0] : slots_[1];
  const std::size_t held = newest.previous.size() + newest.own.size();
  said_ = fmt::format("snapshots of each rank's state on the {} every {} step{} ({}; a copy took {:.1f} ms, "
                      "{:.1f}% of a {:.1f} ms step, {:.1f}% a step at this interval); {:.1f} MiB held on this rank",
                      layout_.replicas > 1 ? "same pipeline rank of the next replica" : "next rank", every_,
                      every_ > 1 ? "s" : "", chose ? "recovery.snapshot_every: auto" : "as set", copy * 1e3,
                      each > 0 ? 100 * copy / each : 0.0, each * 1e3,
                      each > 0 ? 100 * copy / (each * every_) : 0.0, held * 2.0 * sizeof(float) / 1048576.0);
  if (ring_->rank() == 0) std::fprintf(stderr, "baton: %s\n", said_.c_str());
}

std::int64_t KeptState::latest() const { return std::max(slots_[0].step, slots_[1].step); }

const std::vector<NamedTensor>* KeptState::Find(std::int64_t step) const {
  if (ring_ != nullptr) return nullptr;
  for (const Slot& slot : slots_) {
    if (slot.step == step) return &slot.tensors;
  }
  return nullptr;
}

void KeptState::Put(RunSetup& u, const std::vector<NamedTensor>& tensors, std::int64_t step, const char* what) {
  u.params->Restore(tensors, what, step);
  const std::int64_t per_epoch = u.loader->batches_per_epoch();
  u.loader->Seek(step / per_epoch, step % per_epoch);
}

void KeptState::PutOwn(RunSetup& u, const std::vector<NamedTensor>& tensors, std::int64_t step, const char* what) {
  u.params->RestoreOwn(tensors, what, step);
  const std::int64_t per_epoch = u.loader->batches_per_epoch();
  u.loader->Seek(step / per_epoch, step % per_epoch);
}

void KeptState::Restore(RunSetup& u, std::int64_t step) const {
  for (const Slot& slot : slots_) {
    if (slot.step != step) continue;
    if (ring_ != nullptr) {
      std::vector<NamedTensor> tensors = u.params->OwnTensorsToFill();
      Unflatten(slot.own, tensors, "this rank's own state in memory");
      PutOwn(u, tensors, step, "this rank's own state in memory");
    } else {
      Put(u, slot.tensors, step, "this rank's state in memory");
    }
    return;
  }
  throw ConfigError(fmt::format("rank {}: the survivors agreed to go on after step {}, which this rank keeps no "
                                "state of",
                                u.world_rank, step));
}

bool KeptState::NeighboursHold(const std::vector<int>& lost, const ReplicaLayout& layout) {
  for (const int l : lost) {
    if (std::find(lost.begin(), lost.end(), SnapshotHolder(layout, l)) != lost.end()) return false;
  }
  return true;
}

void KeptState::HandBack(RunSetup& u, Transport& ring, const std::vector<int>& lost, std::int64_t step) {
  ring_ = &ring;
  if (world_ring_) ring.Configure(2, timeout_s_);
  // A new process (it has kept nothing) knows no interval: the survivors'.
  // If auto had not chosen yet, every rank chooses three steps on from here.
  const bool fresh = seen_ < 0;
  every_ = ring.AllMax(fresh ? -1 : every_, "the survivors' snapshot interval");
  chosen_ = ring.AllMax(fresh || chosen_ ? 0 : 1, "whether the snapshot interval is chosen") == 0;
  choose_at_ = -1;
  steps_s_.clear();
  last_start_ = -1;
  const int me = ring.rank();
  const bool mine_lost = std::find(lost.begin(), lost.end(), me) != lost.end();
  if (!mine_lost) Restore(u, step);
  for (const int l : lost) {
    const int holder = SnapshotHolder(layout_, l);
    if (me == holder) {
      const std::vector<float>* held = nullptr;
      for (const Slot& slot : slots_) {
        if (slot.step == step) held = &slot.previous;
      }
      if (held == nullptr) {
        throw ConfigError(fmt::format("rank {}: rank {}'s new process asks the snapshot of step {}, which this rank "
                                      "holds none of",
                                      me, l, step));
      }
      auto wire = std::make_unique<Wire>();
      wire->out = *held;
      try {
        Exchange(ring, *wire, l, -1, "SEND of a held snapshot to a new rank", "");
      } catch (...) {
        abandoned_.push_back(std::move(wire));
        throw;
      }
    } else if (me == l) {
      auto wire = std::make_unique<Wire>();
      std::vector<NamedTensor> tensors = u.params->OwnTensorsToFill();
      try {
        Exchange(ring, *wire, -1, holder, "", "RECV of this rank's snapshot from the next rank");
      } catch (...) {
        abandoned_.push_back(std::move(wire));
        throw;
      }
      Unflatten(wire->in, tensors, "this rank's snapshot from its holder");
      PutOwn(u, tensors, step, "its holder's snapshot of this rank");
    }
  }
}

}  // namespace baton
