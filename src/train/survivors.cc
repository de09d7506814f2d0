// The survivors of a lost rank (survivors.h).
#include "survivors.h"

#include <algorithm>
#include <cmath>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <fstream>
#include <cstring>
#include <signal.h>
#include <unistd.h>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <filesystem>

#include "baton/env.h"
#include "baton/error.h"
#include "baton/signals.h"
#include "baton/timing.h"
#include "migrate.h"

namespace baton {

namespace {

// A peer silent this long (its node lost, or the process stopped) is lost.
constexpr double kLostAfterSilence = 1.0;

double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// This process's executable: what a replacement runs.
std::string ThisExecutable() {
  std::error_code error;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) throw Error(fmt::format("starting a new rank: /proc/self/exe: {}", error.message()));
  return self.string();
}

// What becomes of mpirun when the job ends, for the message: told to end
// where it is this rank's parent (it exits 1).
const char* LauncherNote() { return LauncherIsParent() ? "; mpirun, told to end, exits 1" : ""; }

std::string RankList(const std::vector<int>& ranks) {
  return fmt::format("rank{} {}", ranks.size() > 1 ? "s" : "", fmt::join(ranks, ", "));
}

// The one end of a job that cannot go on after a loss: the rank that
// `say`s it prints `line` (if any) and leaves the exit record (`code`,
// `record`); after a moment (mpirun forwards what the ranks print as it
// reads it) mpirun is told to end (it exits 1: it would exit 0 where it
// keeps the survivors), and the process exits `code` without
// MPI_Finalize (the old communicators hold requests to the lost ranks).
[[noreturn]] void EndJob(bool say, int code, const std::string& line, const std::string& record) {
  if (say) {
    if (!line.empty()) std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
    LeaveExitRecord(code, record);
  }
  std::fflush(nullptr);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EndLauncher();
  std::_Exit(code);
}

// The end of a job whose survivors cannot go on: `say`s why (the one rank
// that says it), with the checkpoints written so far.
[[noreturn]] void EndTheJob(bool say, const std::string& why) {
  EndJob(say, kExitLostRank,
         fmt::format("baton: error: {}. The job ends (exit {}{}); run it again with --resume auto to continue from the "
                     "last checkpoint",
                     ForTerminal(why), kExitLostRank, LauncherNote()),
         "failed: " + ForTerminal(why) + ": run it again with --resume auto to continue from the last checkpoint");
}

// While the survivors build their new world, the old watch goes on, and a
// thread of this guard reads it: the MPI calls that make the new
// communicator wait for every member, so a member lost meanwhile (or one
// that never comes: the deadline) would leave them waiting for good. Then
// the job ends as JobWatch::End ends it — the lowest rank alive says why
// once, mpirun is told to end, every rank exits kExitLostRank — with the
// checkpoints written so far. Joined when it goes out of scope.
class RegroupGuard {
 public:
  // `agreed`: the lost ranks the survivors agreed on; `staying`: the ranks
  // that go on (both sorted, in the old world's ranks).
  RegroupGuard(const RankWatch& watch, std::vector<int> agreed, std::vector<int> staying, double deadline_s)
      : watch_(watch),
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
      {
        const std::string why =
            fresh.empty() ? fmt::format("the survivors of the loss of {} did not make their new world within {:.0f} s "
                                        "(a survivor stalled in the recovery?)",
                                        RankList(agreed_), deadline_s_)
                          : fmt::format("lost {} ({}) while the survivors of the loss of {} made their new world, "
                                        "which cannot be made without {} (Open MPI has no ULFM: the calls that make "
                                        "it wait for every member)",
                                        RankList(ranks), DescribeLost(fresh), RankList(agreed_),
                                        ranks.size() > 1 ? "them" : "it");
        EndTheJob(watch_.rank() == says, why);
      }
    }
  }

  const RankWatch& watch_;
  const std::vector<int> agreed_, staying_;
  const double deadline_s_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool done_ = false;
  std::thread thread_;  // last: started once the rest is set
};

}  // namespace

JobWatch::JobWatch(const RunComms& comms, double timeout_s, int epoch)
    : timeout_s_(timeout_s), comms_(&comms), epoch_(epoch) {
  Watch();
}

JobWatch::~JobWatch() { Finish(); }

void JobWatch::Finish() {
  fence_.reset();
  interrupt_.reset();
  watch_.reset();
}

void JobWatch::Watch() {
  fence_.reset();
  interrupt_.reset();
  WatchOptions options{.heartbeat_s = 0.1, .silent_s = kLostAfterSilence, .epoch = epoch_};
  // The others went on without this rank (it was paused past the silence
  // that calls a rank lost): whatever it was doing, it ends here, on the
  // watch's thread, writing nothing more (its file being written removed).
  options.on_excluded = [job_rank = MpiWorldRank()](int epoch) {
    RemoveUnfinishedFile();
    std::fprintf(stderr,
                 "baton: rank %d (pid %d): excluded from the job in epoch %d: the other ranks agreed it was lost while "
                 "it was paused or stalled, and went on without it; it stops here and writes nothing (exit %d)\n",
                 job_rank, static_cast<int>(::getpid()), epoch, kExitExcluded);
    std::fflush(stderr);
    std::_Exit(kExitExcluded);
  };
  watch_ = std::make_unique<RankWatch>(comms_->world, std::move(options));
  interrupt_.emplace(*watch_);
  fence_.emplace([w = watch_.get()] { w->Fence(); });
}

namespace {
// Whether process `pid` of this machine still runs (a zombie does not).
bool ProcessRuns(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return false;
  const std::size_t paren = text.rfind(')');
  return paren == std::string::npos || paren + 2 >= text.size() ||
         (text[paren + 2] != 'Z' && text[paren + 2] != 'X');
}
}  // namespace

std::vector<int> JobWatch::WakeExcluded() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "localhost");
  // One stopped on this machine is woken (as mpirun would before ending
  // it): it reads its fence, says so and exits by itself, and mpirun ends
  // with its ranks. Given 2 s.
  bool woken = false;
  for (const WatchMember& m : maybe_running_) {
    if (m.host == host && ProcessRuns(m.pid)) woken = ::kill(m.pid, SIGCONT) == 0 || woken;
  }
  const auto start = std::chrono::steady_clock::now();
  std::vector<int> running;
  for (;;) {
    running.clear();
    for (const WatchMember& m : maybe_running_) {
      // On another machine it cannot be looked at: taken to run.
      if (m.host != host || ProcessRuns(m.pid)) running.push_back(m.pid);
    }
    if (running.empty() || !woken || Since(start) > 2.0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return running;
}

bool JobWatch::EndExcludedRanks() {
  const std::vector<int> running = WakeExcluded();
  if (running.empty()) return false;
  std::fprintf(stderr,
               "baton: the job ends; a rank it excluded still runs (pid %s, paused?): mpirun is told to end it%s\n",
               fmt::format("{}", fmt::join(running, ", ")).c_str(),
               LauncherIsParent() ? "" : " (mpirun is not this rank's parent: end it by hand)");
  std::fflush(stderr);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  return EndLauncher();
}

Survivors::Shrunk JobWatch::Agree(const RankLost& seen, std::chrono::steady_clock::time_point start,
                                  const RecoveryHook& at) {
  if (at) at("recovery", MpiWorldRank());
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
  // A lost rank whose connection this rank saw close is gone; any other
  // (silent, or seen by another rank) may still run: it was told it is out.
  const std::vector<LostRank> seen_lost = watch_->Lost();
  for (const int l : out.lost) {
    const bool closed = std::any_of(seen_lost.begin(), seen_lost.end(), [&](const LostRank& x) {
      return x.rank == l && x.how == "its connection closed";
    });
    if (!closed) maybe_running_.push_back(watch_->member(l));
  }
  return out;
}

std::vector<int> JobWatch::ReplicasLosing(const std::vector<int>& lost, const ReplicaLayout& layout) {
  std::vector<int> gone;
  for (const int w : lost) gone.push_back(layout.Replica(w));
  std::sort(gone.begin(), gone.end());
  gone.erase(std::unique(gone.begin(), gone.end()), gone.end());
  return gone;
}

void JobWatch::TakeWorld(MpiWorld w, const ReplicaLayout& layout) {
  survivors_.push_back(std::move(w));
  MpiWorld& now = survivors_.back();
  Transport& world = *now.world;
  world.Configure(0, timeout_s_);
  if (layout.replicas == 1) solo_ = MakeSoloReplicaGroup();
  ReplicaGroup& replicas = layout.replicas > 1 ? *now.groups.replicas : *solo_;
  shrunk_comms_.push_back(
      std::make_unique<RunComms>(RunComms{world, layout.replicas > 1 ? *now.groups.pipeline : world, replicas}));
  comms_ = shrunk_comms_.back().get();
}

Survivors::Shrunk JobWatch::Shrink(const RankLost& seen, const ReplicaLayout& layout, const RecoveryHook& at) {
  Shrunk out = Agree(seen, std::chrono::steady_clock::now(), at);
  const std::vector<int> gone = ReplicasLosing(out.lost, layout);  // replicas that lost a rank
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
  std::vector<int> members, staying;
  for (int p = 0; p < layout.pipeline_ranks; ++p) {
    for (const int r : kept) {
      staying.push_back(layout.World(p, r));
      members.push_back(layout.World(p, r));  // its rank in the world now
    }
  }
  std::sort(staying.begin(), staying.end());
  interrupt_.reset();
  // The old watch stays until the new one watches the new world, read by
  // the guard meanwhile.
  std::unique_ptr<RankWatch> old = std::move(watch_);
  {
    const RegroupGuard guard(*old, out.lost, staying, RecoveryDeadline());
    if (at) at("regroup", MpiWorldRank());
    // The old communicators are left as they are: requests to the lost ranks
    // never complete, and freeing them is not safe; they end with the process.
    TakeWorld(MakeMpiSurvivors(comms_->world, members, next, timeout_s_), next);
    Watch();
  }
  old.reset();  // a goodbye on every old connection
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
  // start after their spawn.
  const double seen_unix_s =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count() - Since(start);
  const std::string payload =
      ReplacementPayload(command_, run_id, out.lost, DescribeLost(watch_->Lost()), out.agreed_s, seen_unix_s, epoch_,
                         maybe_running_);
  interrupt_.reset();
  std::unique_ptr<RankWatch> old = std::move(watch_);
  const int me = old->rank();
  {
    const RegroupGuard guard(*old, out.lost, staying, RecoveryDeadline());
    if (at) at("regroup", MpiWorldRank());
    Spawn how;
    how.count = static_cast<int>(out.lost.size());
    how.command = ThisExecutable();
    how.args = {"train", command_.config_path, "--replacement"};
    for (const std::string& s : command_.set) {
      how.args.push_back("--set");
      how.args.push_back(s);
    }
    how.wdir = std::filesystem::current_path().string();
    try {
      TakeWorld(MakeMpiReplaced(comms_->world, staying, how, payload, me, layout, timeout_s_), layout);
    } catch (const Error& e) {
      EndTheJob(me == staying.front(), fmt::format("the survivors of the loss of {} could not start a new rank in "
                                                   "{} place (recovery.on_lost_rank: replace): {}",
                                                   RankList(out.lost), out.lost.size() > 1 ? "their" : "its",
                                                   e.what()));
    }
    Watch();
  }
  old.reset();  // a goodbye on every old connection
  out.comms = comms_;
  return out;
}

std::string ReplacementPayload(const JobWatch::Command& command, const std::string& run_id,
                               const std::vector<int>& lost, const std::string& how, double agreed_s,
                               double seen_unix_s, int epoch, const std::vector<WatchMember>& excluded) {
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
                     LauncherNote()),
         fmt::format("failed: lost rank{} {}: run it again with --resume auto to continue from the last checkpoint",
                     lost.size() > 1 ? "s" : "", fmt::join(lost, ", ")));
}

void JobWatch::Fail(const std::exception& e, bool agreed, int code) {
  const bool peer = dynamic_cast<const PeerFailed*>(&e) != nullptr;
  const std::string after = fmt::format("after the job went on without {} (epoch {})", left_out_, epoch_);
  const std::string what = ForTerminal(e.what());
  if (!agreed) {
    // One rank's own error, mid-step: it alone knows; it says it and ends the job.
    EndJob(true, code, fmt::format("baton: rank {}: error {}: {}", rank(), after, what),
           fmt::format("failed {}: rank {}: {}", after, rank(), what));
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
}

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
