// `baton train CONFIG` (under mpirun) and `baton validate CONFIG`.
#include <cstdio>
#include <iostream>
#include <memory>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "baton/comm.h"
#include "baton/config.h"
#include "baton/error.h"
#include "baton/runtime.h"
#include "baton/schedule.h"
#include "baton/sim.h"
#include "commands.h"
#include "stage.h"

namespace baton {
namespace {

struct TrainFlags {
  std::string config;
  std::vector<std::string> set;
};

// Every rank runs this. Errors: setup errors end the job with exit code 2 on
// every rank (one rank prints); anything during training prints with the rank
// and aborts the whole job.
int RunTrain(const TrainFlags& f) {
  MpiSession mpi(nullptr, nullptr);
  const int rank = MpiSession::WorldRank();
  std::unique_ptr<Transport> transport;
  try {
    transport = MakeMpiTransport();
    // The config is read on rank 0 only and broadcast: on many nodes only the
    // launching node needs the file. A leading '1' marks text, '0' an error.
    std::string message;
    if (rank == 0) {
      try {
        message = "1" + ReadTextFile(f.config);
      } catch (const ConfigError& e) {
        message = std::string("0") + e.what();
      }
    }
    transport->BroadcastString(&message);
    // Every rank parses the same text: a config error is the same everywhere,
    // so rank 0 alone reports it.
    std::unique_ptr<TrainConfig> config;
    try {
      if (message.empty() || message[0] != '1') throw ConfigError(message.empty() ? "empty config" : message.substr(1));
      config = std::make_unique<TrainConfig>(ParseTrainConfig(message.substr(1), f.config, f.set));
    } catch (const ConfigError& e) {
      if (rank == 0) std::fprintf(stderr, "baton: error: %s\n", e.what());
      return 2;
    }
    // Train() raises a setup error on one rank only (the lowest that failed).
    Train(*config, *transport);
  } catch (const PeerFailed&) {
    return 2;
  } catch (const ConfigError& e) {
    std::fprintf(stderr, "baton: error: %s%s\n", rank == 0 ? "" : fmt::format("rank {}: ", rank).c_str(), e.what());
    return 2;
  } catch (const ScheduleError& e) {
    std::fprintf(stderr, "baton: error: %s%s\n", rank == 0 ? "" : fmt::format("rank {}: ", rank).c_str(), e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "baton: rank %d: error: %s\n", rank, e.what());
    MpiSession::AbortWorld(1);
  }
  return 0;
}

void RunValidate(const TrainFlags& f) {
  const TrainConfig c = LoadTrainConfig(f.config, f.set);
  Schedule s = LoadSchedule(c.pipeline.schedule, c.pipeline.ranks, c.pipeline.microbatches, c.pipeline.chunks);
  Validate(s);
  const Schedule lowered = Lower(s);
  Validate(lowered);
  SimOptions unit;
  unit.record_timeline = false;
  const SimResult sim = Simulate(lowered, unit);
  const std::vector<int> bounds = PartitionLayers(c, lowered.stages);
  std::string out = DescribeTrainConfig(c);
  out += fmt::format("# plan: {} ranks, schedule {} ({} stages, {} microbatches of {} samples)\n", c.pipeline.ranks,
                     lowered.name, lowered.stages, lowered.microbatches,
                     c.train.batch_size / c.pipeline.microbatches);
  for (int st = 0; st < lowered.stages; ++st) {
    const RankResult& rr = sim.per_rank[lowered.stage_rank[st]];
    const auto it = std::find(rr.stages.begin(), rr.stages.end(), st);
    out += fmt::format("#   stage {} on rank {}: layers {}..{}, ring capacity {} microbatches\n", st,
                       lowered.stage_rank[st], bounds[st], bounds[st + 1] - 1,
                       rr.peak_in_flight[it - rr.stages.begin()]);
  }
  out += fmt::format("# simulated with unit costs: bubble {:.2f}%\n", 100 * sim.bubble_rate);
  std::cout << out << "ok: " << f.config << " is valid\n";
}

}  // namespace

void AddTrainCommand(CLI::App& app) {
  auto flags = std::make_shared<TrainFlags>();
  CLI::App* cmd = app.add_subcommand("train", "Train a model pipeline-parallel: mpirun -np P baton train CONFIG");
  cmd->add_option("config", flags->config, "YAML training config (configs/*.yaml)")->required();
  cmd->add_option("--set", flags->set, "override a key: --set train.optimizer.lr=0.01 (repeatable)");
  cmd->callback([flags] {
    const int code = RunTrain(*flags);
    if (code != 0) std::exit(code);
  });

  auto vflags = std::make_shared<TrainFlags>();
  CLI::App* validate = app.add_subcommand("validate", "Check a training config without running it");
  validate->add_option("config", vflags->config, "YAML training config")->required();
  validate->add_option("--set", vflags->set, "override a key (repeatable)");
  validate->callback([vflags] { RunValidate(*vflags); });
}

}  // namespace baton
