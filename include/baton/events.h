// What a rank's executor records of a step while `baton bench` measures
// it: every compute action and every wait, timed.
#ifndef BATON_EVENTS_H_
#define BATON_EVENTS_H_

#include "baton/action.h"

namespace baton {

// One timed interval of a step, for `baton bench`: a compute action (kind
// F, B, I or W) or a wait for a message (kind RECV_F or RECV_B: a receive;
// SEND_F or SEND_B: a send's completion; REDUCE_GRAD: the gradient sums). Times are seconds on the rank's
// monotonic clock; on a device with its own clock (a GPU), a compute
// action's are where the device ran it, once ApplyDeviceClock has put them
// on the host's timeline.
struct ActionEvent {
  ActionKind kind = ActionKind::kForward;
  int stage = 0;
  int microbatch = 0;
  double start = 0.0;
  double end = 0.0;
  double cpu = 0.0;  // compute actions: CPU seconds the rank's thread spent in it
  // Compute actions on a device with a clock: its marks (RankDevice::MarkClock)
  // at the action's start and end; -1 otherwise.
  int start_mark = -1, end_mark = -1;
};

}  // namespace baton

#endif  // BATON_EVENTS_H_
