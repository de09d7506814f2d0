// Placing a model's layers over the stages (baton/placement.h): the cut
// points, a placement as the config writes it, the bottleneck placement
// and the placement search the automatic placement runs.
#include "baton/placement.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "baton/error.h"
#include "pricer.h"

namespace baton {
namespace {

std::string Mib(double bytes) { return fmt::format("{:.1f} MiB", bytes / (1024.0 * 1024.0)); }

// A GPT stage of top-level layers [first, last) as a layout's parts.
LayoutStage GptParts(const ModelDesc& model, int first, int last) {
  const int n = model.top_layers();
  LayoutStage st;
  st.embedding = first == 0;
  st.loss = last == n;
  st.blocks = (std::min(last, n - kGptLossLayers) - std::max(first, kGptEmbeddingLayers)) / kGptBlockLayers;
  return st;
}

}  // namespace

std::vector<int> BottleneckPlacement(const TrainConfig& config, const ModelDesc& model,
                                     const std::vector<LayerProfile>& layers, int stages) {
  const int n = model.top_layers();
  std::vector<int> points{0};
  for (int c : PlacementCuts(config, model)) points.push_back(c);
  points.push_back(n);
  const int P = static_cast<int>(points.size());
  std::vector<double> prefix(static_cast<std::size_t>(n) + 1, 0.0);
  for (int l = 0; l < n; ++l) {
    const LayerProfile& lp = layers[static_cast<std::size_t>(l)];
    prefix[static_cast<std::size_t>(l) + 1] = prefix[static_cast<std::size_t>(l)] + lp.forward + lp.backward;
  }
  auto cost = [&](int a, int b) { return prefix[static_cast<std::size_t>(points[b])] - prefix[static_cast<std::size_t>(points[a])]; };
  // best[s][j]: the least bottleneck of s stages over points[0..j]; from[s][j] its last cut.
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(static_cast<std::size_t>(stages) + 1, std::vector<double>(P, inf));
  std::vector<std::vector<int>> from(static_cast<std::size_t>(stages) + 1, std::vector<int>(P, -1));
  best[0][0] = 0.0;
  for (int s = 1; s <= stages; ++s) {
    for (int j = 1; j < P; ++j) {
      for (int i = 0; i < j; ++i) {
        const double v = std::max(best[s - 1][i], cost(i, j));
        if (v < best[s][j]) {
          best[s][j] = v;
          from[s][j] = i;
        }
      }
    }
  }
  if (!std::isfinite(best[stages][P - 1])) return {};
  std::vector<int> bounds{n};
  for (int s = stages, j = P - 1; s > 0; --s) {
    j = from[s][j];
    bounds.push_back(points[j]);
  }
  std::reverse(bounds.begin(), bounds.end());
  return bounds;
}

std::vector<int> PlacementCuts(const TrainConfig& config, const ModelDesc& model) {
  std::vector<int> cuts;
  const int n = model.top_layers();
  if (config.model.gpt) {
    for (int t = kGptEmbeddingLayers; t <= n - kGptLossLayers; t += kGptBlockLayers) cuts.push_back(t);
  } else {
    for (int t = 1; t < n; ++t) cuts.push_back(t);
  }
  return cuts;
}

std::string LayoutText(const TrainConfig& config, const ModelDesc& model, const std::vector<int>& bounds) {
  std::vector<std::string> stages;
  for (std::size_t s = 0; s + 1 < bounds.size(); ++s) {
    const int a = bounds[s], b = bounds[s + 1];
    if (!config.model.gpt) {
      stages.push_back(std::to_string(b - a));
      continue;
    }
    const LayoutStage st = GptParts(model, a, b);
    std::vector<std::string> parts;
    if (st.embedding) parts.emplace_back("E");
    if (st.blocks == 1) parts.emplace_back("t");
    if (st.blocks > 1) parts.push_back(fmt::format("t*{}", st.blocks));
    if (st.loss) parts.emplace_back("L");
    stages.push_back(fmt::format("{}", fmt::join(parts, ",")));
  }
  return config.model.gpt ? fmt::format("{}", fmt::join(stages, "|")) : fmt::format("[{}]", fmt::join(stages, ","));
}

TrainConfig WithPlacement(const TrainConfig& config, const ModelDesc& model, const std::vector<int>& bounds) {
  TrainConfig c = config;
  if (config.model.gpt) {
    c.pipeline.partition = Partition::kLayout;
    c.pipeline.layout = PipelineLayout{};
    c.pipeline.layout.text = LayoutText(config, model, bounds);
    c.pipeline.layout.where = fmt::format("{}: pipeline.layout (placed automatically)", config.source);
    for (std::size_t s = 0; s + 1 < bounds.size(); ++s) c.pipeline.layout.stages.push_back(GptParts(model, bounds[s], bounds[s + 1]));
  } else {
    c.pipeline.partition = Partition::kExplicit;
    c.pipeline.partition_counts.clear();
    for (std::size_t s = 0; s + 1 < bounds.size(); ++s) c.pipeline.partition_counts.push_back(bounds[s + 1] - bounds[s]);
  }
  return c;
}

PlacementChoice ChoosePlacement(const TrainConfig& config, const Profile& profile, const Slowdown& slowdown) {
  return ChoosePlan(config, profile, slowdown, {config.pipeline.schedule});
}

std::vector<std::string> SwappableSchedules(const TrainConfig& config) {
  const std::string& name = config.pipeline.schedule;
  if (FindGenerator(name) == nullptr || config.pipeline.seq_slices > 1) return {name};
  const Placement placement = TraitsOf(name).placement;
  std::vector<std::string> out;
  for (const std::string& g : GeneratorNames()) {
    const GeneratorTraits traits = TraitsOf(g);
    if (traits.placement == placement && traits.one_slice_is.empty()) out.push_back(g);
  }
  return out;
}

PlacementChoice ChoosePlan(const TrainConfig& config, const Profile& profile, const Slowdown& slowdown,
                           const std::vector<std::string>& schedules) {
  const std::string& name = config.pipeline.schedule;
  const std::vector<std::string> names = GeneratorNames();
  for (const std::string& s : schedules) {
    if (std::find(names.begin(), names.end(), s) == names.end()) {
      throw ConfigError(fmt::format("{}: an automatic placement needs a generated schedule (one of {}), not \"{}\"",
                                    config.source, fmt::join(names, ", "), s));
    }
  }
  const auto ranks = static_cast<std::size_t>(config.pipeline.ranks);
  if (!slowdown.ranks.empty() && slowdown.ranks.size() != ranks) {
    throw Error(fmt::format("ChoosePlacement: {} rank slowdowns for {} ranks", slowdown.ranks.size(), ranks));
  }
  if (!slowdown.links.empty() && slowdown.links.size() != ranks * ranks) {
    throw Error(fmt::format("ChoosePlacement: {} link delays for {} ranks ({} links)", slowdown.links.size(), ranks,
                            ranks * ranks));
  }
  ProfilePricer pricer(config, profile, slowdown);
  TuneSpace space;
  space.ranks = config.pipeline.ranks;
  space.schedules = schedules;
  space.microbatches = {config.pipeline.microbatches};
  const GeneratorTraits traits = TraitsOf(name);
  space.chunks = {config.pipeline.chunks > 0 && traits.any_chunks ? config.pipeline.chunks : 2};
  if (schedules.size() == 1 && schedules[0] == name) {
    space.chunks = {config.pipeline.chunks > 0 ? config.pipeline.chunks : traits.default_chunks};
  }
  space.checkpointing = {config.pipeline.checkpointing};
  space.memory_limits = {0.0};
  space.slices = {config.pipeline.seq_slices};
  space.seq_splits = {config.pipeline.seq_split};
  space.zero = {config.data_parallel.in_effect()};
  space.cuts = PlacementCuts(config, pricer.model());
  space.layers = pricer.model().top_layers();
  TuneOptions options;
  options.memory_bytes = config.pipeline.memory_bytes > 0 ? config.pipeline.memory_bytes : 1e300;
  const TuneReport report = baton::Tune(space, std::ref(pricer), options);
  const CandidateResult& r = report.ranked.front();
  if (!r.feasible) {
    if (r.simulated) {
      throw ConfigError(fmt::format(
          "{}: no placement of {} fits pipeline.memory_bytes {} per rank: the smallest any needs is {} (layout {}, "
          "rank {})",
          config.source, name, Mib(options.memory_bytes), Mib(r.max_peak_bytes),
          LayoutText(config, pricer.model(), r.candidate.bounds), r.max_peak_rank));
    }
    throw ConfigError(fmt::format("{}: no placement of {} can run: {}", config.source, name, r.why_not));
  }
  PlacementChoice out;
  out.schedule = r.candidate.schedule;
  out.chunks = r.candidate.chunks;
  out.bounds = r.candidate.bounds;
  out.layout = LayoutText(config, pricer.model(), out.bounds);
  out.step_s = r.step_time;
  out.peak_bytes = r.peak_bytes;
  out.layouts = report.layouts;
  out.simulated = report.layouts_simulated;
  out.seconds = report.seconds;
  return out;
}

}  // namespace baton
