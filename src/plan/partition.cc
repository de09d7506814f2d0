// Cutting the model's top-level layers into stages: a GPT's layout, explicit
// counts, or balanced by parameters or FLOPs.
#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "baton/error.h"
#include "baton/plan.h"

namespace baton {
namespace {

// pipeline.layout: each stage's parts (E, t, L) as top-level layers.
std::vector<int> LayoutBounds(const TrainConfig& c, const ModelDesc& model, int stages) {
  // The layout was checked against the model when it was read; only the
  // stage count waits for the schedule.
  const PipelineLayout& layout = c.pipeline.layout;
  const int n = model.top_layers();
  if (static_cast<int>(layout.stages.size()) != stages) {
    throw ConfigError(fmt::format(
        "{}: pipeline.layout: lists {} stages, but the pipeline has {} ({} ranks x {} chunks, schedule {}): give "
        "one stage per rank and chunk, in stage order (layout \"{}\")",
        layout.where, layout.stages.size(), stages, c.pipeline.ranks, stages / std::max(c.pipeline.ranks, 1),
        c.pipeline.schedule, layout.text));
  }
  std::vector<int> bounds(stages + 1, 0);
  int first = 0;
  for (int s = 0; s < stages; ++s) {
    const LayoutStage& st = layout.stages[static_cast<std::size_t>(s)];
    bounds[s] = first;
    first += (st.embedding ? kGptEmbeddingLayers : 0) + st.blocks * kGptBlockLayers + (st.loss ? kGptLossLayers : 0);
  }
  if (first != n) {
    throw ConfigError(
        fmt::format("{}: pipeline.layout: covers {} top-level layers, but the model has {}", layout.where, first, n));
  }
  bounds[stages] = n;
  return bounds;
}

// pipeline.partition: [counts], checked against the stages and the model.
std::vector<int> ExplicitBounds(const TrainConfig& c, int layers, int stages) {
  const auto& counts = c.pipeline.partition_counts;
  if (static_cast<int>(counts.size()) != stages) {
    throw ConfigError(
        fmt::format("{}: pipeline.partition lists {} stages, but the pipeline has {} ({} ranks x {} "
                    "chunks)",
                    c.source, counts.size(), stages, c.pipeline.ranks, stages / c.pipeline.ranks));
  }
  std::vector<int> bounds(stages + 1, 0);
  int sum = 0;
  for (int s = 0; s < stages; ++s) {
    if (counts[s] < 1) throw ConfigError(fmt::format("{}: pipeline.partition: stage {} is empty", c.source, s));
    bounds[s] = sum;
    sum += counts[s];
  }
  if (sum != layers) {
    throw ConfigError(
        fmt::format("{}: pipeline.partition's counts add up to {} layers, but the model has {}", c.source, sum, layers));
  }
  bounds[stages] = layers;
  return bounds;
}

// The contiguous split whose heaviest stage is lightest (dynamic
// programming over layer prefixes), by parameters or forward FLOPs.
std::vector<int> BalancedBounds(const ModelDesc& model, int stages, bool by_flops) {
  const int n = model.top_layers();
  std::vector<double> prefix(n + 1, 0.0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + model.BalanceWeight(i, by_flops);
  // best[k][i]: the smallest possible heaviest stage when the first i layers
  // form k stages; cut[k][i] the start of the k-th stage in that split.
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(stages + 1, std::vector<double>(n + 1, kInf));
  std::vector<std::vector<int>> cut(stages + 1, std::vector<int>(n + 1, 0));
  best[0][0] = 0;
  for (int k = 1; k <= stages; ++k) {
    for (int i = k; i <= n; ++i) {
      for (int j = k - 1; j < i; ++j) {
        const double v = std::max(best[k - 1][j], prefix[i] - prefix[j]);
        if (v < best[k][i]) {
          best[k][i] = v;
          cut[k][i] = j;
        }
      }
    }
  }
  std::vector<int> bounds(stages + 1, 0);
  bounds[stages] = n;
  for (int k = stages, i = n; k > 0; --k) {
    i = cut[k][i];
    bounds[k - 1] = i;
  }
  return bounds;
}

}  // namespace

std::vector<int> PartitionLayers(const TrainConfig& c, const ModelDesc& model, int stages) {
  const int n = model.top_layers();
  if (c.pipeline.partition == Partition::kLayout) return LayoutBounds(c, model, stages);
  if (c.pipeline.partition == Partition::kAuto) {
    throw ConfigError(fmt::format(
        "{}: the automatic placement is searched when the run starts (or by `baton validate --profile FILE`), from "
        "a profile: this step needs the stages placed first",
        c.source));
  }
  if (stages > n) {
    throw ConfigError(
        fmt::format("{}: pipeline needs {} stages ({} ranks x {} chunks) but the model has only {} "
                    "layers; every stage needs at least one layer",
                    c.source, stages, c.pipeline.ranks, stages / std::max(c.pipeline.ranks, 1), n));
  }
  if (c.pipeline.partition == Partition::kExplicit) return ExplicitBounds(c, n, stages);
  return BalancedBounds(model, stages, c.pipeline.balance_by == BalanceBy::kFlops);
}

}  // namespace baton
