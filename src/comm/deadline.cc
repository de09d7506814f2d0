#include "baton/deadline.h"

#include <sched.h>

#include <cstdio>
#include <cstdlib>
#include <thread>

namespace baton {

bool Deadline::Poll(int spins) {
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

void Deadline::Expire(int rank, const std::string& what, const std::function<void()>& hook,
                      const std::function<void()>& abort) const {
  std::fprintf(stderr,
               "baton: rank %d: timed out waiting for %s: waited %.1f s, limit %.1f s (pipeline.wait_timeout_s); "
               "aborting the job\n",
               rank, what.c_str(), waited_s(), limit_s_);
  if (hook) hook();
  std::fflush(stderr);
  abort();
  std::_Exit(3);  // in case the abort returned
}

}  // namespace baton
