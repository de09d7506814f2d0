// Private to src/sim: whether a schedule can run to its end.
#ifndef BATON_SRC_SIM_COMPLETION_H_
#define BATON_SRC_SIM_COMPLETION_H_

#include "baton/schedule.h"

namespace baton {

// Runs the simulator over the schedule with unit costs but without carrying
// times between ranks: whether every rank can finish depends on the order of
// actions, not on how long they take. Throws the ScheduleError Simulate
// would, naming each stuck rank and what it waits for, if no rank can go on.
// REQUIRES: CheckStructure() passed.
void CheckCompletion(const Schedule& schedule);

}  // namespace baton

#endif  // BATON_SRC_SIM_COMPLETION_H_
