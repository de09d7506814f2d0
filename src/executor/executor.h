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
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "baton/action.h"
#include "baton/comm.h"
#include "baton/data.h"
#include "baton/events.h"
#include "baton/stage_device.h"
#include "baton/store.h"
#include "baton/plan.h"
#include "recorder.h"
#include "baton/env.h"
#include "replica_sync.h"
#include "stage.h"

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

struct StepStats {
  // Sums over every label (one per sample for classes, one per token for
  // next-token data): losses and correct predictions (last stage's rank).
  double loss_sum = 0.0;
  std::int64_t correct = 0;
  std::int64_t samples = 0;  // samples whose loss this rank computed
  // A training step's microbatches run and their positions (their samples
  // run x the sequence), on the last stage's rank: packed documents' run
  // only up to their last sample with positions, an empty one not at all.
  std::int64_t microbatches = 0, positions = 0;
};

// Told where a training step is, between TrainStep's phases: `baton
// bench` times steps through it instead of running a copy of the step.
class StepObserver {
 public:
  // Before the step's first action (the batch in hand, nothing enqueued).
  virtual void StepStarts() {}
  // The step's gradients are final everywhere they are summed: its
  // actions, the tied gradients' sum and the sums over the replicas are
  // done; the optimizer is next.
  virtual void GradientsDone() {}
  // The optimizer has stepped and the gradients are zeroed.
  virtual void StepEnds() {}

 protected:
  ~StepObserver() = default;
};

class Executor {
 public:
  // Allocates everything `plan` lists on `device` (the host, or a GPU),
  // which carries the messages. `replicas`: the replica group that sums the
  // gradients when the plan's reduction is active (null: one replica).
  // REQUIRES: the plan's message tags fit the transport (checked:
  // ConfigError); `model`, `plan`, `device` and `replicas` outlive the
  // executor.
  Executor(const ModelDesc& model, const RankPlan& plan, double wait_timeout_s, Transport& transport,
           RankDevice& device, ReplicaGroup* replicas = nullptr);

  // One training step on `batch` (inputs on the first stage's rank, labels on
  // the last's; this replica's share of the global batch): the plan's step
  // (each stage's gradient sums over the replicas starting after its last
  // backward), the tied gradients' sum, the end of the gradient sums, then
  // every stage's optimizer step (ZeRO: on its shard, then the parameters
  // gathered), then zeroed gradients. Gradients are averaged over the whole
  // global batch.
  // `observer` (optional) is told as the step passes each phase.
  StepStats TrainStep(const Batch& batch, StepObserver* observer = nullptr);
  // TrainStep in its two halves, for a caller that checks the gradients
  // between them: the plan's step, the tied gradients' sum and the end of
  // the sums over the replicas (the gradients are final), then either the
  // optimizers' step or the gradients dropped (the parameters unchanged).
  StepStats ComputeGradients(const Batch& batch, StepObserver* observer = nullptr);
  void ApplyGradients(StepObserver* observer = nullptr);
  void DiscardGradients();
  // After ComputeGradients: false if a gradient this rank holds final (under
  // ZeRO its shard of each stage) is a NaN or an infinity.
  bool GradientsFinite() { return replicas_->GradientsFinite(); }
  // The last TrainStep's gradient sums (zeros without replicas).
  const ReductionTimes& reduction_times() const { return replicas_->times(); }
  // The plan's step alone: gradients accumulate into the stages' gradient
  // buffers (no optimizer step).
  StepStats RunStep(const Batch& batch);
  // Forward-only pass over every sample of `data` (evaluation), in rounds of
  // the plan's evaluation schedule; reads the parts this rank holds.
  // REQUIRES: data's sample and labels per sample are the plan's.
  StepStats Evaluate(const Dataset& data) { return Evaluate(data, 0, data.samples); }
  // The same over samples [begin, end) of `data` (a replica's share).
  StepStats Evaluate(const Dataset& data, std::int64_t begin, std::int64_t end);

  // Records every action and wait of the following steps into `events`
  // (appended; null stops recording). Reserve EventsPerStep() per step
  // beforehand and recording allocates nothing.
  void SetRecorder(std::vector<ActionEvent>* events) {
    clock_.SetRecorder(events);
    replicas_->SetRecorder(events);
  }
  // With a recorder on a device with a clock (a GPU): StartDeviceClock at
  // the step's start (host time `step_start`), then after the step
  // ApplyDeviceClock waits for the device and rewrites the compute events
  // recorded since `first` with the device's times, as step_start + the
  // device's seconds since the start; it returns when the device finished
  // the step's work (host timeline). Without a device clock, StartDeviceClock
  // does nothing and ApplyDeviceClock returns step_start.
  void StartDeviceClock() { clock_.StartDeviceClock(2 * plan_.step.size() + 1); }  // two marks an action, one at the end
  double ApplyDeviceClock(std::size_t first, double step_start) { return clock_.ApplyDeviceClock(first, step_start); }
  std::size_t EventsPerStep() const;

  // The step being run (for the flight record and fault injection).
  // The step the next actions belong to (a slow fault's window starts and
  // ends on a step).
  void set_step(std::int64_t step) {
    step_ = step;
    if (fault_.slow.rank >= 0) clock_.SetSlowdown(fault_.Slows(rank_, step) ? fault_.slow.factor : 1.0);
  }
  // The adaptive plans' measure: each compute action's own CPU time,
  // summed (ActionClock::TakeComputeSeconds), on (true) or off.
  // With it, each message's times for the links' measure: when a SEND
  // started and when its RECV's wait ended, on the monotonic clock.
  void MeasureCompute(bool on) {
    clock_.MeasureCompute(on);
    measuring_links_ = on;
    message_times_.clear();
  }
  double TakeComputeSeconds() { return clock_.TakeComputeSeconds(); }
  // One message's end on this rank: a send it started to `peer`, or a
  // receive from `peer` its wait ended; `key` names the message the same
  // on both ends (MessageKey).
  struct MessageTime {
    bool sent = false;
    int peer = 0;
    std::int64_t key = 0;
    double seconds = 0;
  };
  // This step's, since the last call (empty unless measuring).
  std::vector<MessageTime> TakeMessageTimes() { return std::exchange(message_times_, {}); }
  // The rank's number in the world (with replicas, not its pipeline rank):
  // what BATON_FAULT and the flight record name. Defaults to the plan's rank.
  void set_world_rank(int rank) { rank_ = rank; }
  void set_fault(const Fault& fault) { fault_ = fault; }
  // Writes the last actions this rank ran or was running, with timestamps,
  // as JSON (on a deadline's expiry).
  void WriteFlightRecord(const std::string& path) const { flight_.Write(path, rank_, step_, Injected()); }

  // Every local stage's optimizer over this replica's part of its
  // parameters: the whole stage, ZeRO's shard of it, or under ZeRO 2 and 3
  // the resting shards (ShardingPlan). Setup only.
  void SetOptimizers(const OptimizerSpec& spec) { replicas_->SetOptimizers(spec); }
  // ZeRO 3 (the parameters rest as shards), outside a step: binds local
  // stage `local`'s parameters to `whole` (host memory of its num_params
  // floats), after gathering every replica's shard into it when `gather`
  // (a collective over the replica group: every replica holds the same
  // stages in the same order); else the caller fills it. KeepShard copies
  // this replica's shard of them back to rest and unbinds them. Without
  // ZeRO 3 the stages hold their parameters whole and neither is called.
  bool parameters_sharded() const { return plan_.sharding.parameters_sharded(); }
  void HoldWhole(int local, std::span<float> whole, bool gather) { replicas_->HoldWhole(local, whole, gather); }
  void KeepShard(int local) { replicas_->KeepShard(local); }

  const RankPlan& plan() const { return plan_; }
  std::vector<std::unique_ptr<Stage>>& stages() { return stages_; }  // local, ascending stage index
  std::vector<std::unique_ptr<ActivationStore>>& stores() { return stores_; }

 private:
  // Sums the tied head's and embedding's gradients (plan.h TiedPlan):
  // locally, or with the other copy's rank. Part of TrainStep; collective
  // between those two ranks.
  void SumTiedGradients();
  void SumTiedWide();  // the same in double (RankPlan::wide_gradients)
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
  // Runs `ops` once; sequence j's units have rows[j] samples (evaluation: 0 = skip them).
  void Run(const std::vector<Op>& ops, Mode mode, const std::byte* inputs, const std::int32_t* labels,
           const int* rows, StepStats* stats);
  // One F of `Run`: its receive waited for, its input (the step's inputs
  // on the first stage), its slot and, on the last stage, its loss.
  void RunForward(const Op& op, const TensorDesc& tensor, bool train, const std::byte* inputs,
                  const std::int32_t* labels, int rows, StepStats* stats);
  void WaitSends();
  // UNSHARD, RESHARD or REDUCE_GRAD (sharded data parallel's, when it
  // runs): noted in the flight record, a fault injected, then run by the
  // replica module.
  void RunShardingAction(const Instruction& in, bool train);
  // Moves the last stage's loss totals (if it is here) into *stats.
  void TakeLoss(StepStats* stats);
  // Waits for receive / send `id`, recording the wait when a recorder is set.
  void WaitRecorded(int id, const WaitInfo& info, ActionKind kind, int stage, int microbatch);

  const ModelDesc& model_;
  const RankPlan& plan_;
  RankDevice& dev_;
  int rank_;  // in the world
  float grad_scale_;
  // Packed documents (Batch::starts): the step's (or evaluation round's)
  // starts, host memory, null for none; and the step's gradient scale, one
  // over the global batch's labels that count (else grad_scale_).
  const std::int32_t* starts_ = nullptr;
  float step_grad_scale_ = 0.0f;
  // Packed (RankPlan::packed): each sequence's length this step or round,
  // its longest sample's filled positions (0: the whole sequence); empty
  // where microbatches are whole.
  std::vector<int> lengths_;
  // Sets lengths_ from each sample's filled positions (`filled`, the step's
  // or round's, sequence j's rows[j] samples from j x plan rows).
  void SetLengths(const std::int32_t* filled, std::size_t samples, const int* rows);
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
  // The replicas' side of the step: gradient sums, shards, windows, the
  // optimizer step (data parallelism; with one replica it only steps).
  std::unique_ptr<ReplicaSync> replicas_;
  std::vector<int> full_rows_, round_rows_;  // per sequence (UnitPart::sequence) of a round
  // Packed documents: this step's samples run per sequence, up to its last
  // sample with positions (0: none, the sequence is not run; StepRows).
  std::vector<int> step_rows_;
  const int* StepRows(const Batch& batch, StepStats* stats);
  // Per local stage its sequence and gradient slots (StagePlan), and where
  // a unit that is a part of its sequence gathers its token ids (first
  // stage) and labels (last) from the batch (RankPlan::unit_inputs, unit_labels).
  std::vector<std::byte*> sequences_, gradients_;
  std::byte* unit_inputs_ = nullptr;
  std::byte* unit_labels_ = nullptr;
  // The instruction's part of its sequence with its slots' addresses.
  SequencePart PartOf(const Instruction& in) const;
  // A unit's `rows` samples of a batch of whole sequences at `batch`
  // (tokens_per_sample tokens of token_bytes each): in place for a whole
  // sequence (or one sample); else its tokens (a slice's, or the first
  // `length` of a packed microbatch), gathered into `staging`.
  const std::byte* UnitRows(const std::byte* batch, std::byte* staging, std::size_t token_bytes,
                            std::size_t tokens_per_sample, const UnitPart& u, int rows, int length = 0);
  // The packed length of sequence `j` (0: whole).
  int LengthOf(const UnitPart& u) const {
    return lengths_.empty() || !u.whole() ? 0 : lengths_[static_cast<std::size_t>(u.sequence)];
  }
  std::vector<Pending> pending_;             // sends in flight (capacity preallocated)
  bool measuring_links_ = false, timing_messages_ = false;
  std::vector<MessageTime> message_times_;   // measuring: this step's messages' ends
  ActionClock clock_;    // bench's recording of every action
  FlightRecord flight_;  // the last actions, always kept
  std::int64_t step_ = 0;
  Fault fault_;
  // What BATON_FAULT injects on this rank in this step, for the flight
  // record: "slow=2 (every compute action)", "delay=0.01 s to rank 1".
  std::vector<std::string> Injected() const;
};

}  // namespace baton

#endif  // BATON_RUNTIME_EXECUTOR_H_
