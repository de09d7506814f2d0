// Placing sharded data parallel's actions in a schedule (AddShardingActions,
// baton/sim.h): the gathers from the simulator's timeline of the schedule
// without them, the frees and the gradient sums after their stage's last use.
#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "baton/error.h"
#include "baton/schedule.h"
#include "baton/sim.h"

namespace baton {
namespace {

// One run of a stage's uses on a rank: where in its list it is first and
// last used, and where its gradients are last written (-1: not in it).
struct StageUse {
  int stage = -1;
  int first = -1, last = -1, last_writer = -1;
};

// Rank r's runs of uses, in order of first use: one per stage; or, where
// `split`, two for a stage whose forwards all come before its backwards
// with another stage's work between them (its forwards' run and its
// backwards'), so that it is gathered for each and freed between.
std::vector<StageUse> UsesOf(const Schedule& s, int r, bool split) {
  std::vector<StageUse> uses(static_cast<std::size_t>(s.stages));
  std::vector<int> last_forward(static_cast<std::size_t>(s.stages), -1), first_backward(last_forward);
  std::vector<int> compute;  // per position: the stage it computes, or -1
  const auto& row = s.actions[static_cast<std::size_t>(r)];
  for (int i = 0; i < static_cast<int>(row.size()); ++i) {
    compute.push_back(-1);
    ForEachPart(row[static_cast<std::size_t>(i)], [&](const Action& a) {
      if (!IsCompute(a.kind)) return;
      const auto st = static_cast<std::size_t>(a.stage);
      compute.back() = a.stage;
      StageUse& u = uses[st];
      u.stage = a.stage;
      if (u.first < 0) u.first = i;
      u.last = i;
      if (a.kind == ActionKind::kBackward || a.kind == ActionKind::kBackwardWeight) u.last_writer = i;
      if (a.kind == ActionKind::kForward) last_forward[st] = i;
      if (a.kind != ActionKind::kForward && first_backward[st] < 0) first_backward[st] = i;
    });
  }
  std::erase_if(uses, [](const StageUse& u) { return u.stage < 0; });
  if (split) {
    std::vector<StageUse> runs;
    for (const StageUse& u : uses) {
      const int f = last_forward[static_cast<std::size_t>(u.stage)], b = first_backward[static_cast<std::size_t>(u.stage)];
      const bool apart = f >= 0 && b > f &&
                         std::any_of(compute.begin() + f + 1, compute.begin() + b, [&](int st) { return st >= 0 && st != u.stage; });
      if (!apart) {
        runs.push_back(u);
        continue;
      }
      runs.push_back({u.stage, u.first, f, -1});
      runs.push_back({u.stage, b, u.last, u.last_writer});
    }
    uses = std::move(runs);
  }
  std::sort(uses.begin(), uses.end(), [](const StageUse& a, const StageUse& b) { return a.first < b.first; });
  return uses;
}

// When rank r reaches each position of its list in `sim`'s timeline (the
// end of the compute action before it, 0 before the first), and when each
// compute action starts; one entry per position.
void Clock(const Schedule& s, const SimResult& sim, int r, std::vector<double>* reach, std::vector<double>* start) {
  const auto& row = s.actions[static_cast<std::size_t>(r)];
  const auto& timeline = sim.timeline[static_cast<std::size_t>(r)];
  reach->assign(row.size(), 0.0);
  start->assign(row.size(), 0.0);
  std::size_t next = 0;
  double clock = 0.0;
  for (std::size_t i = 0; i < row.size(); ++i) {
    (*reach)[i] = clock;
    (*start)[i] = clock;
    while (next < timeline.size() && !IsCompute(timeline[next].action.kind)) ++next;  // collectives
    if (IsCompute(row[i].kind) && next < timeline.size()) {
      (*start)[i] = timeline[next].start;
      clock = timeline[next].end;
      ++next;
    }
  }
}

}  // namespace

Schedule AddShardingActions(const Schedule& schedule, ZeroStage zero, const SimOptions& options) {
  if (!zero.has_actions()) {
    throw ScheduleError(
        fmt::format("sharding: ZeRO stage {}: the schedule's actions are for stages 2 and 3", zero.number()));
  }
  SimOptions timed = options;
  timed.shards = {};
  timed.record_timeline = true;
  const SimResult sim = Simulate(schedule, timed);
  Schedule out = schedule;
  for (int r = 0; r < schedule.ranks; ++r) {
    const auto& row = schedule.actions[static_cast<std::size_t>(r)];
    std::vector<double> reach, start;
    Clock(schedule, sim, r, &reach, &start);
    // Without a pipeline (one rank), sharded data parallel's groups of
    // layers: each gathered for its forwards and again for its backwards.
    const std::vector<StageUse> uses = UsesOf(schedule, r, zero.shards_parameters() && schedule.ranks == 1);
    // Before position i, the actions to insert; after it, likewise.
    std::vector<std::vector<Action>> before(row.size()), after(row.size());
    if (zero.shards_parameters()) {
      // As late as possible, from the last first use back: each gather
      // ends by its stage's first use and by the start of the gather after
      // it (the rank's gathers run one after another, in order of first
      // use), from the latest position the rank reaches early enough.
      // Where none is, it and the gathers before it go to the list's start,
      // exposed as little as they can be.
      std::vector<int> at(uses.size(), 0);
      double deadline = std::numeric_limits<double>::infinity();
      for (std::size_t k = uses.size(); k-- > 0;) {
        const StageUse& u = uses[k];
        const double g = options.shards.gather_time.empty()
                             ? 0.0
                             : options.shards.gather_time[static_cast<std::size_t>(u.stage)];
        const double end_by = std::min(deadline, start[static_cast<std::size_t>(u.first)]);
        int j = u.first;
        while (j >= 0 && reach[static_cast<std::size_t>(j)] + g > end_by) --j;
        if (j < 0) break;  // this one and those before it: at the start
        at[k] = j;
        deadline = reach[static_cast<std::size_t>(j)];
      }
      for (std::size_t k = 0; k < uses.size(); ++k) {
        before[static_cast<std::size_t>(at[k])].push_back({uses[k].stage, ActionKind::kUnshard});
        after[static_cast<std::size_t>(uses[k].last)].push_back({uses[k].stage, ActionKind::kReshard});
      }
    }
    for (const StageUse& u : uses) {
      if (u.last_writer >= 0) after[static_cast<std::size_t>(u.last_writer)].push_back({u.stage, ActionKind::kReduceGrad});
    }
    std::vector<Action>& placed = out.actions[static_cast<std::size_t>(r)];
    placed.clear();
    for (std::size_t i = 0; i < row.size(); ++i) {
      placed.insert(placed.end(), before[i].begin(), before[i].end());
      placed.push_back(row[i]);
      // The frees before the sums: a sum needs the gradients, not the parameters.
      std::stable_partition(after[i].begin(), after[i].end(),
                            [](const Action& a) { return a.kind == ActionKind::kReshard; });
      placed.insert(placed.end(), after[i].begin(), after[i].end());
    }
  }
  return out;
}

}  // namespace baton
