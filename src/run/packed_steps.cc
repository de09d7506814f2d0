// A packed run's steps as its loaders hand them out (baton/train.h), for
// the commands that price them (baton simulate, baton bench).
#include <fmt/format.h>

#include <memory>
#include <mutex>
#include <utility>
#include <vector>

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
  const Dataset data = LoadSplit(c.data, Split::kTraining, c.train.batch_size, square, false, false, TokenBatchesOf(c));
  if (!data.packed()) throw ConfigError(fmt::format("{}: the dataset holds no packed documents", data.name));
  // Each replica's loader, arranging as the run's loaders arrange (an
  // arrangement of its own each: one is not called from two threads), the
  // arrangements timed one at a time.
  std::mutex timing;
  std::vector<std::unique_ptr<BatchLoader>> loaders;
  for (int r = 0; r < c.data_parallel.size; ++r) {
    ArrangeBatch timed;
    if (ArrangeBatch arrange = BalancedArrangement(c, plan, square, cores)) {
      timed = [&out, &timing, arrange = std::move(arrange)](std::span<std::vector<DocumentPiece>> samples) {
        const std::lock_guard<std::mutex> lock(timing);
        const double start = MonotonicSeconds();
        arrange(samples);
        out.arrange_seconds += MonotonicSeconds() - start;
        ++out.arranged;
      };
    }
    loaders.push_back(MakeBatchLoader(data, c.train.batch_size, c.data.shuffle, c.data.seed,
                                      MicrobatchesBefore(c, r) * plan.rows, plan.batch_size, std::move(timed)));
    // Straight to step `first`: the batches before it are neither gathered nor arranged.
    const std::int64_t per_epoch = loaders.back()->batches_per_epoch();
    loaders.back()->Seek(first / per_epoch, first % per_epoch);
  }
  for (int k = 0; k < count; ++k) {
    std::vector<std::vector<PackedMicrobatch>> step;
    for (auto& loader : loaders) {
      step.push_back(PackedMicrobatchesOf(loader->Next(), plan.sequences(), plan.rows, plan.model.seq, Cuts(plan)));
    }
    out.steps.push_back(std::move(step));
  }
  for (auto& loader : loaders) loader.reset();  // their last prefetches done before `timing` and `out` go
  return out;
}

}  // namespace baton
