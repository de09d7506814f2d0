// The executor's one opening for what is not its work: a hook told of
// each of a training step's compute and sharding actions as the action
// starts (BATON_FAULT's faults, fault.h, are the one hook there is; a real
// run sets none and the executor reads nothing of faults).
#ifndef BATON_EXECUTOR_ACTION_HOOK_H_
#define BATON_EXECUTOR_ACTION_HOOK_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace baton {

class ActionHook {
 public:
  virtual ~ActionHook() = default;
  // Before action `action` ("F", "B", "I", "W", "UNSHARD", "REDUCE_GRAD")
  // of step `step` on world rank `rank`.
  virtual void Before(int rank, std::int64_t step, std::string_view action) const = 0;
  // The factor on the rank's compute in step `step` (1: its own speed).
  virtual double Slowdown(int rank, std::int64_t step) const = 0;
  // What the hook does to the rank in step `step`, for the flight record
  // ("slow=2 (every compute action)", "delay=0.01 s to rank 1").
  virtual std::vector<std::string> Injected(int rank, std::int64_t step) const = 0;
};

}  // namespace baton

#endif  // BATON_EXECUTOR_ACTION_HOOK_H_
