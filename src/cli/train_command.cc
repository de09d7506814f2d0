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
#include "baton/profile.h"
#include "baton/bench.h"
#include "baton/train.h"
#include "baton/schedule.h"
#include "commands.h"

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

// The message a rank leaves when it is told to stop (SIGTERM from mpirun or
// a scheduler, SIGINT from Ctrl-C): written by the handler itself, so it is
// formatted beforehand.
char g_stop_message[160];
std::size_t g_stop_length = 0;

extern "C" void OnStopSignal(int signal) {
  // Only async-signal-safe calls: unlink, write and _exit.
  RemoveUnfinishedFile();
  if (g_stop_length > 0) {
    const char* name = signal == SIGINT ? " SIGINT\n" : " SIGTERM\n";
    ssize_t ignored = ::write(STDERR_FILENO, g_stop_message, g_stop_length);
    ignored = ::write(STDERR_FILENO, name, std::strlen(name));
    (void)ignored;
  }
  std::_Exit(128 + signal);
}

void HandleStopSignals(int rank) {
  const std::string text = fmt::format(
      "baton: rank {}: stopped before the run ended (a file being written is removed; the last complete checkpoint, "
      "if any, is kept): signal",
      rank);
  g_stop_length = std::min(text.size(), sizeof g_stop_message);
  std::memcpy(g_stop_message, text.data(), g_stop_length);
  struct sigaction action {};
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGTERM, &action, nullptr);
  ::sigaction(SIGINT, &action, nullptr);
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
  HandleStopSignals(rank);
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
// places the stages where the config asks for an automatic placement, then
// runs `job(comms, config, config_text)`. Errors as RunOnAnyRanks.
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
    const TrainConfig placed = ResolvePlacement(config, world);
    Groups groups;
    if (layout.replicas > 1) {
      groups = MakeMpiGroups(layout, config.pipeline.wait_timeout_s);
    } else {
      groups.replicas = MakeSoloReplicaGroup();
    }
    const RunComms comms{world, groups.pipeline ? *groups.pipeline : world, *groups.replicas};
    // Setup errors inside the job are raised on one rank only (the lowest that failed).
    job(comms, placed, text);
  });
}

int RunTrain(const TrainFlags& f) {
  return RunOnAllRanks(f, [&](const RunComms& comms, const TrainConfig& config, const std::string&) {
    Train(config, comms, f.options);
  });
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

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    std::size_t comma = s.find(',', start);
    if (comma == std::string::npos) comma = s.size();
    if (comma > start) out.push_back(s.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

// A comma-separated list of a named enum's values, for tune's `flag`.
template <NamedEnum E>
std::vector<E> EnumList(const std::string& text, const char* flag) {
  std::vector<E> out;
  for (const std::string& word : Split(text)) {
    const std::optional<E> value = ParseEnum<E>(word);
    if (!value) throw ConfigError(fmt::format("tune: {}: '{}' is not one of {}", flag, word, EnumNameList<E>()));
    out.push_back(*value);
  }
  return out;
}

void PrintReport(const BenchReport& b) {
  std::string out = fmt::format(
      "bench {}: {} ranks, {} microbatches, {} chunk(s) per rank, batch {}; {} warm-up + {} measured steps\n",
      b.schedule, b.ranks, b.microbatches, b.chunks, b.batch_size, b.warmup_steps, b.steps);
  out += fmt::format("step time        median {:.3f} ms (min {:.3f}, max {:.3f}); {:.0f} samples/s{}\n",
                     b.step_time_median_s * 1e3, b.step_time_min_s * 1e3, b.step_time_max_s * 1e3, b.samples_per_s,
                     b.tokens_per_s > b.samples_per_s ? fmt::format(" ({:.0f} tokens/s)", b.tokens_per_s) : "");
  out += fmt::format("bubble           measured {:.2f}%, simulated from measured costs {:.2f}%\n", 100 * b.bubble_rate,
                     100 * b.simulated_bubble_rate);
  out += fmt::format("prediction       simulator {:.3f} ms from median action costs; measured / predicted = {:.3f}"
                     " ({:.3f} ms from mean costs; action times spread {:.0f}% p10-p90)\n",
                     b.predicted_step_time_s * 1e3, b.measured_over_predicted,
                     b.predicted_step_time_mean_costs_s * 1e3, 100 * b.action_time_spread);
  out += fmt::format("message latency  {:.1f} us one way (rank 0 <-> 1, one activation)\n", b.message_latency_s * 1e6);
  if (b.gemm_gflops_inside > 0) {
    out += fmt::format("products         {:.2f} GFLOP/s inside actions, call by call; the same calls bare {:.2f} GFLOP/s: "
                       "{:.3f} of the bare SGEMM time (goal >= 0.9)\n",
                       b.gemm_gflops_inside, b.gemm_gflops_bare, b.gemm_inside_over_bare);
  }
  if (b.replicas > 1) {
    out += fmt::format(
        "gradient sums    {} replicas: {:.3f} ms per step per rank, {:.0f}% hidden behind the pipeline's compute, "
        "{:.3f} ms after it; all-reduce {:.1f} us a ring step, {:.2f} GB/s: {:.3f} ms for the largest stage\n",
        b.replicas, b.reduction_s * 1e3, 100 * b.reduction_hidden_fraction, b.reduction_exposed_s * 1e3,
        b.allreduce_step_latency_s * 1e6, b.allreduce_bandwidth_Bps / 1e9, b.predicted_reduction_s * 1e3);
  }
  const int computing = b.cores_shared ? std::min(b.ranks, b.cores) : b.ranks;
  if (b.cores_shared) {
    out += fmt::format("cores            {} ranks share {} cores: the simulator shares them too, each action costing "
                       "its CPU time (and its share of the rank's CPU time outside actions: up to {:.0f}% more); "
                       "cores idle: measured {:.2f}%, simulated {:.2f}%\n",
                       b.ranks, b.cores, 100 * b.cpu_outside_actions, 100 * b.core_idle_rate,
                       100 * b.simulated_core_idle_rate);
  }
  out += fmt::format("compute          {:.2f} GFLOP/s in all = {:.3f} of {} x one rank's peak {:.2f} GFLOP/s; "
                     "goal 0.95 (1 - {}) x {} x peak = {:.2f}\n",
                     b.gflops_total, b.fraction_of_peak, computing, b.peak_gflops_one_core,
                     b.cores_shared ? "cores idle" : "bubble", computing, b.goal_gflops);
  out += fmt::format("while computing  {:.2f} GFLOP/s per rank = {:.3f} of the bare product rate ({})\n",
                     b.gflops_while_busy, b.busy_fraction_of_peak, b.blas_core);
  out += fmt::format("recording        {:.0f} ns per event; step median without recording {:.3f} ms; actions timed "
                     "by {}\n\n",
                     b.record_cost_per_event_s * 1e9, b.step_time_unrecorded_s * 1e3,
                     b.action_clock == "device" ? "the device (CUDA events on the compute stream)" : "the host's clock");
  out += fmt::format("{:>4}  {:>10}  {:>10}  {:>10}  {:>10}  {:>8}\n", "rank", "wall ms", "busy ms", "waiting ms",
                     "idle ms", "GFLOP/s");
  for (const BenchRank& r : b.per_rank) {
    out += fmt::format("{:>4}  {:>10.3f}  {:>10.3f}  {:>10.3f}  {:>10.3f}  {:>8.2f}\n", r.rank, r.wall_s * 1e3,
                       r.busy_s * 1e3, r.waiting_s * 1e3, r.idle_s * 1e3, r.gflops);
  }
  std::fputs(out.c_str(), stdout);
  std::fflush(stdout);
}

// samples/s and bubble rate per combination, as bars.
std::string SweepSvg(const std::vector<std::pair<std::string, BenchReport>>& rows) {
  const double bar = 36, gap = 14, left = 70, top = 50, height = 160, panel_gap = 70;
  const double width = left + rows.size() * (bar + gap) + 40;
  double max_rate = 1, max_bubble = 0.25;
  for (const auto& [label, r] : rows) {
    max_rate = std::max(max_rate, r.samples_per_s);
    max_bubble = std::max({max_bubble, r.bubble_rate, r.simulated_bubble_rate});
  }
  max_bubble = std::min(1.0, std::ceil(max_bubble * 4) / 4);  // the bubble axis ends at a quarter
  std::string svg = fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" "
      "height=\"{1}\" viewBox=\"0 0 {0} {1}\" font-family=\"DejaVu Sans, sans-serif\" font-size=\"11\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      width, top + 2 * height + panel_gap + 150);
  svg += fmt::format("<text x=\"{}\" y=\"22\" font-size=\"15\" font-weight=\"bold\">baton bench --sweep</text>\n",
                     left);
  for (int panel = 0; panel < 2; ++panel) {
    const double y0 = top + panel * (height + panel_gap);
    svg += fmt::format("<text x=\"{}\" y=\"{}\" fill=\"#444\">{}</text>\n", left, y0 - 8,
                       panel == 0 ? "samples / s (measured)" : "bubble rate (measured, blue; simulated, outline)");
    svg += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"#999\"/>\n", left, y0 + height,
                       width - 30);
    for (int tick = 0; tick <= 4; ++tick) {
      const double y = y0 + height - tick * height / 4;
      const std::string label = panel == 0 ? fmt::format("{:.0f}", max_rate * tick / 4)
                                           : fmt::format("{:.0f}%", 100 * max_bubble * tick / 4);
      svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\" fill=\"#666\">{}</text>\n", left - 6, y + 4,
                         label);
      svg += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"#eee\"/>\n", left, y,
                         width - 30);
    }
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const BenchReport& r = rows[i].second;
      const double x = left + gap / 2 + i * (bar + gap);
      if (panel == 0) {
        const double h = height * r.samples_per_s / max_rate;
        svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#0072B2\"/>\n", x,
                           y0 + height - h, bar, h);
        svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"9\">{:.0f}</text>\n",
                           x + bar / 2, y0 + height - h - 3, r.samples_per_s);
      } else {
        const double h = height * r.bubble_rate / max_bubble, hs = height * r.simulated_bubble_rate / max_bubble;
        svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#56B4E9\"/>\n", x,
                           y0 + height - h, bar, h);
        svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#D55E00\" "
                           "stroke-width=\"1.5\"/>\n",
                           x + 3, y0 + height - hs, bar - 6, hs);
        svg += fmt::format("<text transform=\"translate({},{}) rotate(40)\" fill=\"#333\">{}</text>\n", x + 4,
                           y0 + height + 14, rows[i].first);
      }
    }
  }
  return svg + "</svg>\n";
}

int RunBench(const BenchFlags& f) {
  return RunOnAllRanks(f.train, [&](const RunComms& comms, const TrainConfig& config, const std::string& text) {
    const int rank = comms.world.rank();
    if (!f.sweep) {
      const BenchReport report = Bench(config, comms, f.options);
      if (rank == 0 && !f.options.quiet) PrintReport(report);
      return;
    }
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
                                        "continue from the newest complete checkpoint in DIR (default: checkpoint.dir)")
                            ->expected(0, 1);
  cmd->callback([flags, resume] {
    flags->options.resume = resume->count() > 0;
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

  struct TuneFlags {
    TrainFlags train;
    TuneRequest request;
    std::string profile_path;
    bool config_placement = false;
    std::string schedules, microbatches, chunks, policies, slices, splits;
  };
  auto tflags = std::make_shared<TuneFlags>();
  CLI::App* tune = app.add_subcommand(
      "tune", "Pick schedule, microbatches, chunks and checkpointing for a config and a per-rank memory budget");
  tune->add_option("config", tflags->train.config, "YAML training config")->required();
  tune->add_option("--set", tflags->train.set, "override a key (repeatable)");
  tune->add_option("--memory-bytes", tflags->request.memory_bytes, "per-rank memory budget in bytes")->required();
  tune->add_option("--profile", tflags->profile_path,
                   "a baton profile of this config (default: profile it first, in this process)");
  tune->add_flag("--keep-placement", tflags->config_placement,
                 "keep the config's placement (default: search each candidate's placement)");
  tune->add_option("--schedules", tflags->schedules, "schedules to try (default: every generator but seq1f1b, which without slices is 1f1b)");
  tune->add_option("--microbatches", tflags->microbatches, "microbatch counts (default: p, 2p, 4p, 8p dividing the batch)");
  tune->add_option("--chunks", tflags->chunks, "chunk counts for the interleaved schedules (default 2,4)");
  tune->add_option("--policies", tflags->policies, "checkpointing policies (default none,selective,full)");
  tune->add_option("--seq-slices", tflags->slices,
                   "a GPT's sequence slices to try, e.g. 1,2,4 (every schedule but 1f1b; default: the config's)");
  tune->add_option("--seq-splits", tflags->splits, "with slices: even, compute or both (default: the config's)");
  tune->add_option("--top", tflags->request.top, "rows of the ranking to print (default 10)");
  tune->add_option("--overlay", tflags->request.overlay_path, "write the winner's settings as a YAML overlay");
  tune->callback([tflags] {
    TuneRequest r = tflags->request;
    r.schedules = Split(tflags->schedules);
    r.microbatches = WholeNumbers(tflags->microbatches, "tune");
    r.chunks = WholeNumbers(tflags->chunks, "tune");
    r.policies = EnumList<Checkpointing>(tflags->policies, "--policies");
    r.slices = WholeNumbers(tflags->slices, "tune");
    r.seq_splits = EnumList<SeqSplit>(tflags->splits, "--seq-splits");
    const TrainConfig c = LoadTrainConfig(tflags->train.config, tflags->train.set);
    r.placement = !tflags->config_placement;
    std::string source;
    const Profile profile = ProfileFor(c, tflags->profile_path, &source);
    std::cout << Tune(c, r, profile, source);
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
