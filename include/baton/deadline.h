// How every blocking wait in baton polls, and how it ends when its deadline
// passes: a wait spins briefly, then yields its core (ranks may outnumber
// cores and GPUs), and sleeps only once it has been long, so that a short
// wait is not stretched by a sleep's granularity; past the deadline, the
// rank says what it waited for and the job ends, so that no rank hangs.
#ifndef BATON_DEADLINE_H_
#define BATON_DEADLINE_H_

#include <chrono>
#include <functional>
#include <string>

namespace baton {

class Deadline {
 public:
  // Starts now; `limit_s` is pipeline.wait_timeout_s.
  explicit Deadline(double limit_s) : start_(std::chrono::steady_clock::now()), limit_s_(limit_s) {}

  // Between two polls that found the wait not done (spins counts them from
  // 0): backs off, and says whether the deadline has passed (it looks at
  // the clock every 64 polls).
  bool Poll(int spins);

  double waited_s() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }
  double limit_s() const { return limit_s_; }

  // The end of a wait whose deadline passed: one line on stderr, "baton:
  // rank R: timed out waiting for WHAT: waited W s, limit L s
  // (pipeline.wait_timeout_s); aborting the job", then `hook` if any (the
  // executor's flight record), then `abort` (the job's: MPI_Abort). Never
  // returns.
  // "rank R: timed out waiting for WHAT: waited W s, limit L s
  // (pipeline.wait_timeout_s)": what every expiry says, however the job
  // then ends.
  std::string Message(int rank, const std::string& what) const;

  [[noreturn]] void Expire(int rank, const std::string& what, const std::function<void()>& hook,
                           const std::function<void()>& abort) const;

 private:
  std::chrono::steady_clock::time_point start_;
  double limit_s_;
};

// Work a thread does while any of its waits polls: a late wire (LateWire,
// baton/comm.h) posting the messages that have come due, so that no wait
// elsewhere holds them; a lost-rank watch ending the wait (RankWatch,
// baton/watch.h). Nested, for the object's life: Deadline::Poll runs every
// one of its thread, innermost first, and the in-process transport's waits.
// `timed`: the work has things that come due (the late wire's messages),
// so a wait polls it often; otherwise it looks for an event now and then.
class WhileWaiting {
 public:
  explicit WhileWaiting(std::function<void()> work, bool timed = false);
  ~WhileWaiting();
  WhileWaiting(const WhileWaiting&) = delete;
  WhileWaiting& operator=(const WhileWaiting&) = delete;
  // Runs this thread's work, if it has any; whether any of it is timed.
  static bool Run();

 private:
  std::function<void()> work_;
  bool timed_;
  WhileWaiting* outer_;
};

}  // namespace baton

#endif  // BATON_DEADLINE_H_
