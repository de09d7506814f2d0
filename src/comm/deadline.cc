#include "baton/deadline.h"

#include <sched.h>

#include <cstdio>
#include <cstdlib>
#include <thread>

#include <fmt/format.h>

#include "baton/comm.h"

namespace baton {

namespace {
thread_local WhileWaiting* g_while_waiting = nullptr;
}  // namespace

WhileWaiting::WhileWaiting(std::function<void()> work, bool timed)
    : work_(std::move(work)), timed_(timed), outer_(g_while_waiting) {
  g_while_waiting = this;
}
WhileWaiting::~WhileWaiting() { g_while_waiting = outer_; }

bool WhileWaiting::Run() {
  bool timed = false;
  for (WhileWaiting* w = g_while_waiting; w != nullptr; w = w->outer_) {
    timed = timed || w->timed_;
    w->work_();
  }
  return timed;
}

bool Deadline::Poll(int spins) {
  WhileWaiting::Run();
  if (spins < 64) return false;
  if ((spins & 63) != 0) {
    sched_yield();
    return false;
  }
  const double waited = waited_s();
  if (waited >= limit_s_) return true;
  if (waited > 0.005) {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  } else {
    sched_yield();
  }
  return false;
}

std::string Deadline::Message(int rank, const std::string& what) const {
  return fmt::format("rank {}: timed out waiting for {}: waited {:.1f} s, limit {:.1f} s (pipeline.wait_timeout_s)",
                     rank, what, waited_s(), limit_s_);
}

void Deadline::Expire(int rank, const std::string& what, const std::function<void()>& hook,
                      const std::function<void()>& abort) const {
  std::fprintf(stderr, "baton: %s; aborting the job\n", Message(rank, what).c_str());
  if (hook) hook();
  std::fflush(stderr);
  abort();
  std::_Exit(3);  // in case the abort returned
}

std::string DescribeWait(const WaitInfo& info, int world_peer) {
  std::string what = info.what;
  if (info.stage >= 0 || info.microbatch >= 0) {
    const std::string action =
        *info.action ? fmt::format(" (action {}{}{})", info.stage, info.action, info.microbatch) : std::string();
    what += fmt::format(" of stage {} microbatch {}{} {} rank {}", info.stage, info.microbatch, action,
                        std::string(info.what).rfind("SEND", 0) == 0 ? "to" : "from", world_peer);
  }
  return what;
}

}  // namespace baton
