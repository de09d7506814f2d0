// Private to src/sim: what the collectives after a step's compute add to
// each rank's end (a tied head's exchange, the gradient sums, the sharding
// collectives, the optimizer's step), apart from the simulator's loop.
#ifndef BATON_SRC_SIM_COLLECTIVES_H_
#define BATON_SRC_SIM_COLLECTIVES_H_

#include <vector>

#include "baton/schedule.h"
#include "baton/sim.h"

namespace baton {

// Adds them to `res` (its ranks' end, stages and makespan filled in by the
// simulation): each rank's reduce_end and exposed_reduce, and the makespan.
// `grad_end`: with gradient sums, per stage, its last B or W's end;
// `comm_free`: with sharding, per rank, when its communication resource
// frees (else empty).
void AddCollectives(const Schedule& s, const SimOptions& o, const std::vector<double>& grad_end,
                    const std::vector<double>& comm_free, SimResult& res);

// Adds the optimizer's step (SimOptions::update, not empty) to `res`
// after AddCollectives: each rank's update_end, clip_wait and busy time,
// the makespan (the latest update_end) and the bubble rates.
void AddUpdates(const Schedule& s, const SimOptions& o, SimResult& res);

}  // namespace baton

#endif  // BATON_SRC_SIM_COLLECTIVES_H_
