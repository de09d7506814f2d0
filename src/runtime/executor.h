// The executor: allocates what a RankPlan lists (stages, ring stores,
// message buffers, step inputs) once, then interprets the plan's
// instructions, one training step or one evaluation round at a time. It
// decides nothing the plan has not: every operand, request id, tag and peer
// was resolved by PlanRank. A step allocates nothing.
#ifndef BATON_RUNTIME_EXECUTOR_H_
#define BATON_RUNTIME_EXECUTOR_H_

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "baton/action.h"
#include "baton/comm.h"
#include "baton/data.h"
#include "baton/stage_device.h"
#include "baton/store.h"
#include "plan.h"
#include "stage.h"

namespace baton {

// One timed interval of a step, for `baton bench`: a compute action (kind
// F, B, I or W) or a wait for a message (kind RECV_F or RECV_B: a receive;
// SEND_F or SEND_B: a send's completion). Times are seconds on the rank's
// monotonic clock.
struct ActionEvent {
  ActionKind kind = ActionKind::kForward;
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
  // Sums over every label (one per sample for classes, one per token for
  // next-token data): losses and correct predictions (last stage's rank).
  double loss_sum = 0.0;
  std::int64_t correct = 0;
  std::int64_t samples = 0;  // samples whose loss this rank computed
};

class Executor {
 public:
  // Allocates everything `plan` lists on `device` (the host, or a GPU),
  // which carries the messages. REQUIRES: the plan's message tags fit the
  // transport (checked: ConfigError); `model`, `plan` and `device` outlive
  // the executor.
  Executor(const ModelDesc& model, const RankPlan& plan, double wait_timeout_s, Transport& transport,
           RankDevice& device);

  // One training step on `batch` (inputs on the first stage's rank, labels on
  // the last's): the plan's step, then every stage's optimizer step, then
  // zeroed gradients. Gradients are averaged over the whole batch.
  StepStats TrainStep(const Batch& batch);
  // The plan's step alone: gradients accumulate into the stages' gradient
  // buffers (no optimizer step).
  StepStats RunStep(const Batch& batch);
  // Sums the tied head's and embedding's gradients (plan.h TiedPlan):
  // locally, or with the other copy's rank. Part of TrainStep; collective
  // between those two ranks.
  void SumTiedGradients();
  // Every stage's optimizer step, then zeroed gradients: the rest of TrainStep.
  void StepOptimizers();
  // Forward-only pass over every sample of `data` (evaluation), in rounds of
  // the plan's evaluation schedule; reads the parts this rank holds.
  // REQUIRES: data's sample and labels per sample are the plan's.
  StepStats Evaluate(const Dataset& data);

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

  const RankPlan& plan() const { return plan_; }
  std::vector<std::unique_ptr<Stage>>& stages() { return stages_; }  // local, ascending stage index
  std::vector<std::unique_ptr<ActivationStore>>& stores() { return stores_; }

 private:
  // An instruction with its memory: the plan's BufferRefs made pointers.
  struct Op {
    const Instruction* in;
    std::byte* input = nullptr;   // `in` (null for the step's inputs: see input_offset)
    std::byte* output = nullptr;  // `out`
    std::size_t input_offset = 0; // bytes into the step's inputs (first stage's F)
    std::size_t labels = 0;       // labels into the step's labels (last stage's F)
  };
  // A send in flight: its request, what it is for, its kind (for the recorder).
  struct Pending {
    int id;
    WaitInfo info;
    ActionKind kind;
  };
  enum class Mode { kTrain, kEvaluate };
  std::vector<Op> Bind(const std::vector<Instruction>& instructions);
  std::byte* Address(const BufferRef& ref);
  // Runs `ops` once; microbatch j has rows[j] samples (evaluation: 0 = skip it).
  void Run(const std::vector<Op>& ops, Mode mode, const std::byte* inputs, const std::int32_t* labels,
           const int* rows, StepStats* stats);
  void WaitSends();
  // Moves the last stage's loss totals (if it is here) into *stats.
  void TakeLoss(StepStats* stats);
  static double Now();
  // Waits for receive / send `id`, recording the wait when a recorder is set.
  void WaitRecorded(int id, const WaitInfo& info, ActionKind kind, int stage, int microbatch);

  const ModelDesc& model_;
  const RankPlan& plan_;
  RankDevice& dev_;
  int rank_;
  float grad_scale_;
  std::vector<std::unique_ptr<Stage>> stages_;
  std::vector<std::unique_ptr<ActivationStore>> stores_;
  // Per local stage: message buffers of each kind (BufferRef::Kind), m
  // microbatches each, device memory.
  std::vector<std::array<std::byte*, 7>> buffers_;
  // A GPU's copies of the step's inputs (first stage's rank) and labels (last
  // stage's), and of one evaluation round; null on the host, which reads the
  // batch in place.
  std::byte* inputs_ = nullptr;
  std::byte* labels_ = nullptr;
  std::byte* tied_inbox_ = nullptr;  // the other copy's gradient (tied head across ranks)
  std::vector<Op> train_ops_, evaluation_ops_;
  std::vector<int> full_rows_, round_rows_;  // per microbatch of a round
  std::vector<Pending> pending_;             // sends in flight (capacity preallocated)
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
