// The tuner core: enumerate, generate, simulate, rank. See tune.h.
#include "baton/tune.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>

#include "baton/error.h"
#include "baton/plan.h"
#include "baton/schedule.h"
#include "baton/sim.h"

namespace baton {
namespace {

std::string Bytes(double bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  int unit = 0;
  while (std::abs(bytes) >= 1024.0 && unit < 5) {
    bytes /= 1024.0;
    ++unit;
  }
  return fmt::format("{:.4g} {}", bytes, kUnits[unit]);
}

std::string Describe(const Candidate& c) {
  std::string limit;
  if (c.memory_limit == kMemoryLimitFromBudget) limit = ", memory limit from the budget";
  if (c.memory_limit > 0.0) limit = fmt::format(", memory limit {} M_B", c.memory_limit);
  return fmt::format("{} with {} microbatches, {} chunks, checkpointing {}{}{}", c.schedule, c.microbatches, c.chunks,
                     EnumName(c.checkpointing), limit, c.zero.shards_optimizer() ? fmt::format(", ZeRO {}", c.zero.number()) : "");
}

// The model's answer must fit the candidate; a mismatch is the caller's bug,
// reported with the candidate and the field.
void CheckSizes(const Candidate& c, const CandidateCosts& k, int ranks, int stages) {
  auto expect = [&](const char* field, std::size_t got, int want, const char* unit, bool may_be_empty) {
    if ((may_be_empty && got == 0) || static_cast<int>(got) == want) return;
    throw ScheduleError(fmt::format("tune: the cost model gave {} entries of {} for {}, which has {} {}{}", got, field,
                                    Describe(c), want, unit, may_be_empty ? " (or give none)" : ""));
  };
  expect("stage_costs", k.price.compute.stages.size(), stages, "stages", false);
  expect("memory.stage_bytes", k.price.memory.stage_bytes.size(), stages, "stages", false);
  expect("memory.rank_static_bytes", k.price.memory.rank_static_bytes.size(), ranks, "ranks", false);
  expect("memory.stage_sequence_bytes", k.price.memory.stage_sequence_bytes.size(), stages, "stages", true);
  expect("slice_cost", k.price.slices.cost.size(), c.slices, "slices", true);
  expect("slice_memory", k.price.slices.memory.size(), c.slices, "slices", true);
  expect("parameter_bytes", k.parameter_bytes.size(), stages, "stages", !c.zero.has_actions());
  expect("summed_at_end", k.summed_at_end.size(), stages, "stages", true);
}

// ZeRO 2 and 3: the windows rank r's placed list holds at once
// (PlaceShardingWindows, as the plan takes them), each its largest stage's
// parameter bytes.
double WindowBytes(const Schedule& s, int r, const std::vector<double>& parameter_bytes,
                   const std::vector<char>& summed_at_end) {
  std::vector<Action> actions;
  double largest = 0;
  for (const Action& unit : s.actions[static_cast<std::size_t>(r)]) {
    ForEachPart(unit, [&](const Action& a) {
      actions.push_back(a);
      if (a.stage >= 0) largest = std::max(largest, parameter_bytes[static_cast<std::size_t>(a.stage)]);
    });
  }
  const ShardingWindows w = PlaceShardingWindows(actions, s.stages, summed_at_end);
  return largest * (w.parameter_windows + w.gradient_windows);
}

struct CachedSchedule {
  std::optional<Schedule> schedule;
  std::string error;  // the generator's refusal
};

class Tuner {
 public:
  Tuner(const TuneSpace& space, const CostModel& model, const TuneOptions& options)
      : space_(space), model_(model), options_(options) {}

  TuneReport Run() {
    CheckSpace();
    const auto start = std::chrono::steady_clock::now();
    TuneReport report;
    for (const std::string& name : space_.schedules) {
      const GeneratorTraits traits = TraitsOf(name);
      const std::vector<int> chunk_values = traits.any_chunks ? space_.chunks : std::vector<int>{traits.default_chunks};
      std::vector<double> limits = {0.0};
      if (traits.memory_limit) limits = space_.memory_limits;
      // Slices where the schedule runs them (and k = 1 unless it is then
      // another schedule); a split for each k > 1.
      std::vector<std::pair<int, SeqSplit>> slicings;
      for (int k : traits.slices ? space_.slices : std::vector<int>{1}) {
        if (k == 1 && !traits.one_slice_is.empty()) continue;
        if (k == 1) {
          slicings.emplace_back(1, SeqSplit::kEven);
          continue;
        }
        for (SeqSplit split : space_.seq_splits) slicings.emplace_back(k, split);
      }
      for (int m : space_.microbatches) {
        for (int v : chunk_values) {
          for (Checkpointing policy : space_.checkpointing) {
            for (double limit : limits) {
              for (const auto& [k, split] : slicings) {
                for (const ZeroStage zero : space_.zero) {
                  Candidate c{name, m, v, policy, limit, {}, k, split, zero};
                  report.ranked.push_back(space_.cuts.empty() ? Price(c, traits) : SearchPlacement(c, traits));
                  if (report.ranked.back().simulated) ++report.simulated;
                  report.layouts += report.ranked.back().layouts;
                  report.layouts_simulated += report.ranked.back().layouts_simulated;
                }
              }
            }
          }
        }
      }
    }
    Rank(report);
    report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return report;
  }

 private:
  void CheckSpace() const {
    if (space_.ranks < 1)
      throw ScheduleError(fmt::format("tune: the number of ranks must be at least 1, got {}", space_.ranks));
    if (!(options_.memory_bytes > 0.0) || !std::isfinite(options_.memory_bytes)) {
      throw ScheduleError(
          fmt::format("tune: the per-rank memory budget must be a number of bytes > 0, got {}", options_.memory_bytes));
    }
    if (space_.schedules.empty() || space_.microbatches.empty() || space_.checkpointing.empty() ||
        space_.slices.empty() || space_.seq_splits.empty() || space_.zero.empty()) {
      throw ScheduleError(
          "tune: the search space needs at least one schedule, microbatch count, policy, slice count, split and "
          "ZeRO stage");
    }
    for (int k : space_.slices) {
      if (k < 1) throw ScheduleError(fmt::format("tune: a slice count is at least 1, got {}", k));
    }
    for (const std::string& name : space_.schedules) TraitsOf(name);  // unknown names throw
    for (double limit : space_.memory_limits) {
      if (!(limit >= 0.0 || limit == kMemoryLimitFromBudget)) {
        throw ScheduleError(
            fmt::format("tune: a memory limit is 0 (the default), > 0 (M_B) or "
                        "kMemoryLimitFromBudget, got {}",
                        limit));
      }
    }
  }

  // One candidate, placed by the cost model.
  CandidateResult Price(const Candidate& c, const GeneratorTraits& traits) {
    if (c.microbatches < 1 || c.chunks < 1) return Refused(c, CannotRun(c));
    return Evaluate(c, traits, model_(c));
  }

  static CandidateResult Refused(const Candidate& c, std::string why) {
    CandidateResult r;
    r.candidate = c;
    r.why_not = std::move(why);
    return r;
  }
  static std::string CannotRun(const Candidate& c) {
    return fmt::format("{} microbatches and {} chunks cannot run", c.microbatches, c.chunks);
  }

  // Every placement of the candidate's ranks x chunks stages on the space's
  // cuts, in ascending order.
  std::vector<std::vector<int>> Placements(int stages) const {
    std::vector<std::vector<int>> out;
    const int n = static_cast<int>(space_.cuts.size()), k = stages - 1;
    if (k > n || k < 0) return out;
    std::vector<int> pick(static_cast<std::size_t>(k));
    for (int i = 0; i < k; ++i) pick[i] = i;
    while (true) {
      std::vector<int> bounds{0};
      for (int i : pick) bounds.push_back(space_.cuts[static_cast<std::size_t>(i)]);
      bounds.push_back(space_.layers);
      out.push_back(std::move(bounds));
      if (out.size() > space_.max_layouts) return out;
      int i = k - 1;
      while (i >= 0 && pick[i] == n - k + i) --i;
      if (i < 0) return out;
      ++pick[i];
      for (int j = i + 1; j < k; ++j) pick[j] = pick[j - 1] + 1;
    }
  }

  // No placement can be faster than its busiest rank's compute, nor than
  // the compute of each core pool spread over its cores.
  double LowerBound(const Candidate& c, Placement placement, const CandidateCosts& k) const {
    const int p = space_.ranks;
    std::vector<double> busy(static_cast<std::size_t>(p), 0.0);
    for (std::size_t s = 0; s < k.price.compute.stages.size(); ++s) {
      const Costs& cs = k.price.compute.stages[s];
      busy[StageRank(placement, static_cast<int>(s), p)] += c.microbatches * (cs.forward + cs.Backward());
    }
    double bound = *std::max_element(busy.begin(), busy.end());
    const CorePools& cores = k.price.cores;
    if (!cores.pool.empty()) {
      struct Pool {
        double work = 0, ranks = 0;
      };
      std::vector<Pool> pools(cores.pool_cores.size());
      for (int rank = 0; rank < p; ++rank) {
        Pool& pool = pools[static_cast<std::size_t>(cores.pool[rank])];
        pool.work += busy[rank];
        pool.ranks += 1;
      }
      for (std::size_t q = 0; q < pools.size(); ++q) {
        if (pools[q].ranks > 0) bound = std::max(bound, pools[q].work / std::min(pools[q].ranks, cores.pool_cores[q]));
      }
    }
    return bound * cores.Factor();
  }

  // The candidate at its fastest feasible placement (branch and bound on
  // LowerBound); none feasible: the placement needing the least memory.
  CandidateResult SearchPlacement(const Candidate& base, const GeneratorTraits& traits) {
    if (base.microbatches < 1 || base.chunks < 1) return Refused(base, CannotRun(base));
    const int stages = space_.ranks * base.chunks;
    std::vector<std::vector<int>> layouts = Placements(stages);
    if (layouts.empty()) {
      return Refused(base, fmt::format("{} top-level parts do not split into {} stages", space_.cuts.size() + 1, stages));
    }
    if (layouts.size() > space_.max_layouts) {
      return Refused(base,
                     fmt::format("more than {} placements of {} stages: too many to search", space_.max_layouts, stages));
    }
    struct Point {
      double bound;
      std::size_t index;
      CandidateCosts costs;
    };
    std::vector<Point> points;
    std::string invalid;
    for (std::size_t i = 0; i < layouts.size(); ++i) {
      Candidate c = base;
      c.bounds = layouts[i];
      CandidateCosts k = model_(c);
      if (!k.invalid.empty()) {
        if (invalid.empty()) invalid = k.invalid;
        continue;
      }
      CheckSizes(c, k, space_.ranks, stages);
      const double bound = LowerBound(c, traits.placement, k);
      points.push_back({bound, i, std::move(k)});
    }
    std::stable_sort(points.begin(), points.end(), [](const Point& a, const Point& b) { return a.bound < b.bound; });
    CandidateResult best, smallest;
    best.candidate = base;
    best.why_not = invalid.empty() ? "no placement could run" : invalid;
    std::size_t simulated = 0;
    for (Point& pt : points) {
      if (best.feasible && pt.bound >= best.step_time) break;
      Candidate c = base;
      c.bounds = layouts[pt.index];
      CandidateResult r = Evaluate(c, traits, std::move(pt.costs));
      if (!r.simulated) {
        if (!best.simulated) best.why_not = r.why_not;
        continue;
      }
      ++simulated;
      if (r.feasible && (!best.feasible || r.step_time < best.step_time)) best = r;
      if (!r.feasible && (!smallest.simulated || r.max_peak_bytes < smallest.max_peak_bytes)) smallest = r;
    }
    CandidateResult& out = best.feasible || !smallest.simulated ? best : smallest;
    out.layouts = layouts.size();
    out.layouts_simulated = simulated;
    return out;
  }

  CandidateResult Evaluate(const Candidate& c, const GeneratorTraits& traits, CandidateCosts k) {
    CandidateResult r;
    r.candidate = c;
    const int p = space_.ranks, stages = p * c.chunks;
    if (!k.invalid.empty()) {
      r.why_not = k.invalid;
      return r;
    }
    CheckSizes(c, k, p, stages);

    GenerateOptions g;
    g.chunks = c.chunks;
    g.slices = c.slices;
    g.memory_limit = c.memory_limit;
    if (c.memory_limit == kMemoryLimitFromBudget) {
      const std::optional<double> limit = LimitFromBudget(c, k, r);
      if (!limit) return r;
      g.memory_limit = *limit;
    }
    // The generator plans with what the simulator will charge: each action
    // on shared cores at the machine model's factor, and a whole message.
    for (const Costs& cs : k.price.compute.stages) g.stage_costs.push_back(Scaled(cs, k.price.cores.Factor()));
    g.comm = k.price.messages.Time();
    g.weight_memory_ratio = k.price.memory.weight_ratio;

    const Schedule* schedule = nullptr;
    std::optional<Schedule> own;
    try {
      if (traits.plans_with_costs) {
        own = Generate(c.schedule, p, c.microbatches, g);
        CheckStructure(*own);
        schedule = &*own;
      } else {
        const CachedSchedule& cached = Cached(c, g);
        if (!cached.schedule) {
          r.why_not = cached.error;
          return r;
        }
        schedule = &*cached.schedule;
      }
    } catch (const ScheduleError& e) {
      r.why_not = e.what();
      return r;
    }

    SimOptions o = std::move(k.price);
    o.record_timeline = false;
    // Sharded data parallel: its actions where the run places them, priced
    // at this candidate's costs.
    std::optional<Schedule> sharded;
    if (c.zero.has_actions()) {
      try {
        sharded = PlaceRunShardingActions(*schedule, c.zero);
      } catch (const ScheduleError& e) {
        r.why_not = e.what();
        return r;
      }
      schedule = &*sharded;
    }
    const SimResult sim = Simulate(*schedule, o);  // options out of range throw, naming the field

    r.simulated = true;
    r.step_time = sim.makespan;
    r.bubble_rate = sim.bubble_rate;
    r.peak_bytes.resize(p);
    for (int rank = 0; rank < p; ++rank) {
      const RankResult& rr = sim.per_rank[rank];
      const double statics = o.memory.rank_static_bytes[rank];
      double activations = rr.peak_memory_bytes - statics;  // the simulator's peak holds the static bytes
      if (k.ring_memory) {
        // Each stage's ring as deep as its peak; sliced, its slots a slice's,
        // and its sequences' key/value slots (and gradient slots) as many as
        // are live at once.
        activations = 0;
        const std::vector<double>& sequence_bytes = o.memory.stage_sequence_bytes;
        for (std::size_t i = 0; i < rr.stages.size(); ++i) {
          const auto s = static_cast<std::size_t>(rr.stages[i]);
          activations += rr.peak_in_flight[i] * o.memory.stage_bytes[s];
          if (!sequence_bytes.empty() && i < rr.peak_sequences.size()) {
            activations += (rr.peak_sequences[i] + rr.peak_backward_sequences[i]) * sequence_bytes[s];
          }
        }
      }
      if (c.zero.has_actions()) activations += WindowBytes(*schedule, rank, k.parameter_bytes, k.summed_at_end);
      r.peak_bytes[rank] = statics + activations;
      if (r.peak_bytes[rank] > r.max_peak_bytes) {
        r.max_peak_bytes = r.peak_bytes[rank];
        r.max_peak_rank = rank;
      }
    }
    r.feasible = r.max_peak_bytes <= options_.memory_bytes;
    if (!r.feasible) {
      const int worst = r.max_peak_rank;
      r.why_not = fmt::format("rank {} needs {} ({} static + {} activations{}), {} over the budget of {}", worst,
                              Bytes(r.max_peak_bytes), Bytes(o.memory.rank_static_bytes[worst]),
                              Bytes(r.max_peak_bytes - o.memory.rank_static_bytes[worst]), c.zero.has_actions() ? " and windows" : "",
                              Bytes(r.max_peak_bytes - options_.memory_bytes), Bytes(options_.memory_bytes));
    }
    return r;
  }

  // The generator memory limit (M_B) the budget leaves: on every rank, what
  // remains after its static bytes, in units of that rank's M_B (one
  // microbatch through all its stages); the smallest of these.
  std::optional<double> LimitFromBudget(const Candidate& c, const CandidateCosts& k, CandidateResult& r) const {
    const int p = space_.ranks;
    const Placement placement = TraitsOf(c.schedule).placement;
    std::vector<double> rank_bytes(p, 0.0);
    for (int s = 0; s < p * c.chunks; ++s) rank_bytes[StageRank(placement, s, p)] += k.price.memory.stage_bytes[s];
    double limit = std::numeric_limits<double>::infinity();
    for (int rank = 0; rank < p; ++rank) {
      const double statics = k.price.memory.rank_static_bytes[rank];
      const double room = options_.memory_bytes - statics;
      if (room <= 0.0) {
        r.why_not = fmt::format("rank {}'s static bytes ({}) alone fill the budget of {}", rank,
                                Bytes(statics), Bytes(options_.memory_bytes));
        return std::nullopt;
      }
      if (rank_bytes[rank] > 0.0) limit = std::min(limit, room / rank_bytes[rank]);
    }
    // Without activations any limit fits; the schedule's default is as good.
    return std::isfinite(limit) ? limit : 0.0;
  }

  const CachedSchedule& Cached(const Candidate& c, const GenerateOptions& g) {
    const auto key = std::make_tuple(c.schedule, c.microbatches, c.chunks, g.memory_limit, c.slices);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    CachedSchedule entry;
    try {
      entry.schedule = Generate(c.schedule, space_.ranks, c.microbatches, g);
      CheckStructure(*entry.schedule);
    } catch (const ScheduleError& e) {
      entry.schedule.reset();
      entry.error = e.what();
    }
    return cache_.emplace(key, std::move(entry)).first->second;
  }

  static void Rank(TuneReport& report) {
    auto& all = report.ranked;
    auto key = [](const CandidateResult& r) {
      return std::make_tuple(r.candidate.schedule, r.candidate.microbatches, r.candidate.chunks,
                             EnumName(r.candidate.checkpointing), r.candidate.memory_limit, r.candidate.slices,
                             EnumName(r.candidate.seq_split));
    };
    // Stable: the ones that could not run keep their search order.
    std::stable_sort(all.begin(), all.end(), [&](const CandidateResult& a, const CandidateResult& b) {
      auto group = [](const CandidateResult& r) { return r.feasible ? 0 : r.simulated ? 1 : 2; };
      if (group(a) != group(b)) return group(a) < group(b);
      if (group(a) == 0) {
        if (a.step_time != b.step_time) return a.step_time < b.step_time;
        if (a.max_peak_bytes != b.max_peak_bytes) return a.max_peak_bytes < b.max_peak_bytes;
        return key(a) < key(b);
      }
      if (group(a) == 1) {
        if (a.max_peak_bytes != b.max_peak_bytes) return a.max_peak_bytes < b.max_peak_bytes;
        if (a.step_time != b.step_time) return a.step_time < b.step_time;
        return key(a) < key(b);
      }
      return false;
    });
    report.feasible = static_cast<std::size_t>(
        std::count_if(all.begin(), all.end(), [](const CandidateResult& r) { return r.feasible; }));
    if (report.feasible == 0 && report.simulated > 0) report.smallest = all.front();  // least memory first
  }

  const TuneSpace& space_;
  const CostModel& model_;
  const TuneOptions& options_;
  std::map<std::tuple<std::string, int, int, double, int>, CachedSchedule> cache_;
};

}  // namespace

TuneReport Tune(const TuneSpace& space, const CostModel& model, const TuneOptions& options) {
  return Tuner(space, model, options).Run();
}

}  // namespace baton
