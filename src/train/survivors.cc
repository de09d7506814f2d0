// The survivors of a lost rank (survivors.h).
#include "survivors.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "baton/error.h"
#include "baton/signals.h"

namespace baton {

namespace {

// A peer silent this long (its node lost, or the process stopped) is lost.
constexpr double kLostAfterSilence = 1.0;

double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

JobWatch::JobWatch(const RunComms& comms, double timeout_s) : timeout_s_(timeout_s), comms_(&comms) {
  const int size = comms.world.size();
  std::vector<std::string> ranks;
  comms.world.GatherStrings(std::to_string(MpiWorldRank()), &ranks, "every rank's MPI rank");
  std::string joined = fmt::format("{}", fmt::join(ranks, " "));
  comms.world.BroadcastString(&joined);
  mpi_ranks_.clear();
  for (std::size_t at = 0; at < joined.size();) {
    std::size_t end = joined.find(' ', at);
    if (end == std::string::npos) end = joined.size();
    mpi_ranks_.push_back(std::stoi(joined.substr(at, end - at)));
    at = end + 1;
  }
  if (static_cast<int>(mpi_ranks_.size()) != size) throw Error("the lost-rank watch: every rank's MPI rank not known");
  Watch();
}

JobWatch::~JobWatch() { Finish(); }

void JobWatch::Finish() {
  interrupt_.reset();
  watch_.reset();
}

void JobWatch::Watch() {
  interrupt_.reset();
  watch_ = std::make_unique<RankWatch>(comms_->world, WatchOptions{.heartbeat_s = 0.1, .silent_s = kLostAfterSilence});
  interrupt_.emplace(*watch_);
}

Survivors::Shrunk JobWatch::Shrink(const RankLost& seen, const ReplicaLayout& layout) {
  const auto start = std::chrono::steady_clock::now();
  Shrunk out;
  try {
    out.lost = watch_->AgreeLost(std::min(timeout_s_, 30.0));
  } catch (const Error&) {
    End(seen);
  }
  out.agreed_s = Since(start);
  std::vector<int> gone;  // replicas that lost a rank
  for (const int w : out.lost) gone.push_back(layout.Replica(w));
  std::sort(gone.begin(), gone.end());
  gone.erase(std::unique(gone.begin(), gone.end()), gone.end());
  out.replicas = layout.replicas - static_cast<int>(gone.size());
  if (out.replicas == 0) End(seen);
  const int me = comms_->world.rank();
  if (std::binary_search(gone.begin(), gone.end(), layout.Replica(me))) {
    // Its replica leaves the job: nothing of this rank is needed any more.
    interrupt_.reset();
    watch_.reset();  // a goodbye to every rank
    std::fflush(nullptr);
    std::_Exit(0);
  }
  // The new world: pipeline rank p of the r-th replica that goes on is rank
  // p x D' + r (ReplicaLayout's order), each its MPI_COMM_WORLD rank.
  std::vector<int> kept;
  for (int r = 0; r < layout.replicas; ++r) {
    if (!std::binary_search(gone.begin(), gone.end(), r)) kept.push_back(r);
  }
  const ReplicaLayout next{layout.pipeline_ranks, out.replicas};
  std::vector<int> members;
  for (int p = 0; p < layout.pipeline_ranks; ++p) {
    for (const int r : kept) members.push_back(mpi_ranks_[static_cast<std::size_t>(layout.World(p, r))]);
  }
  interrupt_.reset();
  watch_.reset();
  // The old communicators are left as they are: requests to the lost ranks
  // never complete, and freeing them is not safe; they end with the process.
  survivors_.push_back(MakeMpiSurvivors(members, next, timeout_s_));
  MpiWorld& w = survivors_.back();
  Transport& world = *w.world;
  world.Configure(0, timeout_s_);
  if (next.replicas == 1) solo_ = MakeSoloReplicaGroup();
  ReplicaGroup& replicas = next.replicas > 1 ? *w.groups.replicas : *solo_;
  shrunk_comms_.push_back(
      std::make_unique<RunComms>(RunComms{world, next.replicas > 1 ? *w.groups.pipeline : world, replicas}));
  comms_ = shrunk_comms_.back().get();
  mpi_ranks_ = members;
  Watch();
  out.comms = comms_;
  return out;
}

void JobWatch::End(const RankLost& seen) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<int> lost;
  try {
    lost = watch_->AgreeLost(std::min(timeout_s_, 30.0));
  } catch (const Error& e) {
    std::fprintf(stderr, "baton: %s; %s\n", ForTerminal(seen.what()).c_str(), ForTerminal(e.what()).c_str());
    std::fflush(stderr);
    EndLauncher();
    std::_Exit(kExitLostRank);
  }
  const double agreed_s = Since(start);
  int lowest = 0;
  while (std::find(lost.begin(), lost.end(), lowest) != lost.end()) ++lowest;
  if (watch_->rank() == lowest) {
    std::fprintf(stderr,
                 "baton: error: lost rank%s %s (%s); the %d survivors agreed in %.3f s. The job ends "
                 "(recovery.on_lost_rank: stop, or no replica left whole; exit %d; mpirun, told to end, exits 1); "
                 "run it again with --resume auto to continue from the last checkpoint\n",
                 lost.size() > 1 ? "s" : "", fmt::format("{}", fmt::join(lost, ", ")).c_str(),
                 DescribeLost(watch_->Lost()).c_str(), watch_->size() - static_cast<int>(lost.size()), agreed_s, kExitLostRank);
    std::fflush(stderr);
  }
  // mpirun forwards what the ranks print as it reads it: time to read the
  // message before it is told to end.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EndLauncher();
  std::_Exit(kExitLostRank);
}

void KeptState::Keep(RunSetup& u, ReplicaGroup& replicas, std::int64_t step) {
  Slot& slot = slots_[next_];
  u.params->Pull();
  slot.tensors = u.params->CheckpointTensors(u.params->WholeState(replicas));
  u.params->Settle();
  slot.step = step;
  next_ = 1 - next_;
}

std::int64_t KeptState::latest() const { return std::max(slots_[0].step, slots_[1].step); }

void KeptState::Restore(RunSetup& u, std::int64_t step) const {
  for (const Slot& slot : slots_) {
    if (slot.step != step) continue;
    u.params->Restore(slot.tensors, "this rank's state in memory", step);
    const std::int64_t per_epoch = u.loader->batches_per_epoch();
    u.loader->Seek(step / per_epoch, step % per_epoch);
    return;
  }
  throw ConfigError(fmt::format("rank {}: the survivors agreed to go on after step {}, which this rank keeps no "
                                "state of",
                                u.world_rank, step));
}

}  // namespace baton
