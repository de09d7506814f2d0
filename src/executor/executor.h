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
#include "action_hook.h"
#include "recorder.h"
#include "replica_sync.h"
#include "stage.h"

namespace baton {

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
  // After ComputeGradients: into `per_op` (one per ModelDesc op), the sum
  // of the squares, in double, of each op's final gradients this rank
  // counts (ReplicaSync::CountedParts; a tied head's copy not: its
  // embedding's is the one), each op's floats summed by its stage's device
  // (StageDevice::GradientSquares). Summed over every rank, op by op, and
  // the ops then in order, it is what one process computes
  // (train.clip_grad_norm's norm; under ZeRO 1-3 a tensor's parts on the
  // replicas are summed apart first). Waits for the devices.
  void GradientSquares(std::span<double> per_op);
  // Every gradient the optimizer step reads times `factor`.
  void ScaleGradients(float factor) { replicas_->ScaleGradients(factor); }
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

  // The step being run (for the flight record and the hook).
  // The step the next actions belong to (a hook's slowdown starts and
  // ends on a step).
  void set_step(std::int64_t step) {
    step_ = step;
    if (hook_ != nullptr) clock_.SetSlowdown(hook_->Slowdown(rank_, step));
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
  // what a hook and the flight record name. Defaults to the plan's rank.
  void set_world_rank(int rank) { rank_ = rank; }
  // Told of the training steps' actions (ActionHook, action_hook.h; null:
  // none, as in every real run). REQUIRES: it outlives the executor's use.
  void set_hook(const ActionHook* hook) { hook_ = hook; }
  // Writes the last actions this rank ran or was running, with timestamps,
  // as JSON (on a deadline's expiry).
  void WriteFlightRecord(const std::string& path) const {
    flight_.Write(path, rank_, step_, hook_ != nullptr ? hook_->Injected(rank_, step_) : std::vector<std::string>{});
  }

  // Every local stage's optimizer over this replica's part of its
  // parameters: the whole stage, ZeRO's shard of it, or under ZeRO 2 and 3
  // the resting shards (ShardingPlan). Setup only.
  void SetOptimizers(const OptimizerSpec& spec) { replicas_->SetOptimizers(spec); }
  // The rate the next training steps' optimizer steps take (a schedule's
  // of the step: the loop sets it before each).
  void SetLearningRate(double lr) { replicas_->SetLearningRate(lr); }
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
  // runs): noted in the flight record, the hook told, then run by the
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
  // GradientSquares's lists, kept so that a step allocates nothing after
  // its first: a stage's counted parts, their ops' ranges, each range's op
  // and sum.
  std::vector<ParamRange> square_parts_, square_ranges_;
  std::vector<int> square_ops_;
  std::vector<double> square_sums_;
  // Per local stage: message buffers of each kind (BufferRef::Kind), m
  // microbatches each, device memory.
  std::vector<std::array<std::byte*, 7>> buffers_;
  // A GPU's copies of the step's inputs (first stage's rank) and labels (last
  // stage's), and of one evaluation round; null on the host, which reads the
  // batch in place.
  std::byte* inputs_ = nullptr;
  std::byte* labels_ = nullptr;
  // Documents on a GPU (RankPlan::documents): its copy of the step's (or
  // round's) starts, which every stage's layers read (samples x
  // labels_per_sample); null on the host, and for whole samples.
  std::byte* starts_copy_ = nullptr;
  // Sets starts_ to the step's or round's `starts` (host memory, `count`
  // of them; null: none), a GPU's copy where it has one.
  void SetStarts(const std::int32_t* starts, std::size_t count);
  // The step's or round's labels in host memory (the batch's): the real
  // tokens of a packed unit are counted there (LabelsThatCount).
  const std::int32_t* host_labels_ = nullptr;
  std::int64_t LabelsThatCount(const Op& op, const UnitPart& u, int rows, int length) const;
  std::byte* tied_inbox_ = nullptr;  // the other copy's gradient (tied head across ranks)
  std::vector<Op> train_ops_, evaluation_ops_;
  // The replicas' side of the step: gradient sums, shards, windows, the
  // optimizer step (data parallelism; with one replica it only steps).
  std::unique_ptr<ReplicaSync> replicas_;
  std::vector<int> full_rows_, round_rows_;  // per sequence (UnitPart::sequence) of a round
  // An evaluation round's samples read from a dataset's source (token
  // documents hold no samples: Dataset::source), host memory, sized at the
  // first such round: (sequences x rows, ...) inputs, labels and starts.
  ByteBuffer round_inputs_;
  std::vector<std::int32_t> round_labels_, round_starts_;
  // The round of `round` samples from `first` of `data` into the round_ buffers.
  void ReadRound(const Dataset& data, std::int64_t first, std::int64_t round);
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
  // A packed sequence's slice as it runs: up to its sequence's length, the
  // tokens past it not computed nor sent; a slice that begins at or past
  // it runs nothing (SliceRuns false: skipped on every rank, each knowing
  // every length). Whole units, and fixed shapes, as planned.
  UnitPart RealPart(const UnitPart& u) const {
    if (lengths_.empty() || u.whole()) return u;
    UnitPart r = u;
    r.end = std::max(u.begin, std::min(u.end, lengths_[static_cast<std::size_t>(u.sequence)]));
    return r;
  }
  bool SliceRuns(const UnitPart& u) const {
    return lengths_.empty() || u.whole() || u.begin < lengths_[static_cast<std::size_t>(u.sequence)];
  }
  std::vector<Pending> pending_;             // sends in flight (capacity preallocated)
  bool measuring_links_ = false, timing_messages_ = false;
  std::vector<MessageTime> message_times_;   // measuring: this step's messages' ends
  ActionClock clock_;    // bench's recording of every action
  FlightRecord flight_;  // the last actions, always kept
  std::int64_t step_ = 0;
  const ActionHook* hook_ = nullptr;
};

}  // namespace baton

#endif  // BATON_RUNTIME_EXECUTOR_H_
