// The action: one instruction of a pipeline schedule.
//
// An action is (stage, kind, microbatch). Its text form is PyTorch's
// torch.distributed.pipelining one, "{stage}{KIND}{microbatch}", so schedule
// files move between the two tools:
//
//   F       forward of one microbatch through one stage                 "2F0"
//   B       full backward (input and weight gradient together)          "1B3"
//   I       backward for the input gradient only (zero-bubble split)    "1I3"
//   W       backward for the weight gradient only                       "1W3"
//   SEND_F  stage's output to the next stage   (stage = sender)         "0SEND_F1"
//   RECV_F  stage's input from the previous    (stage = receiver)       "1RECV_F1"
//   SEND_B  stage's input gradient to the previous (stage = sender)     "1SEND_B1"
//   RECV_B  stage's output gradient from the next  (stage = receiver)   "0RECV_B1"
//   UNSHARD, RESHARD, REDUCE_GRAD  sharded data parallel (PyTorch's FSDP
//           hooks), no microbatch: gather a stage's parameters from their
//           shards, free the gathered copy, sum the stage's gradients over
//           the replicas. CheckSharding (schedule.h) states their rules;
//           files keep them; the runtime does not run them yet.
//   OVERLAP_F_B  one stage's F and another stage's full backward B run as
//           one unit (DeepSeek's DualPipe "F&B"), so one's communication
//           hides behind the other's compute.     "(0F3;1B2)OVERLAP_F_B"
//           PyTorch writes the unit as its two sub-actions in parentheses,
//           the F first; its ScheduleDualPipeV only ever pairs an F with a
//           full backward B, and that is the one form baton reads and writes.
//           Here `stage`/`microbatch` are the F's, backward_stage /
//           backward_microbatch the B's.
//
// An empty CSV cell is an idle slot, kept as kind kIdle.
#ifndef BATON_ACTION_H_
#define BATON_ACTION_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace baton {

enum class ActionKind : std::uint8_t {
  kForward,
  kBackward,
  kBackwardInput,
  kBackwardWeight,
  kSendF,
  kRecvF,
  kSendB,
  kRecvB,
  kUnshard,
  kReshard,
  kReduceGrad,
  kOverlapFB,
  kIdle,
};

inline constexpr int kNoMicrobatch = -1;

struct Action {
  std::int32_t stage = 0;
  ActionKind kind = ActionKind::kIdle;
  std::int32_t microbatch = kNoMicrobatch;  // kNoMicrobatch for kinds without one
  // kOverlapFB only: the full backward run together with the forward above.
  std::int32_t backward_stage = -1;
  std::int32_t backward_microbatch = kNoMicrobatch;

  friend bool operator==(const Action&, const Action&) = default;
};

// F(forward_stage, forward_microbatch) and B(backward_stage,
// backward_microbatch) as one OVERLAP_F_B unit.
constexpr Action OverlapFB(int forward_stage, int forward_microbatch, int backward_stage, int backward_microbatch) {
  return {forward_stage, ActionKind::kOverlapFB, forward_microbatch, backward_stage, backward_microbatch};
}

// F, B, I, W, or an OVERLAP_F_B unit of an F and a B.
constexpr bool IsCompute(ActionKind k) {
  return k == ActionKind::kForward || k == ActionKind::kBackward || k == ActionKind::kBackwardInput ||
         k == ActionKind::kBackwardWeight || k == ActionKind::kOverlapFB;
}

// Calls fn(part) for each single compute action `a` runs: `a` itself, or for
// an OVERLAP_F_B unit its F and then its B. Every pass that tracks
// dependencies, messages or memory looks at actions through this.
template <typename Fn>
constexpr void ForEachPart(const Action& a, Fn&& fn) {
  if (a.kind == ActionKind::kOverlapFB) {
    fn(Action{a.stage, ActionKind::kForward, a.microbatch});
    fn(Action{a.backward_stage, ActionKind::kBackward, a.backward_microbatch});
  } else {
    fn(a);
  }
}
// SEND_F, RECV_F, SEND_B or RECV_B.
constexpr bool IsComm(ActionKind k) {
  return k == ActionKind::kSendF || k == ActionKind::kRecvF || k == ActionKind::kSendB ||
         k == ActionKind::kRecvB;
}
// UNSHARD, RESHARD or REDUCE_GRAD: sharded data parallel's collectives.
constexpr bool IsSharding(ActionKind k) {
  return k == ActionKind::kUnshard || k == ActionKind::kReshard || k == ActionKind::kReduceGrad;
}
// B or I: the action that produces the stage's input gradient.
constexpr bool IsInputBackward(ActionKind k) {
  return k == ActionKind::kBackward || k == ActionKind::kBackwardInput;
}
// Kinds written without a microbatch: UNSHARD, RESHARD, REDUCE_GRAD (and idle).
constexpr bool HasMicrobatch(ActionKind k) {
  return k != ActionKind::kUnshard && k != ActionKind::kReshard &&
         k != ActionKind::kReduceGrad && k != ActionKind::kIdle;
}

// "F", "SEND_B", "OVERLAP_F_B", ... ; "" for kIdle.
std::string_view KindName(ActionKind kind);

// The action's text form, e.g. "2F0", "1SEND_B3", "0UNSHARD",
// "(0F3;1B2)OVERLAP_F_B"; "" for idle.
std::string ToString(const Action& action);

// Parses one cell in PyTorch's text form. Surrounding blanks are ignored; an
// empty cell gives an idle action. Strict: trailing characters, a sign, a
// number out of int32 range, an unknown kind, or a missing/extra microbatch
// are errors, and an OVERLAP_F_B unit must hold exactly an F then a B.
// Throws ScheduleError quoting the cell with `where` (e.g. "rank 1, column
// 4") prefixed.
Action ParseAction(std::string_view cell, std::string_view where);

}  // namespace baton

#endif  // BATON_ACTION_H_
