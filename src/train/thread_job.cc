// A training job on thread ranks that can lose ranks and go on (thread_job.h).
#include "thread_job.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "baton/comm.h"
#include "baton/deadline.h"
#include "baton/error.h"
#include "baton/files.h"
#include "baton/signals.h"
#include "executor.h"
#include "fault.h"
#include "survivors.h"
#include "watched.h"

namespace baton {

namespace {

// What every rank thread of one job shares.
struct Shared {
  std::mutex mu;
  std::condition_variable changed;
  int live = 0;       // rank threads that have not ended or died
  bool over = false;  // none is live: a dead rank's thread may unwind
  ThreadJobEnd end;   // but its ranks:
  std::deque<ThreadJobRank> ranks;  // a deque: a rank's entry stays where it is as others start
  std::vector<std::thread> threads;
  TrainCommand command;
  TrainOptions options;
};

void StartRank(Shared& s, ThreadRank rank, int place, std::optional<std::string> payload, int index);

// One rank's host: its thread is the rank; a new rank is a new thread; the
// exit record is noted in the job's end; a fault acts on this thread.
class ThreadHost final : public JobHost, public FaultEffects {
 public:
  ThreadHost(Shared& shared, int job_rank) : shared_(shared), job_rank_(job_rank), thread_(std::this_thread::get_id()) {}
  void set_watch(JobWatch* watch) { watch_ = watch; }
  // Whether a guard ended this rank (off its thread), and with what.
  std::optional<int> ended() const {
    const std::lock_guard<std::mutex> lock(mu_);
    return ended_;
  }
  // Whether it died (a fault): no longer counted live.
  bool dead() const { return dead_; }

  int JobRank() const override { return job_rank_; }

  RankWorld Survivors(Transport& base, const std::vector<int>& members, const ReplicaLayout& layout,
                      double timeout_s) override {
    const WhileWaiting ending([this] { ThrowIfEnded(); });
    return MakeThreadSurvivors(base, members, layout, timeout_s);
  }

  RankWorld Replaced(Transport& base, const std::vector<int>& members, const std::vector<int>& lost,
                     const TrainCommand&, const std::string& payload, const ReplicaLayout& layout,
                     double timeout_s) override {
    const WhileWaiting ending([this] { ThrowIfEnded(); });
    return MakeThreadReplaced(base, members, lost, layout, timeout_s,
                              [&](int index, ThreadRank rank) {
                                StartRank(shared_, std::move(rank), lost.at(static_cast<std::size_t>(index)), payload,
                                          index);
                              });
  }

  void LeaveRecord(int code, const std::string& record) override {
    if (ended()) return;
    WriteFence::Check();  // a rank fenced out of the job leaves no record
    const std::lock_guard<std::mutex> lock(shared_.mu);
    shared_.end.record_code = code;
    shared_.end.record = record;
    ++shared_.end.records;
  }

  bool EndLauncher() override { return false; }  // the job's ranks end by themselves
  std::string LauncherNote() const override { return ""; }

  void Exit(int code) override {
    {
      const std::lock_guard<std::mutex> lock(mu_);
      if (!ended_) ended_ = code;
    }
    // Off the rank's thread (a RegroupGuard): the rank's wait for the new
    // world throws RankEnded at its next poll (ThrowIfEnded).
    if (std::this_thread::get_id() == thread_) ThrowIfEnded();
  }

  std::function<void(int)> OnExcluded() override { return {}; }  // RankExcluded from the next wait or write
  std::vector<int> WakeExcluded(const std::vector<WatchMember>&) override { return {}; }  // a paused thread wakes

  [[noreturn]] void Die(int code) override {
    if (watch_ != nullptr) watch_->Die();  // its connections close without a goodbye
    {
      const std::lock_guard<std::mutex> lock(mu_);
      if (!ended_) ended_ = code;
    }
    HoldUntilOver();
    throw RankEnded{code};
  }

  [[noreturn]] void Stall() override {
    HoldUntilOver();
    throw RankEnded{-1};
  }

  void Pause(double seconds) override {
    if (watch_ != nullptr) watch_->Pause(seconds);
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  }

 private:
  void ThrowIfEnded() const {
    if (const std::optional<int> code = ended()) throw RankEnded{*code};
  }
  // A dead rank's thread runs nothing more until every other rank has
  // ended (it is not live).
  void HoldUntilOver() {
    std::unique_lock<std::mutex> lock(shared_.mu);
    --shared_.live;
    dead_ = true;
    shared_.changed.notify_all();
    shared_.changed.wait(lock, [&] { return shared_.over; });
  }

  Shared& shared_;
  int job_rank_;
  bool dead_ = false;  // under shared_.mu
  std::thread::id thread_;
  JobWatch* watch_ = nullptr;
  mutable std::mutex mu_;
  std::optional<int> ended_;
};

// The body of rank `me`'s thread: a launched rank (no payload) or a new
// one told `payload` (the index-th new rank).
void RunRank(Shared& s, ThreadJobRank& me, ThreadRank rank, const std::optional<std::string>& payload, int index) {
  ThreadHost host(s, me.place);
  const ScopedFaultEffects effects(host);
  int code = 0;
  std::string error;
  try {
    TrainOptions options = s.options;
    TrainCommand command = s.command;
    int epoch = 0;
    std::vector<WatchMember> excluded;
    if (payload) {
      const Replacement join = ReadReplacementPayload(*payload, index);
      command = join.command;
      options.joined = join.run;
      epoch = join.epoch;
      excluded = join.excluded;
    }
    const TrainConfig config = ParseTrainConfig(command.config_text, command.config_path, command.set);
    const RunComms comms{*rank.world, rank.pipeline ? *rank.pipeline : *rank.world, *rank.replicas};
    JobWatch watch(comms, config.pipeline.wait_timeout_s, config.recovery.silent_s, host, epoch);
    host.set_watch(&watch);
    watch.set_command(command);
    watch.set_excluded(std::move(excluded));
    const TrainSummary summary = TrainWatched(config, comms, options, watch);
    // A run that lost no rank ends as the launch ends it: the record on rank 0.
    code = summary.stop_signal != 0 ? kExitStopped : 0;
    if (comms.world.rank() == 0) host.LeaveRecord(code, EndedRecord(code, summary));
    host.set_watch(nullptr);
  } catch (const RankEnded& e) {
    code = e.code;
  } catch (const RankExcluded& e) {
    code = kExitExcluded;
    error = e.what();
  } catch (const PeerFailed&) {
    code = 2;
    error = "PeerFailed";
  } catch (const std::exception& e) {
    code = Explained(e) ? 2 : 1;
    error = e.what();
    rank.end_job();  // no other rank waits for it until its deadline
  }
  if (const std::optional<int> ended = host.ended()) code = *ended;
  const std::lock_guard<std::mutex> lock(s.mu);
  me.code = code;
  me.error = error;
  if (!host.dead()) --s.live;
  s.changed.notify_all();
}

void StartRank(Shared& s, ThreadRank rank, int place, std::optional<std::string> payload, int index) {
  const std::lock_guard<std::mutex> lock(s.mu);
  ThreadJobRank& me = s.ranks.emplace_back();
  me.joined = payload.has_value();
  me.place = place;
  ++s.live;
  s.threads.emplace_back([&s, &me, index, rank = std::move(rank), payload = std::move(payload)]() mutable {
    RunRank(s, me, std::move(rank), payload, index);
  });
}

}  // namespace

ThreadJobEnd RunThreadJob(const std::string& config_path, const std::vector<std::string>& set,
                          const TrainOptions& options) {
  Shared s;
  s.command = {config_path, ReadTextFile(config_path), set};
  s.options = options;
  const TrainConfig config = ParseTrainConfig(s.command.config_text, config_path, set);
  std::vector<ThreadRank> ranks =
      MakeThreadRanks({config.pipeline.ranks, config.data_parallel.size}, config.pipeline.wait_timeout_s);
  const std::function<ThreadTraffic()> traffic = ranks.front().traffic;
  for (std::size_t w = 0; w < ranks.size(); ++w) StartRank(s, std::move(ranks[w]), static_cast<int>(w), std::nullopt, 0);
  {
    std::unique_lock<std::mutex> lock(s.mu);
    s.changed.wait(lock, [&] { return s.live == 0; });
    s.over = true;
    s.changed.notify_all();
  }
  // No rank is live: none starts another thread now.
  for (std::thread& t : s.threads) t.join();
  s.end.ranks.assign(s.ranks.begin(), s.ranks.end());
  s.end.traffic = traffic();
  return s.end;
}

}  // namespace baton
