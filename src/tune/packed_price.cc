// A packed step's uneven microbatches priced from a profile (baton/profile_price.h).
#include <fmt/format.h>

#include <algorithm>

#include "baton/error.h"
#include "baton/profile_price.h"

namespace baton {

std::vector<PackedMicrobatch> PackedMicrobatchesOf(const Batch& batch, int microbatches, int rows, int seq,
                                                   std::span<const int> cuts) {
  const std::size_t k = cuts.empty() ? 0 : cuts.size() - 1;
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
    if (k > 0) {
      mb.slice_tokens.assign(k, 0.0);
      mb.slice_squares.assign(k, 0.0);
      for (std::size_t i = 0; i < k; ++i) {
        mb.slice_tokens[i] = static_cast<double>(mb.rows) * std::max(0, std::min(cuts[i + 1], mb.length) - cuts[i]);
      }
    }
    // The documents within the positions the runtime computes: runs of
    // equal starts in each sample's first `length` (each sample run: its
    // rows' documents, a shorter one's unfilled positions one of them).
    for (int r = 0; r < mb.rows; ++r) {
      const std::size_t first = (static_cast<std::size_t>(j) * rows + r) * static_cast<std::size_t>(seq);
      if (first + static_cast<std::size_t>(seq) > batch.starts.size()) break;
      int from = 0;
      for (int t = 1; t <= mb.length; ++t) {
        if (t == mb.length || batch.starts[first + t] != batch.starts[first + from]) {
          mb.squares += static_cast<double>(t - from) * (t - from);
          for (std::size_t i = 0; i < k; ++i) {  // the document's part in each slice
            const int lo = std::max(from, cuts[i]), hi = std::min(t, cuts[i + 1]);
            if (hi > lo) mb.slice_squares[i] += double(hi - from) * (hi - from) - double(lo - from) * (lo - from);
          }
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
  // A part's share on stage s: its tokens' share of the per-token part,
  // its squares' of the per-square part.
  auto share = [&](int s, double tokens, double squares) {
    const double w = whole[static_cast<std::size_t>(s)], p = pairs[static_cast<std::size_t>(s)];
    return w > 0 ? ((w - p) * tokens + p * squares) / w : tokens;
  };
  MicrobatchShares out;
  const auto k = static_cast<std::size_t>(plan.slices);
  const bool units = k > 1 && std::all_of(mbs.begin(), mbs.end(), [&](const PackedMicrobatch& mb) {
    return mb.slice_tokens.size() == k && mb.slice_squares.size() == k;
  });
  if (units) {  // each slice of each microbatch on its own
    out.unit_cost.resize(mbs.size() * k * static_cast<std::size_t>(S));
    for (std::size_t j = 0; j < mbs.size(); ++j) {
      for (std::size_t i = 0; i < k; ++i) {
        const double tokens = mbs[j].slice_tokens[i] / (rows * seq), squares = mbs[j].slice_squares[i] / (rows * seq * seq);
        for (int s = 0; s < S; ++s) out.unit_cost[(j * k + i) * S + s] = share(s, tokens, squares);
        out.unit_message.push_back(tokens);
      }
    }
    return out;
  }
  out.cost.resize(mbs.size() * static_cast<std::size_t>(S));
  for (std::size_t j = 0; j < mbs.size(); ++j) {
    const double tokens = static_cast<double>(mbs[j].rows) * mbs[j].length / (rows * seq);
    const double squares = mbs[j].squares / (rows * seq * seq);
    for (int s = 0; s < S; ++s) out.cost[j * S + s] = share(s, tokens, squares);
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
