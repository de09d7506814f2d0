// A packed run's steps as its loaders hand them out (baton/train.h), for
// the commands that price them (baton simulate, baton bench).
#include <fmt/format.h>

#include <memory>

#include "baton/error.h"
#include "baton/timing.h"
#include "baton/train.h"

namespace baton {
namespace {

// A sliced plan's cuts (each microbatch's slices priced on their own), else none.
std::span<const int> Cuts(const RunPlan& plan) {
  return plan.slices > 1 ? std::span<const int>(plan.cuts) : std::span<const int>();
}

}  // namespace

PackedRunSteps PackedSteps(const TrainConfig& c, const RunPlan& plan, std::int64_t first, int count,
                           std::optional<int> cores) {
  PackedRunSteps out;
  const double square = c.model.gpt ? GptPairCost(c.model.gpt_spec) : 0.0;
  // Packed and arranged as the run packs and arranges it, the arrangement timed.
  const ArrangeBatch arrange = BalancedArrangement(c, plan, square, cores);
  ArrangeBatch timed;
  if (arrange) {
    timed = [&](std::span<std::vector<DocumentPiece>> samples) {
      const double start = MonotonicSeconds();
      arrange(samples);
      out.arrange_seconds += MonotonicSeconds() - start;
      ++out.arranged;
    };
  }
  const Dataset data =
      LoadSplit(c.data, Split::kTraining, c.train.batch_size, square, false, false, timed, TokenBatchesOf(c));
  if (!data.packed()) throw ConfigError(fmt::format("{}: the dataset holds no packed documents", data.name));
  std::vector<std::unique_ptr<BatchLoader>> loaders;
  for (int r = 0; r < c.data_parallel.size; ++r) {
    loaders.push_back(MakeBatchLoader(data, c.train.batch_size, c.data.shuffle, c.data.seed,
                                      MicrobatchesBefore(c, r) * plan.rows, plan.batch_size));
  }
  for (std::int64_t k = 0; k < first + count; ++k) {
    std::vector<std::vector<PackedMicrobatch>> step;
    for (auto& loader : loaders) {
      const Batch b = loader->Next();
      if (k >= first) step.push_back(PackedMicrobatchesOf(b, plan.sequences(), plan.rows, plan.model.seq, Cuts(plan)));
    }
    if (k >= first) out.steps.push_back(std::move(step));
  }
  return out;
}

}  // namespace baton
