// `baton train CONFIG` (under mpirun) and `baton validate CONFIG`.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "baton/comm.h"
#include "baton/config.h"
#include "baton/error.h"
#include "baton/files.h"
#include "baton/host.h"
#include "baton/plan.h"
#include "baton/placement.h"
#include "baton/profile_price.h"
#include "baton/profile.h"
#include "baton/bench.h"
#include "baton/train.h"
#include "baton/schedule.h"
#include "baton/signals.h"
#include "commands.h"
#include "profile_measure.h"

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

// The errors every rank agreed on (or that end on the one rank left):
// said once, exit code 2. Any other error is one rank's, mid-step, and ends
// the whole job.
bool Explained(const Error& e) {
  return dynamic_cast<const ConfigError*>(&e) != nullptr || dynamic_cast<const ScheduleError*>(&e) != nullptr ||
         dynamic_cast<const OutputError*>(&e) != nullptr || dynamic_cast<const ResourceError*>(&e) != nullptr ||
         dynamic_cast<const RunError*>(&e) != nullptr;
}

}  // namespace

int RunOnAnyRanks(const std::string& config_path, const std::vector<std::string>& set,
                  const std::function<void(Transport&, const TrainConfig&, const std::string&)>& job) {
  MpiSession mpi(nullptr, nullptr);
  const int rank = MpiSession::WorldRank();
  EndOnSignals(rank);
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
      if (rank == 0) text = ReadTextFile(config_path);
    });
    transport->BroadcastString(&text);
    // Every rank parses the same text: a config error is the same everywhere,
    // and rank 0 alone reports it.
    TrainConfig config;
    Agree(*transport, "every rank parsing the config", [&] { config = ParseTrainConfig(text, config_path, set); });
    transport->Configure(0, config.pipeline.wait_timeout_s);
    job(*transport, config, text);
  } catch (const PeerFailed&) {
    return 2;
  } catch (const Error& e) {
    if (!Explained(e)) {
      std::fprintf(stderr, "baton: rank %d: error: %s\n", rank, ForTerminal(e.what()).c_str());
      MpiSession::AbortWorld(1);
    }
    report(e);
    return 2;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "baton: rank %d: error: out of memory (an allocation failed outside setup's checks)\n", rank);
    MpiSession::AbortWorld(1);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "baton: rank %d: error: %s\n", rank, ForTerminal(e.what()).c_str());
    MpiSession::AbortWorld(1);
  }
  return 0;
}

namespace {

struct TrainFlags {
  std::string config;
  std::vector<std::string> set;
  TrainOptions options;
};

// Every rank runs this: reads the config on rank 0, broadcasts and parses it,
// splits the world into pipelines and replica groups (data parallelism),
// then runs `job(comms, config, config_text)`. Errors as RunOnAnyRanks.
int RunOnAllRanks(const TrainFlags& f,
                  const std::function<void(const RunComms&, const TrainConfig&, const std::string&)>& job) {
  return RunOnAnyRanks(f.config, f.set, [&](Transport& world, const TrainConfig& config, const std::string& text) {
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
    // Setup errors inside the job are raised on one rank only (the lowest that failed).
    job(comms, config, text);
  });
}

int RunTrain(const TrainFlags& f) {
  const StopSignals signals;  // from the start: a signal during start-up is kept for the first step boundary
  TrainSummary summary;
  const int code = RunOnAllRanks(f, [&](const RunComms& comms, const TrainConfig& config, const std::string&) {
    summary = Train(config, comms, f.options);
  });
  // Stopped by a signal at a step boundary (checkpointed): run it again.
  return code == 0 && summary.stop_signal != 0 ? kExitStopped : code;
}

struct BenchFlags {
  TrainFlags train;
  BenchOptions options;
  bool sweep = false;
  std::string schedules = "1f1b,zb_h1";
  std::string microbatches_list;  // "" = the config's
  std::string chunks_list;        // "" = the config's
  std::string sweep_out = "out/sweep";
};

int RunBench(const BenchFlags& f) {
  return RunOnAllRanks(f.train, [&](const RunComms& comms, const TrainConfig& config, const std::string& text) {
    const int rank = comms.world.rank();
    if (!f.sweep) {
      const BenchReport report = Bench(config, comms, f.options);
      if (rank == 0 && !f.options.quiet) {
        std::fputs(DescribeBenchReport(report).c_str(), stdout);
        std::fflush(stdout);
      }
      return;
    }
    // The sweep's three files, checked before the first combination runs.
    Agree(comms.world, "rank 0 checking the sweep's outputs", [&] {
      if (rank != 0) return;
      CommandFiles files = FilesOf(config, comms.world.size());
      for (const char* ext : {".csv", ".json", ".svg"}) files.outputs.push_back({"--sweep-out", f.sweep_out + ext});
      CheckCommandFiles(files);
    });
    // Every combination in one job; one that cannot be built is skipped.
    std::vector<std::pair<std::string, BenchReport>> rows;
    std::string skipped;
    const std::vector<std::string> mbs =
        f.microbatches_list.empty() ? std::vector<std::string>{std::to_string(config.pipeline.microbatches)}
                                    : Split(f.microbatches_list);
    const std::vector<std::string> chunks =
        f.chunks_list.empty() ? std::vector<std::string>{"0"} : Split(f.chunks_list);
    for (const std::string& sched : Split(f.schedules)) {
      // The chunk list applies to the schedules that take any chunk count;
      // the others have their own (a schedule file its file's).
      const GeneratorEntry* generator = FindGenerator(sched);
      const bool any_chunks = generator != nullptr && generator->traits.any_chunks;
      const bool multi = generator != nullptr && (any_chunks || generator->traits.default_chunks > 1);
      const std::vector<std::string> own = {"0"};
      const std::vector<std::string>& vs = any_chunks ? chunks : own;
      for (const std::string& m : mbs) {
        for (const std::string& v : vs) {
          std::vector<std::string> sets = f.train.set;
          sets.push_back("pipeline.schedule=" + sched);
          sets.push_back("pipeline.microbatches=" + m);
          sets.push_back("pipeline.chunks=" + (multi ? v : std::string("0")));
          const std::string label =
              fmt::format("{} m{}{}", sched, m,
                          multi ? fmt::format(" v{}", v == "0" ? std::to_string(generator->traits.default_chunks) : v)
                                : "");
          try {
            const TrainConfig c = ParseTrainConfig(text, f.train.config, sets);
            BenchOptions o = f.options;
            o.json_path = o.trace_path = o.svg_path = "";
            rows.push_back({label, Bench(c, comms, o)});
            if (rank == 0) std::fprintf(stderr, "sweep: %s: %.0f samples/s, bubble %.1f%%\n", label.c_str(),
                                        rows.back().second.samples_per_s, 100 * rows.back().second.bubble_rate);
          } catch (const PeerFailed&) {
          } catch (const Error& e) {
            if (rank == 0) skipped += fmt::format("sweep: {} skipped: {}\n", label, e.what());
          }
        }
      }
    }
    if (rank == 0) {
      std::fputs(skipped.c_str(), stderr);
      std::string csv = "schedule,microbatches,chunks,samples_per_s,step_time_median_s,bubble_rate,"
                        "simulated_bubble_rate,predicted_step_time_s,measured_over_predicted,gflops_total\n";
      std::string json = "[\n";
      for (std::size_t i = 0; i < rows.size(); ++i) {
        const BenchReport& b = rows[i].second;
        csv += fmt::format("{},{},{},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g}\n", b.schedule, b.microbatches,
                           b.chunks, b.samples_per_s, b.step_time_median_s, b.bubble_rate, b.simulated_bubble_rate,
                           b.predicted_step_time_s, b.measured_over_predicted, b.gflops_total);
        json += (i ? ",\n" : "") + BenchReportJson(rows[i].second);
      }
      WriteTextFile(f.sweep_out + ".csv", csv);
      WriteTextFile(f.sweep_out + ".json", json + "]\n");
      WriteTextFile(f.sweep_out + ".svg", SweepSvg(rows));
      std::fputs(csv.c_str(), stdout);
      std::fprintf(stdout, "wrote %s.csv, %s.json, %s.svg\n", f.sweep_out.c_str(), f.sweep_out.c_str(),
                   f.sweep_out.c_str());
    }
  });
}

// `baton validate`: the settings and the plan; with a profile, the
// automatic placement searched and the step and memory it predicts.
void RunValidate(const TrainFlags& f, const std::string& profile_path) {
  TrainConfig c = LoadTrainConfig(f.config, f.set);
  std::string text = DescribeTrainConfig(c);
  if (c.pipeline.partition == Partition::kAuto && profile_path.empty()) {
    std::cout << text << "the placement (auto) is searched when the run starts; give --profile FILE to see it now\n"
              << "ok: " << f.config << " is valid\n";
    return;
  }
  std::optional<Profile> profile;
  if (!profile_path.empty()) {
    std::string source;
    profile = ProfileFor(c, profile_path, &source);
    if (c.pipeline.partition == Partition::kAuto) {
      const PlacementChoice choice = ChoosePlacement(c, *profile);
      text += fmt::format("placement (auto): {} ({} placements searched, {} simulated)\n", choice.layout,
                          choice.layouts, choice.simulated);
      c = WithPlacement(c, DescribeModel(c.model.layers, c.model.input, c.model.seq), choice.bounds);
    }
  }
  text += DescribeRunPlan(c);
  if (profile) {
    const RunPlan plan = PlanRun(c);
    const ProfilePrediction pred = PredictFromProfile(plan, *profile);
    std::vector<std::string> peaks;
    for (double b : pred.peak_bytes) peaks.push_back(fmt::format("{:.1f}", b / (1024.0 * 1024.0)));
    text += fmt::format("predicted from {}: step {:.2f} ms, bubble {:.1f}%, peak memory per rank [{}] MiB\n",
                        profile_path, pred.sim.makespan * 1e3, 100 * pred.sim.bubble_rate, fmt::join(peaks, ", "));
  }
  std::cout << text << "ok: " << f.config << " is valid\n";
}

}  // namespace

void AddTrainCommand(CLI::App& app) {
  auto flags = std::make_shared<TrainFlags>();
  CLI::App* cmd = app.add_subcommand("train", "Train a model pipeline-parallel: mpirun -np P baton train CONFIG");
  cmd->add_option("config", flags->config, "YAML training config (configs/*.yaml)")->required();
  cmd->add_option("--set", flags->set, "override a key: --set train.optimizer.lr=0.01 (repeatable)");
  CLI::Option* resume = cmd->add_option("--resume", flags->options.resume_dir,
                                        "continue from the newest complete checkpoint in DIR (default: "
                                        "checkpoint.dir); auto: from checkpoint.dir's newest if there is one, else "
                                        "from scratch (./auto for a folder so named)")
                            ->expected(0, 1);
  cmd->callback([flags, resume] {
    flags->options.resume_auto = resume->count() > 0 && flags->options.resume_dir == "auto";
    flags->options.resume = resume->count() > 0 && !flags->options.resume_auto;
    if (flags->options.resume_auto) flags->options.resume_dir.clear();
    const int code = RunTrain(*flags);
    if (code != 0) std::exit(code);
  });

  auto bflags = std::make_shared<BenchFlags>();
  CLI::App* bench = app.add_subcommand(
      "bench", "Measure training steps against the simulator and the hardware: mpirun -np P baton bench CONFIG");
  bench->add_option("config", bflags->train.config, "YAML training config")->required();
  bench->add_option("--set", bflags->train.set, "override a key (repeatable)");
  bench->add_option("--steps", bflags->options.steps, "measured steps (default 10)");
  bench->add_option("--warmup", bflags->options.warmup_steps, "warm-up steps (default 3)");
  bench->add_flag("--real-data", bflags->options.real_data, "use the config's dataset (default: synthetic data)");
  bench->add_option("--json", bflags->options.json_path, "write the report as JSON");
  bench->add_option("--trace", bflags->options.trace_path, "write a Chrome trace of the measured steps");
  bench->add_option("--svg", bflags->options.svg_path, "draw the measured step above the simulated one");
  bench->add_flag("--sweep", bflags->sweep, "measure every schedule x microbatches x chunks combination");
  bench->add_option("--schedules", bflags->schedules, "sweep: schedules (default 1f1b,zb_h1)");
  bench->add_option("--microbatches", bflags->microbatches_list, "sweep: microbatch counts, e.g. 4,8,16");
  bench->add_option("--chunks", bflags->chunks_list, "sweep: chunk counts for the schedules that take any (interleaved_1f1b, interleaved_zb), e.g. 2,4");
  bench->add_option("--sweep-out", bflags->sweep_out, "sweep: writes PATH.csv, PATH.json, PATH.svg (out/sweep)");
  bench->callback([bflags] {
    const int code = RunBench(*bflags);
    if (code != 0) std::exit(code);
  });

  auto vflags = std::make_shared<TrainFlags>();
  auto vprofile = std::make_shared<std::string>();
  CLI::App* validate = app.add_subcommand("validate", "Check a training config without running it");
  validate->add_option("config", vflags->config, "YAML training config")->required();
  validate->add_option("--set", vflags->set, "override a key (repeatable)");
  validate->add_option("--profile", *vprofile,
                       "a baton profile of this config: place an automatic placement, and predict the step and memory");
  validate->callback([vflags, vprofile] { RunValidate(*vflags, *vprofile); });
}

}  // namespace baton
