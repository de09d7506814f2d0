// Operations on a simulation's result.
#include "baton/sim.h"

namespace baton {

void ScaleTimes(SimResult& result, double factor) {
  for (auto& row : result.timeline) {
    for (TimedAction& a : row) {
      a.start *= factor;
      a.end *= factor;
    }
  }
  result.makespan *= factor;
  for (RankResult& r : result.per_rank) {
    r.start *= factor;
    r.end *= factor;
    r.busy *= factor;
    r.work *= factor;
    r.span *= factor;
    r.reduce_end *= factor;
    r.exposed_reduce *= factor;
    r.update_end *= factor;
    r.clip_wait *= factor;
  }
}

}  // namespace baton
