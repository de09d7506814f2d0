// The executor: interprets one rank's lowered schedule, action by action,
// over the rank's stages, ring stores and message buffers. Everything is
// sized and allocated in the constructor; a step allocates nothing.
#ifndef BATON_RUNTIME_EXECUTOR_H_
#define BATON_RUNTIME_EXECUTOR_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "baton/comm.h"
#include "baton/config.h"
#include "baton/data.h"
#include "baton/schedule.h"
#include "baton/sim.h"
#include "baton/stage_device.h"
#include "baton/store.h"
#include "stage.h"

namespace baton {

// One timed interval of a step, for `baton bench`: a compute action, or a
// wait for a receive or for a send's completion. Times are seconds on the
// rank's monotonic clock.
struct ActionEvent {
  enum Kind : std::uint8_t { kF, kB, kI, kW, kWaitRecvF, kWaitRecvB, kWaitSend };
  Kind kind = kF;
  int stage = 0;
  int microbatch = 0;
  double start = 0.0;
  double end = 0.0;
};

// A fault to inject, for testing how runs fail (BATON_FAULT, see fault.cc):
// on `rank`, at step `step`, when action `action` ("F", "B", "I", "W", or
// "checkpoint") is reached: stall forever, exit at once, or die by SIGKILL.
struct Fault {
  enum Mode { kNone, kStall, kExit, kKill };
  Mode mode = kNone;
  int rank = -1;
  std::int64_t step = -1;
  std::string action;
};
// Reads BATON_FAULT ("RANK:STEP:ACTION:MODE", e.g. "1:3:F:stall"); none if
// unset. Throws ConfigError if it is malformed.
Fault FaultFromEnvironment();
// Triggers `fault` if it matches (rank, step, action).
void MaybeInjectFault(const Fault& fault, int rank, std::int64_t step, std::string_view action);

struct StepStats {
  double loss_sum = 0.0;     // sum of per-sample losses (last stage's rank)
  std::int64_t correct = 0;  // correct predictions (last stage's rank)
  std::int64_t samples = 0;  // samples whose loss this rank computed
};

class Executor {
 public:
  // REQUIRES: `lowered` passed Validate() and has transport.size() ranks;
  // `bounds` are the first layers of each stage (PartitionLayers). Stages,
  // rings and message buffers live on `device` (the host, or a GPU), which
  // carries the messages; `device` must outlive the executor.
  Executor(const TrainConfig& config, const Schedule& lowered, const SimResult& sim, const std::vector<int>& bounds,
           Transport& transport, RankDevice& device);

  // One training step on `batch` (inputs on the first stage's rank, labels on
  // the last's). Gradients accumulate into the stages' gradient buffers,
  // averaged over the whole batch.
  StepStats RunStep(const Batch& batch);
  // Forward-only pass of `samples` samples (evaluation); host pointers.
  StepStats Evaluate(const float* inputs, const std::int32_t* labels, std::int64_t samples);

  // Records every action and wait of the following steps into `events`
  // (appended; null stops recording). Reserve EventsPerStep() per step
  // beforehand and recording allocates nothing.
  void SetRecorder(std::vector<ActionEvent>* events) { events_ = events; }
  std::size_t EventsPerStep() const;

  // The step being run (for the flight record and fault injection).
  void set_step(std::int64_t step) { step_ = step; }
  void set_fault(const Fault& fault) { fault_ = fault; }
  // Writes the last actions this rank ran or was running, with timestamps,
  // as JSON (on a deadline's expiry).
  void WriteFlightRecord(const std::string& path) const;

  std::vector<std::unique_ptr<Stage>>& stages() { return stages_; }  // local, ascending stage index
  std::vector<std::unique_ptr<RingStore>>& stores() { return stores_; }
  int batch_rows() const { return rows_; }
  // Features leaving stage s (known on every rank, for every stage).
  int stage_out_features(int s) const { return width_out_[s]; }

 private:
  // Local stage index of global stage s (or -1).
  int Local(int s) const { return local_[s]; }
  float* InboxF(int s, int j) { return inbox_f_[Local(s)] + std::size_t(j) * rows_ * width_in_[s]; }
  float* InboxB(int s, int j) { return inbox_b_[Local(s)] + std::size_t(j) * rows_ * width_out_[s]; }
  float* OutboxF(int s, int j) { return outbox_f_[Local(s)] + std::size_t(j) * rows_ * width_out_[s]; }
  float* OutboxB(int s, int j) { return outbox_b_[Local(s)] + std::size_t(j) * rows_ * width_in_[s]; }
  int Id(int kind, int s, int j) const { return (kind * S_ + s) * m_ + j; }
  int TagF(int from_stage, int j) const { return (from_stage * m_ + j) * 2; }
  int TagB(int from_stage, int j) const { return (from_stage * m_ + j) * 2 + 1; }
  void WaitSends();
  // Moves the last stage's loss totals (if it is here) into *stats.
  void TakeLoss(StepStats* stats);
  static double Now();
  // Waits for receive / send `id`, recording the wait when a recorder is set.
  void WaitRecorded(int id, const WaitInfo& info, ActionEvent::Kind kind, int stage, int microbatch);

  Transport& t_;
  RankDevice& dev_;
  const Schedule& lowered_;
  int rank_, S_, m_, rows_, batch_size_;
  std::vector<int> local_;                 // stage -> local index or -1
  std::vector<int> width_in_, width_out_;  // per stage
  std::vector<std::unique_ptr<Stage>> stages_;
  std::vector<std::unique_ptr<RingStore>> stores_;
  // Per local stage, m microbatches each, device memory: inputs (received or
  // handed over locally), output gradients, and outgoing activations / input
  // gradients.
  std::vector<float*> inbox_f_, inbox_b_, outbox_f_, outbox_b_;
  // A GPU's copies of the step's inputs (first stage's rank) and labels (last
  // stage's), and of one evaluation chunk; null on the host, which reads the
  // batch in place.
  float* inputs_ = nullptr;
  std::int32_t* labels_ = nullptr;
  float* eval_inputs_ = nullptr;
  std::int32_t* eval_labels_ = nullptr;
  std::vector<int> pending_sends_;  // request ids in flight (capacity preallocated)
  std::vector<WaitInfo> pending_info_;
  std::vector<ActionEvent>* events_ = nullptr;
  // Flight record: the last kFlight actions (a ring), always kept.
  struct Flight {
    std::int64_t step = 0;
    Action action;
    double start = 0, end = -1;  // end < 0: still running
  };
  static constexpr std::size_t kFlight = 64;
  std::array<Flight, kFlight> flight_{};
  std::size_t flight_next_ = 0;
  std::int64_t step_ = 0;
  Fault fault_;
};

}  // namespace baton

#endif  // BATON_RUNTIME_EXECUTOR_H_
