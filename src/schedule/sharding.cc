// The sharding actions' rules (UNSHARD, RESHARD, REDUCE_GRAD; baton/schedule.h
// CheckStructure): one walk over each rank's list, in its order.
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "baton/error.h"
#include "baton/schedule.h"

namespace baton {
namespace {

constexpr int kGridSteps = 24;

// B and W write a stage's parameter gradients; F and I do not.
bool WritesGradients(ActionKind k) { return k == ActionKind::kBackward || k == ActionKind::kBackwardWeight; }

class ShardingCheck {
 public:
  explicit ShardingCheck(const Schedule& s) : s_(s) {}

  void Run() {
    for (int r = 0; r < s_.ranks; ++r) Rank(r);
  }

 private:
  struct Stage {
    bool sharded = false;    // an UNSHARD or RESHARD names it: its parameters rest as a shard
    int gathered_at = -1;    // the UNSHARD gathering it now, or -1
    int writers_left = 0;    // its B and W not yet run
    int reduced_at = -1;     // its REDUCE_GRAD, or -1
  };

  [[noreturn]] void FailAt(int rank, int pos, const std::string& why) const {
    throw ScheduleError(fmt::format("{}: rank {}, position {} ({}): {}\n{}", s_.name, rank, pos,
                                    ToString(s_.actions[rank][pos]), why,
                                    FormatGrid(s_, GridMark{rank, pos}, kGridSteps)));
  }

  // The rank's stages before its walk: which are sharded, and their
  // gradient writers.
  void Prepare(int r) {
    stages_.assign(static_cast<std::size_t>(s_.stages), Stage{});
    for (const Action& unit : s_.actions[r]) {
      ForEachPart(unit, [&](const Action& a) {
        if (a.stage < 0 || a.stage >= s_.stages) return;
        Stage& st = stages_[static_cast<std::size_t>(a.stage)];
        if (a.kind == ActionKind::kUnshard || a.kind == ActionKind::kReshard) st.sharded = true;
        if (WritesGradients(a.kind)) ++st.writers_left;
      });
    }
  }

  void Rank(int r) {
    Prepare(r);
    const auto& row = s_.actions[r];
    for (int i = 0; i < static_cast<int>(row.size()); ++i) {
      ForEachPart(row[i], [&](const Action& a) { See(r, i, a); });
    }
  }

  void See(int r, int i, const Action& a) {
    if (a.kind == ActionKind::kIdle || a.stage < 0 || a.stage >= s_.stages) return;
    Stage& st = stages_[static_cast<std::size_t>(a.stage)];
    switch (a.kind) {
      case ActionKind::kUnshard:
        if (st.gathered_at >= 0) {
          FailAt(r, i, fmt::format("stage {} is gathered already (UNSHARD at position {}, no RESHARD since)",
                                   a.stage, st.gathered_at));
        }
        st.gathered_at = i;
        return;
      case ActionKind::kReshard:
        if (st.gathered_at < 0) {
          FailAt(r, i, fmt::format("stage {} is not gathered here: a RESHARD frees what an UNSHARD before it "
                                   "gathered",
                                   a.stage));
        }
        st.gathered_at = -1;
        return;
      case ActionKind::kReduceGrad:
        if (st.reduced_at >= 0) {
          FailAt(r, i, fmt::format("stage {}'s gradients are summed twice (REDUCE_GRAD at position {} too)", a.stage,
                                   st.reduced_at));
        }
        if (st.writers_left > 0) {
          FailAt(r, i, fmt::format("stage {}'s gradients are summed before its last backward: {} more B or W "
                                   "of it follow on this rank",
                                   a.stage, st.writers_left));
        }
        st.reduced_at = i;
        return;
      default:
        break;
    }
    if (!IsCompute(a.kind)) return;
    if (st.sharded && st.gathered_at < 0) {
      FailAt(r, i, fmt::format("{} uses stage {} while its parameters are a shard: an UNSHARD of stage {} must "
                               "come before it (with no RESHARD between)",
                               ToString(a), a.stage, a.stage));
    }
    if (WritesGradients(a.kind)) --st.writers_left;
  }

  const Schedule& s_;
  std::vector<Stage> stages_;
};

}  // namespace

void CheckSharding(const Schedule& schedule) {
  bool any = false;
  for (const auto& row : schedule.actions) {
    for (const Action& a : row) any = any || IsSharding(a.kind);
  }
  if (any) ShardingCheck(schedule).Run();
}

namespace {

// The lowest free slot of `held` (per slot: taken or not), taken.
int TakeWindow(std::vector<char>& held) {
  const auto at = static_cast<std::size_t>(std::find(held.begin(), held.end(), 0) - held.begin());
  if (at == held.size()) held.push_back(0);
  held[at] = 1;
  return static_cast<int>(at);
}

}  // namespace

ShardingWindows PlaceShardingWindows(const std::vector<Action>& actions, int stages,
                                     const std::vector<char>& held_to_end) {
  ShardingWindows out;
  out.window.assign(actions.size(), -1);
  std::vector<char> params, grads;
  std::vector<int> param_of(static_cast<std::size_t>(stages), -1), grad_of(param_of);
  for (std::size_t i = 0; i < actions.size(); ++i) {
    const Action& a = actions[i];
    if (a.kind == ActionKind::kIdle || a.stage < 0 || a.stage >= stages) continue;
    const auto st = static_cast<std::size_t>(a.stage);
    switch (a.kind) {
      case ActionKind::kUnshard:
        out.window[i] = param_of[st] = TakeWindow(params);
        break;
      case ActionKind::kReshard:
        if (param_of[st] >= 0) params[static_cast<std::size_t>(param_of[st])] = 0;
        param_of[st] = -1;
        break;
      case ActionKind::kReduceGrad:
        if (grad_of[st] >= 0 && (held_to_end.empty() || !held_to_end[st])) {
          grads[static_cast<std::size_t>(grad_of[st])] = 0;
        }
        grad_of[st] = -1;
        break;
      case ActionKind::kBackward:
      case ActionKind::kBackwardWeight:
        if (grad_of[st] < 0) out.window[i] = grad_of[st] = TakeWindow(grads);
        break;
      default:
        break;
    }
  }
  out.parameter_windows = static_cast<int>(params.size());
  out.gradient_windows = static_cast<int>(grads.size());
  return out;
}

}  // namespace baton
