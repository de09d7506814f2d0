// zb_auto: the zero-bubble authors' automatic schedule under a memory limit
// ("Zero Bubble Pipeline Parallelism", Qi et al., ICLR 2024, section 3.1),
// ported from the heuristic of their repository
// (sail-sg/zero-bubble-pipeline-parallelism, Graph.manual_order and
// initial_solution in auto_schedule.py / zerobubble/scheduler/zb.py).
//
// One stage per rank. The heuristic places F, B (here I: the input
// gradient) and W one at a time while keeping each stage's clock: a stage's
// action starts when the stage is free and its input has arrived `comm`
// after the producer ended, which is exactly baton's simulator, so the
// times it plans with are the times Simulate() reports.
//   - Warm-up: as many F's as the memory limit allows, stopping once one
//     more would start after the first B could (or, with
//     allow_bubble_before_first_b, would end after it).
//   - Then one F and one B per round, stage 0 first for F's and the last
//     stage first for B's. A W fills a wait when it fits in it, or when the
//     wait would grow the largest cumulative bubble of any stage; W's also
//     run whenever the memory limit would be crossed.
//   - prioritize_b lets a stage two or more F's ahead of the next skip an F
//     when that costs no bubble; no_bubble_greedy places W's into waits
//     smaller than a W.
// The three switches are tried in all eight settings and the schedule with
// the shortest longest stage (first F's start to last W's end) is kept, the
// first of equals in the authors' order.
//
// Memory in units of M_B: F adds 1, I frees 1 - r, W frees r (r = M_W/M_B).
// Where the authors' code stops with "Cannot fit memory" in one setting,
// that setting is skipped; if all eight stop, the limit is refused.
#include <algorithm>
#include <array>
#include <limits>
#include <optional>
#include <vector>

#include "baton/schedule.h"
#include "generator_util.h"

namespace baton {

using namespace generators;

namespace {

constexpr double kMemoryTolerance = 1e-9;  // memory sums of fractions of M_B

struct Problem {
  int stages = 0;
  int microbatches = 0;
  // Per type (0 = F, 1 = B (I), 2 = W), per stage.
  std::array<std::vector<double>, 3> cost;
  std::array<std::vector<double>, 3> memory;
  std::vector<double> memory_limit;
  double comm = 0.0;
};

struct Plan {
  std::vector<std::vector<Action>> order;  // per stage
  double longest = 0.0;                    // longest stage: first F's start to last W's end
};

class ManualOrder {
 public:
  ManualOrder(const Problem& g, bool allow_bubble_before_first_b, bool prioritize_b, bool no_bubble_greedy)
      : g_(g),
        allow_bubble_before_first_b_(allow_bubble_before_first_b),
        prioritize_b_(prioritize_b),
        no_bubble_greedy_(no_bubble_greedy),
        S_(g.stages),
        M_(g.microbatches),
        f_(S_, 0),
        b_(S_, 0),
        w_(S_, 0),
        mem_(S_, 0.0),
        end_(S_, 0.0),
        bubble_(S_, 0.0),
        t_(3 * static_cast<std::size_t>(S_) * M_, 0.0),
        order_(S_) {
    for (auto& row : order_) row.reserve(3 * static_cast<std::size_t>(M_));
  }

  // The plan, or nothing where the memory limit cannot be kept.
  std::optional<Plan> Run() {
    for (int i = 0; i < M_; ++i) {
      if (i == 0) {
        WarmUp();
        continue;
      }
      if (!Round(i)) return std::nullopt;
    }
    for (int j = 0; j < S_; ++j) {
      while (w_[j] < M_) Put(j, 2);
    }
    Plan plan;
    for (int j = 0; j < S_; ++j) {
      plan.longest = std::max(plan.longest, T(2, j, M_ - 1) - T(0, j, 0) + Cost(0, j));
    }
    plan.order = std::move(order_);
    return plan;
  }

 private:
  double Cost(int type, int stage) const { return g_.cost[type][stage]; }
  double Mem(int type, int stage) const { return g_.memory[type][stage]; }
  double Limit(int stage) const { return g_.memory_limit[stage]; }
  bool Exceeds(double memory, int stage) const { return memory > Limit(stage) + kMemoryTolerance; }
  std::size_t Id(int type, int stage, int mb) const { return (static_cast<std::size_t>(type) * S_ + stage) * M_ + mb; }
  // End time of an action already placed (0 for one not placed, as in the
  // authors' code; the order of placement never asks for one).
  double T(int type, int stage, int mb) const { return mb < M_ ? t_[Id(type, stage, mb)] : 0.0; }
  double MaxBubble() const { return *std::max_element(bubble_.begin(), bubble_.end()); }

  // Places the next action of `type` on stage j and advances its clock.
  void Put(int j, int type) {
    int& counter = type == 0 ? f_[j] : type == 1 ? b_[j] : w_[j];
    const int mb = counter;
    const double cost = Cost(type, j);
    double end = end_[j] + cost;
    const double no_bubble = end;
    if (j > 0 && type == 0) end = std::max(end, T(0, j - 1, mb) + g_.comm + cost);
    if (j < S_ - 1 && type == 1) end = std::max(end, T(1, j + 1, mb) + g_.comm + cost);
    if (f_[j] > 0) bubble_[j] += end - no_bubble;
    end_[j] = end;
    t_[Id(type, j, mb)] = end;
    mem_[j] += Mem(type, j);
    ++counter;
    static constexpr ActionKind kKinds[3] = {ActionKind::kForward, ActionKind::kBackwardInput,
                                             ActionKind::kBackwardWeight};
    order_[j].push_back({j, kKinds[type], mb});
  }

  // Microbatch 0 down and back up, with as many extra F's in front of its B
  // on each stage as fit in memory and do not delay that B.
  void WarmUp() {
    for (int j = 0; j < S_; ++j) Put(j, 0);
    std::vector<int> extra(S_, 0);
    double last = 0.0;  // when the B of microbatch 0 ends on the stage after j
    for (int j = S_ - 1; j >= 0; --j) {
      if (j == S_ - 1) {
        last = T(0, j, 0) + Cost(1, j);
        continue;
      }
      double mem = mem_[j];
      double clock = end_[j];
      while (f_[j] + extra[j] < M_ && !Exceeds(mem + Mem(0, j), j)) {
        if (allow_bubble_before_first_b_ ? clock + Cost(0, j) > last + g_.comm : clock >= last + g_.comm) break;
        mem += Mem(0, j);
        clock += Cost(0, j);
        ++extra[j];
      }
      last = std::max(clock, last + g_.comm) + Cost(1, j);
    }
    // Each stage keeps fewer extra F's than the one before it.
    for (int j = 1; j < S_; ++j) {
      while (extra[j] > 0 && extra[j] >= extra[j - 1] && f_[j] + extra[j] < M_) --extra[j];
    }
    for (int j = 0; j < S_; ++j) {
      for (int k = 0; k < extra[j]; ++k) Put(j, 0);
    }
    for (int j = S_ - 1; j >= 0; --j) Put(j, 1);
  }

  // Places W's on stage j while there is memory to recycle; false when the
  // limit cannot be kept.
  bool MakeRoom(int j, int type) {
    while (Exceeds(mem_[j] + Mem(type, j), j)) {
      if (w_[j] >= b_[j]) return false;
      Put(j, 2);
    }
    return true;
  }

  // W's into the wait for an input arriving at `arrival` on stage j.
  void FillWait(int j, double arrival) {
    while (w_[j] < b_[j] && end_[j] + Cost(2, j) <= arrival) Put(j, 2);
    if (w_[j] < b_[j] && end_[j] < arrival) {
      // A wait shorter than a W: take it if the wait would otherwise grow
      // the largest cumulative bubble (or, greedily, anyway).
      if (arrival - end_[j] <= MaxBubble() - bubble_[j]) {
        if (no_bubble_greedy_) Put(j, 2);
      } else {
        Put(j, 2);
      }
    }
  }

  // Round i >= 1: the F's that stages can run, then B (I) of microbatch i.
  bool Round(int i) {
    std::vector<int> want(S_, 0);
    for (int j = 0; j < S_; ++j) {
      if (f_[j] >= M_) continue;
      if (j + 1 < S_ && f_[j] >= f_[j + 1] + 2 && prioritize_b_) {
        const double next_plus_fw = end_[j + 1] + Cost(0, j + 1) + Cost(1, j + 1) + g_.comm;
        if (end_[j] >= next_plus_fw) continue;
        double w_cost = 0.0, mem_with_w = mem_[j] + Mem(0, j);
        int w_count = 0;
        while (Exceeds(mem_with_w, j) && w_[j] + w_count < b_[j]) {
          w_cost += Cost(2, j);
          mem_with_w += Mem(2, j);
          ++w_count;
        }
        if (end_[j] + Cost(0, j) + w_cost <= next_plus_fw) {
          want[j] = 1;
          continue;
        }
        if (next_plus_fw - end_[j] <= MaxBubble() - bubble_[j]) continue;
      }
      want[j] = 1;
    }
    // A stage runs an F only if every later stage does.
    for (int j = S_ - 2; j >= 0; --j) want[j] = std::min(want[j], want[j + 1]);
    for (int j = 0; j < S_; ++j) {
      if (want[j] == 0) continue;
      if (!MakeRoom(j, 0)) return false;
      if (j > 0) FillWait(j, T(0, j - 1, f_[j]) + g_.comm);
      Put(j, 0);
    }
    for (int j = S_ - 1; j >= 0; --j) {
      if (!MakeRoom(j, 1)) return false;
      if (j + 1 < S_) FillWait(j, T(1, j + 1, i) + g_.comm);
      if (j == 0 && f_[j] == M_) {
        while (w_[j] < b_[j]) Put(j, 2);
      }
      Put(j, 1);
    }
    return true;
  }

  const Problem& g_;
  const bool allow_bubble_before_first_b_, prioritize_b_, no_bubble_greedy_;
  const int S_, M_;
  std::vector<int> f_, b_, w_;  // per stage: next microbatch of each type
  std::vector<double> mem_;     // per stage: activation memory held, M_B
  std::vector<double> end_;     // per stage: when its last placed action ends
  std::vector<double> bubble_;  // per stage: idle time after its first F
  std::vector<double> t_;       // (type, stage, mb) -> end time
  std::vector<std::vector<Action>> order_;
};

}  // namespace

Schedule GenerateZbAuto(int p, int m, const GenerateOptions& o) {
  constexpr std::string_view kName = "zb_auto";
  const int v = o.chunks == 0 ? 1 : o.chunks;
  CheckCommon(kName, p, m, v);
  Require(v == 1, kName, "zb_auto places one stage per rank (chunks must be 1)", v);
  const double limit = o.memory_limit > 0.0 ? o.memory_limit : p;
  Require(limit >= 1.0, kName,
          "the memory limit must be at least 1 M_B (one microbatch's activations), as ZB-1p is p and ZB-2p 2p", limit);
  Require(o.weight_memory_ratio >= 0.0 && o.weight_memory_ratio <= 1.0, kName,
          "the weight-memory ratio M_W/M_B must be in [0, 1]", o.weight_memory_ratio);
  Require(o.stage_costs.empty() || static_cast<int>(o.stage_costs.size()) == p, kName,
          fmt::format("needs one cost per stage ({}) or none", p), o.stage_costs.size());
  Require(o.comm >= 0.0, kName, "the communication time must be >= 0", o.comm);

  Problem g;
  g.stages = p;
  g.microbatches = m;
  g.comm = o.comm;
  for (int j = 0; j < p; ++j) {
    const Costs& c = o.stage_costs.empty() ? o.costs : o.stage_costs[j];
    Require(c.forward >= 0.0 && c.backward_input >= 0.0 && c.backward_weight >= 0.0, kName,
            fmt::format("costs must be >= 0 (stage {})", j),
            fmt::format("{}, {}, {}", c.forward, c.backward_input, c.backward_weight));
    g.cost[0].push_back(c.forward);
    g.cost[1].push_back(c.backward_input);
    g.cost[2].push_back(c.backward_weight);
    g.memory[0].push_back(1.0);
    g.memory[1].push_back(-(1.0 - o.weight_memory_ratio));
    g.memory[2].push_back(-o.weight_memory_ratio);
    g.memory_limit.push_back(limit);
  }

  std::optional<Plan> best;
  for (bool allow_bubble_before_first_b : {true, false}) {
    for (bool prioritize_b : {true, false}) {
      for (bool no_bubble_greedy : {true, false}) {
        std::optional<Plan> plan = ManualOrder(g, allow_bubble_before_first_b, prioritize_b, no_bubble_greedy).Run();
        if (plan && (!best || plan->longest < best->longest)) best = std::move(plan);
      }
    }
  }
  if (!best) {
    throw ScheduleError(fmt::format(
        "zb_auto: no schedule keeps every rank within the memory limit of {} M_B with {} ranks and {} microbatches "
        "(the search places W's to free memory and still runs out); raise the limit (got {})",
        limit, p, m, limit));
  }
  Schedule s = Empty(std::string(kName), p, m, 1, Placement::kLoop);
  s.actions = std::move(best->order);
  return s;
}

}  // namespace baton
