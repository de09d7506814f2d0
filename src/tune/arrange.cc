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

void Arrange(const RunPlan& plan, StepPrice& price, std::span<std::vector<DocumentPiece>> samples) {
  const int R = plan.rows, m = plan.sequences(), D = plan.replicas;
  if (R < 1 || m < 1 || samples.size() != static_cast<std::size_t>(R) * m * D) return;
  // Fullest first, R at a time.
  std::vector<SampleFill> fill;
  for (const auto& s : samples) fill.push_back(FillOf(s));
  std::vector<int> by_fill(samples.size());
  std::iota(by_fill.begin(), by_fill.end(), 0);
  std::stable_sort(by_fill.begin(), by_fill.end(),
                   [&](int a, int b) { return fill[static_cast<std::size_t>(a)].positions > fill[static_cast<std::size_t>(b)].positions; });
  const int M = m * D;
  std::vector<PackedMicrobatch> mbs(static_cast<std::size_t>(M));
  std::vector<std::vector<int>> members(static_cast<std::size_t>(M));
  for (int j = 0; j < M; ++j) {
    PackedMicrobatch& mb = mbs[static_cast<std::size_t>(j)];
    for (int r = 0; r < R; ++r) {
      const int s = by_fill[static_cast<std::size_t>(j * R + r)];
      const SampleFill& f = fill[static_cast<std::size_t>(s)];
      members[static_cast<std::size_t>(j)].push_back(s);
      if (f.positions > 0) mb.rows = r + 1;  // the runtime computes up to its last sample with positions
      mb.length = std::max(mb.length, f.positions);
      mb.squares += f.squares;
      mb.tokens += f.positions;
    }
  }
  // The replicas: costliest first into the cheapest with room.
  std::vector<int> order(static_cast<std::size_t>(M));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return price.Cost(mbs[static_cast<std::size_t>(a)]) > price.Cost(mbs[static_cast<std::size_t>(b)]);
  });
  std::vector<std::vector<int>> replica(static_cast<std::size_t>(D));
  std::vector<double> load(static_cast<std::size_t>(D), 0.0);
  for (int j : order) {
    int best = -1;
    for (int r = 0; r < D; ++r) {
      if (static_cast<int>(replica[static_cast<std::size_t>(r)].size()) >= m) continue;
      if (best < 0 || load[static_cast<std::size_t>(r)] < load[static_cast<std::size_t>(best)]) best = r;
    }
    replica[static_cast<std::size_t>(best)].push_back(j);
    load[static_cast<std::size_t>(best)] += price.Cost(mbs[static_cast<std::size_t>(j)]);
  }
  // Each replica's order, then the samples written back in it.
  std::vector<std::vector<DocumentPiece>> arranged;
  arranged.reserve(samples.size());
  for (const std::vector<int>& mine : replica) {
    std::vector<PackedMicrobatch> own;
    for (int j : mine) own.push_back(mbs[static_cast<std::size_t>(j)]);
    for (int k : BestOrder(own, price)) {
      for (int s : members[static_cast<std::size_t>(mine[static_cast<std::size_t>(k)])]) {
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
