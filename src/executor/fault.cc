// Fault injection, for testing only: BATON_FAULT="RANK:STEP:ACTION:MODE".
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>
#include <utility>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <limits>
#include <optional>
#include <thread>
#include <tuple>

#include "baton/error.h"
#include "baton/signals.h"
#include "fault.h"

namespace baton {

namespace {

// Sharded data parallel's collectives where the plan runs them (ZeRO 2
// and 3): a fault can stop a rank before it joins one.
bool IsShardingFault(ActionKind kind, const RankPlan& plan) {
  return plan.sharding.active() && IsSharding(kind) && kind != ActionKind::kReshard;
}

}  // namespace

namespace {

// One comma-separated part of BATON_FAULT ("RANK:STEP:...", or
// "SRC>DST:STEP:..."), read into a Fault: its fields, and each mistake as
// one ConfigError naming the whole variable and every form.
class FaultPart {
 public:
  FaultPart(const std::string& whole_text, const std::string& part) : text_(whole_text) {
    std::size_t start = 0;
    for (std::size_t colon; (colon = part.find(':', start)) != std::string::npos; start = colon + 1) {
      parts_.push_back(part.substr(start, colon - start));
    }
    parts_.push_back(part.substr(start));
    if (parts_.size() < 3 || parts_.size() > 4) throw Bad("four fields needed");
  }

  // Into `f`: a slow window, a slow wire or the action fault (at most one of each).
  void ReadInto(Fault& f) const {
    if (const std::size_t arrow = parts_[0].find('>'); arrow != std::string::npos) {
      ReadLink(arrow, f);
      return;
    }
    const int rank = Rank(parts_[0], "RANK");
    const std::int64_t step = Whole(parts_[1], "STEP");
    if (parts_[2].rfind("slow=", 0) == 0) {
      ReadSlow(rank, step, f);
    } else {
      ReadAction(rank, step, f);
    }
  }

 private:
  ConfigError Bad(const std::string& why) const {
    return ConfigError(
        fmt::format("BATON_FAULT=\"{}\": {} (expected RANK:STEP:ACTION:MODE with ACTION F, B, I, W, "
                    "UNSHARD, REDUCE_GRAD, checkpoint, evaluate, start or replan and MODE stall, exit, kill, term, "
                    "wait, pause=SECONDS or (replan only) error; and/or RANK:STEP:recovery:MODE or "
                    "RANK:STEP:regroup:MODE with MODE stall, exit, kill or pause=SECONDS; and/or RANK:STEP:slow=FACTOR[:until=STEP]; and/or "
                    "SRC>DST:STEP:delay=SECONDS[:until=STEP]; joined by commas)",
                    text_, why));
  }
  std::int64_t Whole(const std::string& text, const char* what) const {
    std::size_t used = 0;
    std::int64_t v = 0;
    try {
      v = std::stoll(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != text.size()) throw Bad(fmt::format("{} must be a whole number, got '{}'", what, text));
    return v;
  }
  // A rank: a whole number from 0 to the largest int (a job's ranks).
  int Rank(const std::string& text, const char* what) const {
    const std::int64_t v = Whole(text, what);
    if (v < 0 || v > std::numeric_limits<int>::max()) {
      throw Bad(fmt::format("{} is a rank, from 0 to {}, got {}", what, std::numeric_limits<int>::max(), text));
    }
    return static_cast<int>(v);
  }
  // MODE pause=SECONDS: the seconds (0 where `mode` is another).
  double Pause(const std::string& mode) const {
    if (mode.rfind("pause=", 0) != 0) return 0;
    const std::string seconds = mode.substr(6);
    const double s = Number(seconds);
    if (!(s > 0.0 && s <= kMaxPauseSeconds)) {
      throw Bad(fmt::format("pause=SECONDS takes a number above 0, at most {} (how long the process is stopped), got "
                            "'{}'",
                            kMaxPauseSeconds, seconds));
    }
    return s;
  }
  // A number, or NaN if `text` is not one whole.
  static double Number(const std::string& text) {
    std::size_t used = 0;
    double v = 0;
    try {
      v = std::stod(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    return used == 0 || used != text.size() ? std::nan("") : v;
  }
  // The end of a window: until=STEP, after its first step; -1: none.
  std::int64_t Until(const char* what, std::int64_t step) const {
    if (parts_.size() < 4) return -1;
    if (parts_[3].rfind("until=", 0) != 0) throw Bad(fmt::format("the field after {} is until=STEP", what));
    const std::int64_t u = Whole(parts_[3].substr(6), "until=STEP");
    if (u <= step) throw Bad(fmt::format("until={} must come after the window's first step {}", u, step));
    return u;
  }

  // A slow wire: SRC>DST, delay=SECONDS, and where it ends.
  void ReadLink(std::size_t arrow, Fault& f) const {
    if (f.link.from >= 0) throw Bad("one slow link at most");
    SlowLink& w = f.link;
    w.from = Rank(parts_[0].substr(0, arrow), "SRC");
    w.to = Rank(parts_[0].substr(arrow + 1), "DST");
    if (w.from == w.to) throw Bad(fmt::format("a link joins two ranks, not rank {} to itself", w.from));
    w.step = Whole(parts_[1], "STEP");
    if (parts_[2].rfind("delay=", 0) != 0) throw Bad("a link's fault is delay=SECONDS");
    const std::string seconds = parts_[2].substr(6);
    w.seconds = Number(seconds);
    if (!(w.seconds > 0.0 && w.seconds <= kMaxLinkDelaySeconds)) {
      throw Bad(fmt::format("delay=SECONDS takes a number above 0, at most {} (what each message is late by), got '{}'",
                            kMaxLinkDelaySeconds, seconds));
    }
    w.until = Until("delay=SECONDS", w.step);
  }

  // A slow rank: FACTOR, and where it ends.
  void ReadSlow(int rank, std::int64_t step, Fault& f) const {
    if (f.slow.rank >= 0) throw Bad("one slow rank at most");
    SlowRank& w = f.slow;
    const std::string factor = parts_[2].substr(5);
    w.factor = Number(factor);
    if (!(w.factor >= 1.0 && w.factor <= kMaxSlowFactor)) {
      throw Bad(fmt::format("slow=FACTOR takes a number from 1 to {} (the times a compute action takes), got '{}'",
                            kMaxSlowFactor, factor));
    }
    w.until = Until("slow=FACTOR", step);
    w.rank = rank;
    w.step = step;
  }

  // A fault in a recovery: where, and MODE (stall, exit or kill).
  void ReadRecovery(int rank, std::int64_t step, Fault& f) const {
    if (f.in_recovery.mode != Fault::kNone) throw Bad("one fault in a recovery at most");
    Fault::InRecovery& r = f.in_recovery;
    r.rank = rank;
    r.step = step;
    r.point = parts_[2];
    static const std::pair<const char*, Fault::Mode> kModes[] = {
        {"stall", Fault::kStall}, {"exit", Fault::kExit}, {"kill", Fault::kKill}};
    if ((r.pause_s = Pause(parts_[3])) > 0) {
      r.mode = Fault::kPause;
      return;
    }
    const auto mode = std::find_if(std::begin(kModes), std::end(kModes),
                                   [&](const auto& m) { return parts_[3] == m.first; });
    if (mode == std::end(kModes)) {
      throw Bad(fmt::format("a fault in a recovery ({}) takes the mode stall, exit, kill or pause=SECONDS, not '{}'",
                            r.point, parts_[3]));
    }
    r.mode = mode->second;
  }

  // The fault of an action: ACTION and MODE.
  void ReadAction(int rank, std::int64_t step, Fault& f) const {
    if (parts_.size() != 4) throw Bad("four fields needed");
    if (parts_[2] == "recovery" || parts_[2] == "regroup") {
      ReadRecovery(rank, step, f);
      return;
    }
    if (f.mode != Fault::kNone) {
      // Another rank's: kept beside the first.
      if (f.rank == rank || std::any_of(f.more.begin(), f.more.end(), [&](const Fault& m) { return m.rank == rank; })) {
        throw Bad(fmt::format("one fault of an action a rank at most (rank {} has two)", rank));
      }
      Fault other;
      ReadAction(rank, step, other);
      f.more.push_back(std::move(other));
      return;
    }
    f.rank = rank;
    f.step = step;
    f.action = parts_[2];
    static const char* const kActions[] = {"F",          "B",          "I",     "W",        "UNSHARD", "REDUCE_GRAD",
                                           "checkpoint", "start",      "evaluate", "replan"};
    if (std::find(std::begin(kActions), std::end(kActions), f.action) == std::end(kActions)) {
      throw Bad("unknown action '" + f.action + "'");
    }
    static const std::pair<const char*, Fault::Mode> kModes[] = {{"stall", Fault::kStall}, {"exit", Fault::kExit},
                                                                 {"kill", Fault::kKill},   {"term", Fault::kTerm},
                                                                 {"wait", Fault::kWait},   {"error", Fault::kError}};
    if ((f.pause_s = Pause(parts_[3])) > 0) {
      f.mode = Fault::kPause;
      return;
    }
    const auto mode = std::find_if(std::begin(kModes), std::end(kModes),
                                   [&](const auto& m) { return parts_[3] == m.first; });
    if (mode == std::end(kModes)) throw Bad("unknown mode '" + parts_[3] + "'");
    if (mode->second == Fault::kError && f.action != "replan") {
      throw Bad("mode error is for the action replan (a failed move the run survives)");
    }
    f.mode = mode->second;
  }

  const std::string& text_;
  std::vector<std::string> parts_;
};

void ReadFaultPart(const std::string& s, const std::string& part, Fault& f) { FaultPart(s, part).ReadInto(f); }

}  // namespace

void ActionFaults::Before(int rank, std::int64_t step, std::string_view action) const {
  if (fault_.mode != Fault::kNone) MaybeInjectFault(fault_, rank, step, action);
}

double ActionFaults::Slowdown(int rank, std::int64_t step) const {
  return fault_.Slows(rank, step) ? fault_.slow.factor : 1.0;
}

void RunFaults::Replanning(std::int64_t done) {
  replanning_ = fault_.action == "replan" && done >= fault_.step;  // the first change at or after its step
  if (replanning_) At(fault_.step, "replan");
}

void RunFaults::Building(std::int64_t done) const {
  if (replanning_ && fault_.mode == Fault::kError && fault_.rank == rank_) {
    throw RunError(fmt::format("BATON_FAULT: rank {} failed to build the new plan after step {}", rank_, done));
  }
}

void RunFaults::BuildFailed() {
  if (replanning_ && fault_.mode == Fault::kError) fault_.mode = Fault::kNone;  // it fired
}

void RunFaults::CheckFired() const {
  if (fault_.mode != Fault::kNone && fault_.rank == rank_) {
    throw RunError(fmt::format("BATON_FAULT: the fault at rank {} step {} action {} did not fire", fault_.rank,
                               fault_.step, fault_.action));
  }
}

std::vector<std::string> ActionFaults::Injected(int rank, std::int64_t step) const {
  std::vector<std::string> out;
  if (fault_.Slows(rank, step)) out.push_back(fmt::format("slow={} (every compute action)", fault_.slow.factor));
  if (fault_.link.from == rank && fault_.Delay(rank, fault_.link.to, step) > 0) {
    out.push_back(fmt::format("delay={} s to rank {}", fault_.link.seconds, fault_.link.to));
  }
  return out;
}

Fault FaultFromEnvironment(const Env& env) {
  const std::optional<std::string> text = env.Variable("BATON_FAULT");
  if (!text || text->empty()) return {};
  const std::string& s = *text;
  Fault f;
  f.spec = s;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = s.find(',', start);
    ReadFaultPart(s, s.substr(start, comma == std::string::npos ? std::string::npos : comma - start), f);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return f;
}

Fault Fault::Own(int r) const {
  Fault f = *this;
  if (more.empty() || rank == r) return f;
  f.mode = kNone;
  f.rank = -1;
  f.step = -1;
  f.action.clear();
  for (const Fault& m : more) {
    if (m.rank != r) continue;
    f.mode = m.mode;
    f.pause_s = m.pause_s;
    f.rank = m.rank;
    f.step = m.step;
    f.action = m.action;
  }
  return f;
}

Fault FaultForRun(const Fault& fault, int rank, std::int64_t first_step) {
  Fault f = fault;
  if (first_step <= 1) return f;
  // A slow window that ended before this run is the earlier run's too.
  if (f.slow.rank >= 0 && f.slow.until >= 0 && f.slow.until <= first_step) f.slow = {};
  if (f.link.from >= 0 && f.link.until >= 0 && f.link.until <= first_step) f.link = {};
  if (f.in_recovery.mode != Fault::kNone && f.in_recovery.step < first_step) f.in_recovery = {};
  if (f.mode == Fault::kNone || f.step >= first_step) return f;
  if (rank == 0) {
    std::fprintf(stderr,
                 "baton: BATON_FAULT's fault at step %lld is before this run (resumed after step %lld): it was the "
                 "run's before, not injected again\n",
                 static_cast<long long>(f.step), static_cast<long long>(first_step - 1));
  }
  f.mode = Fault::kNone;
  f.rank = -1;
  return f;
}

void CheckFault(const Fault& f, int world, int rank, const RankPlan& plan, std::int64_t first_step,
                std::int64_t last_step, std::int64_t checkpoint_every, std::int64_t epoch_steps) {
  if (!f.any()) return;
  const std::string& spec = f.spec;
  auto never = [&](const std::string& why) {
    return ConfigError(fmt::format("BATON_FAULT={}: {}: the fault would never fire, so a test built on it would "
                                   "test nothing",
                                   Quote(spec), why));
  };
  auto in_job = [&](int r) {
    if (r < 0 || r >= world) {
      throw never(fmt::format("rank {} is not in this job ({} ranks: 0..{})", r, world, world - 1));
    }
  };
  // A window of steps: it may have begun before a resumed run.
  auto window = [&](std::int64_t step, std::int64_t until) {
    if (step > last_step) throw never(fmt::format("step {} is past the run's last step {}", step, last_step));
    if (until > last_step + 1) {
      throw never(fmt::format("until={} is past the run's last step {} (leave until out: to the end)", until,
                              last_step));
    }
  };
  if (f.slow.rank >= 0) {
    in_job(f.slow.rank);
    window(f.slow.step, f.slow.until);
  }
  if (f.link.from >= 0) {
    in_job(f.link.from);
    in_job(f.link.to);
    window(f.link.step, f.link.until);
  }
  for (const Fault& m : f.more) in_job(m.rank);  // the rest checked on their ranks (Own)
  // Whether a recovery comes is the run's to find (a loss in its steps).
  if (f.in_recovery.mode != Fault::kNone) {
    in_job(f.in_recovery.rank);
    if (f.in_recovery.step < first_step || f.in_recovery.step > last_step) {
      throw never(fmt::format("step {} is not in this run (steps {}..{})", f.in_recovery.step, first_step, last_step));
    }
  }
  if (f.mode == Fault::kNone) return;
  in_job(f.rank);
  if (f.step < first_step || f.step > last_step) {
    throw never(fmt::format("step {} is not in this run (steps {}..{}{})", f.step, first_step, last_step,
                            first_step > 1 ? fmt::format(", resumed after step {}", first_step - 1) : ""));
  }
  if (f.action == "replan") return;  // whether a re-plan comes is the run's to find: EndRun says if none did
  if (f.action == "evaluate") {
    if (epoch_steps <= 0 || (f.step % epoch_steps != 0 && f.step != last_step)) {
      throw never(epoch_steps <= 0 ? std::string("the run evaluates nothing")
                                   : fmt::format("no evaluation runs after step {} (epochs of {} steps)", f.step,
                                                 epoch_steps));
    }
    return;
  }
  if (f.action == "start") {
    if (f.step != first_step) throw never(fmt::format("the run starts at step {}, not {}", first_step, f.step));
    return;
  }
  if (f.action == "checkpoint") {
    if (checkpoint_every <= 0 || f.step % checkpoint_every != 0) {
      throw never(checkpoint_every <= 0 ? std::string("the run writes no checkpoints")
                                        : fmt::format("no checkpoint is written at step {} (checkpoint.every_steps "
                                                      "{})",
                                                      f.step, checkpoint_every));
    }
    return;
  }
  if (rank != f.rank) return;
  std::vector<std::string> kinds;
  for (const Instruction& in : plan.step) {
    if (!IsCompute(in.action.kind) && !IsShardingFault(in.action.kind, plan)) continue;
    const std::string name(KindName(in.action.kind));
    if (name == f.action) return;
    if (std::find(kinds.begin(), kinds.end(), name) == kinds.end()) kinds.push_back(name);
  }
  throw never(fmt::format("rank {} runs no {} action in this schedule (it runs {})", f.rank, f.action,
                          fmt::join(kinds, ", ")));
}

namespace {
thread_local FaultEffects* t_effects = nullptr;
}  // namespace

ScopedFaultEffects::ScopedFaultEffects(FaultEffects& effects) : outer_(t_effects) { t_effects = &effects; }
ScopedFaultEffects::~ScopedFaultEffects() { t_effects = outer_; }

void MaybeInjectFault(const Fault& f, int rank, std::int64_t step, std::string_view action) {
  if (f.mode == Fault::kNone || f.mode == Fault::kError || f.rank != rank || f.step != step || f.action != action) {
    return;  // kError: thrown where the run survives it (SwapPlan)
  }
  // Once: at the first of the step's actions of its kind (a pause or a
  // stop signal the rank lives through is not repeated at the next).
  thread_local std::tuple<int, std::int64_t, std::string> fired{-1, -1, ""};
  if (fired == std::tuple<int, std::int64_t, std::string>{rank, step, std::string(action)}) return;
  fired = {rank, step, std::string(action)};
  std::fprintf(stderr, "baton: rank %d: injected fault (BATON_FAULT): %s at step %lld, %.*s\n", rank,
               f.mode == Fault::kStall  ? "stalling"
               : f.mode == Fault::kExit ? "exiting"
               : f.mode == Fault::kTerm ? "sending itself SIGTERM"
               : f.mode == Fault::kWait ? "waiting for a stop signal (SIGTERM or SIGUSR1)"
               : f.mode == Fault::kPause ? fmt::format("paused for {} s (SIGSTOP, then SIGCONT)", f.pause_s).c_str()
                                        : "killed",
               static_cast<long long>(step), static_cast<int>(action.size()), action.data());
  std::fflush(stderr);
  if (FaultEffects* effects = t_effects) {  // a thread rank's own
    switch (f.mode) {
      case Fault::kStall:
        effects->Stall();  // neither returns
        return;
      case Fault::kExit:
        effects->Die(7);
        return;
      case Fault::kKill:
        effects->Die(128 + SIGKILL);
        return;
      case Fault::kPause:
        effects->Pause(f.pause_s);
        return;
      default:
        break;  // a stop signal, or a wait for one: the process's, as below
    }
  }
  switch (f.mode) {
    case Fault::kStall:
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    case Fault::kExit:
      std::_Exit(7);
    case Fault::kKill:
      ::kill(::getpid(), SIGKILL);
      std::_Exit(9);
    case Fault::kTerm:  // as a scheduler stopping the job would, to this rank alone
      ::kill(::getpid(), SIGTERM);
      break;
    case Fault::kWait: {  // until a scheduler's stop arrives: a test stops the run at the step it chose
      if (!StopSignals::Active()) throw RunError("BATON_FAULT: wait: nothing here notes stop signals");
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(kFaultWaitSeconds);
      while (StopSignals::Received() == 0) {
        if (std::chrono::steady_clock::now() > give_up) {
          throw RunError(fmt::format("BATON_FAULT: rank {} waited {} s at step {} for a stop signal; none came", rank,
                                     kFaultWaitSeconds, step));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      break;
    }
    case Fault::kPause: {
      // Stopped whole, as a debugger or a stalled node stops it: a child
      // wakes it (nothing of a stopped process runs).
      const pid_t self = ::getpid();
      const pid_t child = ::fork();
      if (child == 0) {
        // Nothing of the rank's held open: its connections and its output
        // (mpirun waits for the output's end) end with the rank.
        ::close_range(0, ~0U, 0);
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // the rank ended while paused (mpirun ended it): so does its waker
        if (::getppid() != self) ::_exit(0);
        const auto ns = static_cast<long long>(f.pause_s * 1e9);
        timespec t{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
        while (::nanosleep(&t, &t) != 0) {
        }
        if (::getppid() == self) ::kill(self, SIGCONT);
        ::_exit(0);
      }
      if (child < 0) throw RunError("BATON_FAULT: pause: fork failed");
      ::raise(SIGSTOP);
      ::waitpid(child, nullptr, 0);
      break;
    }
    case Fault::kNone:
    case Fault::kError:
      break;
  }
}

void MaybeInjectRecoveryFault(const Fault& f, int job_rank, std::int64_t step, std::string_view point) {
  const Fault::InRecovery& r = f.in_recovery;
  if (r.mode == Fault::kNone || r.rank != job_rank || step < r.step || r.point != point) return;
  Fault now;
  now.mode = r.mode;
  now.pause_s = r.pause_s;
  now.rank = job_rank;
  now.step = step;
  now.action = fmt::format("in the recovery ({})", point);
  MaybeInjectFault(now, job_rank, step, now.action);
}

}  // namespace baton
