// `baton tune`: the tuner core (baton/tune.h) fed costs and memory from the
// config's model through the plan: every candidate's stages are planned by
// PlanShape and PlanStageAlone, and its ranks' static bytes summed by
// PlanStaticBytes, as PlanMemory sums them for a run.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "baton/error.h"
#include "baton/files.h"
#include "baton/plan.h"
#include "baton/tune.h"

namespace baton {
namespace {

std::string Mib(double bytes) { return fmt::format("{:.1f} MiB", bytes / (1024.0 * 1024.0)); }

// The config's list, or selective's default (train_config.cc): the outputs
// of the layers with matrix products.
std::vector<LayerType> SelectiveKeep(const TrainConfig& config) {
  return !config.pipeline.keep.empty() ? config.pipeline.keep
                                       : std::vector<LayerType>{LayerType::kLinear, LayerType::kAttention};
}

TuneSpace SpaceOf(const TrainConfig& config, const TuneRequest& req) {
  const int p = config.pipeline.ranks, batch = config.train.batch_size;
  TuneSpace space;
  space.ranks = p;
  space.schedules = req.schedules.empty() ? GeneratorNames() : req.schedules;
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
  return space;
}

// One candidate's costs: each stage's matrix-product FLOPs over the rate
// (I and W priced like F), what its policy recomputes, its slot, and every
// rank's static bytes, all from the candidate's own plan.
CandidateCosts PriceCandidate(const TrainConfig& config, const ModelDesc& model, const TuneRates& rates,
                              const Candidate& c) {
  CandidateCosts out;
  const int p = config.pipeline.ranks, batch = config.train.batch_size;
  if (batch % c.microbatches != 0) {
    out.invalid = fmt::format("{} microbatches do not divide the batch of {}", c.microbatches, batch);
    return out;
  }
  TrainConfig planned = config;
  planned.pipeline.microbatches = c.microbatches;
  planned.pipeline.checkpointing = c.checkpointing;
  planned.pipeline.keep = c.checkpointing == Checkpointing::kSelective ? SelectiveKeep(config) : std::vector<LayerType>{};
  RunPlan shape;
  try {
    shape = PlanShape(planned, model, p * c.chunks);
  } catch (const ConfigError& e) {
    out.invalid = e.what();
    return out;
  }
  // Schedules that run I and W apart keep each op's output gradient (and
  // attention's stash) for W: a larger slot.
  const GeneratorTraits traits = TraitsOf(c.schedule);
  const double token_rows = double(shape.rows) * model.seq;
  for (int s = 0; s < shape.stages(); ++s) {
    const StagePlan st = PlanStageAlone(shape, s, traits.split_backward);
    const double f = model.GemmFlopsPerRow(st.first_layer, st.last_layer) * token_rows / rates.gemm_flops_per_s;
    out.stage_costs.push_back(Costs{f, f, f});
    // What the policy drops, forward again inside backward.
    double recompute = 0;
    for (int i = 0; i + 1 < st.ops(); ++i) {
      if (!st.kept[i + 1]) recompute += model.ops[static_cast<std::size_t>(st.first_op + i)].gemm_flops_per_row;
    }
    out.recompute.push_back(recompute * token_rows / rates.gemm_flops_per_s);
    out.activation_bytes.push_back(static_cast<double>(st.slot_bytes));
  }
  out.static_bytes = PlanStaticBytes(shape, traits.placement, p, traits.split_backward);
  out.weight_memory_ratio = 1.0;  // a ring slot is held until its W
  out.latency = rates.latency_s;
  out.message_bytes = 0;
  return out;
}

std::string Table(const TuneReport& report, int top) {
  std::string text = fmt::format("{:>4}  {:<17} {:>4} {:>3}  {:<10} {:>10} {:>7} {:>12}  {}\n", "rank", "schedule", "m",
                                 "v", "policy", "step ms", "bubble", "peak/rank", "fits");
  const std::size_t rows = std::min<std::size_t>(report.ranked.size(), static_cast<std::size_t>(std::max(top, 1)));
  for (std::size_t i = 0; i < rows; ++i) {
    const CandidateResult& r = report.ranked[i];
    text += fmt::format("{:>4}  {:<17} {:>4} {:>3}  {:<10} {:>10} {:>6.1f}% {:>12}  {}\n", i + 1, r.candidate.schedule,
                        r.candidate.microbatches, r.candidate.chunks, EnumName(r.candidate.checkpointing),
                        r.simulated ? fmt::format("{:.2f}", r.step_time * 1e3) : "-", 100 * r.bubble_rate,
                        r.simulated ? Mib(r.max_peak_bytes) : "-", r.feasible ? "yes" : "no: " + r.why_not);
  }
  text += fmt::format("searched {} candidates ({} simulated) in {:.3f} s: {:.0f} per second; {} fit\n",
                      report.ranked.size(), report.simulated, report.seconds, report.CandidatesPerSecond(),
                      report.feasible);
  return text;
}

// The winner's settings as a YAML overlay of the config.
std::string Overlay(const TrainConfig& config, const TuneReport& report, double budget) {
  const CandidateResult& best = *report.Best();
  const Candidate& c = best.candidate;
  std::string overlay = fmt::format(
      "# baton tune {}: the best of {} candidates under {} per rank (predicted {:.2f} ms, bubble {:.1f}%)\n"
      "pipeline:\n  schedule: {}\n  microbatches: {}\n  chunks: {}\n  checkpointing: {}\n",
      config.source, report.ranked.size(), Mib(budget), best.step_time * 1e3, 100 * best.bubble_rate, c.schedule,
      c.microbatches, TraitsOf(c.schedule).any_chunks ? c.chunks : 0, EnumName(c.checkpointing));
  if (c.checkpointing == Checkpointing::kSelective) {
    std::vector<std::string> names;
    for (LayerType t : SelectiveKeep(config)) names.emplace_back(EnumName(t));
    overlay += fmt::format("  keep: [{}]\n", fmt::join(names, ", "));
  }
  return overlay;
}

}  // namespace

TuneRates TuneRatesFromBenchReport(const std::string& path, const TrainConfig& config) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(ReadTextFile(path));
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(fmt::format("{}: not a baton bench report: {}", path, e.what()));
  }
  const int p = config.pipeline.ranks, batch = config.train.batch_size;
  std::vector<std::string> diffs;
  if (j.value("ranks", -1) != p) diffs.push_back(fmt::format("ranks: report {}, config {}", j.value("ranks", -1), p));
  if (j.value("batch_size", -1) != batch) {
    diffs.push_back(fmt::format("batch_size: report {}, config {}", j.value("batch_size", -1), batch));
  }
  if (!j.contains("gflops_while_busy") || !(j["gflops_while_busy"].get<double>() > 0)) {
    diffs.push_back("the report has no gflops_while_busy (made by an older baton bench?)");
  }
  if (!diffs.empty()) {
    throw ConfigError(fmt::format("{}: the costs do not match {}:\n  {}", path, config.source,
                                  fmt::format("{}", fmt::join(diffs, "\n  "))));
  }
  TuneRates rates;
  rates.gemm_flops_per_s = j["gflops_while_busy"].get<double>() * 1e9;
  rates.latency_s = j.value("message_latency_s", rates.latency_s);
  rates.source = fmt::format("{} (products at {:.1f} GFLOP/s inside actions, {:.1f} us a message)", path,
                             rates.gemm_flops_per_s / 1e9, rates.latency_s * 1e6);
  return rates;
}

std::string Tune(const TrainConfig& config, const TuneRequest& req, const TuneRates& rates) {
  if (!(req.memory_bytes > 0)) throw ConfigError("tune: --memory-bytes must be a number of bytes > 0");
  if (!(rates.gemm_flops_per_s > 0)) throw ConfigError("tune: the products' rate must be > 0 FLOP/s");
  const ModelDesc model = DescribeModel(config.model.layers, config.model.input, config.model.seq);
  TuneOptions options;
  options.memory_bytes = req.memory_bytes;
  const TuneReport report = baton::Tune(
      SpaceOf(config, req), [&](const Candidate& c) { return PriceCandidate(config, model, rates, c); }, options);

  std::string text = fmt::format("tune: {} ranks, batch {}, per-rank budget {}; costs from {}\n", config.pipeline.ranks,
                                 config.train.batch_size, Mib(req.memory_bytes), rates.source);
  text += Table(report, req.top);
  if (report.Best() == nullptr) {
    if (report.smallest) {
      const Candidate& s = report.smallest->candidate;
      text += fmt::format("nothing fits {} per rank: the smallest any candidate needs is {} ({} m{} v{} {})\n",
                          Mib(req.memory_bytes), Mib(report.smallest->max_peak_bytes), s.schedule, s.microbatches,
                          s.chunks, EnumName(s.checkpointing));
    } else {
      text += "no candidate could run (see why above)\n";
    }
    return text;
  }
  const std::string overlay = Overlay(config, report, req.memory_bytes);
  if (!req.overlay_path.empty()) {
    WriteTextFile(req.overlay_path, overlay);
    text += fmt::format("wrote the winner's settings to {}\n", req.overlay_path);
  }
  return text + overlay;
}

}  // namespace baton
