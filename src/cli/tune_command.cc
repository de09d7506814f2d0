// `baton tune CONFIG --memory-bytes N`: the tune room's ranking of a
// config's candidates (baton/tune_config.h), printed, and the winner's
// settings written as a YAML overlay.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <iostream>
#include <memory>

#include "baton/config.h"
#include "baton/machine.h"
#include "baton/train.h"
#include "baton/error.h"
#include "baton/files.h"
#include "baton/model.h"
#include "baton/placement.h"
#include "baton/schedule.h"
#include "baton/tune_config.h"
#include "commands.h"
#include "tune_packed.h"
#include "baton/measure_profile.h"

namespace baton {
namespace {

std::string Mib(double bytes) { return fmt::format("{:.1f} MiB", bytes / (1024.0 * 1024.0)); }
std::string Table(const TrainConfig& config, const ModelDesc& model, const TuneReport& report, int top) {
  std::string text = fmt::format("{:>4}  {:<17} {:>4} {:>3}  {:<10} {:<10} {:>4} {:>10} {:>7} {:>12}  {:<24} {}\n",
                                 "rank", "schedule", "m", "v", "policy", "slices", "zero", "step ms", "bubble",
                                 "peak/rank", "layout", "fits");
  const std::size_t rows = std::min<std::size_t>(report.ranked.size(), static_cast<std::size_t>(std::max(top, 1)));
  for (std::size_t i = 0; i < rows; ++i) {
    const CandidateResult& r = report.ranked[i];
    const std::string layout = r.candidate.bounds.empty() ? "(config's)" : LayoutText(config, model, r.candidate.bounds);
    const std::string slices = r.candidate.slices > 1
                                   ? fmt::format("{}:{}", r.candidate.slices, EnumName(r.candidate.seq_split))
                                   : "1";
    text += fmt::format("{:>4}  {:<17} {:>4} {:>3}  {:<10} {:<10} {:>4} {:>10} {:>6.1f}% {:>12}  {:<24} {}\n", i + 1,
                        r.candidate.schedule, r.candidate.microbatches, r.candidate.chunks,
                        EnumName(r.candidate.checkpointing), slices, r.candidate.zero.number(),
                        r.simulated ? fmt::format("{:.2f}", r.step_time * 1e3) : "-",
                        100 * r.bubble_rate, r.simulated ? Mib(r.max_peak_bytes) : "-", layout,
                        r.feasible ? "yes" : "no: " + r.why_not);
  }
  if (report.layouts > 0) {
    text += fmt::format(
        "searched {} candidates x their placements: {} points ({} simulated, the rest bounded) in {:.3f} s: {:.0f} "
        "per second; {} fit\n",
        report.ranked.size(), report.layouts, report.layouts_simulated, report.seconds, report.CandidatesPerSecond(),
        report.feasible);
  } else {
    text += fmt::format("searched {} candidates ({} simulated) in {:.3f} s: {:.0f} per second; {} fit\n",
                        report.ranked.size(), report.simulated, report.seconds, report.CandidatesPerSecond(),
                        report.feasible);
  }
  return text;
}

// A candidate's settings as a YAML overlay of the config (its pipeline:
// section open, for the packed winner's to follow).
std::string Overlay(const TrainConfig& config, const ModelDesc& model, const CandidateResult& best,
                    std::size_t candidates, double budget) {
  const Candidate& c = best.candidate;
  std::string overlay = fmt::format(
      "# baton tune {}: the best of {} candidates under {} per rank (predicted {:.2f} ms, bubble {:.1f}%)\n"
      "pipeline:\n  schedule: {}\n  microbatches: {}\n  chunks: {}\n  checkpointing: {}\n",
      config.source, candidates, Mib(budget), best.step_time * 1e3, 100 * best.bubble_rate, c.schedule,
      c.microbatches, TraitsOf(c.schedule).any_chunks ? c.chunks : 0, EnumName(c.checkpointing));
  if (c.checkpointing == Checkpointing::kSelective) {
    std::vector<std::string> names;
    for (LayerType t : SelectiveKeep(config)) names.emplace_back(EnumName(t));
    overlay += fmt::format("  keep: [{}]\n", fmt::join(names, ", "));
  }
  if (c.slices > 1 || config.pipeline.seq_slices > 1) {
    overlay += fmt::format("  seq_slices: {}\n", c.slices);
    if (c.slices > 1) overlay += fmt::format("  seq_split: {}\n", EnumName(c.seq_split));
  }
  if (!c.bounds.empty()) {
    overlay += fmt::format("  {}: {}\n", config.model.gpt ? "layout" : "partition",
                           config.model.gpt ? "\"" + LayoutText(config, model, c.bounds) + "\""
                                            : LayoutText(config, model, c.bounds));
  }
  if (config.data_parallel.size > 1) overlay += fmt::format("data_parallel:\n  zero: {}\n", c.zero.number());
  return overlay;
}

// The ranking as `baton tune` prints it, the least memory any candidate
// needs where none fits, and the winner's overlay (written to
// `overlay_path` too, where given).
std::string Describe(const TrainConfig& config, const TuneRequest& req, const TuneReport& report,
                     const std::string& profile_source, int top, const std::string& overlay_path) {
  const ModelDesc model = DescribeModel(config.model.layers, config.model.input, config.model.seq);
  std::string text = fmt::format("tune: {} ranks, batch {}, per-rank budget {}; costs from {}\n", config.pipeline.ranks,
                                 config.train.batch_size, Mib(req.memory_bytes), profile_source);
  text += Table(config, model, report, top);
  if (report.Best() == nullptr) {
    if (report.smallest) {
      const Candidate& s = report.smallest->candidate;
      text += fmt::format("nothing fits {} per rank: the smallest any candidate needs is {} ({} m{} v{} {}{}{})\n",
                          Mib(req.memory_bytes), Mib(report.smallest->max_peak_bytes), s.schedule, s.microbatches,
                          s.chunks, EnumName(s.checkpointing), s.zero.shards_optimizer() ? fmt::format(" ZeRO {}", s.zero.number()) : "",
                          s.bounds.empty() ? "" : ", layout " + LayoutText(config, model, s.bounds));
    } else {
      text += "no candidate could run (see why above)\n";
    }
    return text;
  }
  const std::string overlay = Overlay(config, model, *report.Best(), report.ranked.size(), req.memory_bytes);
  if (!overlay_path.empty()) {
    WriteTextFile(overlay_path, overlay);
    text += fmt::format("wrote the winner's settings to {}\n", overlay_path);
  }
  return text + overlay;
}

// Packed documents: every budget and packing, the most real tokens a
// second first, and the winner's overlay with its data and batch.
std::string DescribePacked(const TrainConfig& config, const TuneRequest& req, const std::vector<PackedPoint>& points,
                           const std::string& sources, int top, const std::string& overlay_path) {
  std::string text = fmt::format(
      "tune: {} ranks, packed documents, the batch's {} positions held (train.batch_size x data.max_tokens), "
      "per-rank budget {}; costs from\n{}",
      config.pipeline.ranks, static_cast<long long>(config.train.batch_size) * config.data.seq_len,
      Mib(req.memory_bytes), sources);
  text += fmt::format("{:>4}  {:>10} {:>5}  {:<8}  {:<17} {:>4} {:>3}  {:<10} {:>4} {:>10} {:>8} {:>10} {:>7} {:>12}  {}\n",
                      "rank", "max_tokens", "batch", "packing", "schedule", "m", "v", "policy", "zero", "step ms",
                      "tokens", "tokens/s", "unused", "peak/rank", "fits");
  const std::size_t rows = std::min<std::size_t>(points.size(), static_cast<std::size_t>(std::max(top, 1)));
  for (std::size_t i = 0; i < rows; ++i) {
    const PackedPoint& p = points[i];
    if (!p.why_not.empty()) {
      text += fmt::format("{:>4}  {:>10} {:>5}  {:<8}  no: {}\n", i + 1, p.budget, p.batch_size, EnumName(p.packing),
                          p.why_not);
      continue;
    }
    const Candidate& c = p.candidate.candidate;
    text += fmt::format("{:>4}  {:>10} {:>5}  {:<8}  {:<17} {:>4} {:>3}  {:<10} {:>4} {:>10.2f} {:>8.0f} {:>10.0f} "
                        "{:>6.1f}% {:>12}  yes\n",
                        i + 1, p.budget, p.batch_size, EnumName(p.packing), c.schedule, c.microbatches, c.chunks,
                        EnumName(c.checkpointing), c.zero.number(), p.step_s * 1e3, p.tokens, p.TokensPerSecond(),
                        100 * p.unused, Mib(p.candidate.max_peak_bytes));
  }
  if (points.empty() || !points.front().why_not.empty()) return text + "no budget and packing could run (see why above)\n";
  const PackedPoint& best = points.front();
  const ModelDesc model = DescribeModel(best.config.model.layers, best.config.model.input, best.config.model.seq);
  std::string overlay = Overlay(best.config, model, best.candidate, best.candidates, req.memory_bytes);
  overlay = fmt::format("# packed: {:.2f} ms a step predicted by the first steps' documents, {:.0f} real tokens/s "
                        "({} budgets x packings tried)\n",
                        best.step_s * 1e3, best.TokensPerSecond(), points.size()) + overlay;
  overlay += fmt::format("data:\n  packing: {}\n  max_tokens: {}\ntrain:\n  batch_size: {}\n", EnumName(best.packing),
                         best.budget, best.batch_size);
  if (best.config.model.gpt && best.config.model.gpt_spec.seq_len != config.model.gpt_spec.seq_len) {
    overlay += fmt::format("model:\n  seq_len: {}\n", best.config.model.gpt_spec.seq_len);
  }
  if (!overlay_path.empty()) {
    WriteTextFile(overlay_path, overlay);
    text += fmt::format("wrote the winner's settings to {}\n", overlay_path);
  }
  return text + overlay;
}

struct TrainFlags {
  std::string config;
  std::vector<std::string> set;
};

}  // namespace

void AddTuneCommand(CLI::App& app) {
  struct TuneFlags {
    TrainFlags train;
    TuneRequest request;
    int top = 10;
    std::string overlay_path;
    std::string profile_path;
    bool config_placement = false;
    std::string schedules, microbatches, chunks, policies, slices, splits, zero;
    std::string budgets, packings;
    int steps = 8;
  };
  auto tflags = std::make_shared<TuneFlags>();
  CLI::App* tune = app.add_subcommand(
      "tune", "Pick schedule, microbatches, chunks and checkpointing for a config and a per-rank memory budget");
  tune->add_option("config", tflags->train.config, "YAML training config")->required();
  tune->add_option("--set", tflags->train.set, "override a key (repeatable)");
  tune->add_option("--memory-bytes", tflags->request.memory_bytes, "per-rank memory budget in bytes")->required();
  tune->add_option("--profile", tflags->profile_path,
                   "a baton profile of this config (default: profile it first, in this process); with --budgets, "
                   "{max_tokens} in the path names each budget's");
  tune->add_flag("--keep-placement", tflags->config_placement,
                 "keep the config's placement (default: search each candidate's placement)");
  tune->add_option("--schedules", tflags->schedules, "schedules to try (default: every generator but seq1f1b, which without slices is 1f1b)");
  tune->add_option("--microbatches", tflags->microbatches, "microbatch counts (default: p, 2p, 4p, 8p dividing the batch)");
  tune->add_option("--chunks", tflags->chunks, "chunk counts for the interleaved schedules (default 2,4)");
  tune->add_option("--policies", tflags->policies, "checkpointing policies (default none,selective,full)");
  tune->add_option("--seq-slices", tflags->slices,
                   "a GPT's sequence slices to try, e.g. 1,2,4 (every schedule but 1f1b; default: the config's)");
  tune->add_option("--seq-splits", tflags->splits, "with slices: even, compute or both (default: the config's)");
  tune->add_option("--zero", tflags->zero,
                   "with replicas: ZeRO stages to try, e.g. 1,3 (default 0,1,2,3 on the CPU, 0,1 on a GPU; the "
                   "config's without replicas)");
  tune->add_option("--budgets", tflags->budgets,
                   "packed documents: token budgets (data.max_tokens) to try, e.g. 256,512,1024, the batch's "
                   "positions held (default: the config's)");
  tune->add_option("--packings", tflags->packings, "packed documents: greedy, balanced, pad (default greedy,balanced)");
  tune->add_option("--steps", tflags->steps, "packed documents: the run's first steps priced at each point (default 8)");
  tune->add_option("--top", tflags->top, "rows of the ranking to print (default 10)");
  tune->add_option("--overlay", tflags->overlay_path, "write the winner's settings as a YAML overlay");
  tune->callback([tflags] {
    TuneRequest r = tflags->request;
    r.schedules = Split(tflags->schedules);
    r.microbatches = WholeNumbers(tflags->microbatches, "tune");
    r.chunks = WholeNumbers(tflags->chunks, "tune");
    r.policies = EnumList<Checkpointing>(tflags->policies, "tune", "--policies");
    r.slices = WholeNumbers(tflags->slices, "tune");
    r.seq_splits = EnumList<SeqSplit>(tflags->splits, "tune", "--seq-splits");
    r.zero = WholeNumbers(tflags->zero, "tune");
    const TrainConfig c = LoadTrainConfig(tflags->train.config, tflags->train.set);
    if (!tflags->overlay_path.empty()) {
      CommandFiles files = RunInputsOf(c);
      AddProfileInputs(files, "--profile", tflags->profile_path);
      files.outputs.push_back({"--overlay", tflags->overlay_path});
      files.standard_output = false;
      CheckCommandFiles(files);
    }
    r.placement = !tflags->config_placement;
    std::string source;
    if (c.data.packing != Packing::kNone) {
      PackedTuneRequest packed{tflags->train.config, tflags->train.set, WholeNumbers(tflags->budgets, "tune"),
                               EnumList<Packing>(tflags->packings, "tune", "--packings"), tflags->steps,
                               tflags->profile_path};
      const std::vector<PackedPoint> points = TunePacked(c, r, packed, &source);
      std::cout << DescribePacked(c, r, points, source, tflags->top, tflags->overlay_path);
      return;
    }
    if (!tflags->budgets.empty() || !tflags->packings.empty()) {
      throw ConfigError("tune --budgets/--packings: the config packs no documents (data.packing: none)");
    }
    const Profile profile = ProfileFor(c, tflags->profile_path, &source);
    std::cout << Describe(c, r, TuneConfig(c, r, profile), source, tflags->top, tflags->overlay_path);
  });

}

}  // namespace baton
