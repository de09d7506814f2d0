// Discrete-event simulator. Times follow from dependencies alone (each rank
// is one in-order server, communication never blocks), so instead of a
// global event queue each rank advances as far as its inputs allow, and a
// rank is revisited only when an action it may be waiting for completes.
// That makes a simulation linear in the number of actions.
//
// A rank's clock only moves forward, so a result made earlier on the same
// rank is always there by the time the rank looks for it: for those inputs
// the simulator keeps only whether they are done, and times only for what
// crosses ranks. That keeps the per-(stage, microbatch) state small, which
// is what a large simulation's speed depends on.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include <fmt/format.h>

#include "baton/error.h"
#include "baton/sim.h"
#include "check_options.h"
#include "collectives.h"
#include "completion.h"
#include "unit_shares.h"

namespace baton {
namespace {

constexpr double kNotYet = std::numeric_limits<double>::quiet_NaN();
bool Done(double t) { return !std::isnan(t); }

// Bits of Simulator::flags_, per (stage, microbatch). 16 bits, not 8: a
// store through a character type may alias any object, and the compiler
// would then reload every member after each.
using Flags = std::uint16_t;
constexpr Flags kForwardDone = 1;   // its F has run
constexpr Flags kBackwardDone = 2;  // its I or B has run
constexpr Flags kRecvF = 4;         // lowered: its RECV_F is posted
constexpr Flags kRecvB = 8;         // lowered: its RECV_B is posted
constexpr Flags kSentF = 16;        // lowered: its SEND_F has run
constexpr Flags kSentB = 32;        // lowered: its SEND_B has run

// Lists of actions up to this size stay in a core's cache (1 MiB of L2 on
// the machines baton is measured on), where prefetching them only costs.
constexpr std::size_t kCachedRowBytes = std::size_t{1} << 20;

std::size_t RowBytes(const Schedule& s) {
  std::size_t actions = 0;
  for (const auto& row : s.actions) actions += row.size();
  return actions * sizeof(Action);
}

// Which instance of the simulator's loop runs: completion only (no times,
// memory or costs: Validate), whole microbatches alike, or units of their
// own shares (slices, uneven microbatches).
enum class Pass { kCompletion, kWhole, kShaped };

class Simulator {
 public:
  // `timed` false: only whether each rank can finish is wanted (Validate);
  // the ranks still run their actions, but no times cross ranks.
  Simulator(const Schedule& s, const SimOptions& o, bool timed = true)
      : s_(s),
        o_(o),
        m_(s.microbatches),
        lowered_(s.IsLowered()),
        timed_(timed),
        record_timeline_(o.record_timeline),
        track_gradients_(!o.sums.stage_time.empty()),
        shards_(!o.shards.gather_time.empty() || !o.shards.reduce_time.empty() || !o.shards.gathered_bytes.empty() ||
                !o.shards.after_step.empty()),
        stage_bytes_(o.memory.stage_bytes.empty() ? nullptr : o.memory.stage_bytes.data()),
        prefetch_(RowBytes(s) > kCachedRowBytes) {}

  SimResult Run() {
    Prepare();
    // Ranks that may be able to go on. Waking a rank that is not actually
    // unblocked costs one look at its next action.
    work_.reserve(s_.ranks);
    queued_.assign(s_.ranks, 1);
    for (int r = s_.ranks - 1; r >= 0; --r) work_.push_back(r);
    // Completion, whole microbatches and shaped units take separate instances of
    // the loop, so that none carries another's work or tests per action.
    if (!timed_) {
      RunDependencies<Pass::kCompletion>();
    } else if (Shared()) {
      shaped_ ? RunShared<Pass::kShaped>() : RunShared<Pass::kWhole>();
    } else {
      shaped_ ? RunDependencies<Pass::kShaped>() : RunDependencies<Pass::kWhole>();
    }
    for (int r = 0; r < s_.ranks; ++r) {
      if (rank_[r].pc < s_.actions[r].size()) ReportDeadlock();
    }
    return Collect();
  }

 private:
  struct RankState {
    std::size_t pc = 0;      // next action in the rank's list
    double clock = 0.0;      // when the rank is free
    double start = kNotYet;  // first compute start
    double end = 0.0;
    double busy = 0.0;
    double work = 0.0;
    double memory = 0.0;
    double peak_memory = 0.0;
    double bytes = 0.0;  // with memory.stage_bytes: the same in bytes (and the gathered copies')
    double peak_bytes = 0.0;
    double comm_free = 0.0;  // sharding: when its communication resource is free
  };

  // Some pool has more ranks than cores.
  bool Shared() const {
    std::vector<int> ranks(o_.cores.pool_cores.size(), 0);
    for (int pool : o_.cores.pool) ++ranks[static_cast<std::size_t>(pool)];
    for (std::size_t k = 0; k < ranks.size(); ++k) {
      if (ranks[k] > o_.cores.pool_cores[k]) return true;
    }
    return false;
  }

  std::size_t At(int stage, int mb) const { return static_cast<std::size_t>(stage) * m_ + mb; }

  void Prepare() {
    const int S = s_.stages;
    std::vector<int> stages_on_rank(s_.ranks, 0);
    for (int st = 0; st < S; ++st) ++stages_on_rank[s_.stage_rank[st]];
    cost_.resize(S);
    mem_per_chunk_.resize(S);
    for (int st = 0; st < S; ++st) {
      const double v = stages_on_rank[s_.stage_rank[st]];
      const ComputeCosts& c = o_.compute;
      if (c.stages.empty()) {
        cost_[st] = {c.uniform.forward / v, c.uniform.backward_input / v, c.uniform.backward_weight / v};
        if (c.uniform.forward_backward) cost_[st].forward_backward = *c.uniform.forward_backward / v;
      } else {
        cost_[st] = c.stages[st];
      }
      // The machine model, where ranks share cores: every action at its factor.
      if (o_.cores.Factor() != 1.0) cost_[st] = Scaled(cost_[st], o_.cores.Factor());
      mem_per_chunk_[st] = 1.0 / v;
    }
    // Per slice: its memory share (whole units: 1); per unit: its cost
    // (per stage where the microbatches' are) and message time.
    const int k = s_.slices;
    auto shares = [&](const std::vector<double>& given) {
      return given.empty() ? std::vector<double>(static_cast<std::size_t>(k), 1.0 / k) : given;
    };
    const std::vector<double> slice_cost = shares(o_.slices.cost);
    slice_memory_ = shares(o_.slices.memory);
    sliced_ = k > 1;
    shaped_ = sliced_ || !o_.microbatches.empty();
    live_sequences_.assign(S, 0);
    peak_sequences_.assign(S, 0);
    backward_sequences_.assign(S, 0);
    peak_backward_sequences_.assign(S, 0);
    if (sliced_) {
      // Per (stage, sequence): its slices not yet released, its input backwards run.
      const std::size_t n = static_cast<std::size_t>(S) * static_cast<std::size_t>(s_.sequences());
      sequence_left_.assign(n, k);
      sequence_backward_.assign(n, 0);
    }
    comm_time_ = o_.messages.Time();
    link_delay_ = o_.messages.link_delay.empty() ? nullptr : &o_.messages.link_delay;
    if (shaped_) {
      UnitShares u = ShapeUnits(s_, o_, slice_cost, o_.slices.message.empty() ? slice_memory_ : o_.slices.message);
      cost_stride_ = u.stride;
      unit_cost_ = std::move(u.cost);
      unit_comm_ = std::move(u.message_time);
    }
    const std::size_t n = static_cast<std::size_t>(S) * m_;
    flags_.assign(n, 0);
    if (timed_) {
      f_time_.assign(n, kNotYet);
      b_time_.assign(n, kNotYet);
    }
    in_flight_.assign(S, 0);
    peak_in_flight_.assign(S, 0);
    if (shards_) gathered_at_.assign(S, 0.0);
    if (track_gradients_) grad_end_.assign(S, 0.0);
    rank_.assign(s_.ranks, RankState{});
    if (record_timeline_) {
      timeline_.resize(s_.ranks);
      for (int r = 0; r < s_.ranks; ++r) timeline_[r].reserve(s_.actions[r].size());
    }
  }

  // When the input of a compute action of stage `to` on rank r arrives from
  // stage `from`, or kNotYet if it cannot be known yet. `time` holds the
  // producers' times (f_time_ or b_time_); `done`, `sent` and `posted` are
  // the flags saying the producer ran, its SEND ran and the RECV is posted.
  // A local hand-over is there by r's clock, so any time not after it will
  // do: 0 (and untimed, for every input).
  template <Pass kPass>
  double Arrival(int r, int to, int from, int mb, const std::vector<double>& time, Flags done, Flags sent,
                 Flags posted) const {
    const std::size_t produced = At(from, mb);
    const Flags there = flags_[produced];
    if (s_.stage_rank[from] == r) return there & done ? 0.0 : kNotYet;
    if (lowered_ && !(flags_[At(to, mb)] & posted)) return kNotYet;
    if (!(there & (lowered_ ? sent : done))) return kNotYet;
    if constexpr (kPass == Pass::kCompletion) return 0.0;
    const double wire = link_delay_ == nullptr ? 0.0 : (*link_delay_)[static_cast<std::size_t>(s_.stage_rank[from] * s_.ranks + r)];
    return time[produced] + (kPass == Pass::kShaped ? unit_comm_[static_cast<std::size_t>(mb)] : comm_time_) + wire;
  }

  // Rank r's next compute action, after running the markers and sends
  // before it at the rank's clock: false if the rank has no more actions or
  // a send's data is not produced yet; else `a`, when its inputs are all
  // there (`ready`, kNotYet if not known yet) and its cost.
  template <Pass kPass>
  [[gnu::always_inline]] inline bool NextCompute(int r, Action& a, double& ready, double& duration) {
    RankState& rs = rank_[r];
    const auto& row = s_.actions[r];
    const std::size_t size = row.size();
    const int S = s_.stages;
    while (rs.pc < size) {
      a = row[rs.pc];
      const int st = a.stage, mb = a.microbatch;
      switch (a.kind) {
        case ActionKind::kIdle:
          ++rs.pc;
          continue;
        case ActionKind::kUnshard:
        case ActionKind::kReshard:
        case ActionKind::kReduceGrad:
          if constexpr (kPass != Pass::kCompletion) Shard(r, rs, a);
          ++rs.pc;
          continue;
        case ActionKind::kRecvF:
          flags_[At(st, mb)] |= kRecvF;
          ++rs.pc;
          continue;
        case ActionKind::kRecvB:
          flags_[At(st, mb)] |= kRecvB;
          ++rs.pc;
          continue;
        case ActionKind::kSendF:
        case ActionKind::kSendB: {
          const bool fwd = a.kind == ActionKind::kSendF;
          Flags& flags = flags_[At(st, mb)];
          if (!(flags & (fwd ? kForwardDone : kBackwardDone))) return false;
          flags |= fwd ? kSentF : kSentB;
          // Its data was made earlier on this rank, so it leaves at the rank's clock.
          if constexpr (kPass != Pass::kCompletion) (fwd ? f_time_ : b_time_)[At(st, mb)] = rs.clock;
          ++rs.pc;
          const int to = fwd ? st + 1 : st - 1;
          if (to >= 0 && to < S) Wake(s_.stage_rank[to]);
          continue;
        }
        case ActionKind::kForward:
        case ActionKind::kBackward:
        case ActionKind::kBackwardInput:
        case ActionKind::kBackwardWeight:
          ready = Gathered(PartReady<kPass>(r, a), st);
          if constexpr (kPass != Pass::kCompletion) duration = PartCost<kPass>(a);
          return true;
        case ActionKind::kOverlapFB: {
          // One unit: it starts when both parts could, and both finish at its end.
          ready = 0.0;
          ForEachPart(a, [&](const Action& part) {
            const double t = Gathered(PartReady<kPass>(r, part), part.stage);
            ready = Done(ready) && Done(t) ? std::max(ready, t) : kNotYet;
          });
          if constexpr (kPass != Pass::kCompletion) duration = OverlapCost<kPass>(a);
          return true;
        }
      }
    }
    return false;
  }

  // Sharding (SimOptions::shards): a compute action of stage st is ready
  // no earlier than the stage's gather.
  double Gathered(double ready, int st) const {
    return shards_ && Done(ready) ? std::max(ready, gathered_at_[static_cast<std::size_t>(st)]) : ready;
  }
  static double ShardCost(const std::vector<double>& per_stage, int st) {
    return per_stage.empty() ? 0.0 : per_stage[static_cast<std::size_t>(st)];
  }
  // UNSHARD and REDUCE_GRAD take the rank's communication resource from
  // when the rank reaches them (or the resource frees); UNSHARD holds the
  // gathered copy until RESHARD frees it.
  // The timeline records the collectives too, beside the compute.
  void Shard(int r, RankState& rs, const Action& a) {
    if (!shards_) return;  // unpriced: no time, no memory
    const int st = a.stage;
    const double gathered = ShardCost(o_.shards.gathered_bytes, st);
    if (a.kind == ActionKind::kReshard) {
      rs.bytes -= gathered;
      return;
    }
    const bool gather = a.kind == ActionKind::kUnshard;
    const double start = std::max(rs.clock, rs.comm_free);
    rs.comm_free = start + ShardCost(gather ? o_.shards.gather_time : o_.shards.reduce_time, st);
    if (record_timeline_) timeline_[static_cast<std::size_t>(r)].push_back({a, start, rs.comm_free});
    if (!gather) return;
    gathered_at_[static_cast<std::size_t>(st)] = rs.comm_free;
    rs.bytes += gathered;
    rs.peak_bytes = std::max(rs.peak_bytes, rs.bytes);
  }

  // Rank r's compute action `a`, of cost `cost`, ran from `start` to `end`.
  template <Pass kPass>
  [[gnu::always_inline]] inline void Finish(int r, const Action& a, double start, double end, double cost) {
    RankState& rs = rank_[r];
    if constexpr (kPass != Pass::kCompletion) {
      rs.clock = end;
      if (!Done(rs.start)) rs.start = start;
      rs.end = end;
      rs.busy += end - start;
      rs.work += cost;
      if (record_timeline_) timeline_[r].push_back({a, start, end});
    }
    ++rs.pc;
    // ForEachPart spelled out: its lambda, called from three places, would
    // be left out of line.
    if (a.kind == ActionKind::kOverlapFB) {
      Account<kPass>(rs, Action{a.stage, ActionKind::kForward, a.microbatch}, end);
      Account<kPass>(rs, Action{a.backward_stage, ActionKind::kBackward, a.backward_microbatch}, end);
    } else {
      Account<kPass>(rs, a, end);
    }
  }

  // Each rank in turn as far as its inputs allow, until none can go on.
  template <Pass kPass>
  void RunDependencies() {
    while (!work_.empty()) {
      const int r = work_.back();
      work_.pop_back();
      queued_[r] = 0;
      Advance<kPass>(r);
    }
  }

  // Runs rank r's actions until one must wait.
  template <Pass kPass>
  [[gnu::always_inline]] inline void Advance(int r) {
    RankState& rs = rank_[r];
    Action a;
    double ready = 0.0, duration = 0.0;
    while (NextCompute<kPass>(r, a, ready, duration) && Done(ready)) {
      const double start = std::max(rs.clock, ready);
      Finish<kPass>(r, a, start, start + duration, duration);
    }
    // The rank resumes here once woken, after other ranks have run: fetch
    // its next actions (about three cache lines) now, so that reading its
    // list then does not wait on memory.
    const auto& row = s_.actions[r];
    if (prefetch_ && rs.pc + 9 < row.size()) {
      __builtin_prefetch(&row[rs.pc + 3]);
      __builtin_prefetch(&row[rs.pc + 6]);
      __builtin_prefetch(&row[rs.pc + 9]);
    }
  }

  // With ranks sharing cores the ranks' times depend on one another, so
  // time advances globally, from one action's start or end to the next:
  // while n ranks of a pool compute, each proceeds at min(1, cores / n) of
  // its speed (processor sharing).
  template <Pass kPass>
  void RunShared() {
    const int R = s_.ranks;
    struct Live {
      bool running = false;
      Action action;
      double start = 0.0;
      double cost = 0.0;
      double left = 0.0;           // cost still to do
      double wake = kNotYet;       // blocked: when its inputs arrive, if known
      bool waiting = false;        // not computing, with actions left (polling for its inputs)
    };
    std::vector<Live> live(R);
    const int pools = static_cast<int>(o_.cores.pool_cores.size());
    std::vector<double> computing(pools);  // the pool's load: computing ranks, and waiting ones' share
    double now = 0.0;
    for (;;) {
      // Every rank not computing goes as far as it can at `now`; an action
      // of no cost ends at once, which may let others go on.
      for (bool again = true; again;) {
        again = false;
        for (int r = 0; r < R; ++r) {
          Live& l = live[r];
          if (l.running) continue;
          rank_[r].clock = now;
          Action a;
          double ready = 0.0, duration = 0.0;
          const std::size_t pc = rank_[r].pc;
          l.wake = kNotYet;
          bool has = false;
          while ((has = NextCompute<kPass>(r, a, ready, duration)) && Done(ready) && ready <= now) {
            if (duration > 0.0) {
              l = Live{true, a, now, duration, duration, kNotYet};
              break;
            }
            Finish<kPass>(r, a, now, now, 0.0);
          }
          if (!l.running && has && Done(ready) && ready > now) l.wake = ready;
          l.waiting = !l.running && has;
          if (rank_[r].pc != pc) again = true;
        }
      }
      std::fill(computing.begin(), computing.end(), 0.0);
      for (int r = 0; r < R; ++r) {
        if (live[r].running) computing[o_.cores.pool[r]] += 1.0;
        if (live[r].waiting) computing[o_.cores.pool[r]] += o_.cores.shared.waiting_share;
      }
      auto rate = [&](int r) {
        const int pool = o_.cores.pool[r];
        return std::min(1.0, o_.cores.pool_cores[pool] / computing[pool]);
      };
      // The next start or end: the earliest rank's.
      std::vector<double>& until = until_;
      until.assign(R, std::numeric_limits<double>::infinity());
      double next = std::numeric_limits<double>::infinity();
      for (int r = 0; r < R; ++r) {
        if (live[r].running) until[r] = now + live[r].left / rate(r);
        if (!live[r].running && Done(live[r].wake)) until[r] = live[r].wake;
        next = std::min(next, until[r]);
      }
      if (!std::isfinite(next)) break;  // done, or stuck
      for (int r = 0; r < R; ++r) {
        Live& l = live[r];
        if (!l.running) continue;
        if (until[r] <= next) {
          l.running = false;
          Finish<kPass>(r, l.action, l.start, next, l.cost);
        } else {
          l.left -= (next - now) * rate(r);
        }
      }
      now = next;
    }
  }

  // When a single compute action's inputs are all there, or kNotYet.
  template <Pass kPass>
  double PartReady(int r, const Action& a) const {
    const int st = a.stage, mb = a.microbatch, S = s_.stages;
    switch (a.kind) {
      case ActionKind::kForward:
        return st == 0 ? 0.0 : Arrival<kPass>(r, st, st - 1, mb, f_time_, kForwardDone, kSentF, kRecvF);
      case ActionKind::kBackward:
      case ActionKind::kBackwardInput:
        // Its own F ran on this rank; on the last stage that is all it needs.
        if (!(flags_[At(st, mb)] & kForwardDone)) return kNotYet;
        return st == S - 1 ? 0.0 : Arrival<kPass>(r, st, st + 1, mb, b_time_, kBackwardDone, kSentB, kRecvB);
      case ActionKind::kBackwardWeight:
        return flags_[At(st, mb)] & kBackwardDone ? 0.0 : kNotYet;  // its I, on this rank
      default:
        return 0.0;
    }
  }

  template <Pass kPass>
  double PartCost(const Action& a) const {
    if constexpr (kPass == Pass::kShaped) return UnitCost(a.stage, a.microbatch) * WholeCost(a);
    return WholeCost(a);
  }

  // A whole microbatch's cost of the action's kind on its stage.
  double WholeCost(const Action& a) const {
    const Costs& c = cost_[a.stage];
    switch (a.kind) {
      case ActionKind::kForward:
        return c.forward;
      case ActionKind::kBackward:
        return c.Backward();
      case ActionKind::kBackwardInput:
        return c.backward_input;
      case ActionKind::kBackwardWeight:
        return c.backward_weight;
      default:
        return 0.0;
    }
  }
  double UnitCost(int stage, int unit) const {
    return unit_cost_[static_cast<std::size_t>(stage) * cost_stride_ + static_cast<std::size_t>(unit)];
  }
  std::size_t SliceOf(int unit) const { return static_cast<std::size_t>(s_.SliceOf(unit)); }

  // F of stage a with B of stage b: F_a + B_b less what overlapping saves,
  // half of each stage's own saving F + B - F&B (so with equal stages it is
  // exactly their F&B, and F + B when none is given).
  template <Pass kPass>
  double OverlapCost(const Action& a) const {
    const Costs& f = cost_[a.stage];
    const Costs& b = cost_[a.backward_stage];
    constexpr bool shaped = kPass == Pass::kShaped;
    const double fs = shaped ? UnitCost(a.stage, a.microbatch) : 1.0;
    const double bs = shaped ? UnitCost(a.backward_stage, a.backward_microbatch) : 1.0;
    auto saving = [](const Costs& c) { return c.forward + c.Backward() - c.ForwardBackward(); };
    return std::max(0.0, fs * f.forward + bs * b.Backward() - 0.5 * (fs * saving(f) + bs * saving(b)));
  }

  // Sliced schedules: a sequence's key/value slot, held from its first
  // slice's F to its slices' last B or W on the stage, and its gradient
  // slot, from its first input backward to its last. Apart from Account,
  // which stays small on the path every schedule takes.
  [[gnu::noinline]] void AccountSequence(RankState& rs, const Action& a) {
    const int st = a.stage, mb = a.microbatch;
    // The sequence's keys and values, and their gradients.
    auto sequence = [&](double share) {
      rs.memory += share * o_.memory.sequence_share * mem_per_chunk_[st];
      rs.peak_memory = std::max(rs.peak_memory, rs.memory);
      if (stage_bytes_ != nullptr && !o_.memory.stage_sequence_bytes.empty()) {
        rs.bytes += share * o_.memory.stage_sequence_bytes[static_cast<std::size_t>(st)];
        rs.peak_bytes = std::max(rs.peak_bytes, rs.bytes);
      }
    };
    const std::size_t at = static_cast<std::size_t>(st) * static_cast<std::size_t>(s_.sequences()) +
                           static_cast<std::size_t>(s_.SequenceOf(mb));
    const bool releases = a.kind == ActionKind::kBackward || a.kind == ActionKind::kBackwardWeight;
    const bool input = a.kind == ActionKind::kBackward || a.kind == ActionKind::kBackwardInput;
    if (a.kind == ActionKind::kForward && sequence_left_[at] == s_.slices && s_.SliceOf(mb) == 0) {
      sequence(1.0);
      peak_sequences_[st] = std::max(peak_sequences_[st], ++live_sequences_[st]);
    }
    if (input && sequence_backward_[at]++ == 0) {
      sequence(1.0);
      peak_backward_sequences_[st] = std::max(peak_backward_sequences_[st], ++backward_sequences_[st]);
    }
    if (input && sequence_backward_[at] == s_.slices) {
      sequence(-1.0);
      --backward_sequences_[st];
    }
    if (releases && --sequence_left_[at] == 0) {
      sequence(-1.0);
      --live_sequences_[st];
    }
  }

  // Records completion: done flags and the times other ranks need, memory,
  // in-flight counts; wakes the rank that may be waiting for this result.
  template <Pass kPass>
  [[gnu::always_inline]] inline void Account(RankState& rs, const Action& a, double end) {
    const int st = a.stage, mb = a.microbatch;
    const double slice = kPass == Pass::kShaped ? slice_memory_[SliceOf(mb)] : 1.0;
    const double unit = mem_per_chunk_[st] * slice;
    const double w_ratio = o_.memory.weight_ratio;
    // Adds `share` of a microbatch's activations on stage st (negative frees).
    auto hold = [&](double share) __attribute__((always_inline)) {
      if constexpr (kPass == Pass::kCompletion) return;
      rs.memory += share * unit;
      rs.peak_memory = std::max(rs.peak_memory, rs.memory);
      if (stage_bytes_ != nullptr) {
        rs.bytes += share * slice * stage_bytes_[st];
        rs.peak_bytes = std::max(rs.peak_bytes, rs.bytes);
      }
    };
    // The consumer's rank may go on now in the compute-only form; in the
    // lowered form a consumer on another rank waits for the SEND, which
    // wakes it, and one on this rank needs no time, only the done flag.
    auto hand_over = [&](int to, std::vector<double>& time) __attribute__((always_inline)) {
      if (lowered_) return;
      if constexpr (kPass != Pass::kCompletion) time[At(st, mb)] = end;
      if (to >= 0 && to < s_.stages) Wake(s_.stage_rank[to]);
    };
    if constexpr (kPass == Pass::kShaped) {
      if (sliced_) AccountSequence(rs, a);
    }
    switch (a.kind) {
      case ActionKind::kForward:
        flags_[At(st, mb)] |= kForwardDone;
        hold(1.0);
        if constexpr (kPass != Pass::kCompletion) peak_in_flight_[st] = std::max(peak_in_flight_[st], ++in_flight_[st]);
        hand_over(st + 1, f_time_);
        break;
      case ActionKind::kBackward:
      case ActionKind::kBackwardInput:
        flags_[At(st, mb)] |= kBackwardDone;
        if (a.kind == ActionKind::kBackward && track_gradients_) grad_end_[st] = std::max(grad_end_[st], end);
        if (a.kind == ActionKind::kBackward) {
          hold(-1.0);
          if constexpr (kPass != Pass::kCompletion) --in_flight_[st];
        } else {
          hold(-(1.0 - w_ratio));
        }
        hand_over(st - 1, b_time_);
        break;
      case ActionKind::kBackwardWeight:
        hold(-w_ratio);
        if constexpr (kPass != Pass::kCompletion) --in_flight_[st];
        if (track_gradients_) grad_end_[st] = std::max(grad_end_[st], end);
        break;
      default:
        break;
    }
  }

  [[gnu::always_inline]] inline void Wake(int r) {
    if (!queued_[r]) {
      queued_[r] = 1;
      work_.push_back(r);
    }
  }

  std::string WaitReason(int r, const Action& a) const {
    const int st = a.stage, mb = a.microbatch, S = s_.stages;
    auto where = [&](const Action& b) {
      return fmt::format("{} on rank {}", ToString(b), s_.stage_rank[b.stage]);
    };
    switch (a.kind) {
      case ActionKind::kSendF:
        return fmt::format("waits for {}, which has not run", where({st, ActionKind::kForward, mb}));
      case ActionKind::kSendB:
        return fmt::format("waits for the backward of stage {} microbatch {}, which has not run", st, mb);
      case ActionKind::kForward: {
        const Action prev{st - 1, ActionKind::kForward, mb};
        if (s_.stage_rank[st - 1] == r || !lowered_) return fmt::format("waits for {}", where(prev));
        if (!(flags_[At(st, mb)] & kRecvF)) {
          return fmt::format("waits for {}, which is not posted before it", ToString({st, ActionKind::kRecvF, mb}));
        }
        return fmt::format("waits for {} from rank {}", ToString({st - 1, ActionKind::kSendF, mb}),
                           s_.stage_rank[st - 1]);
      }
      case ActionKind::kBackward:
      case ActionKind::kBackwardInput: {
        if (!(flags_[At(st, mb)] & kForwardDone)) {
          return fmt::format("waits for its own forward {}", ToString({st, ActionKind::kForward, mb}));
        }
        const std::string next = fmt::format("the input gradient of stage {} microbatch {} (rank {})", st + 1, mb,
                                             st + 1 < S ? s_.stage_rank[st + 1] : r);
        if (st + 1 >= S || s_.stage_rank[st + 1] == r || !lowered_) return "waits for " + next;
        if (!(flags_[At(st, mb)] & kRecvB)) {
          return fmt::format("waits for {}, which is not posted before it", ToString({st, ActionKind::kRecvB, mb}));
        }
        return fmt::format("waits for {} from rank {}", ToString({st + 1, ActionKind::kSendB, mb}),
                           s_.stage_rank[st + 1]);
      }
      case ActionKind::kBackwardWeight:
        return fmt::format("waits for {}", ToString({st, ActionKind::kBackwardInput, mb}));
      case ActionKind::kOverlapFB: {
        std::string reasons;
        ForEachPart(a, [&](const Action& part) {
          // Only whether it could start counts: no times (the completion
          // check, which reports deadlocks too, keeps none).
          if (Done(PartReady<Pass::kCompletion>(r, part))) return;
          reasons += fmt::format("{}its {} part {}", reasons.empty() ? "" : "; ",
                                 part.kind == ActionKind::kForward ? "forward" : "backward", WaitReason(r, part));
        });
        return reasons;
      }
      default:
        return "waits";
    }
  }

  [[noreturn]] void ReportDeadlock() const {
    std::string lines;
    std::optional<GridMark> mark;
    for (int r = 0; r < s_.ranks; ++r) {
      const std::size_t pc = rank_[r].pc;
      if (pc >= s_.actions[r].size()) continue;
      const Action& a = s_.actions[r][pc];
      if (!mark) mark = GridMark{r, static_cast<int>(pc)};
      lines += fmt::format("  rank {}, position {} ({}): {}\n", r, pc, ToString(a), WaitReason(r, a));
    }
    throw ScheduleError(fmt::format(
        "{}: the schedule deadlocks: no rank can go on. Each stuck rank and what it waits for:\n{}{}", s_.name,
        lines, FormatGrid(s_, mark, 24)));
  }

  SimResult Collect() {
    SimResult res;
    res.schedule = s_.name;
    res.ranks = s_.ranks;
    res.microbatches = s_.microbatches;
    res.slices = s_.slices;
    res.chunks = s_.chunks();
    res.per_rank.resize(s_.ranks);
    double busy_total = 0.0, max_span = 0.0;
    for (int r = 0; r < s_.ranks; ++r) {
      const RankState& rs = rank_[r];
      RankResult& out = res.per_rank[r];
      out.rank = r;
      out.start = Done(rs.start) ? rs.start : 0.0;
      out.end = rs.end;
      out.busy = rs.busy;
      out.work = rs.work;
      out.span = out.end - out.start;
      out.peak_memory = rs.peak_memory;
      // Without per-stage activation bytes, the gathered copies' peak (if
      // any) is added to the activations': a bound.
      out.peak_memory_bytes =
          (o_.memory.stage_bytes.empty() ? rs.peak_memory * o_.memory.microbatch_bytes + rs.peak_bytes
                                         : rs.peak_bytes) +
          (o_.memory.rank_static_bytes.empty() ? 0.0 : o_.memory.rank_static_bytes[static_cast<std::size_t>(r)]);
      res.makespan = std::max(res.makespan, out.end);
      busy_total += rs.busy;
      max_span = std::max(max_span, out.span);
    }
    for (int st = 0; st < s_.stages; ++st) {
      RankResult& out = res.per_rank[s_.stage_rank[st]];
      out.stages.push_back(st);
      out.peak_in_flight.push_back(peak_in_flight_[st]);
      if (s_.slices > 1) {
        out.peak_sequences.push_back(peak_sequences_[st]);
        out.peak_backward_sequences.push_back(peak_backward_sequences_[st]);
      }
    }
    // What the collectives after the compute add (tied exchange, gradient
    // sums, sharding's), on each rank's end.
    std::vector<double> comm_free;
    if (shards_) {
      for (const RankState& rs : rank_) comm_free.push_back(rs.comm_free);
    }
    AddCollectives(s_, o_, grad_end_, comm_free, res);
    const double p = s_.ranks;
    res.bubble_rate = res.makespan > 0.0 ? 1.0 - busy_total / (p * res.makespan) : 0.0;
    res.span_bubble_rate = max_span > 0.0 ? 1.0 - busy_total / (p * max_span) : 0.0;
    if (!o_.update.empty()) AddUpdates(s_, o_, res);  // the optimizer's step, after all of it
    res.timeline = std::move(timeline_);
    return res;
  }

  const Schedule& s_;
  const SimOptions& o_;
  const int m_;
  const bool lowered_;
  const bool timed_;
  const bool record_timeline_;
  const bool track_gradients_;       // sums.stage_time given
  const bool shards_;                // ShardCosts given
  std::vector<double> gathered_at_;  // sharding, per stage: when its last gather ends
  const double* const stage_bytes_;  // memory.stage_bytes, or null
  const bool prefetch_;              // the ranks' lists are larger than a cache holds
  std::vector<int> work_;     // ranks to advance
  std::vector<char> queued_;  // rank is in work_
  std::vector<Costs> cost_;            // per stage, one microbatch
  std::vector<double> mem_per_chunk_;  // per stage: M_B units an F adds
  // Shaped units (ShapeUnits): per unit its cost share (per stage at
  // stage x cost_stride_ + unit) and message time; per slice its memory
  // share. Whole microbatches alike: comm_time_.
  bool sliced_ = false;
  bool shaped_ = false;
  std::size_t cost_stride_ = 0;
  std::vector<double> unit_cost_, unit_comm_;
  double comm_time_ = 0.0;
  const std::vector<double>* link_delay_ = nullptr;  // o_.messages.link_delay, or null without one
  std::vector<double> slice_memory_;
  std::vector<int> live_sequences_, peak_sequences_;             // per stage
  std::vector<int> backward_sequences_, peak_backward_sequences_;  // per stage
  std::vector<int> sequence_left_, sequence_backward_;           // per (stage, sequence)
  // Per (stage, mb): kForwardDone, kBackwardDone, kRecvF, kRecvB, kSentF, kSentB.
  std::vector<Flags> flags_;
  // Timed, per (stage, mb), what a consumer on another rank reads once the
  // flags say it is there: when its F / its I or B ended, or in the lowered
  // form when that result's SEND ran.
  std::vector<double> f_time_, b_time_;
  std::vector<int> in_flight_, peak_in_flight_;  // per stage
  std::vector<double> grad_end_;                 // with sums.stage_time, per stage: its last B or W's end
  std::vector<RankState> rank_;
  std::vector<double> until_;  // shared cores: per rank, its next start or end
  std::vector<std::vector<TimedAction>> timeline_;
};

}  // namespace

SimResult Simulate(const Schedule& schedule, const SimOptions& options) {
  CheckOptions(schedule, options);
  return Simulator(schedule, options).Run();
}

void CheckCompletion(const Schedule& schedule) {
  SimOptions unit;
  unit.record_timeline = false;
  Simulator(schedule, unit, /*timed=*/false).Run();
}

}  // namespace baton
