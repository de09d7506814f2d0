// Structural checks of a schedule: placement, completeness, per-rank order,
// and the SEND/RECV pairing of lowered schedules. No timing: whether the
// schedule can run to completion is the simulator's question (Validate).
//
// Two passes share the rules. QuickCheck vouches for a correct schedule in
// one walk over each rank with a byte per (stage, microbatch); the Checker
// keeps every action's position, which it needs only to name the first
// error, and runs when QuickCheck cannot vouch for a schedule.
#include <array>
#include <cstdint>

#include <fmt/format.h>

#include "baton/error.h"
#include "baton/schedule.h"

namespace baton {
namespace {

constexpr int kGridSteps = 24;

// Index of a kind among those that carry a microbatch and may appear once
// per (stage, microbatch).
constexpr int kTracked = 8;
constexpr int Slot(ActionKind k) {
  switch (k) {
    case ActionKind::kForward: return 0;
    case ActionKind::kBackward: return 1;
    case ActionKind::kBackwardInput: return 2;
    case ActionKind::kBackwardWeight: return 3;
    case ActionKind::kSendF: return 4;
    case ActionKind::kRecvF: return 5;
    case ActionKind::kSendB: return 6;
    case ActionKind::kRecvB: return 7;
    default: return -1;
  }
}

// The rank x stage x microbatch shape: rows, placement, sizes.
void CheckShape(const Schedule& s) {
  if (s.ranks < 1 || static_cast<int>(s.actions.size()) != s.ranks) {
    throw ScheduleError(fmt::format("{}: the schedule has {} rows for {} ranks", s.name, s.actions.size(), s.ranks));
  }
  if (s.stages < 1 || static_cast<int>(s.stage_rank.size()) != s.stages) {
    throw ScheduleError(fmt::format("{}: {} stages but a placement for {}", s.name, s.stages, s.stage_rank.size()));
  }
  if (s.microbatches < 1) {
    throw ScheduleError(fmt::format("{}: the schedule has no microbatch", s.name));
  }
  if (s.slices < 1 || s.microbatches % s.slices != 0) {
    throw ScheduleError(fmt::format("{}: {} units are not a whole number of sequences of {} slices", s.name,
                                    s.microbatches, s.slices));
  }
  for (int stage = 0; stage < s.stages; ++stage) {
    if (s.stage_rank[stage] < 0 || s.stage_rank[stage] >= s.ranks) {
      throw ScheduleError(fmt::format("{}: stage {} is placed on rank {}, which does not exist ({} ranks)", s.name,
                                      stage, s.stage_rank[stage], s.ranks));
    }
  }
}

// True only if the Checker would find nothing wrong. Walks each rank in
// order keeping, per (stage, microbatch), which kinds it has seen; every
// rule of the Checker is a rule about one rank's order (all actions of a
// stage live on its rank), so each is checked when its later action comes,
// and completeness at the end. Anything else it cannot vouch for (such as
// a RECV_F on the first stage, which the Checker lets pass) answers false.
// REQUIRES: CheckShape passed.
class QuickCheck {
 public:
  explicit QuickCheck(const Schedule& s) : s_(s), lowered_(s.IsLowered()) {}

  bool Run() { return s_.slices > 1 ? Walk<true>() : Walk<false>(); }

 private:
  // Whole microbatches and slices take separate instances, so that the
  // common case carries no test for slices per action.
  template <bool kSliced>
  bool Walk() {
    seen_.assign(static_cast<std::size_t>(s_.stages) * s_.microbatches, 0);
    for (int r = 0; r < s_.ranks; ++r) {
      for (const Action& a : s_.actions[r]) {
        if (a.kind == ActionKind::kIdle) continue;
        // The Checker explains an OVERLAP_F_B unit of one (stage, microbatch).
        if (a.kind == ActionKind::kOverlapFB && a.stage == a.backward_stage && a.microbatch == a.backward_microbatch) {
          return false;
        }
        bool ok = true;
        ForEachPart(a, [&](const Action& part) { ok = ok && See<kSliced>(r, part); });
        if (!ok) return false;
      }
    }
    return Complete();
  }

  static constexpr std::uint8_t Bit(ActionKind k) { return static_cast<std::uint8_t>(1u << Slot(k)); }

  std::size_t Index(int st, int mb) const { return static_cast<std::size_t>(st) * s_.microbatches + mb; }

  // Messages cross from stage `from` to stage `to` when both exist on different ranks.
  bool Crosses(int from, int to) const { return to >= 0 && to < s_.stages && s_.stage_rank[from] != s_.stage_rank[to]; }

  // Rank r's next action `a` (not an OVERLAP_F_B unit): false if it breaks a rule.
  template <bool kSliced>
  bool See(int r, const Action& a) {
    const int st = a.stage, mb = a.microbatch;
    if (st < 0 || st >= s_.stages || s_.stage_rank[st] != r) return false;
    if (!HasMicrobatch(a.kind)) return true;
    if (mb < 0 || mb >= s_.microbatches) return false;
    std::uint8_t& seen = seen_[Index(st, mb)];
    const std::uint8_t forward = Bit(ActionKind::kForward), full = Bit(ActionKind::kBackward);
    const std::uint8_t input = Bit(ActionKind::kBackwardInput), weight = Bit(ActionKind::kBackwardWeight);
    if (seen & Bit(a.kind)) return false;  // twice
    bool ok = true;
    switch (a.kind) {
      case ActionKind::kForward:
        ok = (!lowered_ || !Crosses(st, st - 1) || (seen & Bit(ActionKind::kRecvF))) &&
             (!kSliced || s_.SliceOf(mb) == 0 || (seen_[Index(st, mb - 1)] & forward));
        break;
      case ActionKind::kBackward:
      case ActionKind::kBackwardInput:
        ok = (seen & forward) && !(seen & (a.kind == ActionKind::kBackward ? input | weight : full)) &&
             (!lowered_ || !Crosses(st, st + 1) || (seen & Bit(ActionKind::kRecvB))) &&
             (!kSliced || s_.SliceOf(mb) == s_.slices - 1 || (seen_[Index(st, mb + 1)] & (full | input)));
        break;
      case ActionKind::kBackwardWeight:
        ok = (seen & input) && !(seen & full);
        break;
      case ActionKind::kSendF:
        ok = Crosses(st, st + 1) && (seen & forward);
        break;
      case ActionKind::kSendB:
        ok = Crosses(st, st - 1) && (seen & (full | input));
        break;
      case ActionKind::kRecvF:
        ok = Crosses(st, st - 1) && !(seen & forward);
        break;
      case ActionKind::kRecvB:
        ok = Crosses(st, st + 1) && !(seen & (full | input));
        break;
      default:
        break;
    }
    seen |= Bit(a.kind);
    return ok;
  }

  // Every (stage, microbatch) has its F and one B or one I and one W, and in
  // a lowered schedule every hand-over that crosses ranks its SEND and RECV.
  bool Complete() const {
    const std::uint8_t backward = Bit(ActionKind::kBackward);
    const std::uint8_t split = Bit(ActionKind::kBackwardInput) | Bit(ActionKind::kBackwardWeight);
    for (int st = 0; st < s_.stages; ++st) {
      const std::uint8_t* seen = &seen_[static_cast<std::size_t>(st) * s_.microbatches];
      std::uint8_t needed = Bit(ActionKind::kForward);
      if (lowered_ && Crosses(st, st - 1)) needed |= Bit(ActionKind::kRecvF) | Bit(ActionKind::kSendB);
      if (lowered_ && Crosses(st, st + 1)) needed |= Bit(ActionKind::kSendF) | Bit(ActionKind::kRecvB);
      for (int mb = 0; mb < s_.microbatches; ++mb) {
        if ((seen[mb] & needed) != needed) return false;
        if (!(seen[mb] & backward) && (seen[mb] & split) != split) return false;
      }
    }
    return true;
  }

  const Schedule& s_;
  const bool lowered_;
  std::vector<std::uint8_t> seen_;  // (stage, microbatch) -> Bit() of each kind seen so far
};

// Finds and explains the first error: each action's place and duplicates,
// then each (stage, microbatch)'s actions, then the messages.
// REQUIRES: CheckShape passed.
class Checker {
 public:
  explicit Checker(const Schedule& s) : s_(s) {}

  void Run() {
    Index();
    for (int stage = 0; stage < s_.stages; ++stage) {
      for (int mb = 0; mb < s_.microbatches; ++mb) CheckMicrobatch(stage, mb);
    }
    if (s_.IsLowered()) CheckMessages();
  }

 private:
  [[noreturn]] void FailAt(int rank, int pos, const std::string& why) const {
    const Action& a = s_.actions[rank][pos];
    throw ScheduleError(fmt::format("{}: rank {}, position {} ({}): {}\n{}", s_.name, rank, pos,
                                    ToString(a), why, FormatGrid(s_, GridMark{rank, pos}, kGridSteps)));
  }
  [[noreturn]] void Fail(const std::string& why) const {
    throw ScheduleError(fmt::format("{}: {}\n{}", s_.name, why, FormatGrid(s_, std::nullopt, kGridSteps)));
  }

  std::size_t At(int stage, int mb, int slot) const {
    return (static_cast<std::size_t>(stage) * s_.microbatches + mb) * kTracked + slot;
  }
  int Pos(int stage, int mb, ActionKind k) const { return pos_[At(stage, mb, Slot(k))]; }

  // Records the position of every action; rejects out-of-range actions,
  // actions on the wrong rank and duplicates.
  void Index() {
    pos_.assign(static_cast<std::size_t>(s_.stages) * s_.microbatches * kTracked, -1);
    for (int r = 0; r < s_.ranks; ++r) {
      const auto& row = s_.actions[r];
      for (int i = 0; i < static_cast<int>(row.size()); ++i) {
        // Both parts of an OVERLAP_F_B unit are indexed at the unit's position.
        ForEachPart(row[i], [&](const Action& a) {
          if (a.kind == ActionKind::kIdle) return;
          if (a.stage < 0 || a.stage >= s_.stages) {
            FailAt(r, i, fmt::format("stage {} does not exist (the schedule has {} stages)", a.stage, s_.stages));
          }
          if (s_.stage_rank[a.stage] != r) {
            FailAt(r, i,
                   fmt::format("stage {} lives on rank {}, so its actions cannot run on rank {}", a.stage,
                               s_.stage_rank[a.stage], r));
          }
          if (!HasMicrobatch(a.kind)) return;
          if (a.microbatch < 0 || a.microbatch >= s_.microbatches) {
            FailAt(r, i,
                   fmt::format("microbatch {} does not exist (the schedule has {} microbatches)", a.microbatch,
                               s_.microbatches));
          }
          int& seen = pos_[At(a.stage, a.microbatch, Slot(a.kind))];
          if (seen >= 0) {
            FailAt(r, i, fmt::format("{} appears twice on rank {}: at positions {} and {}", ToString(a), r, seen, i));
          }
          seen = i;
        });
      }
    }
  }

  void CheckMicrobatch(int stage, int mb) const {
    const int rank = s_.stage_rank[stage];
    const int f = Pos(stage, mb, ActionKind::kForward);
    const int b = Pos(stage, mb, ActionKind::kBackward);
    const int in = Pos(stage, mb, ActionKind::kBackwardInput);
    const int w = Pos(stage, mb, ActionKind::kBackwardWeight);
    auto name = [&](ActionKind k) { return ToString(Action{stage, k, mb}); };
    if (f < 0) {
      Fail(fmt::format("microbatch {} never runs forward through stage {}: {} is missing from rank {}",
                       mb, stage, name(ActionKind::kForward), rank));
    }
    if (b >= 0 && (in >= 0 || w >= 0)) {
      FailAt(rank, b, fmt::format("microbatch {} of stage {} has a full backward {} and also a split one "
                                  "({}); use either one B or one I and one W",
                                  mb, stage, name(ActionKind::kBackward),
                                  in >= 0 ? name(ActionKind::kBackwardInput) : name(ActionKind::kBackwardWeight)));
    }
    if (b < 0 && in < 0) {
      Fail(fmt::format("microbatch {} never runs backward through stage {}: rank {} needs {}, or {} and {}",
                       mb, stage, rank, name(ActionKind::kBackward), name(ActionKind::kBackwardInput),
                       name(ActionKind::kBackwardWeight)));
    }
    if (b < 0 && w < 0) {
      Fail(fmt::format("microbatch {} of stage {} has {} but no {}: a split backward needs both",
                       mb, stage, name(ActionKind::kBackwardInput), name(ActionKind::kBackwardWeight)));
    }
    const int first_backward = b >= 0 ? b : in;
    if (first_backward == f) {
      FailAt(rank, f,
             fmt::format("this OVERLAP_F_B unit runs both the forward and the backward of microbatch {} "
                         "of stage {}; the backward needs the forward finished first",
                         mb, stage));
    }
    if (first_backward < f) {
      FailAt(rank, first_backward, fmt::format("the backward of microbatch {} comes before its forward {} "
                                               "(position {}) on the same rank",
                                               mb, name(ActionKind::kForward), f));
    }
    if (b < 0 && w < in) {
      FailAt(rank, w, fmt::format("{} comes before {} (position {}): the weight gradient needs the input "
                                  "gradient's backward first",
                                  name(ActionKind::kBackwardWeight), name(ActionKind::kBackwardInput), in));
    }
    if (s_.slices > 1) CheckSliceOrder(stage, mb, f, first_backward);
  }

  // Slice s of a sequence runs forward after slice s-1 and backward before
  // it, on each stage. `f` and `back` are unit mb's forward and input
  // backward positions.
  void CheckSliceOrder(int stage, int mb, int f, int back) const {
    const int k = s_.slices, slice = s_.SliceOf(mb), rank = s_.stage_rank[stage];
    auto input_backward = [&](int u) {
      const int full = Pos(stage, u, ActionKind::kBackward);
      return full >= 0 ? full : Pos(stage, u, ActionKind::kBackwardInput);
    };
    auto backward_name = [&](int u) {
      return ToString(Action{stage, Pos(stage, u, ActionKind::kBackward) >= 0 ? ActionKind::kBackward
                                                                               : ActionKind::kBackwardInput, u});
    };
    if (slice > 0) {
      const int before = Pos(stage, mb - 1, ActionKind::kForward);
      if (before >= 0 && f <= before) {
        FailAt(rank, f, fmt::format("{} (slice {} of microbatch {}) runs forward before {} (slice {}, position {}): "
                                    "a slice's attention reads the keys and values of the slices before it, so "
                                    "their forwards come first",
                                    ToString(Action{stage, ActionKind::kForward, mb}), slice, s_.SequenceOf(mb),
                                    ToString(Action{stage, ActionKind::kForward, mb - 1}), slice - 1, before));
      }
    }
    if (slice < k - 1) {
      const int later = input_backward(mb + 1);
      if (later >= 0 && back <= later) {
        FailAt(rank, back, fmt::format("{} (slice {} of microbatch {}) runs backward before {} (slice {}, position "
                                       "{}): a later slice's backward sends gradients into this slice's keys and "
                                       "values, so it comes first",
                                       backward_name(mb), slice, s_.SequenceOf(mb), backward_name(mb + 1), slice + 1, later));
      }
    }
  }

  // Every hand-over between stages on different ranks is one SEND after its
  // producer and one RECV before its consumer; nothing else is a message.
  void CheckMessages() const {
    for (int stage = 0; stage < s_.stages; ++stage) {
      for (int mb = 0; mb < s_.microbatches; ++mb) {
        // Forward: stage -> stage+1.
        CheckHandOver(stage, stage + 1, mb, ActionKind::kForward, ActionKind::kSendF, ActionKind::kRecvF,
                      ActionKind::kForward);
        // Backward: stage -> stage-1.
        const ActionKind producer =
            Pos(stage, mb, ActionKind::kBackward) >= 0 ? ActionKind::kBackward : ActionKind::kBackwardInput;
        ActionKind consumer = ActionKind::kBackward;
        if (stage > 0 && Pos(stage - 1, mb, ActionKind::kBackward) < 0) consumer = ActionKind::kBackwardInput;
        CheckHandOver(stage, stage - 1, mb, producer, ActionKind::kSendB, ActionKind::kRecvB, consumer);
      }
    }
  }

  void CheckHandOver(int from, int to, int mb, ActionKind producer, ActionKind send_kind,
                     ActionKind recv_kind, ActionKind consumer) const {
    const int send = Pos(from, mb, send_kind);
    const bool exists = to >= 0 && to < s_.stages;
    const int recv = exists ? Pos(to, mb, recv_kind) : -1;
    const int from_rank = s_.stage_rank[from];
    if (!exists || s_.stage_rank[to] == from_rank) {
      // No message belongs here: the last/first stage, or a local hand-over.
      if (send < 0 && recv < 0) return;
      const std::string why = exists ? fmt::format("stages {} and {} are both on rank {} and hand over locally, "
                                                   "with no message", from, to, from_rank)
                                     : fmt::format("stage {} has no neighbour stage {}", from, to);
      FailAt(from_rank, send >= 0 ? send : recv, why);
    }
    const int produced = Pos(from, mb, producer);
    const int consumed = Pos(to, mb, consumer);
    if (send >= produced && recv >= 0 && recv <= consumed) return;  // the common, correct case

    const int to_rank = s_.stage_rank[to];
    const std::string send_name = ToString(Action{from, send_kind, mb});
    const std::string recv_name = ToString(Action{to, recv_kind, mb});
    if (send < 0) {
      FailAt(from_rank, produced, fmt::format("{} crosses to rank {} but is never sent: {} is missing after it",
                                              ToString(Action{from, producer, mb}), to_rank, send_name));
    }
    if (send < produced) {
      FailAt(from_rank, send, fmt::format("{} is sent before it is computed by {} at position {}", send_name,
                                          ToString(Action{from, producer, mb}), produced));
    }
    if (recv < 0) {
      FailAt(to_rank, consumed, fmt::format("{} needs a message from rank {} but {} is missing before it",
                                            ToString(Action{to, consumer, mb}), from_rank, recv_name));
    }
    FailAt(to_rank, consumed, fmt::format("{} waits for {}, which comes later on the same rank (position {})",
                                          ToString(Action{to, consumer, mb}), recv_name, recv));
  }

  const Schedule& s_;
  std::vector<int> pos_;  // (stage, microbatch, slot) -> position on its rank, or -1
};

}  // namespace

void CheckStructure(const Schedule& schedule) {
  CheckShape(schedule);
  if (!QuickCheck(schedule).Run()) Checker(schedule).Run();
  CheckSharding(schedule);
}

}  // namespace baton
