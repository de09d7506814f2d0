// Helpers shared by the schedule generators (private to src/schedule).
#ifndef BATON_SRC_SCHEDULE_GENERATOR_UTIL_H_
#define BATON_SRC_SCHEDULE_GENERATOR_UTIL_H_

#include <fmt/format.h>

#include <string>
#include <string_view>

#include "baton/error.h"
#include "baton/schedule.h"

namespace baton::generators {

// Keeps schedules within what a person could mean (and memory can hold).
inline constexpr long long kMaxActions = 100'000'000;

// Throws "<schedule>: <rule> (got <value>)" unless ok.
template <typename T>
void Require(bool ok, std::string_view schedule, std::string_view rule, T value) {
  if (!ok) throw ScheduleError(fmt::format("{}: {} (got {})", schedule, rule, value));
}

inline void CheckCommon(std::string_view name, int p, int m, int v) {
  Require(p >= 1, name, "the number of ranks must be at least 1", p);
  Require(m >= 1, name, "the number of microbatches must be at least 1", m);
  Require(v >= 1, name, "the number of chunks must be at least 1", v);
  const long long actions = 3LL * p * m * v;
  if (actions > kMaxActions) {
    throw ScheduleError(fmt::format("{}: {} ranks x {} microbatches x {} chunks is too large (more than {} actions)",
                                    name, p, m, v, kMaxActions));
  }
}

// A schedule of p ranks and p*v stages placed by `placement`, no actions yet.
inline Schedule Empty(std::string name, int p, int m, int v, Placement placement) {
  Schedule s;
  s.name = std::move(name);
  s.ranks = p;
  s.stages = p * v;
  s.microbatches = m;
  s.stage_rank.resize(s.stages);
  for (int stage = 0; stage < s.stages; ++stage) s.stage_rank[stage] = StageRank(placement, stage, p);
  s.actions.resize(p);
  return s;
}

// The unit of the b-th input backward (counting from 0) of a stage with k
// slices a sequence: microbatch after microbatch, each one's slices last
// to first (j x k + k - 1, ..., j x k + 0).
inline int BackwardUnit(int b, int k) { return UnitOf(SequenceOfUnit(b, k), k - 1 - SliceOfUnit(b, k), k); }

inline Action F(int stage, int mb) { return {stage, ActionKind::kForward, mb}; }
inline Action B(int stage, int mb) { return {stage, ActionKind::kBackward, mb}; }
inline Action I(int stage, int mb) { return {stage, ActionKind::kBackwardInput, mb}; }
inline Action W(int stage, int mb) { return {stage, ActionKind::kBackwardWeight, mb}; }

}  // namespace baton::generators

#endif  // BATON_SRC_SCHEDULE_GENERATOR_UTIL_H_
