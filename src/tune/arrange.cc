// data.packing: balanced's arrangement of a global batch into the step's
// microbatches, priced by the simulator (baton/profile_price.h).
#include <algorithm>
#include <memory>
#include <numeric>
#include <optional>

#include "baton/profile_price.h"

namespace baton {
namespace {

// One sample's positions and its documents' squares.
struct SampleFill {
  int positions = 0;
  double squares = 0;
};

SampleFill FillOf(const std::vector<DocumentPiece>& sample) {
  SampleFill f;
  for (const DocumentPiece& p : sample) {
    f.positions += p.positions;
    f.squares += static_cast<double>(p.positions) * p.positions;
  }
  return f;
}

// The step's price for one replica's microbatches in a given order.
class StepPrice {
 public:
  StepPrice(const RunPlan& plan, double square, const Profile* profile)
      : plan_(plan), square_(square), profile_(profile) {
    options_ = profile != nullptr ? PriceRun(plan, ProfileRunCosts(plan, *profile)) : PriceRun(plan, RunCosts{});
    options_.record_timeline = false;
  }
  double operator()(const std::vector<PackedMicrobatch>& mbs) {
    if (profile_ != nullptr) {
      options_.microbatches = PackedShares(plan_, *profile_, mbs);
    } else {
      options_.microbatches.cost.clear();
      for (const PackedMicrobatch& mb : mbs) options_.microbatches.cost.push_back(Cost(mb) / Whole());
    }
    return Simulate(plan_.lowered, options_).makespan;
  }
  double square() const { return square_; }
  // A microbatch's cost alone (the replicas' balance): its tokens and squares.
  double Cost(const PackedMicrobatch& mb) const {
    return static_cast<double>(mb.rows) * mb.length + square_ * mb.squares;
  }

 private:
  double Whole() const {
    const double t = plan_.model.seq, r = plan_.rows;
    return r * t + square_ * r * t * t;
  }
  const RunPlan& plan_;
  double square_;
  const Profile* profile_;
  SimOptions options_;
};

// The order of `mbs` (a permutation) the price finds least, its empty
// microbatches (no rows: a batch by tokens) last.
std::vector<int> BestOrder(const std::vector<PackedMicrobatch>& mbs, StepPrice& price) {
  std::vector<int> empty;
  for (int j = 0; j < static_cast<int>(mbs.size()); ++j) {
    if (mbs[static_cast<std::size_t>(j)].rows == 0) empty.push_back(j);
  }
  const int m = static_cast<int>(mbs.size() - empty.size());
  std::vector<int> by_cost;
  for (int j = 0; j < static_cast<int>(mbs.size()); ++j) {
    if (mbs[static_cast<std::size_t>(j)].rows > 0) by_cost.push_back(j);
  }
  std::stable_sort(by_cost.begin(), by_cost.end(), [&](int a, int b) { return price.Cost(mbs[a]) > price.Cost(mbs[b]); });
  std::vector<int> ascending(by_cost.rbegin(), by_cost.rend());
  std::vector<int> valley;  // the cheapest first, the next cheapest last, the rest costliest first
  if (m >= 2) {
    valley.push_back(by_cost[static_cast<std::size_t>(m - 1)]);
    for (int k = 0; k + 2 < m; ++k) valley.push_back(by_cost[static_cast<std::size_t>(k)]);
    valley.push_back(by_cost[static_cast<std::size_t>(m - 2)]);
  }
  int tries = 0;
  auto cost_of = [&](const std::vector<int>& order) {
    ++tries;
    std::vector<PackedMicrobatch> ordered;
    for (int j : order) ordered.push_back(mbs[static_cast<std::size_t>(j)]);
    for (int j : empty) ordered.push_back(mbs[static_cast<std::size_t>(j)]);
    return price(ordered);
  };
  std::vector<int> best = by_cost;
  double best_cost = cost_of(best);
  for (const std::vector<int>* order : {&ascending, &valley}) {
    if (order->empty()) continue;
    const double c = cost_of(*order);
    if (c < best_cost) {
      best_cost = c;
      best = *order;
    }
  }
  // Swaps of two while one lowers the price, within the tries.
  for (bool better = true; better && tries < kArrangeTries;) {
    better = false;
    for (int a = 0; a < m && tries < kArrangeTries; ++a) {
      for (int b = a + 1; b < m && tries < kArrangeTries; ++b) {
        std::vector<int> order = best;
        std::swap(order[static_cast<std::size_t>(a)], order[static_cast<std::size_t>(b)]);
        const double c = cost_of(order);
        if (c < best_cost * (1 - 1e-12)) {
          best_cost = c;
          best = std::move(order);
          better = true;
        }
      }
    }
  }
  best.insert(best.end(), empty.begin(), empty.end());
  return best;
}

// A batch's samples as the step's microbatches: the samples by their
// positions, fullest first, plan.rows at a time (a microbatch runs up to
// its last sample with positions); the microbatches to the replicas
// costliest first, each to the cheapest with room.
struct Layout {
  std::vector<PackedMicrobatch> mbs;
  std::vector<std::vector<int>> members;  // per microbatch, its samples
  std::vector<std::vector<int>> replica;  // per replica, its microbatches
};

Layout LayOut(const RunPlan& plan, const StepPrice& price, std::span<const std::vector<DocumentPiece>> samples) {
  const int R = plan.rows, m = plan.sequences(), D = plan.replicas;
  std::vector<SampleFill> fill;
  for (const auto& s : samples) fill.push_back(FillOf(s));
  std::vector<int> by_fill(samples.size());
  std::iota(by_fill.begin(), by_fill.end(), 0);
  std::stable_sort(by_fill.begin(), by_fill.end(),
                   [&](int a, int b) { return fill[static_cast<std::size_t>(a)].positions > fill[static_cast<std::size_t>(b)].positions; });
  const int M = m * D;
  Layout out;
  out.mbs.resize(static_cast<std::size_t>(M));
  out.members.resize(static_cast<std::size_t>(M));
  std::vector<std::int32_t> filled(static_cast<std::size_t>(R));
  for (int j = 0; j < M; ++j) {
    PackedMicrobatch& mb = out.mbs[static_cast<std::size_t>(j)];
    for (int r = 0; r < R; ++r) {
      const int s = by_fill[static_cast<std::size_t>(j * R + r)];
      const SampleFill& f = fill[static_cast<std::size_t>(s)];
      out.members[static_cast<std::size_t>(j)].push_back(s);
      filled[static_cast<std::size_t>(r)] = f.positions;
      mb.length = std::max(mb.length, f.positions);
      mb.squares += f.squares;
      mb.tokens += f.positions;
    }
    mb.rows = RowsRun(filled);
  }
  std::vector<int> order(static_cast<std::size_t>(M));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return price.Cost(out.mbs[static_cast<std::size_t>(a)]) > price.Cost(out.mbs[static_cast<std::size_t>(b)]);
  });
  out.replica.resize(static_cast<std::size_t>(D));
  std::vector<double> load(static_cast<std::size_t>(D), 0.0);
  for (int j : order) {  // costliest first: each replica's list is costliest first too
    int best = -1;
    for (int r = 0; r < D; ++r) {
      if (static_cast<int>(out.replica[static_cast<std::size_t>(r)].size()) >= m) continue;
      if (best < 0 || load[static_cast<std::size_t>(r)] < load[static_cast<std::size_t>(best)]) best = r;
    }
    out.replica[static_cast<std::size_t>(best)].push_back(j);
    load[static_cast<std::size_t>(best)] += price.Cost(out.mbs[static_cast<std::size_t>(j)]);
  }
  return out;
}

// A layout's step priced with each replica's microbatches costliest first
// (empty ones last): the slowest replica's.
double FirstPrice(const Layout& layout, StepPrice& price) {
  double worst = 0;
  for (const std::vector<int>& mine : layout.replica) {
    std::vector<PackedMicrobatch> own;
    for (int j : mine) own.push_back(layout.mbs[static_cast<std::size_t>(j)]);
    worst = std::max(worst, price(own));
  }
  return worst;
}

// The batch's pieces packed again (PackLongestFirst) into each count of
// samples from its own up to the batch's slots (a batch by tokens,
// train.batch_tokens, has empty ones; at most kArrangeCounts + 1 counts,
// evenly apart, where it has more), at each of kArrangeTilts, the
// packing whose step (each replica's microbatches costliest first) prices
// least taken: more, shorter microbatches fill and drain the pipeline
// sooner, and a tilt's costlier first microbatches and cheap last ones
// leave the steady state's waits and the drain short.
void ChoosePacking(const RunPlan& plan, StepPrice& price, std::span<std::vector<DocumentPiece>> samples) {
  std::size_t filled = 0;
  std::vector<DocumentPiece> pieces;
  for (const auto& s : samples) {
    filled += !s.empty();
    pieces.insert(pieces.end(), s.begin(), s.end());
  }
  if (filled == 0) return;
  double best = FirstPrice(LayOut(plan, price, samples), price);
  std::optional<std::vector<std::vector<DocumentPiece>>> chosen;
  // At most kArrangeCounts + 1 counts, evenly apart, the batch's own and
  // all its slots among them: the prices a batch stay bounded however
  // many slots it has.
  const std::size_t stride = (samples.size() - filled) / kArrangeCounts + 1;
  std::vector<std::size_t> counts;
  for (std::size_t k = filled; k < samples.size(); k += stride) counts.push_back(k);
  counts.push_back(samples.size());
  for (std::size_t k : counts) {
    for (double tilt : kArrangeTilts) {
      if (k == filled && tilt == 0) continue;  // the batch's own packing
      auto packed = PackLongestFirst(pieces, k, plan.model.seq, price.square(), tilt);
      if (!packed) continue;
      packed->resize(samples.size());
      const double p = FirstPrice(LayOut(plan, price, *packed), price);
      if (p < best * (1 - 1e-9)) {
        best = p;
        chosen = std::move(packed);
      }
    }
  }
  if (chosen) std::move(chosen->begin(), chosen->end(), samples.begin());
}

void Arrange(const RunPlan& plan, StepPrice& price, std::span<std::vector<DocumentPiece>> samples) {
  const int R = plan.rows, m = plan.sequences(), D = plan.replicas;
  if (R < 1 || m < 1 || samples.size() != static_cast<std::size_t>(R) * m * D) return;
  ChoosePacking(plan, price, samples);
  const Layout layout = LayOut(plan, price, samples);
  // Each replica's order, then the samples written back in it.
  std::vector<std::vector<DocumentPiece>> arranged;
  arranged.reserve(samples.size());
  for (const std::vector<int>& mine : layout.replica) {
    std::vector<PackedMicrobatch> own;
    for (int j : mine) own.push_back(layout.mbs[static_cast<std::size_t>(j)]);
    for (int k : BestOrder(own, price)) {
      for (int s : layout.members[static_cast<std::size_t>(mine[static_cast<std::size_t>(k)])]) {
        arranged.push_back(std::move(samples[static_cast<std::size_t>(s)]));
      }
    }
  }
  std::move(arranged.begin(), arranged.end(), samples.begin());
}

}  // namespace

ArrangeBatch ArrangeBalanced(const RunPlan& plan, double square, std::optional<Profile> profile) {
  // What the price reads, owned by the arrangement.
  struct Owned {
    RunPlan plan;
    std::optional<Profile> profile;
    std::unique_ptr<StepPrice> price;
  };
  auto owned = std::make_shared<Owned>(Owned{plan, std::move(profile), nullptr});
  if (owned->profile && owned->profile->document_tokens <= 0) owned->profile.reset();  // no document costs: `square`
  owned->price = std::make_unique<StepPrice>(owned->plan, square, owned->profile ? &*owned->profile : nullptr);
  return [owned](std::span<std::vector<DocumentPiece>> samples) { Arrange(owned->plan, *owned->price, samples); };
}

}  // namespace baton
