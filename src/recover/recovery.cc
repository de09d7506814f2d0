// Recovery inside the job from a lost rank (recovery.h).
#include "recovery.h"

#include <algorithm>
#include <cstdio>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "baton/error.h"
#include "baton/signals.h"
#include "checkpoint.h"
#include "executor.h"
#include "fault.h"
#include "metrics_row.h"
#include "migrate.h"

namespace baton {

namespace {

double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// The slowest rank's regroup (`mine`: this rank's; a new rank's is 0) to
// the microsecond, known to every rank of the new world: what the
// recovered row says.
double SlowestRegroup(Transport& world, double mine) {
  return world.AllMax(static_cast<int>(std::min(mine, 2000.0) * 1e6), "the survivors' regroup times") * 1e-6;
}

}  // namespace

RecoveryMode::RecoveryMode(const TrainConfig& c, bool survivors) {
  if (!survivors) return;
  switch (c.recovery.on_lost_rank) {
    case LostRankMode::kStop:
      kind_ = SavesOnLoss(c) ? Kind::kSaveThenStop : Kind::kEnd;
      break;
    case LostRankMode::kShrink:
      kind_ = Kind::kShrink;
      break;
    case LostRankMode::kReplace:
      kind_ = Kind::kReplace;
      snapshots_ = c.data_parallel.size == 1 || c.data_parallel.zero.shards_optimizer();
      break;
  }
}

std::string_view RecoveryMode::name() const {
  switch (kind_) {
    case Kind::kShrink:
      return "shrink";
    case Kind::kReplace:
      return "replace";
    case Kind::kEnd:
    case Kind::kSaveThenStop:
      break;
  }
  return "stop";
}

bool SavesOnLoss(const TrainConfig& c) {
  if (c.checkpoint.dir.empty() || c.data_parallel.size < 2 || c.data_parallel.zero.shards_optimizer() ||
      c.device != Device::kCpu) {
    return false;
  }
  for (int left = 1; left < c.data_parallel.size; ++left) {
    if (c.pipeline.microbatches * c.data_parallel.size % left != 0) return false;
  }
  return true;
}

TrainConfig ShrunkConfig(TrainConfig c, int replicas) {
  const int total = c.pipeline.microbatches * c.data_parallel.size;
  c.data_parallel.size = replicas;
  c.pipeline.microbatches = total / replicas;
  return c;
}

Recovery::Recovery(const TrainConfig& c, const RunComms& comms, const TrainOptions& options)
    : mode_(c, options.survivors != nullptr),
      survivors_(options.survivors),
      comms_(&comms),
      replicas_(c.data_parallel.size) {
  const ReplicaLayout layout{c.pipeline.ranks, c.data_parallel.size};
  if (mode_.snapshots()) kept_.HoldNeighbours(Ring(), layout, c.recovery.snapshot_every, c.pipeline.wait_timeout_s);
  if (!options.joined) return;
  // A new process in a lost rank's place: the survivors' recovery, from
  // the step they all keep (it keeps none: the least of theirs), with the
  // same two agreements as their Regroup.
  const JoinedRun& j = *options.joined;
  Loss r;
  r.lost = j.lost;
  r.how = j.how;
  r.agreed_s = j.agreed_s;
  r.seen = Clock::now() - std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(j.since_loss_s));
  r.replicas_before = r.replicas_after = c.data_parallel.size;
  r.joined = true;
  r.after_step = -comms_->world.AllMax(std::numeric_limits<int>::min(), "the survivors' kept steps");
  r.interrupted = comms_->world.AllMax(-1, "the survivors' last step boundaries") + 1;
  r.regroup_s = SlowestRegroup(comms_->world, 0);
  for (const int l : r.lost) r.holders.push_back(SnapshotHolder(layout, l));
  kept_.run_id = j.run_id;
  loss_ = r;
}

Transport& Recovery::Ring() const { return replicas_ == 1 ? comms_->pipeline : comms_->world; }

std::optional<SetupOptions::Recovered> Recovery::ForSetup() const {
  if (!loss_) return std::nullopt;
  // A survivor of a replace keeps its rank, and its own fault of a later step.
  return SetupOptions::Recovered{kept_.run_id, loss_->after_step,
                                 mode_.replaces() && !loss_->joined ? loss_->interrupted : -1};
}

void Recovery::TakeFromAWholeReplica(const TrainConfig& c, RunSetup& u) const {
  const Loss& r = *loss_;
  const ReplicaLayout layout{c.pipeline.ranks, c.data_parallel.size};
  auto lost_in = [&](auto same) { return std::any_of(r.lost.begin(), r.lost.end(), same); };
  int whole = 0;
  while (whole < layout.replicas && lost_in([&](int l) { return layout.Replica(l) == whole; })) ++whole;
  const int p = layout.PipelineRank(comms_->world.rank());
  if (!lost_in([&](int l) { return layout.PipelineRank(l) == p; })) {
    kept_.Restore(u, r.after_step);
    return;
  }
  std::vector<NamedTensor> tensors;
  if (const std::vector<NamedTensor>* mine = kept_.Find(r.after_step)) {
    tensors = *mine;
  } else {  // a new rank: the names and shapes, filled from the whole replica
    tensors = StateTensorsToFill(u);
  }
  ShareFromReplica(comms_->replicas, tensors, whole);
  KeptState::Put(u, tensors, r.after_step, "a whole replica's state");
}

std::optional<std::int64_t> Recovery::TakeUp(const TrainConfig& c, RunSetup& u) {
  if (!loss_) {
    if (mode_.keeps_state()) {  // every rank knows the run's id, should it become rank 0
      kept_.run_id = u.run.run_id;
      comms_->world.BroadcastString(&kept_.run_id);
    }
    return std::nullopt;
  }
  if (mode_.snapshots()) {
    kept_.HandBack(u, Ring(), loss_->lost, loss_->after_step);
  } else if (mode_.replaces()) {
    TakeFromAWholeReplica(c, u);
  } else {
    kept_.Restore(u, loss_->after_step);
  }
  return loss_->after_step;
}

void Recovery::Keep(RunSetup& u, std::int64_t step, bool first) {
  if (mode_.keeps_state()) kept_.Keep(u, comms_->replicas, step, first);
}

void Recovery::SayRecovered(RunSetup& u, std::int64_t step, bool tty) {
  const Loss& r = *loss_;
  Transport& t = comms_->world;
  const double seconds = Since(r.seen);
  const std::string lost = fmt::format("{}", fmt::join(r.lost, ", "));
  const bool many = r.lost.size() > 1;
  if (t.rank() == 0 && mode_.replaces()) {
    std::string from;  // where the new ranks' state came from, and the steps redone
    if (mode_.snapshots()) {
      const std::int64_t replayed = r.interrupted - 1 - r.after_step;
      from = fmt::format("the snapshot{} of step {} on rank{} {}, and went on from step {}{}", many ? "s" : "",
                         r.after_step, many ? "s" : "", fmt::join(r.holders, ", "), r.after_step + 1,
                         replayed > 0 ? fmt::format(" (replaying {} step{} done before the loss)", replayed,
                                                    replayed > 1 ? "s" : "")
                                      : "");
    } else {
      from = fmt::format("a whole replica, and went on from step {} with every replica", r.after_step + 1);
    }
    std::fprintf(stderr,
                 "%sbaton: lost rank%s %s (%s); the survivors agreed in %.3f s, started %zu new rank%s in %s place "
                 "(recovery.on_lost_rank: replace), %s state from %s; step %lld finished %.2f s after the loss\n",
                 tty ? "\n" : "", many ? "s" : "", lost.c_str(), r.how.c_str(), r.agreed_s, r.lost.size(),
                 many ? "s" : "", many ? "their" : "its", many ? "their" : "its", from.c_str(),
                 static_cast<long long>(step), seconds);
  } else if (t.rank() == 0) {
    std::fprintf(stderr,
                 "%sbaton: lost rank%s %s (%s); the survivors agreed in %.3f s and went on with %d of %d replicas "
                 "(recovery.on_lost_rank: shrink) from step %lld, the same global batch; step %lld finished %.2f s "
                 "after the loss\n",
                 tty ? "\n" : "", many ? "s" : "", lost.c_str(), r.how.c_str(), r.agreed_s, r.replicas_after,
                 r.replicas_before, static_cast<long long>(r.after_step + 1), static_cast<long long>(step), seconds);
  }
  WriteRow(t, u.metrics.get(),
           Row({{"event", "\"recovered\""},
                {"step", std::to_string(step)},
                {"lost", fmt::format("[{}]", lost)},
                {"noticed", nlohmann::json(r.how).dump()},
                {"mode", fmt::format("\"{}\"", mode_.name())},
                {"replicas", std::to_string(r.replicas_after)},
                {"resumed_after", std::to_string(r.after_step)},
                {"replayed", std::to_string(std::max<std::int64_t>(0, r.interrupted - 1 - r.after_step))},
                {"agreed_s", Json(r.agreed_s)},
                {"regroup_s", Json(r.regroup_s)},
                {"seconds", Json(seconds)}}));
  loss_.reset();
}

void Recovery::SaveAndStop(RunSetup& u, TrainSummary& summary) {
  const Loss& r = *loss_;
  Transport& t = comms_->world;
  const std::int64_t done = r.after_step;
  const std::string dir = StepDir(u.checkpoint_place.dir, done);
  const int whole = t.AllMax(t.rank() == 0 && u.env->KindOf(dir + "/manifest.json") == Env::PathKind::kFile ? 1 : 0,
                             "rank 0 looking for the checkpoint of the kept step");
  if (whole == 0) {
    SaveCheckpoint(u.checkpoint_place, u.run, *comms_, *u.params, done,
                   [&] { u.FaultAt(done, "checkpoint"); });
  }
  summary.stopped_after = done;
  summary.checkpointed = true;
  summary.stopped_for_lost_rank = true;
  const std::string lost = fmt::format("{}", fmt::join(r.lost, ", "));
  if (t.rank() == 0) {
    std::fprintf(stderr,
                 "baton: error: lost rank%s %s (%s); the survivors agreed in %.3f s and stopped (recovery.on_lost_rank: "
                 "stop) with the checkpoint of step %lld in %s, %.2f s after the loss; run it again with --resume "
                 "auto to continue from it (exit %d from every rank; mpirun, told to end, exits 1)\n",
                 r.lost.size() > 1 ? "s" : "", lost.c_str(), r.how.c_str(), r.agreed_s, static_cast<long long>(done),
                 dir.c_str(), Since(r.seen), kExitStopped);
  }
  WriteRow(t, u.metrics.get(),
           Row({{"event", "\"lost_rank\""},
                {"mode", "\"stop\""},
                {"lost", fmt::format("[{}]", lost)},
                {"noticed", nlohmann::json(r.how).dump()},
                {"checkpoint_step", std::to_string(done)},
                {"agreed_s", Json(r.agreed_s)},
                {"seconds", Json(Since(r.seen))}}));
  t.Barrier();  // the manifest and the row are written before any rank ends
  loss_.reset();
}

TrainConfig Recovery::Regroup(const RankLost& seen, const TrainConfig& c, std::unique_ptr<RunSetup> old) {
  old->metrics.reset();
  old->checkpoints.Abandon();
  old->held_outputs = HeldFifos();
  // BATON_FAULT's fault in a recovery, if any, fires in this one.
  RunFaults* const faults = old->faults.get();  // kept with `old` in left_
  left_.push_back(std::move(old));
  Loss r;
  r.seen = Clock::now();
  r.how = DescribeLost(seen.lost());
  r.replicas_before = c.data_parallel.size;
  const std::int64_t interrupted = kept_.seen() + 1;
  Survivors::RecoveryHook hook;  // none in a real run
  if (faults != nullptr) {
    hook = [faults, interrupted](std::string_view point, int job_rank) {
      faults->InRecovery(job_rank, interrupted, point);
    };
  }
  const ReplicaLayout layout{c.pipeline.ranks, c.data_parallel.size};
  // stop with a checkpoint shrinks too: the replicas that lost a rank
  // leave, the others write the checkpoint.
  const Survivors::Shrunk shrunk = mode_.replaces()
                                       ? survivors_->Replace(seen, layout, kept_.run_id, hook, mode_.snapshots())
                                       : survivors_->Shrink(seen, layout, hook);
  comms_ = shrunk.comms;
  replicas_ = shrunk.replicas;
  r.lost = shrunk.lost;
  r.agreed_s = shrunk.agreed_s;
  r.replicas_after = shrunk.replicas;
  // The step every survivor still keeps: the least of their latest.
  r.after_step = -comms_->world.AllMax(static_cast<int>(-kept_.latest()), "the survivors' kept steps");
  r.interrupted = comms_->world.AllMax(static_cast<int>(kept_.seen()), "the survivors' last step boundaries") + 1;
  r.regroup_s = SlowestRegroup(comms_->world, shrunk.regroup_s);
  if (!mode_.snapshots()) r.interrupted = r.after_step + 1;  // the first step redone
  for (const int l : r.lost) r.holders.push_back(SnapshotHolder(layout, l));
  loss_ = r;
  return mode_.replaces() ? c : ShrunkConfig(c, shrunk.replicas);
}

}  // namespace baton
