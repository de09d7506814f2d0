#include "baton/sim.h"
#include "completion.h"

namespace baton {

void Validate(const Schedule& schedule) {
  CheckStructure(schedule);
  CheckCompletion(schedule);
}

}  // namespace baton
