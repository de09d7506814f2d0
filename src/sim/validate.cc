#include "baton/sim.h"

namespace baton {

void Validate(const Schedule& schedule) {
  CheckStructure(schedule);
  // Unit costs are enough: whether every rank can finish depends on the
  // order of actions, not on how long they take.
  SimOptions unit;
  unit.record_timeline = false;
  Simulate(schedule, unit);
}

}  // namespace baton
