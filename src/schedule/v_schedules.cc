// V-shaped schedules from "Pipeline Parallelism with Controllable Memory"
// (Qi, Wan, Amar, Lin, NeurIPS 2024), ported from the authors' code in
// sail-sg/zero-bubble-pipeline-parallelism (zerobubble/scheduler/
// zbv_greedy.py for V-Min and V-Half, zbv.py for V-ZB).
//
// All three place 2 chunks per rank on the V: rank i holds stage i (chunk 0)
// and stage 2p-1-i (chunk 1). Per rank there are six kinds of action,
// numbered as in the authors' code:
//   0  F of chunk 0        2  I of chunk 1        4  W of chunk 1
//   1  F of chunk 1        3  I of chunk 0        5  W of chunk 0
// (the backward runs the V the other way, so its "first" chunk is chunk 1).
//
// V-Min and V-Half repeat a building block every 6 time slots: each rank
// starts microbatch k's four F/I actions at fixed offsets in the block. The
// offsets set how long a microbatch's activations live, so the peak memory:
// about a third (V-Min) or a half (V-Half) of 1F1B's. Slots are then
// squeezed by the authors' greedy pass (each action moved to the earliest
// free slot that keeps its dependencies and does not raise the stage's
// peak memory), once with W's placed and once without, and the W's finally
// fill the free slots.
#include <algorithm>
#include <array>
#include <cmath>
#include <deque>
#include <functional>
#include <limits>
#include <optional>
#include <tuple>
#include <vector>

#include "baton/schedule.h"
#include "generator_util.h"

namespace baton {

using namespace generators;

namespace {

// ---- V-Min and V-Half: building blocks, squeezed ----

using Times = std::vector<long long>;      // per microbatch: the action's slot
using StageSlots = std::vector<Times>;     // per kind (4, 5 or 6 kinds)
using AllSlots = std::vector<StageSlots>;  // per rank

constexpr long long kNever = std::numeric_limits<long long>::max();

// The authors' building blocks: for rank i of n, the slot of microbatch 0's
// four F/I actions (kinds 0-3); microbatch k's are 6k later.
std::vector<std::array<long long, 4>> PatternVMin(int n) {
  const long long gap = n % 3 == 0 ? 2 : 0;
  std::vector<std::array<long long, 4>> pattern;
  for (long long i = 0; i < n; ++i) pattern.push_back({i, 2 * n - i - 1, 2 * n + gap + i, 4 * n + gap - i - 1});
  return pattern;
}
std::vector<std::array<long long, 4>> PatternVHalf(int n) {
  const long long gap = n % 2 == 0 ? 3 : 0;
  std::vector<std::array<long long, 4>> pattern;
  for (long long i = 0; i < n; ++i) {
    pattern.push_back({2 * i, 3 * n - i - 2, 3 * n + gap + 2 * i - 1, 6 * n + gap - i - 2});
  }
  return pattern;
}

// The kind whose next action comes first, in the order of the authors'
// min() over (slot, kind): the earliest slot, the lowest kind on a tie.
// `next[k]` is the index of kind k's next action. Returns -1 when all done.
int NextKind(const StageSlots& s, const std::vector<std::size_t>& next, int kinds) {
  int best = -1;
  long long best_time = kNever;
  for (int k = 0; k < kinds; ++k) {
    if (next[k] >= s[k].size()) continue;
    if (s[k][next[k]] < best_time) {
      best_time = s[k][next[k]];
      best = k;
    }
  }
  return best;
}

long long LastSlot(const StageSlots& s) {
  long long last = 0;
  for (const Times& t : s) {
    if (!t.empty()) last = std::max(last, *std::max_element(t.begin(), t.end()));
  }
  return last;
}

// put_w: W's into the free slots after their I's, one per free slot, first
// come first served; `split` keeps the two chunks' W's apart (kinds 4, 5),
// otherwise all W's are kind 4.
void PutW(StageSlots& s, bool split) {
  const long long bound = LastSlot(s);
  s.resize(split ? 6 : 5);
  std::vector<std::size_t> next(4, 0);
  int pending[2] = {0, 0};
  long long i = 0;
  for (; i <= bound; ++i) {
    const int k = NextKind(s, next, 4);
    if (k >= 0 && s[k][next[k]] == i) {
      ++next[k];
      if (k >= 2) ++pending[split ? k - 2 : 0];
    } else {
      for (int w = 0; w < 2; ++w) {
        if (pending[w] > 0) {
          s[4 + w].push_back(i);
          --pending[w];
          break;
        }
      }
    }
  }
  --i;
  for (int w = 0; w < 2; ++w) {
    while (pending[w] > 0) {
      s[4 + w].push_back(++i);
      --pending[w];
    }
  }
}

// mem_of_stage: the stage's peak, in the authors' units (an F holds one
// unit until its W frees it). Without W's placed, one W is assumed to run
// in each free slot.
long long PeakMemory(const StageSlots& s) {
  static constexpr long long kMemory[5] = {1, 1, 0, 0, -1};
  const bool has_w = s.size() > 4;
  const long long bound = LastSlot(s);
  const int kinds = static_cast<int>(s.size());
  std::vector<std::size_t> next(kinds, 0);
  long long current = 0, peak = 0, pending = 0;
  for (long long i = 0; i <= bound; ++i) {
    const int k = NextKind(s, next, kinds);
    if (k >= 0 && s[k][next[k]] == i) {
      ++next[k];
      current += kMemory[k];
      if (k == 2 || k == 3) ++pending;
    } else if (!has_w && pending > 0) {
      current += kMemory[4];
      --pending;
    }
    peak = std::max(peak, current);
  }
  return peak;
}

// The authors' global order: over all ranks and kinds, the next action with
// the smallest (slot, rank, kind, microbatch). A heap of each (rank, kind)'s
// next action gives the same order as their scan of all of them: the squeeze
// moves an action only after taking it, so the queued slots never change.
struct Item {
  int rank = -1, kind = -1, mb = -1;
};
class GlobalOrder {
 public:
  GlobalOrder(const AllSlots& slots, int kinds) : slots_(slots) {
    for (int r = 0; r < static_cast<int>(slots.size()); ++r) {
      for (int k = 0; k < kinds; ++k) Push(r, k, 0);
    }
  }
  Item Pop() {
    if (heap_.empty()) throw ScheduleError("v schedule: internal error: the slot table ran out early");
    std::pop_heap(heap_.begin(), heap_.end(), std::greater<>());
    const auto [time, rank, kind, mb] = heap_.back();
    heap_.pop_back();
    Push(rank, kind, mb + 1);
    return {rank, kind, mb};
  }

 private:
  void Push(int rank, int kind, int mb) {
    if (mb >= static_cast<int>(slots_[rank][kind].size())) return;
    heap_.emplace_back(slots_[rank][kind][mb], rank, kind, mb);
    std::push_heap(heap_.begin(), heap_.end(), std::greater<>());
  }

  const AllSlots& slots_;
  std::vector<std::tuple<long long, int, int, int>> heap_;  // (slot, rank, kind, microbatch)
};

std::size_t TotalActions(const AllSlots& slots) {
  std::size_t n = 0;
  for (const Times& t : slots[0]) n += t.size();
  return n * slots.size();
}

// eager_execution_time with unit costs and no communication: every action
// as early as its dependencies and its rank's previous action allow, taken
// in the global order. Returns each action's new (start) slot, and each
// rank's order.
AllSlots Eager(const AllSlots& slots, std::vector<std::vector<Item>>* rank_order = nullptr) {
  const int n = static_cast<int>(slots.size());
  const int kinds = static_cast<int>(slots[0].size());
  AllSlots end(n, StageSlots(kinds));
  for (int r = 0; r < n; ++r) {
    for (int k = 0; k < kinds; ++k) end[r][k].assign(slots[r][k].size(), -1);
  }
  std::vector<Item> last(n);
  if (rank_order) rank_order->assign(n, {});
  GlobalOrder order(slots, kinds);
  auto done = [&](int r, int k, int mb) {
    const long long t = end[r][k][mb];
    if (t < 0) throw ScheduleError("v schedule: internal error: an action ran before its dependency");
    return t;
  };
  for (std::size_t count = TotalActions(slots); count > 0; --count) {
    const Item it = order.Pop();
    long long ready = 0;
    if ((it.kind == 0 || it.kind == 2) && it.rank > 0) ready = std::max(ready, done(it.rank - 1, it.kind, it.mb));
    if ((it.kind == 1 || it.kind == 3) && it.rank + 1 < n) ready = std::max(ready, done(it.rank + 1, it.kind, it.mb));
    if (it.kind > 0 && it.kind < 4) ready = std::max(ready, done(it.rank, it.kind - 1, it.mb));
    if (it.mb > 0) ready = std::max(ready, done(it.rank, it.kind, it.mb - 1));
    if (last[it.rank].rank >= 0) ready = std::max(ready, done(it.rank, last[it.rank].kind, last[it.rank].mb));
    end[it.rank][it.kind][it.mb] = ready + 1;
    last[it.rank] = it;
    if (rank_order) (*rank_order)[it.rank].push_back(it);
  }
  for (auto& stage : end) {
    for (Times& t : stage) {
      for (long long& x : t) x -= 1;  // start = end - cost
    }
  }
  return end;
}

// reorder ("squeeze" in the paper): outside the steady phase, each action
// moves to the earliest free slot after its dependencies that does not
// raise the rank's peak memory above the starting peak.
AllSlots Squeeze(AllSlots slots, bool consider_w) {
  int kinds = 4;
  if (consider_w) {
    for (StageSlots& s : slots) PutW(s, /*split=*/false);
    kinds = 5;
  }
  const int n = static_cast<int>(slots.size());
  long long peak = 0;
  for (const StageSlots& s : slots) peak = std::max(peak, PeakMemory(s));
  std::vector<std::vector<char>> occupied(n);
  for (int r = 0; r < n; ++r) occupied[r].assign(static_cast<std::size_t>(LastSlot(slots[r])) + 1, 0);
  const int last_mb = static_cast<int>(slots[0][0].size()) - 1;

  int phase = 0;  // 0: warm-up, 1: steady (kept as is), 2: cool-down
  GlobalOrder order(slots, kinds);
  for (std::size_t count = TotalActions(slots); count > 0; --count) {
    const Item it = order.Pop();
    long long& slot = slots[it.rank][it.kind][it.mb];
    if (it.kind == 3 && it.rank == 0 && phase == 0) phase = 1;
    if (phase == 1) {
      if (it.kind == 0 && it.mb == last_mb) phase = 2;
      occupied[it.rank][slot] = 1;
      continue;
    }
    if (phase == 0 && !consider_w) {
      occupied[it.rank][slot] = 1;
      continue;
    }
    long long earliest = -1;
    const StageSlots& s = slots[it.rank];
    if ((it.kind == 0 || it.kind == 2) && it.rank > 0)
      earliest = std::max(earliest, slots[it.rank - 1][it.kind][it.mb]);
    if ((it.kind == 1 || it.kind == 3) && it.rank + 1 < n) {
      earliest = std::max(earliest, slots[it.rank + 1][it.kind][it.mb]);
    }
    if (it.kind > 0 && it.kind < 4) earliest = std::max(earliest, s[it.kind - 1][it.mb]);
    if (it.kind == 4) {  // the it.mb-th I of either chunk
      Times both = s[2];
      both.insert(both.end(), s[3].begin(), s[3].end());
      std::nth_element(both.begin(), both.begin() + it.mb, both.end());
      earliest = std::max(earliest, both[it.mb]);
    }
    if (it.mb > 0) earliest = std::max(earliest, s[it.kind][it.mb - 1]);
    ++earliest;
    const long long original = slot;
    if (earliest > original) throw ScheduleError("v schedule: internal error: a building block breaks a dependency");
    bool moved = false;
    for (long long t = earliest; t < original; ++t) {
      if (occupied[it.rank][t]) continue;
      slot = t;
      if (PeakMemory(slots[it.rank]) <= peak) {
        moved = true;
        break;
      }
    }
    if (!moved) slot = original;
    occupied[it.rank][slot] = 1;
  }
  if (!consider_w) {
    for (StageSlots& s : slots) PutW(s, /*split=*/false);
  }
  return Eager(slots);
}

Schedule FromPattern(std::string name, int p, int m, const std::vector<std::array<long long, 4>>& pattern) {
  AllSlots slots(p, StageSlots(4));
  for (int r = 0; r < p; ++r) {
    for (int k = 0; k < 4; ++k) {
      for (int mb = 0; mb < m; ++mb) slots[r][k].push_back(pattern[r][k] + 6LL * mb);
    }
  }
  auto drop_w = [](AllSlots s) {
    for (StageSlots& stage : s) stage.resize(4);
    return s;
  };
  AllSlots squeezed = drop_w(Squeeze(drop_w(Squeeze(slots, /*consider_w=*/true)), /*consider_w=*/false));
  for (StageSlots& s : squeezed) PutW(s, /*split=*/true);
  std::vector<std::vector<Item>> order;
  Eager(squeezed, &order);

  Schedule s = Empty(std::move(name), p, m, 2, Placement::kV);
  for (int r = 0; r < p; ++r) {
    const int down = r, up = 2 * p - 1 - r;
    for (const Item& it : order[r]) {
      switch (it.kind) {
        case 0:
          s.actions[r].push_back(F(down, it.mb));
          break;
        case 1:
          s.actions[r].push_back(F(up, it.mb));
          break;
        case 2:
          s.actions[r].push_back(I(up, it.mb));
          break;
        case 3:
          s.actions[r].push_back(I(down, it.mb));
          break;
        case 4:
          s.actions[r].push_back(W(up, it.mb));
          break;
        default:
          s.actions[r].push_back(W(down, it.mb));
          break;
      }
    }
  }
  return s;
}

// ---- V-ZB: the zero-bubble V search ----

// try_v_schedule and create_schedule of the authors' zbv.py: places F's,
// I's and W's rank by rank with each rank's clock, keeping memory under the
// limit and filling waits with W's, like zb_auto does on one chunk.
class VZbSearch {
 public:
  struct Params {
    int stages = 0, microbatches = 0;
    double cost[3] = {1, 1, 1};  // F, I, W of one chunk
    double comm = 0.0;
    double memory[3] = {0, 0, 0};  // F, I, W of one chunk, M_B
    double limit = 0.0;
  };
  struct Result {
    std::vector<std::vector<Action>> order;
    double max_bubble = 0.0;
  };

  explicit VZbSearch(const Params& g) : g_(g), S_(g.stages), M_(g.microbatches) {}

  // The best of the four settings of fill_b and fill_f, or nothing if the
  // memory limit cannot be kept.
  std::optional<Result> Run() {
    std::optional<Result> best;
    for (bool fill_b : {true, false}) {
      for (bool fill_f : {true, false}) {
        std::optional<Result> r = Try(fill_f, fill_b, {});
        if (r && (!best || r->max_bubble < best->max_bubble)) best = std::move(r);
      }
    }
    return best;
  }

 private:
  struct NoRoom {};  // the memory limit cannot be kept

  std::size_t Id(int cat, int chunk, int stage, int mb) const {
    return ((static_cast<std::size_t>(cat) * 2 + chunk) * S_ + stage) * M_ + mb;
  }

  std::optional<Result> Try(bool fill_f, bool fill_b, const std::vector<double>& approved) {
    try {
      Result r = Attempt(fill_f, fill_b, approved);
      // Retrying with this attempt's bubbles as the allowance can only be
      // kept if it is strictly better, so this ends.
      const double max_approved = approved.empty() ? -1.0 : *std::max_element(approved.begin(), approved.end());
      if (max_approved < 0 || r.max_bubble < max_approved) {
        std::optional<Result> again = Try(fill_f, fill_b, bubble_);
        if (again && again->max_bubble < r.max_bubble) return again;
      }
      return r;
    } catch (const NoRoom&) {
      return std::nullopt;
    }
  }

  // One pass of the authors' greedy placement under the allowance
  // `approved_in` (per stage; empty: none yet): the warm-up, then rounds of
  // backwards and forwards, W's filling where a stage would otherwise wait.
  Result Attempt(bool fill_f, bool fill_b, const std::vector<double>& approved_in) {
    Reset(approved_in);
    WarmUp();
    for (int round = 0; round < 2 * M_; ++round) {
      for (int i = 0; i < S_; ++i) {
        while (mem_[i] + g_.memory[1] > g_.limit + kTolerance) PutW(i);
      }
      PlaceBackwards(fill_b);
      PlaceForwards(fill_f);
    }
    for (int i = 0; i < S_; ++i) {
      while (!pending_w_[i].empty()) PutW(i);
    }
    Result r;
    r.max_bubble = MaxStageBubble(-1);
    r.order = order_;
    return r;
  }

  void Reset(const std::vector<double>& approved_in) {
    approved_ = approved_in.empty() ? std::vector<double>(S_, -1.0) : approved_in;
    max_approved_ = *std::max_element(approved_.begin(), approved_.end());
    count_.assign(S_, std::array<int, 6>{});
    end_.assign(6 * static_cast<std::size_t>(S_) * M_, -1.0);
    clock_.assign(S_, 0.0);
    mem_.assign(S_, 0.0);
    bubble_.assign(S_, 0.0);
    pending_w_.assign(S_, {});
    order_.assign(S_, {});
  }

  double MaxStageBubble(int stage) const {
    double b = *std::max_element(bubble_.begin(), bubble_.end());
    if (stage >= 0) b = std::max(b, max_approved_ - approved_[stage]);
    return b;
  }
  // The authors index end_time[-1] (the last entry) where no producer
  // exists; kept so the choices match theirs.
  double EndOrLast(long long id) const { return id >= 0 ? end_[id] : end_.back(); }

  // Before a stage's unit that waits for `from`: W's while they fit before
  // it arrives, and one more where the wait would exceed the stage's share
  // of the bubble and `fill` allows.
  void FillWaitWithW(int i, long long from, bool fill) {
    const double w_cost = g_.cost[2];
    while (!pending_w_[i].empty() && from >= 0 && end_[from] + g_.comm >= clock_[i] + w_cost) PutW(i);
    if (!pending_w_[i].empty() && EndOrLast(from) + g_.comm - clock_[i] > MaxStageBubble(i) - bubble_[i]) {
      if (fill) PutW(i);
    }
  }

  // The forwards of chunk 0 down the V, chunk 1's first back up as memory
  // and arrivals allow, then each stage's forwards until it has as many as
  // the one before it.
  void WarmUp() {
    const double f_mem = g_.memory[0];
    for (int i = 0; i < S_; ++i) Put(0, 0, i);
    for (int i = S_ - 1; i >= 0; --i) {
      if (i == S_ - 1) {
        Put(0, 1, i);
        continue;
      }
      const double arrival = end_[Id(0, 1, i + 1, 0)] + g_.comm;
      while (mem_[i] + f_mem * (2 + i * 2) <= g_.limit + kTolerance && clock_[i] + g_.cost[0] <= arrival &&
             count_[i][0] < M_) {
        for (int j = 0; j <= i; ++j) Put(0, 0, j);
      }
      Put(0, 1, i);
    }
    int chunk = 0;
    for (int i = 1; i < S_; ++i) {
      while (count_[i][0] + count_[i][1] < count_[i - 1][0] + count_[i - 1][1] ||
             (count_[i][1] <= count_[i - 1][1] && count_[i - 1][1] < M_)) {
        for (int j = S_ - 1; j >= i; --j) {
          if (count_[j][chunk] < M_) Put(0, chunk, j);
        }
        chunk = 1 - chunk;
      }
    }
  }

  // A round's backwards: chunk 1's (where their input gradient has come)
  // from the bottom of the V up, then chunk 0's.
  void PlaceBackwards(bool fill_b) {
    std::vector<int> b0, b1;
    for (int i = 0; i < S_; ++i) {
      if (count_[i][3] >= count_[i][2]) {
        b0.push_back(i);
      } else if (i == S_ - 1) {
        b1.push_back(i);
      } else if (end_[Id(1, 1, i + 1, count_[i][3])] >= 0 || count_[i][2] >= M_) {
        b1.push_back(i);
      } else {
        b0.push_back(i);
      }
    }
    std::vector<std::pair<int, int>> backwards;  // (rank, chunk)
    for (auto it = b1.rbegin(); it != b1.rend(); ++it) backwards.push_back({*it, 1});
    for (int i : b0) backwards.push_back({i, 0});
    for (const auto& [i, c] : backwards) {
      long long from = -1;
      if (c == 1 && i < S_ - 1) from = static_cast<long long>(Id(1, 1, i + 1, count_[i][3]));
      if (c == 0 && i > 0) from = static_cast<long long>(Id(1, 0, i - 1, count_[i][2]));
      FillWaitWithW(i, from, c == 1 || fill_b);
      Put(1, c, i);
    }
  }

  // A round's forwards: on each stage, the chunk whose input is there.
  void PlaceForwards(bool fill_f) {
    const double f_mem = g_.memory[0];
    for (int i = 0; i < S_; ++i) {
      if (count_[i][1] >= M_) continue;
      int item = -1;
      if (count_[i][1] >= count_[i][0]) {
        item = 0;
      } else if (i == S_ - 1) {
        item = 1;
      } else if (end_[Id(0, 1, i + 1, count_[i][1])] >= 0) {
        item = 1;
      } else if (count_[i][0] < M_) {
        if (i == 0 || end_[Id(0, 0, i - 1, count_[i][0])] >= 0) item = 0;
      }
      if (item < 0) continue;
      while (mem_[i] + f_mem > g_.limit + kTolerance) PutW(i);
      long long from = -1;
      if (item == 0 && i > 0) from = static_cast<long long>(Id(0, 0, i - 1, count_[i][0]));
      if (item == 1 && i < S_ - 1) from = static_cast<long long>(Id(0, 1, i + 1, count_[i][1]));
      FillWaitWithW(i, from, fill_f);
      Put(0, item, i);
    }
  }

  void PutW(int stage) {
    if (pending_w_[stage].empty()) throw NoRoom{};
    const int chunk = pending_w_[stage].front();
    pending_w_[stage].pop_front();
    Put(2, chunk, stage);
  }

  // Places the next action of category cat (0 F, 1 I, 2 W) and chunk on a
  // rank. For I and W, chunk 0 is the V's chunk 1 (the backward's first).
  void Put(int cat, int chunk, int stage) {
    const double no_bubble = clock_[stage] + g_.cost[cat];
    double end = no_bubble;
    const int mb = count_[stage][cat * 2 + chunk];
    if (mb >= M_) throw ScheduleError("v_zb: internal error: an action beyond the last microbatch");
    if (mem_[stage] + g_.memory[cat] > g_.limit + kTolerance) throw NoRoom{};
    if (cat < 2 && chunk == 1 && stage < S_ - 1) {
      end = std::max(end, end_[Id(cat, 1, stage + 1, mb)] + g_.comm + g_.cost[cat]);
    }
    if (cat < 2 && chunk == 0 && stage > 0) {
      end = std::max(end, end_[Id(cat, 0, stage - 1, mb)] + g_.comm + g_.cost[cat]);
    }
    if (count_[stage][0] > 0) bubble_[stage] += end - no_bubble;
    end_[Id(cat, chunk, stage, mb)] = end;
    clock_[stage] = end;
    mem_[stage] += g_.memory[cat];
    if (cat == 1) pending_w_[stage].push_back(chunk);
    ++count_[stage][cat * 2 + chunk];
    const int down = stage, up = 2 * S_ - 1 - stage;
    // F: chunk 0 down, 1 up. I and W: the backward's chunk 0 is the V's up.
    const int v_stage = cat == 0 ? (chunk == 0 ? down : up) : (chunk == 0 ? up : down);
    static constexpr ActionKind kKinds[3] = {ActionKind::kForward, ActionKind::kBackwardInput,
                                             ActionKind::kBackwardWeight};
    order_[stage].push_back({v_stage, kKinds[cat], mb});
  }

  static constexpr double kTolerance = 1e-9;
  const Params g_;
  const int S_, M_;
  std::vector<std::array<int, 6>> count_;
  std::vector<double> end_, clock_, mem_, bubble_;
  std::vector<std::deque<int>> pending_w_;  // per rank: chunks of I's whose W has not run
  std::vector<std::vector<Action>> order_;
  std::vector<double> approved_;  // per stage: the bubble an attempt may leave (-1: none given)
  double max_approved_ = -1;
};

}  // namespace

Schedule GenerateVMin(int p, int m) {
  CheckCommon("v_min", p, m, 2);
  return FromPattern("v_min", p, m, PatternVMin(p));
}

Schedule GenerateVHalf(int p, int m) {
  CheckCommon("v_half", p, m, 2);
  return FromPattern("v_half", p, m, PatternVHalf(p));
}

Schedule GenerateVZb(int p, int m, const GenerateOptions& o) {
  constexpr std::string_view kName = "v_zb";
  CheckCommon(kName, p, m, 2);
  const double limit = o.memory_limit > 0.0 ? o.memory_limit : p;
  Require(o.weight_memory_ratio >= 0.0 && o.weight_memory_ratio <= 1.0, kName,
          "the weight-memory ratio M_W/M_B must be in [0, 1]", o.weight_memory_ratio);
  Require(o.stage_costs.empty() || static_cast<int>(o.stage_costs.size()) == 2 * p, kName,
          fmt::format("needs one cost per stage ({}) or none", 2 * p), o.stage_costs.size());
  Require(o.comm >= 0.0, kName, "the communication time must be >= 0", o.comm);
  VZbSearch::Params g;
  g.stages = p;
  g.microbatches = m;
  g.comm = o.comm;
  g.limit = limit;
  // One chunk of the V: per-rank costs halved, or, as the authors do with
  // measured costs, each rank's average of its two stages and then the
  // median rank's.
  if (o.stage_costs.empty()) {
    g.cost[0] = o.costs.forward / 2;
    g.cost[1] = o.costs.backward_input / 2;
    g.cost[2] = o.costs.backward_weight / 2;
  } else {
    for (int kind = 0; kind < 3; ++kind) {
      std::vector<double> per_rank;
      for (int r = 0; r < p; ++r) {
        auto pick = [&](const Costs& c) {
          return kind == 0 ? c.forward : kind == 1 ? c.backward_input : c.backward_weight;
        };
        per_rank.push_back((pick(o.stage_costs[r]) + pick(o.stage_costs[2 * p - 1 - r])) / 2);
      }
      std::sort(per_rank.begin(), per_rank.end());
      g.cost[kind] = per_rank[per_rank.size() / 2];
    }
  }
  g.memory[0] = 0.5;
  g.memory[1] = -(1.0 - o.weight_memory_ratio) / 2;
  g.memory[2] = -o.weight_memory_ratio / 2;
  std::optional<VZbSearch::Result> best = VZbSearch(g).Run();
  if (!best) {
    throw ScheduleError(fmt::format(
        "v_zb: no schedule keeps every rank within the memory limit of {} M_B with {} ranks and {} microbatches; "
        "raise the limit (got {})",
        limit, p, m, limit));
  }
  Schedule s = Empty(std::string(kName), p, m, 2, Placement::kV);
  s.actions = std::move(best->order);
  return s;
}

}  // namespace baton
