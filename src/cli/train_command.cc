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
#include <filesystem>

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
#include "baton/measure_profile.h"

namespace baton {

namespace {

struct TrainFlags {
  std::string config;
  std::vector<std::string> set;
  TrainOptions options;
  bool replacement = false;  // started by the survivors of a lost rank (recovery.on_lost_rank: replace)
};

int RunTrain(const TrainFlags& f) {
  return f.replacement ? JoinTrainJob(f.set, f.options) : TrainJob(f.config, f.set, f.options);
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

// The sweep's rows, rank 0's: PATH.csv (printed too), PATH.json and PATH.svg.
void WriteSweep(const std::string& out, const std::vector<std::pair<std::string, BenchReport>>& rows) {
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
  WriteTextFile(out + ".csv", csv);
  WriteTextFile(out + ".json", json + "]\n");
  WriteTextFile(out + ".svg", SweepSvg(rows));
  std::fputs(csv.c_str(), stdout);
  std::fprintf(stdout, "wrote %s.csv, %s.json, %s.svg\n", out.c_str(), out.c_str(), out.c_str());
}

int RunBench(const BenchFlags& f) {
  return RunOnAllRanks(f.train.config, f.train.set, [&](const RunComms& comms, const TrainConfig& config, const std::string& text) {
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
      const std::string name = std::filesystem::path(f.sweep_out).filename().string();
      if (name.empty() || name == "." || name == "..") {
        throw OutputError(fmt::format("--sweep-out {}: names no file (it is written as PATH.csv, PATH.json and "
                                      "PATH.svg): give a path such as out/sweep",
                                      Quote(f.sweep_out)));
      }
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
      WriteSweep(f.sweep_out, rows);
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
  // Hidden: the survivors start a new rank so (recovery.on_lost_rank: replace).
  cmd->add_flag("--replacement", flags->replacement)->group("");
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
  bench->add_option("--profile", bflags->options.profile_path,
                    "packed documents (data.packing, with --real-data): set each recorded step against its "
                    "prediction from this baton profile");
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
