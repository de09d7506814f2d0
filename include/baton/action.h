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
//   UNSHARD, RESHARD, REDUCE_GRAD  PyTorch's FSDP/DDP hooks, no microbatch:
//           parsed and kept so files round-trip; no-ops in baton.
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
  kIdle,
};

inline constexpr int kNoMicrobatch = -1;

struct Action {
  std::int32_t stage = 0;
  ActionKind kind = ActionKind::kIdle;
  std::int32_t microbatch = kNoMicrobatch;  // kNoMicrobatch for kinds without one

  friend bool operator==(const Action&, const Action&) = default;
};

// F, B, I or W.
constexpr bool IsCompute(ActionKind k) {
  return k == ActionKind::kForward || k == ActionKind::kBackward ||
         k == ActionKind::kBackwardInput || k == ActionKind::kBackwardWeight;
}
// SEND_F, RECV_F, SEND_B or RECV_B.
constexpr bool IsComm(ActionKind k) {
  return k == ActionKind::kSendF || k == ActionKind::kRecvF || k == ActionKind::kSendB ||
         k == ActionKind::kRecvB;
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

// "F", "SEND_B", ... ; "" for kIdle.
std::string_view KindName(ActionKind kind);

// The action's text form, e.g. "2F0", "1SEND_B3", "0UNSHARD"; "" for idle.
std::string ToString(const Action& action);

// Parses one cell in PyTorch's text form. Surrounding blanks are ignored; an
// empty cell gives an idle action. Strict: trailing characters, a sign, a
// number out of int32 range, an unknown kind, or a missing/extra microbatch
// are errors. Throws ScheduleError quoting the cell with `where` (e.g.
// "rank 1, column 4") prefixed.
Action ParseAction(std::string_view cell, std::string_view where);

}  // namespace baton

#endif  // BATON_ACTION_H_
