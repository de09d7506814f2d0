// The run plan: everything a run's ranks will do, decided from the config
// alone, before anything is allocated or any message is sent. Pure: no MPI,
// no device, no run memory; every rank computes the same plan, `baton
// validate` prints it, and unit tests assert on it.
//
//   config ──► PlanRun ──► RunPlan: model description, lowered schedule (the
//                          training step), forward-only lowered schedule
//                          (evaluation), unit-cost simulation, partition
//                     └──► PlanRank(rank) ──► RankPlan: per local stage its
//                          ops, tensors, ring slot layout and capacity; its
//                          message buffers; every message's request id, tag,
//                          peer and tensor; the step and evaluation as
//                          instructions with every operand resolved
//
// The executor (src/executor) allocates what a RankPlan lists and
// interprets its instructions; it decides nothing. The plan library
// (src/plan) links neither MPI nor a device.
#ifndef BATON_PLAN_H_
#define BATON_PLAN_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "baton/action.h"
#include "baton/choices.h"
#include "baton/config.h"
#include "baton/model.h"
#include "baton/schedule.h"
#include "baton/sim.h"
#include "baton/view.h"

namespace baton {

struct RunPlan {
  ModelDesc model;
  Schedule lowered;     // one training step, with SEND/RECV
  Schedule evaluation;  // the step's forwards only, lowered: evaluation rounds of m microbatches
  SimResult sim;        // unit costs: the ring capacities (peak in-flight microbatches per stage)
  // The schedule file holds sharded data parallel's actions (UNSHARD,
  // RESHARD, REDUCE_GRAD, as PyTorch's FSDP files do) that this run does not
  // shard for (ZeRO 0 or 1): they are kept, and do nothing; the run says so.
  bool idle_sharding_actions = false;
  std::vector<int> bounds;  // first top-level layer of each stage, and the layer count (size stages + 1)
  int rows = 0;             // samples per microbatch
  int batch_size = 0;       // samples of one pipeline step: the replica's share of the global batch
  int global_batch = 0;     // train.batch_size: gradients are averaged over it (batch_size x replicas)
  int replicas = 1;         // data_parallel.size
  // data_parallel.zero in effect (0 with one replica): 1 the optimizer
  // state sharded over the replicas, 2 also the gradients, 3 also the
  // parameters (ShardingPlan).
  ZeroStage zero;
  double bucket_cap_bytes = 25.0 * 1024 * 1024;
  // Gradients summed in double (WideGradients: train.grad_accum_dtype):
  // each stage holds a double per parameter beside its float gradient, and
  // the replicas' sums and the tied sum move doubles.
  bool wide_gradients = false;
  std::size_t GradSumBytes() const { return wide_gradients ? sizeof(double) : sizeof(float); }
  // One sample of the step's inputs, as the dataset gives it (dimension 0 is
  // 1): f32[1, features], or i32[1, seq_len] token ids. The first stage's
  // input is this with `rows` rows.
  TensorDesc input;
  int labels_per_sample = 1;  // 1: a class per sample; seq_len: next-token targets
  Checkpointing checkpointing = Checkpointing::kNone;
  std::vector<LayerType> keep;  // selective: the layer types whose outputs a slot keeps
  double wait_timeout_s = 300;
  int optimizer_states = 0;  // buffers of optimizer state per parameter (SGD 0 or 1, AdamW 2)
  OptimizerType optimizer = OptimizerType::kSgd;  // train.optimizer's type: what its step costs
  // train.clip_grad_norm on: each step's update waits for the gradients'
  // global norm, reduced over every rank (a priced part of the step).
  bool clips = false;
  Device device = Device::kCpu;  // where the stages compute: whose layers' scratch the memory counts
  // Sequence slices (pipeline.seq_slices): each microbatch's sequence in
  // `slices` slices, the schedule's units (unit u = microbatch u / k,
  // slice u mod k); `cuts` their k + 1 token boundaries, `slice_tokens`
  // the longest slice (what slots and messages are sized for). Without
  // slices: 1, {0, seq}, seq.
  int slices = 1;
  std::vector<int> cuts;
  int slice_tokens = 1;
  // Packed documents (data.packing): each microbatch computed and sent at
  // its real length, its longest sample's filled positions (every rank
  // derives it from the batch: Batch::filled); sliced, each slice up to
  // that length and a slice past it not at all.
  bool packed = false;
  // The samples carry documents (data.packing other than none, padded
  // ones too): every attention and position table reads their starts.
  bool documents = false;
  // Per slice: its share of a whole microbatch's compute (attention over
  // more keys the later it is) and of its tokens (SliceSequence).
  std::vector<double> slice_cost, slice_token_share;

  int stages() const { return lowered.stages; }
  // Stage s's parameters (floats), and their bytes: the one place they are
  // counted from the model and the partition.
  std::size_t StageParams(int s) const {
    return model.NumParams(bounds[static_cast<std::size_t>(s)], bounds[static_cast<std::size_t>(s) + 1]);
  }
  double StageParamBytes(int s) const { return double(StageParams(s)) * sizeof(float); }
  // Per stage, 1 where it holds a copy of a tied head (GPT's lm_head =
  // wte): its gradients are summed after the tied sum, at the step's end.
  // All 0 without a tied head. The one place tied stages are found.
  std::vector<char> SummedAtEnd() const;
  int microbatches() const { return lowered.microbatches; }  // units: microbatches x slices
  int sequences() const { return lowered.sequences(); }      // whole microbatches: units / slices
  // Unit u's slice of each sample's sequence: tokens [SliceBegin, SliceEnd).
  int SliceBegin(int unit) const { return cuts[static_cast<std::size_t>(SliceOfUnit(unit, slices))]; }
  int SliceEnd(int unit) const { return cuts[static_cast<std::size_t>(SliceOfUnit(unit, slices)) + 1]; }
};

// Loads and checks the schedule (generator or file), lowers and validates it,
// simulates it with unit costs, describes the model and partitions it.
// Throws ConfigError or ScheduleError with the rule; allocates no run memory.
RunPlan PlanRun(const TrainConfig& config);

// Sharded data parallel's actions (ZeRO 2 and 3) in a schedule without
// them, as every run places them (AddShardingActions, baton/sim.h): at the
// unit price (a rank's forward 1, shared by its stages; each stage's
// gather one forward of it), so a run's order follows from its config
// alone, whatever was measured. `baton tune` prices this same order.
// Throws ScheduleError as AddShardingActions.
Schedule PlaceRunShardingActions(const Schedule& schedule, ZeroStage zero);

// The parts of a plan that need no schedule: `model` partitioned into
// `stages` stages, the microbatch's shape (config.pipeline.microbatches),
// the checkpointing policy, the replicas, the optimizer's state count and
// the device. PlanRun starts from it; `baton tune` prices a candidate with
// it before any schedule exists. `lowered` holds only the stage count.
// Throws ConfigError as PartitionLayers.
RunPlan PlanShape(const TrainConfig& config, ModelDesc model, int stages);

// One sample's input and labels per sample of the configured dataset:
// f32[1, features] and 1, or for token datasets i32[1, seq_len] and seq_len.
TensorDesc SampleInput(const DataConfig& data);
int LabelsPerSample(const DataConfig& data);

// Refuses a model that cannot take the dataset's inputs, with a ConfigError
// naming the dataset, what it gives and what the model needs: token ids
// (i32) for a model that starts with an embedding, of its sequence length,
// and f32 features for any other. Called by setup and `baton validate`,
// after PlanRun; setup then checks every loaded token id against the
// embedding's vocabulary (CheckTokens, baton/data.h).
void CheckModelInput(const TrainConfig& config, const RunPlan& plan);

// Replica i's shard of n floats over D replicas (ZeRO stage 1): floats
// [n i / D, n (i + 1) / D). The shards of 0..D-1 tile [0, n) in order.
struct Shard {
  std::size_t begin = 0, count = 0;
};
inline Shard ShardOf(std::size_t n, int i, int replicas) {
  const auto D = static_cast<std::size_t>(replicas), k = static_cast<std::size_t>(i);
  return {n * k / D, n * (k + 1) / D - n * k / D};
}

// First top-level layer of each stage (size stages + 1). Balanced splits
// minimise the largest stage's parameter count (or forward FLOPs); explicit
// counts are checked; a GPT's pipeline.layout is expanded (E, t and L are
// two top-level layers each) once its stage count is checked against
// `stages`. Throws ConfigError with the rule.
std::vector<int> PartitionLayers(const TrainConfig& config, const ModelDesc& model, int stages);

// Whether `schedule` runs stage `stage`'s backward split (an I for it on
// some rank; a schedule file may split some stages only).
bool SplitsBackward(const Schedule& schedule, int stage);

// One microbatch through one stage: its ops over activations a_0 (the stage
// input) .. a_K (its output), and what its ring slot keeps.
//
// Backward needs the input of every layer op. Which inputs a microbatch keeps
// is the checkpointing policy: none keeps them all; full keeps only a_0 and
// recomputes the rest into the stage's workspace inside backward; selective
// keeps a_0 and the outputs of the kept layer types and recomputes the
// others. A split backward (I, then W later) also keeps, per op with
// parameters, the gradient of its output, which W needs. The last stage
// keeps the loss's gradient (dlogits).
struct StagePlan {
  int stage = 0;                          // global index
  int first_layer = 0, last_layer = 0;    // top-level layers [first, last)
  int first_op = 0;                       // ModelDesc op of the stage's op 0
  int rows = 0;                           // samples per microbatch
  bool is_first = false, is_last = false;
  bool split_backward = false;            // the schedule runs I and W separately here
  Checkpointing checkpointing = Checkpointing::kNone;
  std::vector<int> layer;                 // per op: the device's layer index, -1 for an add
  std::vector<int> skip;                  // per op: an add's second input (activation index), or -1
  std::vector<char> block_input;          // per activation: a residual block starts from it
  std::vector<TensorDesc> act;            // a_0 .. a_K of one microbatch
  std::vector<char> kept;                 // per activation: kept in the slot
  std::vector<std::size_t> kept_offset;   // per activation: its bytes in the slot, if kept
  std::vector<std::size_t> wgrad_offset;  // per op with parameters (split backward): its output gradient
  std::size_t dlogits_offset = 0;         // last stage
  std::size_t forward_bytes = 0;          // filled by one forward (activations; dlogits)
  std::size_t slot_bytes = 0;
  int ring_capacity = 1;                  // the simulator's peak in-flight microbatches
  std::vector<std::size_t> workspace_offset;  // per activation, bytes into each workspace buffer
  std::size_t workspace_bytes = 0;        // one microbatch of every activation
  // A layer's own state (attention's projections and softmax statistics:
  // OpDesc::saved_per_row), per op: in the slot when the op's output is kept
  // (or it is the last op: never recomputed), else in the state workspace,
  // where recomputation writes it again; and what I leaves for W
  // (OpDesc::stash_per_row): in the slot for a split backward, else in the
  // state workspace. Evaluation (no slot) uses the workspace for both.
  std::vector<std::size_t> saved_bytes, stash_bytes;  // per op, one microbatch
  std::vector<char> saved_in_slot, stash_in_slot;     // per op
  std::vector<std::size_t> saved_offset, stash_offset;  // per op: in the slot, if there
  std::vector<std::size_t> ws_saved_offset, ws_stash_offset;  // per op: in the state workspace
  std::size_t state_workspace_bytes = 0;
  int tokens_per_sample = 1;              // the sequence (1 for MLPs)
  // Sequence slices (RunPlan::slices > 1): the activations above are one
  // slice's of `slice_tokens` tokens (the longest; a unit's own views take
  // its slice's tokens). Each attention op keeps its sequence's q, k, v in
  // a sequence slot (SequenceSlice, host/attention.h): `sequence_bytes` a
  // sequence, at `sequence_offset` per op, in one of `sequence_capacity`
  // slots, from its first slice's forward to its last backward (B or W) on
  // the stage; microbatch j's slot in training `sequence_slot[j]`, in
  // evaluation `evaluation_sequence_slot[j]`. Their gradients take a
  // gradient slot of as many bytes, at the same offsets, from the
  // sequence's first input backward (its last slice's) to its last (its
  // first slice's): `gradient_slot[j]` of `gradient_capacity`. Units take
  // ring slots by `slot_of` (a sequence's slices release theirs last first,
  // so not unit mod capacity). All empty or 0 without slices.
  int slices = 1;
  int slice_tokens = 0;
  std::size_t sequence_bytes = 0;
  std::vector<std::size_t> sequence_offset;  // per op
  int sequence_capacity = 0, gradient_capacity = 0;
  std::vector<int> sequence_slot, evaluation_sequence_slot, gradient_slot;  // per microbatch (sequence)
  std::vector<int> slot_of;                                                // per unit
  std::size_t num_params = 0;             // floats
  std::size_t param_offset = 0;           // floats, from the model's first parameter

  int ops() const { return static_cast<int>(layer.size()); }
  const TensorDesc& input() const { return act.front(); }
  const TensorDesc& output() const { return act.back(); }
};

// Where an instruction's tensor lives; the executor turns it into memory.
struct BufferRef {
  enum Kind : std::uint8_t {
    kNone,
    kInputs,   // the step's inputs (first stage), microbatch `microbatch`
    kLabels,   // the step's labels (last stage)
    kInboxF,   // local stage `local`'s input of microbatch j: received, or handed over locally
    kInboxB,   // local stage `local`'s output gradient of microbatch j
    kOutboxF,  // local stage `local`'s output of microbatch j, to send
    kOutboxB,  // local stage `local`'s input gradient of microbatch j, to send
  };
  Kind kind = kNone;
  int local = -1;
  int microbatch = 0;
};

// One action of the rank's list with its operands resolved.
//   F:        reads `in` (after completing receive `wait`), writes `out` (or
//             the loss against `labels` on the last stage)
//   B, I:     reads `in` = the output gradient (none on the last stage),
//             writes `out` = the input gradient (none on the first)
//   W:        the slot only
//   RECV_*:   posts receive `request` of `tensor` from `peer` with `tag` into `out`
//   SEND_*:   posts send `request` of `tensor` from `in` to `peer` with `tag`
// A unit's part of its sequence, resolved for each instruction: the
// sequence (whole microbatch) it belongs to, whose inputs, labels and rows
// it reads; and sliced (RunPlan::slices > 1), its tokens [begin, end) of
// each sample's sequence (Schedule::SliceOf's cut), and for a compute
// action on a stage that keeps keys and values, the stage's slot of its
// sequence's (StagePlan::sequence_slot, or evaluation_sequence_slot) and,
// training, of their gradients (StagePlan::gradient_slot; -1: none).
// Whole sequences: begin = end = 0, no slots.
struct UnitPart {
  int sequence = 0;
  int begin = 0, end = 0;
  int sequence_slot = -1, gradient_slot = -1;
  bool whole() const { return end == 0; }
  // Tokens of each sample it computes: its own, or `whole`.
  int Tokens(int whole_tokens) const { return end == 0 ? whole_tokens : end - begin; }
};

struct Instruction {
  Action action;
  UnitPart part;       // F, B, I, W and messages: the unit's part of its sequence
  int local = -1;      // local stage of the action
  BufferRef in, out, labels;
  int wait = -1;       // compute: a receive to complete first (request id)
  int request = -1;    // comm: its request id
  int peer = -1;       // comm: the other rank; compute: the rank `wait` receives from
  int tag = -1;
  TensorDesc tensor;   // comm: the message; compute: `in` (a sliced unit's: its tokens)
  // Sharded data parallel (ShardingPlan): UNSHARD, the parameter window it
  // gathers into; a stage's first B or W of the step, the gradient window
  // it takes (zeroed); -1 otherwise.
  int window = -1;
};

// A rank's message buffers of one kind for one local stage: `count`
// microbatches of `tensor` each (one per microbatch of the step).
struct BufferPlan {
  BufferRef::Kind kind = BufferRef::kNone;
  int local = -1;
  TensorDesc tensor;
  int count = 0;
};

// A head tied to the embedding (GPT's lm_head = wte): each of the two
// stages holds a copy, and after every step's backward their gradients are
// summed, between the two ranks when they differ (Megatron-LM's embedding
// group), so that the copies, updated alike, never drift.
struct TiedPlan {
  bool active = false;          // this rank holds a copy
  int local_embedding = -1;     // local stage holding the embedding, or -1
  int local_head = -1;          // local stage holding the head, or -1
  std::size_t embedding_offset = 0, head_offset = 0;  // floats into those stages' parameters
  std::size_t floats = 0;
  int peer = -1;                // the other copy's rank, -1 when both are here
  int send_request = -1, recv_request = -1, tag = -1;
};

// Data parallelism: each local stage's gradients are summed over the
// replicas in buckets, contiguous ranges of its gradient buffer of at most
// RunPlan::bucket_cap_bytes, each its own non-blocking collective on the
// replica group. A stage's buckets start right after its last gradient
// writer of the step (its last B or W: the rest of the rank's work, and the
// other ranks' cool-down, hide them); a stage holding a tied copy starts
// after the tied gradients are summed, at the step's end. All end before
// the optimizer steps.
//
// ZeRO stage 1 and above (shards_optimizer): replica i keeps the optimizer state of, and updates,
// only its shard of each stage's parameters, floats [N i / D, N (i+1) / D)
// of N; a bucket is reduce-scattered (member i receives the sum of its
// shard's part of it), and after the optimizer step each bucket's updated
// parts are all-gathered into every replica's parameters.
struct BucketPlan {
  int local = -1;          // local stage
  std::size_t offset = 0;  // floats into the stage's gradients (and parameters)
  std::size_t count = 0;   // floats
  int request = -1;        // the sum's replica-group request id; ZeRO's all-gather uses request + 1
  std::vector<int> counts, displs;  // ZeRO: each replica's part, floats from `offset`, replica order
};

struct ReductionPlan {
  int replicas = 1;
  int replica = 0;  // this rank's
  bool shards_optimizer = false;  // RunPlan::zero.shards_optimizer()
  std::vector<BucketPlan> buckets;         // grouped by local stage, ascending
  std::vector<int> first_bucket;           // per local stage: its first bucket (size local stages + 1)
  std::vector<int> start_after;            // per local stage: the step instruction after which its buckets
                                           // start, or -1: after the tied gradients' sum
  std::vector<std::size_t> shard_begin, shard_count;  // per local stage: this replica's optimizer shard (floats)
  int requests = 0;                        // replica-group request ids are in [0, requests)

  bool active() const { return replicas > 1; }
};

// ZeRO stages 2 and 3 (RunPlan::zero.has_actions()), as the schedule's actions
// place them. Each local stage's gradients accumulate in a gradient window
// taken at its first B or W of the step; its REDUCE_GRAD reduce-scatters
// the window over the replicas in one coalesced collective, this replica
// keeping its shard of the sum (ShardOf) in a resting gradient shard, and
// the window is free once the collective ends. Stage 3 keeps only the
// parameters' shard at rest: UNSHARD all-gathers them into a parameter
// window (one coalesced collective, waited for at the stage's next action),
// RESHARD frees it; a window still held at the list's end is freed with
// the step. The optimizer steps on the shards (stage 2 then all-gathers the
// updated parameters in place, as ZeRO 1 does). Windows come from two
// pools, sized by the most a list holds at once (the training step's or
// the evaluation's); each is the largest local stage's parameters. A stage
// holding a tied copy sums its gradients after the tied sum, at the step's
// end: its window is held until then.
struct ShardedStage {
  std::size_t floats = 0;           // the stage's parameters
  std::vector<int> counts, displs;  // every replica's shard (ShardOf), in replica order
  int gather_request = -1;          // the replica group's ids: UNSHARD's all-gather (and ZeRO 2's after the step)
  int reduce_request = -1;          // REDUCE_GRAD's reduce-scatter
  bool after_tied = false;          // its REDUCE_GRAD waits for the tied gradients' sum
};

struct ShardingPlan {
  ZeroStage zero;  // 2 or 3; 0: not sharded beyond ZeRO 1
  std::vector<ShardedStage> stages;  // per local stage
  std::size_t window_floats = 0;
  int parameter_windows = 0, gradient_windows = 0;

  bool active() const { return zero.has_actions(); }
  bool parameters_sharded() const { return zero.shards_parameters(); }
};

struct RankPlan {
  int rank = 0;
  int ranks = 0, stages = 0, microbatches = 0, rows = 0, batch_size = 0;
  int global_batch = 0;                    // the batch gradients are averaged over (all replicas')
  std::vector<int> stage_rank;
  std::vector<int> local;                  // stage -> local index, or -1
  std::vector<StagePlan> local_stages;     // ascending stage index
  std::vector<TensorDesc> stage_input, stage_output;  // every stage, one microbatch
  TensorDesc inputs;                       // the step's inputs (first stage's rank): plan.input, batch_size rows
  TensorDesc labels;                       // the step's labels (last stage's rank): i32[batch_size(, labels_per_sample)]
  int labels_per_sample = 1;
  bool has_inputs = false, has_labels = false;
  int sequences = 0;                       // whole microbatches a step (UnitPart::sequence in [0, sequences))
  // Where a unit that is a part of its sequence (sliced) gathers its tokens
  // of the step's inputs (first stage) and labels (last stage): rows x the
  // longest slice's tokens. Empty: units read the batch in place.
  // Packed (RunPlan::packed) with more than one sample a microbatch: the
  // same, rows x the whole sequence, where a microbatch's samples are
  // gathered at its length.
  TensorDesc unit_inputs, unit_labels;
  bool packed = false;                     // RunPlan::packed
  bool documents = false;                  // RunPlan::documents
  std::vector<BufferPlan> buffers;
  int requests = 0;                        // request ids are in [0, requests)
  int max_tag = 0;                         // the largest tag any message uses
  std::vector<std::size_t> message_bytes;  // per request id: its message's bytes (0: unused)
  std::vector<Instruction> step;           // one training step
  std::vector<Instruction> evaluation;     // one evaluation round of `microbatches` microbatches
  int sends_per_step = 0;                  // the most sends in flight at once
  TiedPlan tied;
  ReductionPlan reduction;
  ShardingPlan sharding;
  bool wide_gradients = false;             // RunPlan::wide_gradients

  // Request id of a message: (kind, stage, microbatch), kind = RECV_F 0,
  // RECV_B 1, SEND_F 2, SEND_B 3.
  int RequestId(ActionKind kind, int stage, int microbatch) const;
  // Tags name the sending stage and the microbatch: activations even,
  // gradients odd.
  int TagF(int from_stage, int microbatch) const { return (from_stage * microbatches + microbatch) * 2; }
  int TagB(int from_stage, int microbatch) const { return (from_stage * microbatches + microbatch) * 2 + 1; }
  // Bytes of the rank's run memory: rings, message buffers, workspaces,
  // parameters, gradients (not the optimizer state).
  std::size_t RingBytes() const;
};

// Rank `rank`'s part of the plan (in replica `replica`, which decides its
// optimizer shard under ZeRO). Pure.
RankPlan PlanRank(const RunPlan& plan, int rank, int replica = 0);

// What a rank holds, in bytes, predicted from its plan alone: everything
// its executor allocates at setup (the host reads the step's batch in
// place, from the loader's buffers, and allocates nothing for it).
// `baton validate` prints it; tests/executor/memory_test measures the heap
// against it.
struct RankMemory {
  std::size_t params = 0;         // every local stage's f32 parameters (ZeRO 3: their shards and parameter windows)
  std::size_t grads = 0;          // as many (ZeRO 2 and 3: the gradient shards and windows)
  std::size_t optimizer = 0;      // optimizer state: the parameters (this replica's shard) x RunPlan::optimizer_states
  std::size_t rings = 0;          // ring stores: per stage, capacity x slot bytes
  std::size_t sequences = 0;      // sequence slices: per stage, its sequence and gradient slots (StagePlan)
  std::size_t workspaces = 0;     // per stage: three activation workspaces and the state workspace
  std::size_t layer_scratch = 0;  // the layers' own scratch (ScratchBytes on the run's device)
  std::size_t messages = 0;       // message buffers, and the tied head's gradient inbox
  // The simulator's memory model in bytes (unit costs): the static bytes
  // (all but the rings and sequence slots) plus the peak of the ring slots
  // live at once (a slot is live from its F to its last backward, B or W)
  // and, sliced, of the sequences' and their gradients' slots. <= total():
  // a rank with several stages reaches each stage's peak at another time,
  // while each ring holds its own peak.
  double simulated_peak = 0;

  std::size_t static_bytes() const { return params + grads + optimizer + workspaces + layer_scratch + messages; }
  std::size_t total() const { return static_bytes() + rings + sequences; }
  RankMemory& operator+=(const RankMemory& o);
};

// Every rank's memory (RankMemory), index = rank.
std::vector<RankMemory> PlanMemory(const RunPlan& run);
// One rank's memory from its plan, without the simulated peak (0): what
// training setup checks against the node's memory before allocating.
RankMemory RankMemoryOf(const RunPlan& run, const RankPlan& rank);

// What one microbatch through stage `stage` keeps, and its static memory,
// where no schedule exists yet (`baton tune`): `shape` from PlanShape, the
// stage's backward split or not. Its ring capacity is left at 1.
StagePlan PlanStageAlone(const RunPlan& shape, int stage, bool split_backward);
// Every rank's static bytes (RankMemory::static_bytes: all but the rings)
// for `shape`'s stages placed by `placement` on `ranks` ranks, each stage's
// backward split or not: the same sums PlanMemory makes, before a schedule
// exists. Under ZeRO 2 and 3 the resting shards alone: the windows are the
// placed schedule's (the tuner counts them from its actions).
std::vector<double> PlanStaticBytes(const RunPlan& shape, Placement placement, int ranks, bool split_backward);
// PlanStaticBytes for many placements of one shape (its microbatches,
// policy and model; only `bounds` varying): each stage's static memory is
// planned once per layer range and neighbourhood and remembered.
class StaticBytesCache {
 public:
  std::vector<double> operator()(const RunPlan& shape, Placement placement, int ranks, bool split_backward);

 private:
  std::map<std::tuple<int, int, bool, bool, bool>, RankMemory> memo_;
};

// The plan as text, one line per stage (its rank, layers, parameters, ring
// capacity and slot bytes, its matrix products' forward FLOPs for one
// microbatch and its parameter bytes) and one per rank's messages: for
// `baton validate`.
std::string DescribePlan(const RunPlan& plan);

// What `baton validate` prints after the settings: PlanRun, CheckModelInput
// and DescribePlan. Plans only: no MPI, nothing allocated. Throws
// ConfigError or ScheduleError as a run would.
std::string DescribeRunPlan(const TrainConfig& config);

}  // namespace baton

#endif  // BATON_PLAN_H_
