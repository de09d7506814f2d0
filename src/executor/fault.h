// Faults injected for testing how runs fail (BATON_FAULT, fault.cc): what
// they are, how they are read and checked, and how they fire, from
// outside the real paths: the executor through its hook (ActionFaults, an
// ActionHook), the loop and recovery at their named points.
#ifndef BATON_EXECUTOR_FAULT_H_
#define BATON_EXECUTOR_FAULT_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "action_hook.h"
#include "baton/env.h"
#include "baton/plan.h"

namespace baton {

// A fault to inject, for testing how runs fail (BATON_FAULT, see fault.cc):
// on `rank`, at step `step`, when action `action` ("F", "B", "I", "W",
// sharded data parallel's "UNSHARD" or "REDUCE_GRAD", "checkpoint",
// "evaluate", or "start": before the run's first step) is reached: stall forever, exit at
// once, die by SIGKILL, send itself SIGTERM (a scheduler's stop) and go on,
// or wait there until the process is sent a stop signal (at most
// kFaultWaitSeconds), so that a test stops a run at the step it chose
// however fast the machine is; or (pause=SECONDS) be paused as a debugger,
// a stalled node or a long swap-in pauses a process: stopped whole
// (SIGSTOP, every thread), a child process sends it SIGCONT after SECONDS
// (at most kMaxPauseSeconds).
inline constexpr int kFaultWaitSeconds = 600;
inline constexpr double kMaxPauseSeconds = 600;
// "replan" is the adaptive plans' first placement change at or after STEP
// (SwapPlan, before the state moves), where the mode may also be "error":
// the rank fails to build the new plan, and every rank goes back to the
// old one.
//
// Beside it, or alone, a slow rank for the adaptive plans ("RANK:STEP:slow=
// FACTOR[:until=STEP]", the two joined by a comma): from step STEP (until
// step `until`, not included; -1: to the end) every compute action on the
// rank takes `factor` times its own time, the rest spent busy on its own
// core, as a slower device would.
struct SlowRank {
  int rank = -1;  // -1: none
  std::int64_t step = -1, until = -1;
  double factor = 1.0;
};
// A slow wire: every message from rank `from` to rank `to` (world ranks)
// arrives `seconds` late, from step `step` until step `until` (-1: the end).
struct SlowLink {
  int from = -1, to = -1;  // -1: none
  std::int64_t step = -1, until = -1;
  double seconds = 0.0;
};
struct Fault {
  enum Mode { kNone, kStall, kExit, kKill, kTerm, kWait, kError, kPause };
  Mode mode = kNone;
  double pause_s = 0;  // kPause: how long
  int rank = -1;
  std::int64_t step = -1;
  std::string action;
  SlowRank slow;
  SlowLink link;
  // Beside the action's, a fault in a recovery from a lost rank
  // ("RANK:STEP:recovery:MODE" or "RANK:STEP:regroup:MODE", MODE stall,
  // exit or kill): on the job's rank RANK (its rank at launch, whatever
  // the survivors' world renumbers it), in the first recovery from a loss
  // in step STEP or later; `recovery` as the rank joins it, before the
  // survivors agree on who is lost; `regroup` once they have agreed, while
  // they build their new world.
  struct InRecovery {
    Mode mode = kNone;
    double pause_s = 0;
    int rank = -1;
    std::int64_t step = -1;
    std::string point;  // "recovery" or "regroup"
  } in_recovery;
  std::string spec;  // BATON_FAULT's text, for messages
  // Faults of actions on other ranks (one a rank at most, e.g.
  // "2:30:F:kill,0:60:F:wait"): each rank injects its own (Own), the
  // others kept for the checks.
  std::vector<Fault> more;
  bool any() const {
    return mode != kNone || slow.rank >= 0 || link.from >= 0 || in_recovery.mode != kNone || !more.empty();
  }
  // This fault with rank `r`'s fault of an action in place of the first
  // one's (none if `r` has none).
  Fault Own(int r) const;
  // Whether step `at` is slowed on rank `on`.
  bool Slows(int on, std::int64_t at) const {
    return slow.rank >= 0 && on == slow.rank && at >= slow.step && (slow.until < 0 || at < slow.until);
  }
  // What a message from rank `from` to rank `to` arrives late by in step `at` (seconds; 0: in time).
  double Delay(int from, int to, std::int64_t at) const {
    const bool on = link.from == from && link.to == to && at >= link.step && (link.until < 0 || at < link.until);
    return on ? link.seconds : 0.0;
  }
};
// The most a slow fault may slow a rank (a test's run would crawl beyond),
// and the longest a slow wire may hold a message.
inline constexpr double kMaxSlowFactor = 100.0;
inline constexpr double kMaxLinkDelaySeconds = 10.0;
// Reads BATON_FAULT ("RANK:STEP:ACTION:MODE", e.g. "1:3:F:stall", and/or
// "RANK:STEP:slow=FACTOR[:until=STEP]" and/or
// "SRC>DST:STEP:delay=SECONDS[:until=STEP]", comma-joined); none if unset.
// Throws ConfigError if it is malformed. Read through `env` (tests give a
// fake's variables).
Fault FaultFromEnvironment(const Env& env = Env::Default());
// The fault this run injects: none if the run resumed after the fault's
// step (a requeued job repeats its environment; the fault was the earlier
// run's), said once on rank 0; else `fault`.
Fault FaultForRun(const Fault& fault, int rank, std::int64_t first_step);
// Throws ConfigError if `fault` (none: nothing) could never fire in a run
// of `world` ranks over steps [first_step, last_step]: a rank the job does
// not have, a step the run does not take, an action the fault's rank does
// not run (checked on that rank, `rank`, against its `plan`), a
// checkpoint at a step where none is written (`checkpoint_every` 0: none),
// or an evaluation ("evaluate": after an epoch's last step, and the run's)
// at a step where none runs (`epoch_steps` 0: the run evaluates nothing).
void CheckFault(const Fault& fault, int world, int rank, const RankPlan& plan, std::int64_t first_step,
                std::int64_t last_step, std::int64_t checkpoint_every, std::int64_t epoch_steps = 0);
// What a fault does to the rank it fires on: to its process (SIGKILL,
// _Exit, SIGSTOP), unless the rank is a thread of one process (tests on
// thread ranks), whose faults act on its own thread through the effects
// set for it.
class FaultEffects {
 public:
  virtual ~FaultEffects() = default;
  // kill (`code` 137) or exit (7): the rank dies here, its connections
  // closed as a process's would be, and nothing of it runs on.
  [[noreturn]] virtual void Die(int code) = 0;
  // stall: the rank hangs here for good, its watch alive.
  [[noreturn]] virtual void Stall() = 0;
  // pause: the rank stops whole for `seconds` (its watch silent too), then
  // goes on.
  virtual void Pause(double seconds) = 0;
};
// For its lifetime, the faults this thread fires act through `effects`
// (nested: the innermost).
class ScopedFaultEffects {
 public:
  explicit ScopedFaultEffects(FaultEffects& effects);
  ~ScopedFaultEffects();
  ScopedFaultEffects(const ScopedFaultEffects&) = delete;
  ScopedFaultEffects& operator=(const ScopedFaultEffects&) = delete;

 private:
  FaultEffects* outer_;
};
// Triggers `fault` if it matches (rank, step, action).
void MaybeInjectFault(const Fault& fault, int rank, std::int64_t step, std::string_view action);
// The recovery's fault (Fault::in_recovery) at `point` ("recovery" or
// "regroup") of a recovery from a loss in step `step`, on the job's rank
// `job_rank`: fires, or returns.
void MaybeInjectRecoveryFault(const Fault& fault, int job_rank, std::int64_t step, std::string_view point);

// BATON_FAULT's faults of a rank as the executor's hook: its actions'
// faults fire (MaybeInjectFault), its slow rank slows the compute.
class ActionFaults final : public ActionHook {
 public:
  explicit ActionFaults(Fault fault) : fault_(std::move(fault)) {}
  void Before(int rank, std::int64_t step, std::string_view action) const override;
  double Slowdown(int rank, std::int64_t step) const override;
  std::vector<std::string> Injected(int rank, std::int64_t step) const override;

 private:
  Fault fault_;
};

// BATON_FAULT's faults of one rank's run, fired from outside the run's
// real paths: the loop, a re-plan and a recovery call these hooks at their
// named points, and a real run has none (RunSetup::faults is null), so no
// real path reads a fault. Made by the run's setup from the fault it
// checked (FaultForRun, CheckFault) for world rank `rank`.
class RunFaults {
 public:
  RunFaults(Fault fault, int rank) : fault_(std::move(fault)), rank_(rank), actions_(fault_) {}
  // The executor's hook: the actions' faults, the slow rank.
  ActionHook* actions() { return &actions_; }
  // A named point of the loop ("start", "evaluate", "checkpoint") at step `step`.
  void At(std::int64_t step, std::string_view point) const {
    if (fault_.mode != Fault::kNone) MaybeInjectFault(fault_, rank_, step, point);
  }
  // A re-plan after step `done`: the first at or after the fault's step is
  // its "replan" point (the fault fires here); Building, inside the ranks'
  // agreement on the new plan, then throws RunError where the fault is this
  // rank's failure to build it (mode error), until BuildFailed says it
  // fired.
  void Replanning(std::int64_t done);
  void Building(std::int64_t done) const;
  void BuildFailed();
  // A recovery from a loss in step `step`, at `point` ("recovery",
  // "regroup"), on the job's rank `job_rank`.
  void InRecovery(int job_rank, std::int64_t step, std::string_view point) const {
    MaybeInjectRecoveryFault(fault_, job_rank, step, point);
  }
  // A slow wire from this rank: the rank it leads to, and how late a
  // message on it is in step `step` (seconds; 0: none).
  int WireTo() const { return fault_.link.to; }
  double WireDelay(std::int64_t step) const { return fault_.Delay(rank_, fault_.link.to, step); }
  // Throws RunError where this rank's fault was asked for and never fired
  // (at the run's end: a test it would have made was not made).
  void CheckFired() const;

 private:
  Fault fault_;
  int rank_;
  ActionFaults actions_;
  bool replanning_ = false;  // this re-plan is the fault's
};

}  // namespace baton

#endif  // BATON_EXECUTOR_FAULT_H_
