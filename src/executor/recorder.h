// What a rank keeps of its actions, beside the executor: the flight record
// (the last actions, always kept, written when a deadline passes) and, while
// `baton bench` records, every action's times on the host's clocks or the
// device's (a GPU's events).
#ifndef BATON_EXECUTOR_RECORDER_H_
#define BATON_EXECUTOR_RECORDER_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "baton/action.h"
#include "baton/events.h"
#include "baton/stage_device.h"

namespace baton {

// The last kSize actions a rank started, with their start and end on the
// monotonic clock: a ring, no allocation, always on.
class FlightRecord {
 public:
  // Notes `action` of `step` starting now; returns its entry for Done.
  std::size_t Start(std::int64_t step, const Action& action);
  void Done(std::size_t entry);
  // Writes the record as JSON to `path` (best effort, never throws: the job
  // is being aborted), saying so on standard error, for world rank `rank`
  // at step `step`; `injected`: what BATON_FAULT injects on the rank at
  // that step (a slowdown, a slow wire), each a JSON string, or none.
  void Write(const std::string& path, int rank, std::int64_t step, const std::vector<std::string>& injected = {}) const;

 private:
  struct Flight {
    std::int64_t step = 0;
    Action action;
    double start = 0, end = -1;  // end < 0: still running
  };
  static constexpr std::size_t kSize = 64;
  std::array<Flight, kSize> ring_{};
  std::size_t next_ = 0;
};

// Records actions and waits into the caller's events while recording is on.
class ActionClock {
 public:
  explicit ActionClock(RankDevice& device) : dev_(device) {}

  // Appends to `events` from now (null: off). On a device with a clock,
  // compute actions are timed by it too.
  void SetRecorder(std::vector<ActionEvent>* events) {
    events_ = events;
    device_clock_ = events != nullptr && dev_.has_clock();
  }
  bool recording() const { return events_ != nullptr; }

  // An action's start, on the wall and CPU clocks (and the device's mark).
  struct Stamp {
    double wall = 0.0, cpu = 0.0;
    int mark = -1;  // the device clock's mark, if it has one
  };
  Stamp Mark() const;
  // Appends action (kind, stage, microbatch) from `start` to now.
  void Record(ActionKind kind, int stage, int microbatch, Stamp start);
  // Appends a wait, from `start` (monotonic seconds) to now.
  void RecordWait(ActionKind kind, int stage, int microbatch, double start);

  // A slow rank (BATON_FAULT's slow=): each compute action from now takes
  // `factor` times its own CPU time, the rest spent busy here. 1: full
  // speed.
  void SetSlowdown(double factor) { slow_ = factor; }
  // Sums each compute action's own time, for the adaptive plans: the
  // thread's CPU time (waits excluded, and what other processes on its
  // core took meanwhile). On (true) or off.
  void MeasureCompute(bool on) {
    measuring_ = on;
    busy_ = 0.0;
  }
  // The sum since the last call (seconds), and zeroes it.
  double TakeComputeSeconds() { return std::exchange(busy_, 0.0); }

  // At a step's start with `marks` device marks to come (Executor::StartDeviceClock).
  void StartDeviceClock(std::size_t marks);
  // After the step: the compute events from `first` on retimed by the
  // device's clock (Executor::ApplyDeviceClock).
  double ApplyDeviceClock(std::size_t first, double step_start);

 private:
  RankDevice& dev_;
  double slow_ = 1.0;
  bool measuring_ = false;  // MeasureCompute
  double busy_ = 0.0;
  std::vector<ActionEvent>* events_ = nullptr;
  bool device_clock_ = false;          // recording, with the device's clock
  std::vector<double> clock_seconds_;  // ApplyDeviceClock's reading (reserved once)
};

}  // namespace baton

#endif  // BATON_EXECUTOR_RECORDER_H_
