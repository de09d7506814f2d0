// Structural checks of a schedule: placement, completeness, per-rank order,
// and the SEND/RECV pairing of lowered schedules. No timing: whether the
// schedule can run to completion is the simulator's question (Validate).
#include <array>

#include <fmt/format.h>

#include "baton/error.h"
#include "baton/schedule.h"

namespace baton {
namespace {

constexpr int kGridSteps = 24;

// Index of a kind among those that carry a microbatch and may appear once
// per (stage, microbatch).
constexpr int kTracked = 8;
int Slot(ActionKind k) {
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

class Checker {
 public:
  explicit Checker(const Schedule& s) : s_(s) {}

  void Run() {
    CheckShape();
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

  void CheckShape() const {
    if (s_.ranks < 1 || static_cast<int>(s_.actions.size()) != s_.ranks) {
      throw ScheduleError(fmt::format("{}: the schedule has {} rows for {} ranks", s_.name,
                                      s_.actions.size(), s_.ranks));
    }
    if (s_.stages < 1 || static_cast<int>(s_.stage_rank.size()) != s_.stages) {
      throw ScheduleError(fmt::format("{}: {} stages but a placement for {}", s_.name, s_.stages,
                                      s_.stage_rank.size()));
    }
    if (s_.microbatches < 1) {
      throw ScheduleError(fmt::format("{}: the schedule has no microbatch", s_.name));
    }
    for (int stage = 0; stage < s_.stages; ++stage) {
      if (s_.stage_rank[stage] < 0 || s_.stage_rank[stage] >= s_.ranks) {
        throw ScheduleError(fmt::format("{}: stage {} is placed on rank {}, which does not exist ({} ranks)",
                                        s_.name, stage, s_.stage_rank[stage], s_.ranks));
      }
    }
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

void CheckStructure(const Schedule& schedule) { Checker(schedule).Run(); }

}  // namespace baton
