// A packed step's uneven microbatches priced from a profile (baton/profile_price.h).
#include <fmt/format.h>

#include <algorithm>

#include "baton/error.h"
#include "baton/profile_price.h"

namespace baton {

std::vector<PackedMicrobatch> PackedMicrobatchesOf(const Batch& batch, int microbatches, int rows, int seq) {
  std::vector<PackedMicrobatch> out(static_cast<std::size_t>(microbatches));
  for (int j = 0; j < microbatches; ++j) {
    PackedMicrobatch& mb = out[static_cast<std::size_t>(j)];
    const std::size_t first = std::min(static_cast<std::size_t>(j) * rows, batch.filled.size());
    const std::span<const std::int32_t> filled =
        batch.filled.subspan(first, std::min<std::size_t>(rows, batch.filled.size() - first));
    mb.rows = RowsRun(filled);
    for (const std::int32_t f : filled) {
      mb.length = std::max(mb.length, static_cast<int>(f));
      mb.tokens += f;
    }
    // The documents within the positions the runtime computes: runs of
    // equal starts in each sample's first `length`.
    for (int r = 0; r < rows; ++r) {
      const std::size_t first = (static_cast<std::size_t>(j) * rows + r) * static_cast<std::size_t>(seq);
      if (first + static_cast<std::size_t>(seq) > batch.starts.size()) break;
      int from = 0;
      for (int t = 1; t <= mb.length; ++t) {
        if (t == mb.length || batch.starts[first + t] != batch.starts[first + from]) {
          mb.squares += static_cast<double>(t - from) * (t - from);
          from = t;
        }
      }
    }
  }
  return out;
}

double PackedStepShare(const std::vector<PackedMicrobatch>& mbs, int microbatches, int rows, int seq, double square) {
  const double t = seq, whole = rows * t + square * rows * t * t;
  if (microbatches < 1 || whole <= 0) return 1.0;
  double work = 0;
  for (const PackedMicrobatch& mb : mbs) work += static_cast<double>(mb.rows) * mb.length + square * mb.squares;
  return work / (microbatches * whole);
}

namespace {

double Total(const Costs& c) { return c.forward + c.backward_input + c.backward_weight; }

// The sum of squares of a sample of `seq` cut into documents of `tokens`.
double CutSquares(int seq, int tokens) {
  const double whole = seq / tokens, rest = seq % tokens;
  return whole * tokens * tokens + rest * rest;
}

}  // namespace

MicrobatchShares PackedShares(const RunPlan& plan, const Profile& profile, const std::vector<PackedMicrobatch>& mbs) {
  if (profile.document_tokens <= 0) {
    throw ConfigError(fmt::format("{}: this profile holds no document costs (document_tokens): packed documents are "
                                  "priced from a profile made by `baton profile` on the host; profile again",
                                  profile.config));
  }
  const std::vector<LayerProfile> layers = LayersAt(profile, plan.rows);
  const double seq = plan.model.seq, rows = plan.rows;
  const double cut = CutSquares(plan.model.seq, profile.document_tokens) / (seq * seq);
  const int S = plan.stages();
  // Per stage: its whole cost, and of it the part per document square.
  std::vector<double> whole(static_cast<std::size_t>(S), 0.0), pairs(static_cast<std::size_t>(S), 0.0);
  for (int s = 0; s < S; ++s) {
    for (int t = plan.bounds[static_cast<std::size_t>(s)]; t < plan.bounds[static_cast<std::size_t>(s) + 1]; ++t) {
      const LayerProfile& l = layers[static_cast<std::size_t>(t)];
      const double w = l.forward + l.backward_input + l.backward_weight;
      whole[static_cast<std::size_t>(s)] += w;
      if (cut < 1.0) pairs[static_cast<std::size_t>(s)] += std::clamp((w - Total(l.documents)) / (1.0 - cut), 0.0, w);
    }
  }
  MicrobatchShares out;
  out.cost.resize(mbs.size() * static_cast<std::size_t>(S));
  for (std::size_t j = 0; j < mbs.size(); ++j) {
    const double tokens = static_cast<double>(mbs[j].rows) * mbs[j].length / (rows * seq);
    const double squares = mbs[j].squares / (rows * seq * seq);
    for (int s = 0; s < S; ++s) {
      const double w = whole[static_cast<std::size_t>(s)], p = pairs[static_cast<std::size_t>(s)];
      out.cost[j * S + s] = w > 0 ? ((w - p) * tokens + p * squares) / w : tokens;
    }
    out.message.push_back(tokens);
  }
  return out;
}

SimResult PredictPackedStep(const RunPlan& plan, const Profile& profile,
                            const std::vector<std::vector<PackedMicrobatch>>& replicas) {
  SimOptions o = PriceRun(plan, ProfileRunCosts(plan, profile));
  o.record_timeline = true;
  SimResult slowest;
  for (const std::vector<PackedMicrobatch>& mbs : replicas) {
    o.microbatches = PackedShares(plan, profile, mbs);
    SimResult r = Simulate(plan.lowered, o);
    if (&mbs == &replicas.front() || r.makespan > slowest.makespan) slowest = std::move(r);
  }
  return slowest;
}

}  // namespace baton
