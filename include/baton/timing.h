// Clocks and the one statistic baton reports timings by.
#ifndef BATON_TIMING_H_
#define BATON_TIMING_H_

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <vector>

namespace baton {

// Seconds on the monotonic clock (only differences mean anything).
inline double MonotonicSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// CPU seconds the calling thread has used.
inline double ThreadCpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// The seconds one pass of a probe takes, as every product-rate probe
// measures it: one pass to warm up (and to size the rounds), then the best
// of 5 rounds of at least 50 ms each. `time(n)` runs n passes back to back
// and returns their seconds, on whatever clock times the work (the host's,
// or a GPU's events).
inline double BestSecondsPerPass(const std::function<double(int)>& time) {
  const double once = std::max(time(1), 1e-7);
  const int passes = static_cast<int>(std::clamp(std::ceil(0.05 / once), 1.0, 1e6));
  double best = 1e300;
  for (int round = 0; round < 5; ++round) best = std::min(best, time(passes) / passes);
  return best;
}

// The median (the mean of the middle two for an even count); 0 for none.
inline double Median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace baton

#endif  // BATON_TIMING_H_
