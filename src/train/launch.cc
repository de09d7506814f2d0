// Launching a job on every rank (baton/train.h RunOnAnyRanks,
// RunOnAllRanks, TrainJob): MPI started, the config read on rank 0 and
// broadcast, the world split into pipelines and replica groups, every
// error said once with the job's exit code. The commands only call these.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "baton/comm.h"
#include "baton/config.h"
#include "baton/env.h"
#include "baton/error.h"
#include "baton/files.h"
#include "baton/signals.h"
#include "baton/train.h"
#include "baton/watch.h"
#include "survivors.h"
#include "watched.h"

namespace baton {

namespace {

// pipeline.wait_timeout_s from the command line, if given there: the
// deadline of the waits before the config is read (the config's own value
// is known only after rank 0 has read it). Malformed: the default, and the
// config's parse reports it.
double StartupTimeout(const std::vector<std::string>& set) {
  double timeout = PipelineConfig{}.wait_timeout_s;
  for (const std::string& s : set) {
    constexpr std::string_view kKey = "pipeline.wait_timeout_s=";
    if (s.rfind(kKey, 0) != 0) continue;
    char* end = nullptr;
    const double v = std::strtod(s.c_str() + kKey.size(), &end);
    if (end != s.c_str() + kKey.size() && *end == '\0' && std::isfinite(v) && v > 0) timeout = v;
  }
  return timeout;
}

// Where mpirun keeps the survivors of a lost rank (orte_enable_recovery 1),
// it exits 0 whatever its ranks return, MPI_Abort included: a job that
// failed tells it to end (after a moment, so that it forwards the message
// first), and it exits 1.
void TellLauncherItFailed() {
  if (!DetectLaunch().keeps_survivors) return;
  std::fflush(stderr);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EndLauncher();
}

// This process's rank in the job's world as it started (-1: before MPI),
// and the error it said last: for the exit record (LeaveExitRecord), which
// the lowest rank leaves.
int g_world_rank = -1;
std::string g_error;

// This rank's error ends the whole job, non-zero.
[[noreturn]] void Abort() {
  if (g_world_rank == 0) LeaveExitRecord(1, "failed: " + g_error);
  TellLauncherItFailed();
  MpiSession::AbortWorld(1);
}

// What a run that ended with `code` says in its exit record.
std::string WhyEnded(int code, const TrainSummary& summary) {
  if (code == 0 || code == kExitStopped) return EndedRecord(code, summary);
  return "failed: " + (g_error.empty() ? std::string("see the job's output") : g_error);
}

}  // namespace

int RunOnAnyRanks(const std::string& config_path, const std::vector<std::string>& set,
                  const std::function<void(Transport&, const TrainConfig&, const std::string&)>& job) {
  MpiSession mpi(nullptr, nullptr);
  const int rank = MpiSession::WorldRank();
  g_world_rank = rank;
  EndOnSignals(rank);
  if (DetectLaunch().kind != Launch::kSingle) StopWhenLauncherEnds();
  std::unique_ptr<Transport> transport;
  auto report = [rank](const std::exception& e) {
    std::fprintf(stderr, "baton: error: %s%s\n", rank == 0 ? "" : fmt::format("rank {}: ", rank).c_str(),
                 ForTerminal(e.what()).c_str());
  };
  try {
    transport = MakeMpiTransport(0, StartupTimeout(set));
    // The config is read on rank 0 only and broadcast: on many nodes only the
    // launching node needs the file.
    std::string text;
    Agree(*transport, fmt::format("rank 0 reading the config file {}", Quote(config_path, 200)), [&] {
      if (rank != 0) return;
      // The exit record must not land on the config (its other clashes are
      // found with the run's outputs, SetUpRun).
      const std::optional<std::string> exit_file = Env::Default().Variable(kExitFileVariable);
      if (exit_file && !exit_file->empty() && IdOf(*exit_file) == IdOf(config_path)) {
        RefuseExitRecord();
        throw ConfigError(fmt::format("{}={}: is the config file {}: the job's exit record would overwrite it; name "
                                      "a file of its own",
                                      kExitFileVariable, Quote(*exit_file, 200), Quote(config_path, 200)));
      }
      text = ReadTextFile(config_path);
    });
    transport->BroadcastString(&text);
    // Every rank parses the same text: a config error is the same everywhere,
    // and rank 0 alone reports it.
    TrainConfig config;
    Agree(*transport, "every rank parsing the config", [&] { config = ParseTrainConfig(text, config_path, set); });
    transport->Configure(0, config.pipeline.wait_timeout_s);
    job(*transport, config, text);
  } catch (const PeerFailed&) {
    // Another rank said the error: the lowest tells mpirun, as for its own.
    if (rank == 0) {
      g_error = "another rank's error (see the job's output)";
      LeaveExitRecord(2, "failed: " + g_error);  // before mpirun, told, ends the ranks
      TellLauncherItFailed();
    }
    return 2;
  } catch (const Error& e) {
    g_error = ForTerminal(e.what());
    if (!Explained(e)) {
      std::fprintf(stderr, "baton: rank %d: error: %s\n", rank, g_error.c_str());
      Abort();
    }
    report(e);
    if (rank == 0) {
      LeaveExitRecord(2, "failed: " + g_error);  // before mpirun, told, ends the ranks
      TellLauncherItFailed();
    }
    return 2;
  } catch (const std::bad_alloc&) {
    g_error = "out of memory (an allocation failed outside setup's checks)";
    std::fprintf(stderr, "baton: rank %d: error: %s\n", rank, g_error.c_str());
    Abort();
  } catch (const std::exception& e) {
    g_error = ForTerminal(e.what());
    std::fprintf(stderr, "baton: rank %d: error: %s\n", rank, g_error.c_str());
    Abort();
  }
  return 0;
}

// Every rank runs this: reads the config on rank 0, broadcasts and parses it,
// splits the world into pipelines and replica groups (data parallelism),
// then runs `job(comms, config, config_text)`. Errors as RunOnAnyRanks.
namespace {

// RunOnAllRanks, the job given the ranks' watch where the launcher keeps
// the survivors of a lost rank (null elsewhere).
int RunWatched(const std::string& config_path, const std::vector<std::string>& set,
               const std::function<void(const RunComms&, const TrainConfig&, const std::string&, JobWatch*)>& job) {
  return RunOnAnyRanks(config_path, set, [&](Transport& world, const TrainConfig& config, const std::string& text) {
    // D replicas of a P-rank pipeline: every rank's pipeline and replica
    // group as sub-communicators; one replica: the world is the pipeline.
    const ReplicaLayout layout{config.pipeline.ranks, config.data_parallel.size};
    Agree(world, "every rank checking the job's size", [&] {
      if (world.size() != layout.pipeline_ranks * layout.replicas) {
        if (layout.replicas == 1) {
          throw ConfigError(fmt::format("{}: pipeline.ranks is {} but the job has {} ranks (mpirun -np {})",
                                        config.source, layout.pipeline_ranks, world.size(), layout.pipeline_ranks));
        }
        throw ConfigError(fmt::format(
            "{}: pipeline.ranks {} x data_parallel.size {} = {} ranks, but the job has {} (mpirun -np {})",
            config.source, layout.pipeline_ranks, layout.replicas, layout.pipeline_ranks * layout.replicas,
            world.size(), layout.pipeline_ranks * layout.replicas));
      }
    });
    Groups groups;
    if (layout.replicas > 1) {
      groups = MakeMpiGroups(layout, config.pipeline.wait_timeout_s);
    } else {
      groups.replicas = MakeSoloReplicaGroup();
    }
    const RunComms comms{world, groups.pipeline ? *groups.pipeline : world, *groups.replicas};
    // A launcher that keeps the survivors of a lost rank: every rank watches
    // the others, and a loss ends every wait at once.
    std::unique_ptr<JobHost> host;
    std::unique_ptr<JobWatch> watch;
    if (world.size() > 1 && DetectLaunch().keeps_survivors) {
      host = MakeProcessHost();
      watch = std::make_unique<JobWatch>(comms, config.pipeline.wait_timeout_s, config.recovery.silent_s, *host);
      watch->set_command({config_path, text, set});
    }
    try {
      // Setup errors inside the job are raised on one rank only (the lowest that failed).
      job(comms, config, text, watch.get());
    } catch (const RankLost& lost) {
      watch->End(lost);
    } catch (const RankExcluded&) {
      watch->Fence();  // it ends there (JobWatch: one line, nothing written)
      throw;
    }
  });
}

}  // namespace

int RunOnAllRanks(const std::string& config_path, const std::vector<std::string>& set,
                  const std::function<void(const RunComms&, const TrainConfig&, const std::string&)>& job) {
  return RunWatched(config_path, set,
                    [&](const RunComms& comms, const TrainConfig& config, const std::string& text, JobWatch*) {
                      job(comms, config, text);
                    });
}

[[noreturn]] int JoinTrainJob(const std::vector<std::string>& set, const TrainOptions& options) {
  const StopSignals signals;
  MpiSession mpi(nullptr, nullptr);
  StopWhenLauncherEnds();
  Replacement join;
  const std::unique_ptr<JobHost> host = MakeProcessHost();
  std::unique_ptr<JobWatch> watch;
  try {
    TrainConfig config;
    std::string payload;
    RankWorld w = JoinMpiJob(
        [&](const std::string& text, int index) {
          join = ReadReplacementPayload(text, index);
          config = ParseTrainConfig(join.command.config_text, join.command.config_path, join.command.set);
          return std::pair<int, ReplicaLayout>{join.place,
                                               ReplicaLayout{config.pipeline.ranks, config.data_parallel.size}};
        },
        &payload, StartupTimeout(set));
    EndOnSignals(join.place);
    if (!join.exit_file.empty()) ::setenv(kExitFileVariable, join.exit_file.c_str(), 1);
    w.world->Configure(0, config.pipeline.wait_timeout_s);
    std::unique_ptr<ReplicaGroup> solo;
    if (!w.groups.replicas) solo = MakeSoloReplicaGroup();
    const RunComms comms{*w.world, w.groups.pipeline ? *w.groups.pipeline : *w.world,
                         w.groups.replicas ? *w.groups.replicas : *solo};
    // A new process in a lost rank's place watches the world it joined
    // (collective with the survivors' Replace), and recovers from a later
    // loss as they do.
    watch = std::make_unique<JobWatch>(comms, config.pipeline.wait_timeout_s, config.recovery.silent_s, *host,
                                       join.epoch);
    watch->set_command(join.command);  // a later loss may start new ranks from this one too
    watch->set_excluded(join.excluded);
    TrainOptions o = options;
    o.joined = join.run;
    // A new rank's run went on after a loss: it ends in TrainWatched
    // (JobWatch::Finished), as the survivors' does.
    TrainWatched(config, comms, o, *watch);
    throw Error("a new rank's run ended without its end (JobWatch::Finished)");
  } catch (const std::exception& e) {
    g_error = ForTerminal(e.what());
    std::fprintf(stderr, "baton: rank %d (a new rank in a lost one's place): error: %s\n", join.place,
                 g_error.c_str());
    if (join.place == 0) g_world_rank = 0;
    Abort();
  }
}

int TrainJob(const std::string& config_path, const std::vector<std::string>& set, const TrainOptions& options) {
  const StopSignals signals;  // from the start: a signal during start-up is kept for the first step boundary
  TrainSummary summary;
  bool recorded = false;
  const int code = RunWatched(config_path, set, [&](const RunComms& comms, const TrainConfig& config,
                                                    const std::string&, JobWatch* watch) {
    // Where the launch keeps the survivors, a run that lost a rank ends
    // inside TrainWatched (JobWatch::Finished), never here.
    summary = watch != nullptr ? TrainWatched(config, comms, options, *watch) : Train(config, comms, options);
    // The record now, before MPI_Finalize: a launcher sent SIGTERM or
    // SIGKILL (the ranks stopped at a step boundary with a checkpoint) is
    // gone by then, and the ranks with it.
    const int ended = summary.stop_signal != 0 ? kExitStopped : 0;
    if (comms.world.rank() == 0) LeaveExitRecord(ended, WhyEnded(ended, summary));
    recorded = true;
  });
  // Stopped by a signal at a step boundary (checkpointed): run it again.
  const int final_code = code == 0 && summary.stop_signal != 0 ? kExitStopped : code;
  if (g_world_rank == 0 && !recorded) LeaveExitRecord(final_code, WhyEnded(final_code, summary));
  return final_code;
}

}  // namespace baton
