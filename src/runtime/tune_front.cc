// `baton tune`: the tuner core (baton/tune.h) fed costs and memory from the
// config's model and the run plan.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "baton/host.h"
#include "baton/error.h"
#include "baton/files.h"
#include "baton/runtime.h"
#include "baton/tune.h"
#include "plan.h"

namespace baton {
namespace {

double OptimizerStates(const OptimizerSpec& o) { return static_cast<double>(OptimizerStateNames(o).size()); }

}  // namespace

std::string Tune(const TrainConfig& config, const TuneRequest& req) {
  if (!(req.memory_bytes > 0)) throw ConfigError("tune: --memory-bytes must be a number of bytes > 0");
  const int p = config.pipeline.ranks;
  const int batch = config.train.batch_size;
  // The rate of the products inside actions and the message latency: from a
  // bench report of this config, or measured here (this process's BLAS).
  const ModelDesc model = DescribeModel(config.model.layers, config.model.input, config.model.seq);
  double rate = 0, latency = 20e-6;
  std::string source;
  if (!req.costs_path.empty()) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(ReadTextFile(req.costs_path));
    } catch (const nlohmann::json::exception& e) {
      throw ConfigError(fmt::format("{}: not a baton bench report: {}", req.costs_path, e.what()));
    }
    std::vector<std::string> diffs;
    if (j.value("ranks", -1) != p) diffs.push_back(fmt::format("ranks: report {}, config {}", j.value("ranks", -1), p));
    if (j.value("batch_size", -1) != batch) {
      diffs.push_back(fmt::format("batch_size: report {}, config {}", j.value("batch_size", -1), batch));
    }
    if (!j.contains("gflops_while_busy") || !(j["gflops_while_busy"].get<double>() > 0)) {
      diffs.push_back("the report has no gflops_while_busy (made by an older baton bench?)");
    }
    if (!diffs.empty()) {
      throw ConfigError(fmt::format("{}: the costs do not match {}:\n  {}", req.costs_path, config.source,
                                    fmt::format("{}", fmt::join(diffs, "\n  "))));
    }
    rate = j["gflops_while_busy"].get<double>() * 1e9;
    latency = j.value("message_latency_s", latency);
    source = fmt::format("{} (products at {:.1f} GFLOP/s inside actions, {:.1f} us a message)", req.costs_path,
                         rate / 1e9, latency * 1e6);
  } else {
    std::vector<std::pair<int, int>> shapes;
    for (const OpDesc& op : model.ops) {
      if (op.type == LayerType::kLinear) shapes.push_back({op.in, op.out});
    }
    rate = HostGemmGflops(shapes, std::max(1, batch / std::max(1, config.pipeline.microbatches)) * model.seq) * 1e9;
    source = fmt::format("this machine's SGEMM at the model's shapes ({:.1f} GFLOP/s), 20 us a message", rate / 1e9);
  }

  TuneSpace space;
  space.ranks = p;
  space.schedules = req.schedules;
  if (space.schedules.empty()) space.schedules = GeneratorNames();
  space.microbatches = req.microbatches;
  if (space.microbatches.empty()) {
    for (int k : {1, 2, 4, 8}) {
      if (batch % (k * p) == 0) space.microbatches.push_back(k * p);
    }
  }
  space.chunks = req.chunks.empty() ? std::vector<int>{2, 4} : req.chunks;
  space.checkpointing = req.policies.empty() ? std::vector<Checkpointing>{Checkpointing::kNone, Checkpointing::kSelective,
                                                                            Checkpointing::kFull}
                                             : req.policies;
  // Limits a config can state: the schedules' own (an overlay names no limit).
  space.memory_limits = {0.0};

  // The config's list, or selective's default (train_config.cc): the
  // outputs of the layers with matrix products.
  const std::vector<LayerType> keep = !config.pipeline.keep.empty()
                                          ? config.pipeline.keep
                                          : std::vector<LayerType>{LayerType::kLinear, LayerType::kAttention};
  auto costs = [&](const Candidate& c) {
    CandidateCosts out;
    if (batch % c.microbatches != 0) {
      out.invalid = fmt::format("{} microbatches do not divide the batch of {}", c.microbatches, batch);
      return out;
    }
    const int stages = p * c.chunks;
    RunPlan run;
    run.model = model;
    run.rows = batch / c.microbatches;
    run.batch_size = batch;
    run.checkpointing = c.checkpointing;
    run.keep = run.checkpointing == Checkpointing::kSelective ? keep : std::vector<LayerType>{};
    run.input = SampleInput(config.data);
    run.lowered.stages = stages;
    try {
      run.bounds = PartitionLayers(config, model, stages);
    } catch (const ConfigError& e) {
      out.invalid = e.what();
      return out;
    }
    // Schedules that run I and W apart keep each op's output gradient (and
    // attention's stash) for W: a larger slot.
    const GeneratorTraits traits = TraitsOf(c.schedule);
    const bool split = traits.split_backward;
    const Placement placement = traits.placement;
    const double token_rows = double(run.rows) * model.seq;
    out.static_bytes.assign(static_cast<std::size_t>(p), 0.0);
    for (int s = 0; s < stages; ++s) {
      const StagePlan st = PlanStageAlone(run, s, split);
      const double f = model.GemmFlopsPerRow(st.first_layer, st.last_layer) * token_rows / rate;
      out.stage_costs.push_back(Costs{f, f, f});
      // What the policy drops, forward again inside backward.
      double recompute = 0;
      for (int i = 0; i + 1 < st.ops(); ++i) {
        if (!st.kept[i + 1]) recompute += model.ops[static_cast<std::size_t>(st.first_op + i)].gemm_flops_per_row;
      }
      out.recompute.push_back(recompute * token_rows / rate);
      out.activation_bytes.push_back(static_cast<double>(st.slot_bytes));
      const double params = static_cast<double>(st.num_params) * sizeof(float);
      out.static_bytes[static_cast<std::size_t>(StageRank(placement, s, p))] +=
          params * (2 + OptimizerStates(config.train.optimizer)) + 3.0 * static_cast<double>(st.workspace_bytes) +
          static_cast<double>(st.state_workspace_bytes) +
          2.0 * c.microbatches * static_cast<double>(st.input().bytes() + st.output().bytes());
    }
    out.weight_memory_ratio = 1.0;  // a ring slot is held until its W
    out.latency = latency;
    out.message_bytes = 0;
    return out;
  };
  TuneOptions options;
  options.memory_bytes = req.memory_bytes;
  const TuneReport report = baton::Tune(space, costs, options);

  auto mib = [](double b) { return fmt::format("{:.1f} MiB", b / (1024.0 * 1024.0)); };
  std::string text = fmt::format("tune: {} ranks, batch {}, per-rank budget {}; costs from {}\n", p, batch,
                                 mib(req.memory_bytes), source);
  text += fmt::format("{:>4}  {:<17} {:>4} {:>3}  {:<10} {:>10} {:>7} {:>12}  {}\n", "rank", "schedule", "m", "v",
                      "policy", "step ms", "bubble", "peak/rank", "fits");
  const std::size_t rows = std::min<std::size_t>(report.ranked.size(), static_cast<std::size_t>(std::max(req.top, 1)));
  for (std::size_t i = 0; i < rows; ++i) {
    const CandidateResult& r = report.ranked[i];
    text += fmt::format("{:>4}  {:<17} {:>4} {:>3}  {:<10} {:>10} {:>6.1f}% {:>12}  {}\n", i + 1, r.candidate.schedule,
                        r.candidate.microbatches, r.candidate.chunks, EnumName(r.candidate.checkpointing),
                        r.simulated ? fmt::format("{:.2f}", r.step_time * 1e3) : "-", 100 * r.bubble_rate,
                        r.simulated ? mib(r.max_peak_bytes) : "-", r.feasible ? "yes" : "no: " + r.why_not);
  }
  text += fmt::format("searched {} candidates ({} simulated) in {:.3f} s: {:.0f} per second; {} fit\n",
                      report.ranked.size(), report.simulated, report.seconds, report.CandidatesPerSecond(),
                      report.feasible);
  const CandidateResult* best = report.Best();
  if (best == nullptr) {
    if (report.smallest) {
      text += fmt::format("nothing fits {} per rank: the smallest any candidate needs is {} ({} m{} v{} {})\n",
                          mib(req.memory_bytes), mib(report.smallest->max_peak_bytes),
                          report.smallest->candidate.schedule, report.smallest->candidate.microbatches,
                          report.smallest->candidate.chunks, EnumName(report.smallest->candidate.checkpointing));
    } else {
      text += "no candidate could run (see why above)\n";
    }
    return text;
  }
  const Candidate& c = best->candidate;
  std::string overlay = fmt::format(
      "# baton tune {}: the best of {} candidates under {} per rank (predicted {:.2f} ms, bubble {:.1f}%)\n"
      "pipeline:\n  schedule: {}\n  microbatches: {}\n  chunks: {}\n  checkpointing: {}\n",
      config.source, report.ranked.size(), mib(req.memory_bytes), best->step_time * 1e3, 100 * best->bubble_rate,
      c.schedule, c.microbatches, TraitsOf(c.schedule).any_chunks ? c.chunks : 0, EnumName(c.checkpointing));
  if (c.checkpointing == Checkpointing::kSelective) {
    std::vector<std::string> names;
    for (LayerType t : keep) names.emplace_back(EnumName(t));
    overlay += fmt::format("  keep: [{}]\n", fmt::join(names, ", "));
  }
  if (!req.overlay_path.empty()) {
    WriteTextFile(req.overlay_path, overlay);
    text += fmt::format("wrote the winner's settings to {}\n", req.overlay_path);
  }
  return text + overlay;
}

}  // namespace baton
