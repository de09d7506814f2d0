// The survivors of a lost rank (survivors.h): the watch, the agreement,
// the regroup and every end of a job that lost a rank, over a JobHost.
#include "survivors.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <csignal>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "baton/env.h"
#include "baton/error.h"
#include "baton/signals.h"
#include "kept_state.h"

namespace baton {

namespace {

double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

std::string RankList(const std::vector<int>& ranks) {
  return fmt::format("rank{} {}", ranks.size() > 1 ? "s" : "", fmt::join(ranks, ", "));
}

// The replicas (sorted, once each) that hold a rank of `lost`.
std::vector<int> ReplicasLosing(const std::vector<int>& lost, const ReplicaLayout& layout) {
  std::vector<int> gone;
  for (const int w : lost) gone.push_back(layout.Replica(w));
  std::sort(gone.begin(), gone.end());
  gone.erase(std::unique(gone.begin(), gone.end()), gone.end());
  return gone;
}

}  // namespace

// While the survivors build their new world, the old watch goes on, and a
// thread of this guard reads it: the calls that make the new world wait
// for every member, so a member lost meanwhile (or one that never comes:
// the deadline) would leave them waiting for good. Then the job ends as
// JobWatch::End ends it — the lowest rank alive says why once, the
// launcher is told to end, every rank ends kExitLostRank — with the
// checkpoints written so far. Joined when it goes out of scope.
class RegroupGuard {
 public:
  // `agreed`: the lost ranks the survivors agreed on; `staying`: the ranks
  // that go on (both sorted, in the old world's ranks).
  RegroupGuard(JobWatch& job, const RankWatch& watch, std::vector<int> agreed, std::vector<int> staying,
               double deadline_s)
      : job_(job),
        watch_(watch),
        agreed_(std::move(agreed)),
        staying_(std::move(staying)),
        deadline_s_(deadline_s),
        thread_([this] { Run(); }) {}
  ~RegroupGuard() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  RegroupGuard(const RegroupGuard&) = delete;
  RegroupGuard& operator=(const RegroupGuard&) = delete;

 private:
  void Run() {
    const auto start = std::chrono::steady_clock::now();
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait_for(lock, std::chrono::milliseconds(20));
      if (done_) return;
      std::vector<LostRank> fresh;
      for (const LostRank& l : watch_.Lost()) {
        if (!std::binary_search(agreed_.begin(), agreed_.end(), l.rank)) fresh.push_back(l);
      }
      if (fresh.empty() && Since(start) < deadline_s_) continue;
      std::vector<int> ranks;
      for (const LostRank& l : fresh) ranks.push_back(l.rank);
      std::sort(ranks.begin(), ranks.end());
      // The lowest of the ranks going on that is not lost says why.
      int says = -1;
      for (const int r : staying_) {
        if (!std::binary_search(ranks.begin(), ranks.end(), r)) {
          says = r;
          break;
        }
      }
      const std::string why =
          fresh.empty() ? fmt::format("the survivors of the loss of {} did not make their new world within {:.0f} s "
                                      "(a survivor stalled in the recovery?)",
                                      RankList(agreed_), deadline_s_)
                        : fmt::format("lost {} ({}) while the survivors of the loss of {} made their new world, "
                                      "which cannot be made without {} (Open MPI has no ULFM: the calls that make it "
                                      "wait for every member)",
                                      RankList(ranks), DescribeLost(fresh), RankList(agreed_),
                                      ranks.size() > 1 ? "them" : "it");
      // A process ends here; a thread rank's job is ended, and its wait
      // for the new world throws.
      job_.EndTheJob(watch_.rank() == says, why);
      return;
    }
  }

  JobWatch& job_;
  const RankWatch& watch_;
  const std::vector<int> agreed_, staying_;
  const double deadline_s_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool done_ = false;
  std::thread thread_;  // last: started once the rest is set
};

JobWatch::JobWatch(const RunComms& comms, double timeout_s, double silent_s, JobHost& host, int epoch)
    : timeout_s_(timeout_s), silent_s_(silent_s), host_(host), comms_(&comms), epoch_(epoch) {
  Watch();
}

JobWatch::~JobWatch() { Finish(); }

void JobWatch::Finish() {
  fence_.reset();
  interrupt_.reset();
  watch_.reset();
  old_watch_.reset();
}

void JobWatch::Die() {
  for (RankWatch* w : {watch_.get(), old_watch_.get()}) {
    if (w != nullptr) w->Die();
  }
}

void JobWatch::Pause(double seconds) {
  for (RankWatch* w : {watch_.get(), old_watch_.get()}) {
    if (w != nullptr) w->Pause(seconds);
  }
}

void JobWatch::Watch() {
  fence_.reset();
  interrupt_.reset();
  // recovery.silent_s 0: only a closed connection is a loss, and nothing
  // reads a heartbeat (1,024 thread ranks on 2 cores would send 70,000 a
  // second for nothing).
  WatchOptions options{.heartbeat_s = silent_s_ > 0 ? 0.1 : 0.0, .silent_s = silent_s_, .epoch = epoch_};
  // The others went on without this rank (it was paused past the silence
  // that calls a rank lost): whatever it was doing, it ends there.
  options.on_excluded = host_.OnExcluded();
  watch_ = std::make_unique<RankWatch>(comms_->world, std::move(options));
  interrupt_.emplace(*watch_);
  fence_.emplace([w = watch_.get()] { w->Fence(); });
}

void JobWatch::EndJob(bool say, int code, const std::string& line, const std::string& record) {
  if (say) {
    if (!line.empty()) std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
    host_.LeaveRecord(code, record);
  }
  std::fflush(nullptr);
  host_.EndLauncher();
  host_.Exit(code);
}

void JobWatch::EndTheJob(bool say, const std::string& why) {
  EndJob(say, kExitLostRank,
         fmt::format("baton: error: {}. The job ends (exit {}{}); run it again with --resume auto to continue from the "
                     "last checkpoint",
                     ForTerminal(why), kExitLostRank, host_.LauncherNote()),
         "failed: " + ForTerminal(why) + ": run it again with --resume auto to continue from the last checkpoint");
}

Survivors::Shrunk JobWatch::Agree(const RankLost& seen, std::chrono::steady_clock::time_point start,
                                  const RecoveryHook& at) {
  if (at) at("recovery", host_.JobRank());
  Shrunk out;
  try {
    out.lost = watch_->AgreeLost(RecoveryDeadline());
  } catch (const RankExcluded&) {
    throw;
  } catch (const Error&) {
    End(seen);
  }
  out.agreed_s = Since(start);
  epoch_ = watch_->epoch();
  out.epoch = epoch_;
  left_out_ = RankList(out.lost);
  // A lost rank whose connection closed (here or at the rank that told) is
  // gone; any other (silent, or only agreed on) may still run: it was told
  // it is out.
  const std::vector<LostRank> seen_lost = watch_->Lost();
  for (const int l : out.lost) {
    const bool closed = std::any_of(seen_lost.begin(), seen_lost.end(), [&](const LostRank& x) {
      return x.rank == l && x.gone;
    });
    // Known: the loss and the decision carry a lost rank's process.
    if (const WatchMember m = watch_->member(l); !closed && m.pid > 0) maybe_running_.push_back(m);
  }
  return out;
}

void JobWatch::TakeWorld(RankWorld w, const ReplicaLayout& layout) {
  survivors_.push_back(std::move(w));
  RankWorld& now = survivors_.back();
  Transport& world = *now.world;
  world.Configure(0, timeout_s_);
  if (layout.replicas == 1) solos_.push_back(MakeSoloReplicaGroup());
  ReplicaGroup& replicas = layout.replicas > 1 ? *now.groups.replicas : *solos_.back();
  shrunk_comms_.push_back(
      std::make_unique<RunComms>(RunComms{world, layout.replicas > 1 ? *now.groups.pipeline : world, replicas}));
  comms_ = shrunk_comms_.back().get();
}

double JobWatch::Regroup(const std::vector<int>& lost, const std::vector<int>& staying, const RecoveryHook& at,
                         const std::function<void()>& make) {
  const auto start = std::chrono::steady_clock::now();
  interrupt_.reset();
  // The old watch stays until the new one watches the new world, read by
  // the guard meanwhile.
  old_watch_ = std::move(watch_);
  {
    const RegroupGuard guard(*this, *old_watch_, lost, staying, RecoveryDeadline());
    if (at) at("regroup", host_.JobRank());
    // The old communicators are left as they are: requests to the lost
    // ranks never complete, and freeing them is not safe; they end with
    // the process.
    make();
    Watch();
  }
  old_watch_.reset();  // a goodbye on every old connection
  return Since(start);
}

Survivors::Shrunk JobWatch::Shrink(const RankLost& seen, const ReplicaLayout& layout, const RecoveryHook& at) {
  Shrunk out = Agree(seen, std::chrono::steady_clock::now(), at);
  const std::vector<int> gone = ReplicasLosing(out.lost, layout);  // replicas that lost a rank
  out.replicas = layout.replicas - static_cast<int>(gone.size());
  if (out.replicas == 0) End(seen);
  const int me = comms_->world.rank();
  if (std::binary_search(gone.begin(), gone.end(), layout.Replica(me))) {
    // Its replica leaves the job: nothing of this rank is needed any more.
    Finish();  // a goodbye to every rank
    host_.Exit(0);
    throw RankEnded{0};  // a host's Exit on the rank's thread does not return
  }
  // The new world: pipeline rank p of the r-th replica that goes on is rank
  // p x D' + r (ReplicaLayout's order), each its rank in the world now.
  std::vector<int> kept;
  for (int r = 0; r < layout.replicas; ++r) {
    if (!std::binary_search(gone.begin(), gone.end(), r)) kept.push_back(r);
  }
  const ReplicaLayout next{layout.pipeline_ranks, out.replicas};
  std::vector<int> members;
  for (int p = 0; p < layout.pipeline_ranks; ++p) {
    for (const int r : kept) members.push_back(layout.World(p, r));
  }
  std::vector<int> staying = members;
  std::sort(staying.begin(), staying.end());
  out.regroup_s =
      Regroup(out.lost, staying, at, [&] { TakeWorld(host_.Survivors(comms_->world, members, next, timeout_s_), next); });
  out.comms = comms_;
  return out;
}

Survivors::Shrunk JobWatch::Replace(const RankLost& seen, const ReplicaLayout& layout, const std::string& run_id,
                                    const RecoveryHook& at, bool from_snapshots) {
  const auto start = std::chrono::steady_clock::now();
  Shrunk out = Agree(seen, start, at);
  // A whole replica must be left to give the new ranks their state; with
  // snapshots, each lost rank's holder.
  const std::vector<int> gone = ReplicasLosing(out.lost, layout);
  if (from_snapshots && !KeptState::NeighboursHold(out.lost, layout)) {
    int l = out.lost.front();
    for (const int x : out.lost) {
      if (std::find(out.lost.begin(), out.lost.end(), SnapshotHolder(layout, x)) != out.lost.end()) l = x;
    }
    End(seen, fmt::format("recovery.on_lost_rank: replace: rank {}'s snapshot was on rank {}, lost too; the job "
                          "goes on after the loss of ranks that do not hold each other's snapshots",
                          l, SnapshotHolder(layout, l)));
  }
  if (!from_snapshots && static_cast<int>(gone.size()) == layout.replicas) End(seen);
  out.replicas = layout.replicas;
  std::vector<int> staying;  // ranks of the world now
  for (int w = 0; w < watch_->size(); ++w) {
    if (!std::binary_search(out.lost.begin(), out.lost.end(), w)) staying.push_back(w);
  }
  // When the loss was seen, as a wall-clock time: the new ranks' clocks
  // start after their start.
  const double seen_unix_s =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() - Since(start);
  const std::string payload = ReplacementPayload(command_, run_id, out.lost, DescribeLost(watch_->Lost()),
                                                 out.agreed_s, seen_unix_s, epoch_, maybe_running_);
  const int me = watch_->rank();
  out.regroup_s = Regroup(out.lost, staying, at, [&] {
    try {
      TakeWorld(host_.Replaced(comms_->world, staying, out.lost, command_, payload, layout, timeout_s_), layout);
    } catch (const Error& e) {
      EndTheJob(me == staying.front(), fmt::format("the survivors of the loss of {} could not start a new rank in "
                                                   "{} place (recovery.on_lost_rank: replace): {}",
                                                   RankList(out.lost), out.lost.size() > 1 ? "their" : "its",
                                                   e.what()));
      throw RankEnded{kExitLostRank};  // a host's Exit on the rank's thread does not return
    }
  });
  out.comms = comms_;
  return out;
}

void JobWatch::End(const RankLost& seen, const std::string& why) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<int> lost;
  try {
    lost = watch_->AgreeLost(RecoveryDeadline());
  } catch (const RankExcluded&) {
    watch_->Fence();  // this rank is the one out: it ends there, saying so, and writes nothing
    throw;
  } catch (const Error& e) {
    // Which rank is lowest is not agreed: every one says it and leaves the same code.
    EndJob(true, kExitLostRank, fmt::format("baton: {}; {}", ForTerminal(seen.what()), ForTerminal(e.what())),
           "failed: " + ForTerminal(seen.what()) + "; " + ForTerminal(e.what()));
    throw RankEnded{kExitLostRank};
  }
  const double agreed_s = Since(start);
  int lowest = 0;
  while (std::find(lost.begin(), lost.end(), lowest) != lost.end()) ++lowest;
  EndJob(watch_->rank() == lowest, kExitLostRank,
         fmt::format("baton: error: lost rank{} {} ({}); the {} survivors agreed in {:.3f} s. The job ends ({}; exit "
                     "{}{}); run it again with --resume auto to continue from the last checkpoint",
                     lost.size() > 1 ? "s" : "", fmt::join(lost, ", "), DescribeLost(watch_->Lost()),
                     watch_->size() - static_cast<int>(lost.size()), agreed_s,
                     why.empty() ? "recovery.on_lost_rank: stop, or no replica left whole" : why, kExitLostRank,
                     host_.LauncherNote()),
         fmt::format("failed: lost rank{} {}: run it again with --resume auto to continue from the last checkpoint",
                     lost.size() > 1 ? "s" : "", fmt::join(lost, ", ")));
  throw RankEnded{kExitLostRank};
}

void JobWatch::Fail(const std::exception& e, bool agreed, int code) {
  const bool peer = dynamic_cast<const PeerFailed*>(&e) != nullptr;
  const std::string after = fmt::format("after the job went on without {} (epoch {})", left_out_, epoch_);
  const std::string what = ForTerminal(e.what());
  if (!agreed) {
    // One rank's own error, mid-step: it alone knows; it says it and ends the job.
    EndJob(true, code, fmt::format("baton: rank {}: error {}: {}", rank(), after, what),
           fmt::format("failed {}: rank {}: {}", after, rank(), what));
    throw RankEnded{code};
  }
  // Agreed (every rank is here): the rank that failed says why, the
  // lowest leaves the record.
  if (!peer) {
    std::fprintf(stderr, "baton: error: %s%s: %s\n", rank() == 0 ? "" : fmt::format("rank {}: ", rank()).c_str(),
                 after.c_str(), what.c_str());
  }
  EndJob(rank() == 0, code, "",
         peer ? fmt::format("failed {}: another rank's error (see the job's output)", after)
              : fmt::format("failed {}: {}", after, what));
  throw RankEnded{code};
}

void JobWatch::Finished(int code, const std::string& record, bool tell_launcher) {
  const bool lowest = rank() == 0;
  // The record first (fenced: an excluded rank leaves none), then the
  // goodbyes: a launcher ending the job on a stop (Slurm's KillWait, or an
  // orted that SIGKILLs its ranks soon after passing a SIGTERM on) finds
  // it written.
  if (lowest) host_.LeaveRecord(code, record);
  Finish();
  std::fflush(nullptr);
  if (lowest) {
    const std::vector<int> running = host_.WakeExcluded(maybe_running_);
    if (!running.empty()) {
      std::fprintf(stderr,
                   "baton: the job ends; a rank it excluded still runs (pid %s, paused?): mpirun is told to end it%s\n",
                   fmt::format("{}", fmt::join(running, ", ")).c_str(),
                   host_.LauncherNote().empty() ? " (mpirun is not this rank's parent: end it by hand)" : "");
      std::fflush(stderr);
    }
    if (!running.empty() || tell_launcher) host_.EndLauncher();
  }
  host_.Exit(code);
  throw RankEnded{code};
}

bool Explained(const std::exception& e) {
  return dynamic_cast<const ConfigError*>(&e) != nullptr || dynamic_cast<const ScheduleError*>(&e) != nullptr ||
         dynamic_cast<const OutputError*>(&e) != nullptr || dynamic_cast<const ResourceError*>(&e) != nullptr ||
         dynamic_cast<const RunError*>(&e) != nullptr;
}

std::string EndedRecord(int code, const TrainSummary& summary) {
  if (code == kExitStopped && summary.stopped_for_lost_rank) {
    return fmt::format("stopped after a lost rank (recovery.on_lost_rank: stop) with the checkpoint of step {}: run "
                       "it again to resume",
                       summary.stopped_after);
  }
  if (code == kExitStopped) {
    return fmt::format("stopped on {} after step {}{}: run it again to resume",
                       summary.stop_signal == SIGUSR1 ? "SIGUSR1" : "SIGTERM", summary.stopped_after,
                       summary.checkpointed ? " with a checkpoint" : "");
  }
  return fmt::format("finished: {} steps{}", summary.steps,
                     summary.recoveries > 0 ? fmt::format(", going on after {} loss{} of ranks", summary.recoveries,
                                                          summary.recoveries > 1 ? "es" : "")
                                            : "");
}

std::string ReplacementPayload(const TrainCommand& command, const std::string& run_id, const std::vector<int>& lost,
                               const std::string& how, double agreed_s, double seen_unix_s, int epoch,
                               const std::vector<WatchMember>& excluded) {
  nlohmann::json running = nlohmann::json::array();
  for (const WatchMember& m : excluded) running.push_back({{"host", m.host}, {"pid", m.pid}});
  return nlohmann::json{{"config_path", command.config_path},
                        {"config_text", command.config_text},
                        {"set", command.set},
                        {"run_id", run_id},
                        {"lost", lost},
                        {"how", how},
                        {"agreed_s", agreed_s},
                        {"seen_unix_s", seen_unix_s},
                        {"epoch", epoch},
                        // A new rank 0 ends the job: it wakes those it may find still stopped.
                        {"excluded", running},
                        // A new process is not started with the job's
                        // environment: the exit record's file goes with it.
                        {"exit_file", Env::Default().Variable(kExitFileVariable).value_or("")}}
      .dump();
}

Replacement ReadReplacementPayload(const std::string& payload, int index) {
  Replacement r;
  try {
    const nlohmann::json j = nlohmann::json::parse(payload);
    r.command.config_path = j.at("config_path").get<std::string>();
    r.command.config_text = j.at("config_text").get<std::string>();
    r.command.set = j.at("set").get<std::vector<std::string>>();
    r.run.run_id = j.at("run_id").get<std::string>();
    r.run.lost = j.at("lost").get<std::vector<int>>();
    r.run.how = j.at("how").get<std::string>();
    r.run.agreed_s = j.at("agreed_s").get<double>();
    r.exit_file = j.value("exit_file", std::string());
    r.epoch = j.value("epoch", 0);
    for (const auto& m : j.value("excluded", nlohmann::json::array())) {
      r.excluded.push_back({m.at("host").get<std::string>(), m.at("pid").get<int>()});
    }
    const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    r.run.since_loss_s = std::max(0.0, now - j.at("seen_unix_s").get<double>());
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("a new rank could not read the survivors' message: {}", e.what()));
  }
  if (index < 0 || index >= static_cast<int>(r.run.lost.size())) {
    throw Error(fmt::format("a new rank, number {} of the new ones, has no lost rank's place (the survivors lost {})",
                            index, r.run.lost.size()));
  }
  r.place = r.run.lost[static_cast<std::size_t>(index)];
  return r;
}

}  // namespace baton
