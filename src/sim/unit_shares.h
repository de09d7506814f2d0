// Private to src/sim: what each unit (a microbatch, or a slice of one)
// costs and sends, as shares of a whole microbatch's, for the simulator's
// shaped pass (sequence slices, uneven microbatches).
#ifndef BATON_SRC_SIM_UNIT_SHARES_H_
#define BATON_SRC_SIM_UNIT_SHARES_H_

#include <cstddef>
#include <vector>

#include "baton/schedule.h"
#include "baton/sim.h"

namespace baton {

struct UnitShares {
  // Per unit its cost share: one for every stage (stride 0), or per stage
  // at stage x stride + unit (stride = the schedule's units).
  std::size_t stride = 0;
  std::vector<double> cost;
  std::vector<double> message_time;  // per unit: its message's time on the wire (0: it sends nothing)
};

// Each unit's shares: MicrobatchShares::unit_cost and unit_message where
// given (each unit its own), else its slice's share (`slice_cost`,
// `slice_message`, per slice) times its microbatch's (MicrobatchShares::cost
// and message, 1 where absent).
UnitShares ShapeUnits(const Schedule& s, const SimOptions& o, const std::vector<double>& slice_cost,
                      const std::vector<double>& slice_message);

}  // namespace baton

#endif  // BATON_SRC_SIM_UNIT_SHARES_H_
