// Private to src/sim: the simulator's options checked against a schedule,
// apart from the simulation itself.
#ifndef BATON_SRC_SIM_CHECK_OPTIONS_H_
#define BATON_SRC_SIM_CHECK_OPTIONS_H_

#include "baton/schedule.h"
#include "baton/sim.h"

namespace baton {

// Throws ScheduleError naming the field, the value and the rule for options
// that do not fit `schedule` or are out of range (negative or non-finite
// costs, per-stage and per-rank lists of the wrong length, ...): before a
// simulation reads any of them.
void CheckOptions(const Schedule& schedule, const SimOptions& options);

}  // namespace baton

#endif  // BATON_SRC_SIM_CHECK_OPTIONS_H_
