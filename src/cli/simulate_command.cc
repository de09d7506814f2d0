// `baton simulate`: simulate one schedule, or compare several, from flags or
// a YAML file (flags override the file).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <tuple>

#include "baton/config.h"
#include "baton/machine.h"
#include "baton/error.h"
#include "baton/plan.h"
#include "baton/price.h"
#include "baton/placement.h"
#include "baton/files.h"
#include "baton/profile_price.h"
#include "baton/profile.h"
#include "baton/schedule.h"
#include "baton/sim.h"
#include "baton/slices.h"
#include "commands.h"
#include "simulate_packed.h"
#include "baton/measure_profile.h"

namespace baton {
namespace {

constexpr int kDefaultRanks = 4;
constexpr int kDefaultMicrobatches = 8;

struct SimulateFlags {
  std::string config;
  std::optional<std::string> schedule;
  std::optional<int> ranks, microbatches, chunks;
  std::optional<std::vector<double>> cost;
  std::optional<double> comm, bandwidth, message_bytes, weight_ratio, memory_bytes, cores;
  std::optional<int> seq_slices, seq_len;
  std::optional<std::string> seq_split;
  std::optional<double> attention_cost_share, attention_memory_share, kv_memory_share;
  std::optional<int> zero;
  std::optional<double> gather_time, reduce_scatter_time, gathered_bytes;
  double memory_limit = 0.0;  // generators' memory limit, M_B (0 = each one's default)
  std::optional<std::string> compare, json, trace, svg;
  std::string profile;           // with a training config: its step from a baton profile
  int steps = 10;                // packed documents: the steps priced
  std::string lengths;           // packed documents: one step's lengths instead
  std::vector<std::string> set;  // the training config's overrides
};

std::string Num(double v) { return fmt::format("{:.6g}", v); }

// ", F&B x" when an overlapped unit has its own cost.
std::string ForwardBackwardText(const Costs& k) {
  return k.forward_backward ? fmt::format(", F&B {}", Num(*k.forward_backward)) : "";
}

// "; ranks share 2 cores" when they do.
std::string CoresText(const SimulateConfig& c) {
  return c.cores > 0 ? fmt::format("; ranks share {} cores", Num(c.cores)) : "";
}

bool IsGenerator(std::string_view name) { return FindGenerator(name) != nullptr; }

// The sequence-slice flags (--seq-slices, --seq-len, --seq-split and the
// attention's shares) over `c`, each checked.
void ResolveSlices(const SimulateFlags& f, SimulateConfig& c) {
  if (f.seq_slices) {
    if (*f.seq_slices < 1) throw ConfigError(fmt::format("--seq-slices must be at least 1, got {}", *f.seq_slices));
    c.seq_slices = *f.seq_slices;
  }
  if (f.seq_len) {
    if (*f.seq_len < 1) throw ConfigError(fmt::format("--seq-len must be at least 1, got {}", *f.seq_len));
    c.seq_len = *f.seq_len;
  }
  if (f.seq_split) {
    const std::optional<SeqSplit> split = ParseEnum<SeqSplit>(*f.seq_split);
    if (!split) {
      throw ConfigError(fmt::format("--seq-split '{}' is not one of: {}", *f.seq_split, EnumNameList<SeqSplit>()));
    }
    c.seq_split = *split;
  }
  for (const auto& [flag, value, target] :
       {std::tuple{"--attention-cost-share", f.attention_cost_share, &c.attention_cost_share},
        std::tuple{"--attention-memory-share", f.attention_memory_share, &c.attention_memory_share}}) {
    if (!value) continue;
    if (!(*value >= 0.0 && *value <= 1.0)) throw ConfigError(fmt::format("{} must be in [0, 1], got {}", flag, *value));
    *target = *value;
  }
  if (f.kv_memory_share) {
    if (!(*f.kv_memory_share >= 0.0 && *f.kv_memory_share < 1.0)) {
      throw ConfigError(fmt::format("--kv-memory-share must be in [0, 1) (the slices hold the rest), got {}",
                                    *f.kv_memory_share));
    }
    c.kv_memory_share = *f.kv_memory_share;
  }
}

SimulateConfig Resolve(const SimulateFlags& f) {
  SimulateConfig c;
  c.ranks = 0;  // 0 = unset: a generator's default, or what a file holds
  c.microbatches = 0;
  if (!f.config.empty()) c = LoadSimulateConfig(f.config);
  if (f.schedule) c.schedule = *f.schedule;
  // 0 means "unset" inside; an explicit flag must be a real count.
  if ((f.ranks && *f.ranks < 1) || (f.microbatches && *f.microbatches < 1)) {
    throw ConfigError(fmt::format("--ranks and --microbatches must be at least 1, got {}",
                                  f.ranks && *f.ranks < 1 ? *f.ranks : *f.microbatches));
  }
  if (f.chunks && *f.chunks < 0) throw ConfigError(fmt::format("--chunks must be at least 0 (0 = the schedule's own), got {}", *f.chunks));
  if (f.ranks) c.ranks = *f.ranks;
  if (f.microbatches) c.microbatches = *f.microbatches;
  if (f.chunks) c.chunks = *f.chunks;
  ResolveSlices(f, c);
  if (f.cost) {
    if (f.cost->size() != 3 && f.cost->size() != 4) {
      throw ConfigError(
          fmt::format("--cost takes three numbers F,I,W (forward, backward-input, backward-weight "
                      "of one microbatch through a whole rank) and optionally a fourth, F&B (an F "
                      "and a B run as one OVERLAP_F_B unit), got {}",
                      f.cost->size()));
    }
    c.options.compute.uniform = {(*f.cost)[0], (*f.cost)[1], (*f.cost)[2]};
    if (f.cost->size() == 4) c.options.compute.uniform.forward_backward = (*f.cost)[3];
  }
  if (f.comm) c.options.messages.latency = *f.comm;
  if (f.bandwidth) c.options.messages.bandwidth = *f.bandwidth;
  if (f.message_bytes) c.options.messages.bytes = *f.message_bytes;
  if (f.weight_ratio) c.options.memory.weight_ratio = *f.weight_ratio;
  if (f.memory_bytes) c.options.memory.microbatch_bytes = *f.memory_bytes;
  if (f.cores) {
    if (!(*f.cores >= 0.0) || !std::isfinite(*f.cores)) {
      throw ConfigError(fmt::format("--cores must be a number >= 0 (0: a core per rank), got {}", *f.cores));
    }
    c.cores = *f.cores;
  }
  if (f.zero) c.sharding.zero = ZeroFlag(*f.zero);  // ZeRO-1 has no schedule actions
  for (const auto& [flag, given, into] :
       {std::tuple{"--gather-time", &f.gather_time, &c.sharding.gather_time},
        std::tuple{"--reduce-scatter-time", &f.reduce_scatter_time, &c.sharding.reduce_scatter_time},
        std::tuple{"--gathered-bytes", &f.gathered_bytes, &c.sharding.gathered_bytes}}) {
    if (!*given) continue;
    if (!(**given >= 0.0) || !std::isfinite(**given)) {
      throw ConfigError(fmt::format("{} must be a number >= 0, got {}", flag, **given));
    }
    *into = **given;
  }
  if (f.compare) c.compare = Split(*f.compare);
  if (f.json) c.json_path = *f.json;
  if (f.trace) c.trace_path = *f.trace;
  if (f.svg) c.svg_path = *f.svg;
  return c;
}

struct Run {
  Schedule schedule;
  SimResult result;
  std::optional<SequenceSlices> slices;  // a sliced schedule's cuts and shares
};

// The slices of a sequence of --seq-len tokens (default 1024 a slice).
SequenceSlices SlicesOf(const SimulateConfig& c, int k) {
  const int len = c.seq_len > 0 ? c.seq_len : 1024 * k;
  return SliceSequence(len, k, c.seq_split, c.attention_cost_share, c.attention_memory_share);
}

// "0.250 0.250 ..." : shares, three decimals.
std::string SharesText(const std::vector<double>& shares) {
  std::string out;
  for (double v : shares) out += fmt::format("{}{:.3f}", out.empty() ? "" : " ", v);
  return out;
}

// What the generators that plan with costs or memory (zb_auto, v_zb, the
// interleaved warm-up) are told: the simulation's own costs and message time.
GenerateOptions GeneratorOptions(const SimulateConfig& c, int chunks, int slices, double memory_limit) {
  GenerateOptions g;
  g.chunks = chunks;
  g.slices = slices;
  g.memory_limit = memory_limit;
  g.costs = c.options.compute.uniform;
  g.stage_costs = c.options.compute.stages;
  g.comm = c.options.messages.Time();
  g.weight_memory_ratio = c.options.memory.weight_ratio;
  return g;
}

Run SimulateOne(const SimulateConfig& c, const std::string& name, bool comparing, double memory_limit) {
  int chunks = c.chunks;
  // In a comparison --chunks sets the depth of the schedules that take any
  // (the interleaved ones) only; the others keep their own (1, or 2 for the
  // V-shaped ones).
  if (comparing && IsGenerator(name) && !TraitsOf(name).any_chunks) chunks = 0;
  // Likewise --seq-slices slices the schedules that take slices only.
  const int slices = comparing && IsGenerator(name) && !TraitsOf(name).slices ? 1 : c.seq_slices;
  int ranks = c.ranks, microbatches = c.microbatches;
  if (IsGenerator(name)) {
    if (ranks == 0) ranks = kDefaultRanks;
    if (microbatches == 0) microbatches = kDefaultMicrobatches;
  }
  // A file's slices are its own unless --seq-slices asks for some.
  const int asked = IsGenerator(name) || c.seq_slices > 1 ? slices : 0;
  Run run{LoadSchedule(name, ranks, microbatches, GeneratorOptions(c, chunks, asked, memory_limit)), {}, {}};
  // The price of what the flags give (no model behind it): the costs as a
  // run's (RunCosts), the schedule's shape (its message, its slices), and
  // the one function that makes the simulator's options of them.
  RunCosts costs;
  costs.uniform = c.options.compute.uniform;
  costs.stage_costs = c.options.compute.stages;
  costs.latency = c.options.messages.latency;
  costs.bandwidth = c.options.messages.bandwidth;
  costs.memory = c.options.memory;
  if (c.cores > 0) {
    costs.cores.pool.assign(static_cast<std::size_t>(run.schedule.ranks), 0);
    costs.cores.pool_cores = {c.cores};
  }
  PriceShape shape;
  shape.message_bytes = c.options.messages.bytes;
  if (run.schedule.slices > 1) {
    run.slices = SlicesOf(c, run.schedule.slices);
    // The sequence's keys and values are held apart from its slices, which
    // hold the rest of a microbatch's activations; a slice's message is its
    // tokens' share of the hidden states.
    const double kv = c.kv_memory_share;
    shape.slice_cost = run.slices->cost;
    shape.slice_memory = run.slices->memory;
    for (double& share : shape.slice_memory) share *= 1.0 - kv;
    costs.memory.sequence_share = kv;
    const std::vector<int>& cuts = run.slices->cuts;
    for (std::size_t s = 0; s + 1 < cuts.size(); ++s) {
      shape.slice_message.push_back(static_cast<double>(cuts[s + 1] - cuts[s]) / cuts.back());
    }
  }
  SimOptions options = PriceSchedule(shape, costs);
  // The collectives' times as the flags give them, per stage.
  if (c.sharding.priced() || c.sharding.zero.has_actions()) {
    const auto stages = static_cast<std::size_t>(run.schedule.stages);
    options.shards.gather_time.assign(stages, c.sharding.gather_time);
    options.shards.reduce_time.assign(stages, c.sharding.reduce_scatter_time);
    options.shards.gathered_bytes.assign(stages, c.sharding.gathered_bytes);
  }
  if (c.sharding.zero.has_actions()) run.schedule = AddShardingActions(run.schedule, c.sharding.zero, options);
  Validate(run.schedule);
  // Only the pictures draw the timeline; keeping every action's times costs
  // more memory than the schedule itself.
  options.record_timeline = !c.svg_path.empty() || !c.trace_path.empty();
  run.result = Simulate(run.schedule, options);
  return run;
}

void PrintDetail(const SimulateConfig& c, const Run& run) {
  const SimResult& r = run.result;
  const Costs& k = c.options.compute.uniform;
  std::string out;
  const std::string units =
      r.slices > 1 ? fmt::format("{} microbatches x {} slices ({} units)", run.schedule.sequences(), r.slices,
                                 r.microbatches)
                   : fmt::format("{} microbatches", r.microbatches);
  out += fmt::format("{}: {} ranks, {}, {} stage{} ({} per rank), {} actions\n", r.schedule, r.ranks, units,
                     run.schedule.stages, run.schedule.stages == 1 ? "" : "s", r.chunks, run.schedule.CountActions());
  if (run.slices) {
    const SequenceSlices& sl = *run.slices;
    out += fmt::format("slices: {} split of {} tokens at {}; compute shares {}; memory shares {}{}\n",
                       EnumName(c.seq_split), sl.cuts.back(), CutsText(sl.cuts), SharesText(sl.cost),
                       SharesText(sl.memory),
                       c.kv_memory_share > 0.0
                           ? fmt::format(" of the {} the slices hold; keys and values {} M_B a sequence",
                                         Num(1.0 - c.kv_memory_share), Num(c.kv_memory_share))
                           : "");
  }
  out += fmt::format("costs per rank: F {} I {} W {} (B {}{}){}; comm {}; M_W/M_B {}{}\n", Num(k.forward),
                     Num(k.backward_input), Num(k.backward_weight), Num(k.Backward()), ForwardBackwardText(k),
                     c.options.compute.stages.empty() ? "" : " (overridden per stage)", Num(c.options.messages.latency),
                     Num(c.options.memory.weight_ratio), CoresText(c));
  if (c.sharding.zero.has_actions() || c.sharding.priced()) {
    const RankResult* tail = &r.per_rank.front();
    for (const RankResult& rr : r.per_rank) {
      if (rr.exposed_reduce > tail->exposed_reduce) tail = &rr;
    }
    out += fmt::format("sharding: {}; a stage's gather {}, reduce-scatter {}, gathered copy {} bytes; the "
                       "collectives end {} after the compute on rank {} (the most)\n",
                       c.sharding.zero.has_actions() ? fmt::format("ZeRO-{}, its actions placed", c.sharding.zero.number())
                                            : "the schedule's own actions",
                       Num(c.sharding.gather_time), Num(c.sharding.reduce_scatter_time), Num(c.sharding.gathered_bytes),
                       Num(tail->exposed_reduce), tail->rank);
  }
  out += fmt::format("makespan {}   bubble {:.2f}%   span bubble {:.2f}%\n\n", Num(r.makespan), 100 * r.bubble_rate,
                     100 * r.span_bubble_rate);
  const bool bytes = c.options.memory.microbatch_bytes > 0;
  out += fmt::format("{:>4}  {:>10}  {:>10}  {:>10}  {:>10}  {:>7}  {:>13}{}  {}\n", "rank", "start", "end", "busy",
                     "span", "idle", "peak mem M_B", bytes ? "    peak MiB" : "", "peak in-flight per stage");
  for (const RankResult& rr : r.per_rank) {
    std::string in_flight;
    for (std::size_t i = 0; i < rr.stages.size(); ++i) {
      in_flight += fmt::format("{}s{}:{}", i ? " " : "", rr.stages[i], rr.peak_in_flight[i]);
    }
    const double idle = r.makespan > 0 ? 1.0 - rr.busy / r.makespan : 0.0;
    out += fmt::format("{:>4}  {:>10}  {:>10}  {:>10}  {:>10}  {:>6.2f}%  {:>13.3f}{}  {}\n", rr.rank, Num(rr.start),
                       Num(rr.end), Num(rr.busy), Num(rr.span), 100 * idle, rr.peak_memory,
                       bytes ? fmt::format("  {:>10.1f}", rr.peak_memory_bytes / (1024.0 * 1024.0)) : "", in_flight);
  }
  std::cout << out;
}

void PrintComparison(const SimulateConfig& c, const std::vector<Run>& runs) {
  const Costs& k = c.options.compute.uniform;
  std::string out = fmt::format("costs per rank: F {} I {} W {} (B {}{}); comm {}; M_W/M_B {}{}\n\n",
                                Num(k.forward), Num(k.backward_input), Num(k.backward_weight), Num(k.Backward()),
                                ForwardBackwardText(k), Num(c.options.messages.latency), Num(c.options.memory.weight_ratio),
                                CoresText(c));
  out += fmt::format("{:<18} {:>5} {:>5} {:>3} {:>10} {:>8} {:>12} {:>14} {:>9}\n", "schedule", "ranks", "mb", "v",
                     "makespan", "bubble", "span bubble", "peak mem M_B", "actions");
  for (const Run& run : runs) {
    const SimResult& r = run.result;
    double peak = 0;
    for (const RankResult& rr : r.per_rank) peak = std::max(peak, rr.peak_memory);
    const std::string mb = r.slices > 1 ? fmt::format("{}x{}", run.schedule.sequences(), r.slices)
                                        : std::to_string(r.microbatches);
    out += fmt::format("{:<18} {:>5} {:>5} {:>3} {:>10} {:>7.2f}% {:>11.2f}% {:>14.3f} {:>9}\n", r.schedule, r.ranks,
                       mb, r.chunks, Num(r.makespan), 100 * r.bubble_rate, 100 * r.span_bubble_rate, peak,
                       run.schedule.CountActions());
  }
  std::cout << out;
}

// The optimizer's step where the profile priced it: how far the step's end
// lies past the last rank's gradients, and with a clip, the longest a rank
// waited for the norm. Empty where not priced.
std::string DescribeUpdate(const SimResult& r, bool clips) {
  double gradients = 0, wait = 0, update_end = 0;
  for (const RankResult& rr : r.per_rank) {
    gradients = std::max({gradients, rr.end, rr.reduce_end});
    wait = std::max(wait, rr.clip_wait);
    update_end = std::max(update_end, rr.update_end);
  }
  if (update_end == 0) return "";
  std::string out = fmt::format("the optimizer's step: the step ends {:.3f} ms after the last rank's gradients",
                                (r.makespan - gradients) * 1e3);
  if (clips) out += fmt::format("; the clip's norm (train.clip_grad_norm) held a rank {:.3f} ms", wait * 1e3);
  return out + "\n";
}

// A training config's step from a profile: its plan (placed, for an
// automatic placement) simulated with each stage's profiled costs.
void RunSimulateProfile(const SimulateFlags& flags) {
  if (flags.config.empty()) throw ConfigError("simulate --profile: give the training config the profile is of");
  TrainConfig config = LoadTrainConfig(flags.config, flags.set);
  std::string source;
  Profile profile = ProfileFor(config, flags.profile, &source);
  // --cores: the step on a machine of that many CPUs (0: a core a rank)
  // rather than the profiled one's.
  std::optional<int> cores;
  if (flags.cores) {
    if (!(*flags.cores >= 0.0) || *flags.cores != std::floor(*flags.cores) || *flags.cores > 1e6) {
      throw ConfigError(fmt::format("simulate --profile --cores {}: a whole number of CPUs >= 0 (0: a core per rank)",
                                    *flags.cores));
    }
    cores = static_cast<int>(*flags.cores);
    profile.identity.cores = *cores;
    source += *cores == 0 ? ", priced for a core per rank" : fmt::format(", priced for {} cores", *cores);
  }
  const ModelDesc model = DescribeModel(config.model.layers, config.model.input, config.model.seq);
  if (config.pipeline.partition == Partition::kAuto) {
    config = WithPlacement(config, model, ChoosePlacement(config, profile).bounds);
  }
  const RunPlan plan = PlanRun(config);
  if (RealLengths(config.data.packing)) {
    SimulatePacked(config, plan, profile,
                   {flags.steps, flags.lengths, flags.svg, flags.trace, flags.json, flags.config, flags.profile, source,
                    cores});
    return;
  }
  if (!flags.lengths.empty()) {
    throw ConfigError(fmt::format("simulate --lengths: the config's microbatches are one fixed shape (data.packing: "
                                  "{}); lengths price greedy or balanced packing",
                                  EnumName(config.data.packing)));
  }
  const ProfilePrediction p = PredictFromProfile(plan, profile);
  const SimResult& r = p.sim;
  std::string out = fmt::format("{}: {} ranks, {} microbatches of {} samples, {} stages ({}), costs from {}\n",
                                r.schedule, r.ranks, r.microbatches, plan.rows, plan.stages(),
                                LayoutText(config, model, plan.bounds), source);
  out += fmt::format("step {:.3f} ms   bubble {:.2f}%\n", r.makespan * 1e3, 100 * r.bubble_rate);
  out += DescribeUpdate(r, plan.clips);
  // The model state (parameters, gradients, optimizer state) as the ZeRO
  // stage in effect holds it: shards and windows under 2 and 3.
  out += fmt::format("{:>4}  {:>10}  {:>7}  {:>14}  {:>26}  {}\n", "rank", "busy ms", "idle", "memory MiB",
                     fmt::format("model state MiB (ZeRO {})", plan.zero.number()), "stages");
  for (const RankResult& rr : r.per_rank) {
    const RankMemory& m = p.memory[static_cast<std::size_t>(rr.rank)];
    const std::string state = fmt::format("{:.2f} = {:.2f} + {:.2f} + {:.2f}", (m.params + m.grads + m.optimizer) / 1048576.0,
                                          m.params / 1048576.0, m.grads / 1048576.0, m.optimizer / 1048576.0);
    out += fmt::format("{:>4}  {:>10.3f}  {:>6.2f}%  {:>14.1f}  {:>26}  {}\n", rr.rank, rr.busy * 1e3,
                       100 * (1 - rr.busy / r.makespan), p.peak_bytes[static_cast<std::size_t>(rr.rank)] / 1048576.0,
                       state, fmt::join(rr.stages, ","));
  }
  CommandFiles files;
  files.inputs = {{"the config file", flags.config}};
  AddProfileInputs(files, "--profile", flags.profile);
  if (flags.svg) files.outputs.push_back({"--svg", ExpandPath(*flags.svg, r.schedule)});
  if (flags.trace) files.outputs.push_back({"--trace", ExpandPath(*flags.trace, r.schedule)});
  if (flags.json) files.outputs.push_back({"--json", *flags.json});
  CheckCommandFiles(files);
  if (flags.json.value_or("") != "-" && flags.svg.value_or("") != "-" && flags.trace.value_or("") != "-") {
    std::cout << out;  // an output on standard output ('-') goes there alone
  }
  if (flags.svg) {
    std::ostringstream svg;
    WriteSvg(r, svg);
    WriteOutput(ExpandPath(*flags.svg, r.schedule), svg.str());
  }
  if (flags.trace) {
    std::ostringstream trace;
    WriteChromeTrace(r, trace);
    WriteOutput(ExpandPath(*flags.trace, r.schedule), trace.str());
  }
  if (flags.json) WriteOutput(*flags.json, ToJson(r) + "\n");
}

// What a simulation reads (its config, schedule files) and writes (per
// schedule where the path has {schedule}), for the one output check.
CommandFiles FilesOf(const SimulateFlags& flags, const SimulateConfig& c, const std::vector<std::string>& names,
                     const std::vector<Run>& runs) {
  CommandFiles files;
  if (!flags.config.empty()) files.inputs.push_back({"the config file", flags.config});
  for (const std::string& name : names) {
    if (!IsGenerator(name)) files.inputs.push_back({"the schedule file", name});
  }
  for (const Run& run : runs) {
    const std::string base = std::filesystem::path(run.result.schedule).stem().string();
    if (!c.svg_path.empty()) files.outputs.push_back({"--svg", ExpandPath(c.svg_path, base)});
    if (!c.trace_path.empty()) files.outputs.push_back({"--trace", ExpandPath(c.trace_path, base)});
    if (!c.json_path.empty() && (c.json_path.find("{schedule}") != std::string::npos || &run == &runs.front())) {
      files.outputs.push_back({"--json", ExpandPath(c.json_path, base)});
    }
  }
  return files;
}

void RunSimulate(const SimulateFlags& flags) {
  if (!flags.profile.empty()) {
    RunSimulateProfile(flags);
    return;
  }
  if (!flags.set.empty()) throw ConfigError("simulate: --set is for a training config with --profile");
  const SimulateConfig c = Resolve(flags);
  const bool comparing = !c.compare.empty();
  const std::vector<std::string> names = comparing ? c.compare : std::vector<std::string>{c.schedule};
  if (comparing && names.size() > 1) {
    for (const std::string* path : {&c.svg_path, &c.trace_path}) {  // JSON may hold them all
      if (!path->empty() && path->find("{schedule}") == std::string::npos) {
        throw ConfigError(fmt::format("output path \"{}\": when comparing several schedules, put {{schedule}} in "
                                      "the path so each schedule gets its own file",
                                      *path));
      }
    }
  }
  // Everything is simulated before anything is written, so an error in one
  // schedule leaves no partial set of outputs.
  std::vector<Run> runs;
  if (!(flags.memory_limit >= 0.0)) {
    throw ConfigError(
        fmt::format("--memory-limit must be >= 0 (M_B; 0 = each schedule's default), got {}", flags.memory_limit));
  }
  for (const std::string& name : names) runs.push_back(SimulateOne(c, name, comparing, flags.memory_limit));
  CheckCommandFiles(FilesOf(flags, c, names, runs));

  // With an output on standard output ('-'), it carries that output alone.
  if (c.json_path != "-" && c.svg_path != "-" && c.trace_path != "-") {
    if (comparing) {
      PrintComparison(c, runs);
    } else {
      PrintDetail(c, runs.front());
    }
  }
  for (const Run& run : runs) {
    const std::string base = std::filesystem::path(run.result.schedule).stem().string();
    if (!c.svg_path.empty()) {
      std::ostringstream svg;
      WriteSvg(run.result, svg);
      WriteOutput(ExpandPath(c.svg_path, base), svg.str());
    }
    if (!c.trace_path.empty()) {
      std::ostringstream trace;
      WriteChromeTrace(run.result, trace);
      WriteOutput(ExpandPath(c.trace_path, base), trace.str());
    }
  }
  if (!c.json_path.empty()) {
    const bool one_per_schedule = c.json_path.find("{schedule}") != std::string::npos;
    if (comparing && !one_per_schedule) {
      std::string json = "[\n";
      for (std::size_t i = 0; i < runs.size(); ++i) json += (i ? ",\n" : "") + ToJson(runs[i].result);
      WriteOutput(c.json_path, json + "\n]\n");
    } else {
      for (const Run& run : runs) {
        const std::string base = std::filesystem::path(run.result.schedule).stem().string();
        WriteOutput(ExpandPath(c.json_path, base), ToJson(run.result) + "\n");
      }
    }
  }
}

}  // namespace

void AddSimulateCommand(CLI::App& app) {
  auto flags = std::make_shared<SimulateFlags>();
  CLI::App* cmd = app.add_subcommand("simulate", "Simulate a schedule: step time, bubble, memory, pictures");
  cmd->add_option("config", flags->config,
                  "YAML simulate config (configs/*.yaml); flags override it. With --profile: a training config");
  cmd->add_option("--profile", flags->profile,
                  "a baton profile of the training config CONFIG: simulate its step from the profiled costs");
  cmd->add_option("--set", flags->set, "with --profile: override a key of the training config (repeatable)");
  cmd->add_option("--steps", flags->steps,
                  "with --profile and packed documents (data.packing): the run's first steps priced, each by its "
                  "microbatches' lengths (default 10)");
  cmd->add_option("--lengths", flags->lengths,
                  "with --profile and packed documents: price one step from a lengths file instead: one line a "
                  "microbatch (replica 0's first), samples apart by ';', each its documents' token counts");
  cmd->add_option("-s,--schedule", flags->schedule,
                  fmt::format("{}, or a CSV schedule file (default 1f1b)", fmt::join(GeneratorNames(), ", ")));
  cmd->add_option("-p,--ranks", flags->ranks, "pipeline ranks p (default 4; a file's row count)");
  cmd->add_option("-m,--microbatches", flags->microbatches, "microbatches per step m (default 8)");
  cmd->add_option("-v,--chunks", flags->chunks, "stages per rank v (default: the schedule's own)");
  cmd->add_option("--cost", flags->cost,
                  "F,I,W[,F&B]: costs of one microbatch through a whole rank (default 1,1,1); F&B, an F and a B "
                  "run as one OVERLAP_F_B unit, defaults to F+I+W")
      ->delimiter(',');
  cmd->add_option("--memory-limit", flags->memory_limit,
                  "activation memory a rank may hold, M_B, for the schedules that take one (zb_auto: default p, "
                  "2p for ZB-2p; v_zb: default p; interleaved_1f1b: caps the warm-up)");
  cmd->add_option("--comm", flags->comm, "latency of one message between ranks (default 0)");
  cmd->add_option("--bandwidth", flags->bandwidth, "bytes per time unit; with --message-bytes adds bytes/bandwidth");
  cmd->add_option("--message-bytes", flags->message_bytes, "bytes of one activation or gradient message");
  cmd->add_option("--weight-memory-ratio", flags->weight_ratio, "M_W/M_B: activations still held after I (0.5)");
  cmd->add_option("--memory-bytes", flags->memory_bytes, "M_B in bytes, to report peak memory in bytes too");
  cmd->add_option("--cores", flags->cores,
                  "the ranks share this many cores: while n compute, each runs at min(1, cores/n) of its speed "
                  "(default 0: a core per rank; with --profile, default the profiled machine's)");
  cmd->add_option("--seq-slices", flags->seq_slices,
                  "cut each microbatch's sequence into k slices, each a unit of the pipeline (every schedule "
                  "but 1f1b, whose sliced form is seq1f1b; default 1); memory still reads in whole microbatches (M_B)");
  cmd->add_option("--seq-split", flags->seq_split,
                  "even (equal tokens) or compute (cuts placed so that slices cost about the same)");
  cmd->add_option("--seq-len", flags->seq_len, "tokens a sequence has, for the cuts (default 1024 a slice)");
  cmd->add_option("--attention-cost-share", flags->attention_cost_share,
                  "share of a sequence's compute that grows with the keys a token attends to (causal attention; "
                  "default 0: a slice costs its share of the tokens)");
  cmd->add_option("--attention-memory-share", flags->attention_memory_share,
                  "share of a sequence's activations that grows with the keys (attention probabilities; default 0)");
  cmd->add_option("--kv-memory-share", flags->kv_memory_share,
                  "share of a microbatch's activations that is its sequence's keys and values, held whole from "
                  "its first slice's forward to its slices' last backward, and as much again for their gradients "
                  "while it runs backward (default 0: counted in the slices)");
  cmd->add_option("--zero", flags->zero,
                  "sharded data parallel: 2 places a reduce-scatter after each stage's last backward, 3 also a "
                  "gather before each stage's first use and a free after its last (default 0: a file's own actions)");
  cmd->add_option("--gather-time", flags->gather_time, "with sharding: a stage's all-gather of its parameters");
  cmd->add_option("--reduce-scatter-time", flags->reduce_scatter_time,
                  "with sharding: a stage's reduce-scatter of its gradients");
  cmd->add_option("--gathered-bytes", flags->gathered_bytes, "with sharding: bytes of a stage's gathered parameters");
  cmd->add_option("--compare", flags->compare, "comma-separated schedules to compare under the same costs");
  cmd->add_option("--json", flags->json, "write the numbers as JSON to PATH ('-' for standard output)");
  cmd->add_option("--trace", flags->trace, "write a Chrome trace (Perfetto) to PATH");
  cmd->add_option("--svg", flags->svg, "write a pipeline diagram to PATH ({schedule} is replaced by the name)");
  cmd->callback([flags] { RunSimulate(*flags); });
}

}  // namespace baton
