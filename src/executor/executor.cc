#include "executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "baton/deadline.h"
#include "baton/error.h"
#include "baton/timing.h"

namespace baton {
namespace {

// Packed documents: a step's (or evaluation round's) document starts, one
// per position of each of its samples.
std::size_t StartsBytes(const RankPlan& plan) {
  return static_cast<std::size_t>(plan.sequences) * static_cast<std::size_t>(plan.rows) *
         static_cast<std::size_t>(plan.labels_per_sample) * sizeof(std::int32_t);
}

}  // namespace

Executor::Executor(const ModelDesc& model, const RankPlan& plan, double wait_timeout_s, Transport& transport,
                   RankDevice& device, ReplicaGroup* replicas)
    : model_(model),
      plan_(plan),
      dev_(device),
      rank_(plan.rank),
      grad_scale_(1.0f / static_cast<float>(std::int64_t(plan.global_batch) * plan.labels_per_sample)),
      clock_(device) {
  if (plan.max_tag > transport.max_tag()) {
    throw ConfigError(fmt::format("{} stages x {} microbatches need message tags up to {}, beyond MPI's limit {}",
                                  plan.stages, plan.microbatches, plan.max_tag, transport.max_tag()));
  }
  // Sharded data parallel: the stages compute with the executor's windows.
  const ShardingPlan& sh = plan.sharding;
  if (sh.active() && !dev_.host_memory()) {
    throw ConfigError(fmt::format("rank {}: data_parallel.zero {} runs on the CPU only (device: cpu)", rank_, sh.zero.number()));
  }
  for (const StagePlan& sp : plan.local_stages) {
    stages_.push_back(
        std::make_unique<Stage>(model, sp, dev_.MakeStageDevice(), !sh.parameters_sharded(), !sh.active()));
  }
  // Ring stores sized by the simulator's peak in-flight counts (or by the
  // plan's slot of each unit, StagePlan::slot_of); sequence slots where the
  // plan has them.
  for (const StagePlan& sp : plan.local_stages) {
    stores_.push_back(std::make_unique<ActivationStore>(fmt::format("rank {} stage {} activation store", rank_, sp.stage),
                                                        sp.slot_bytes, sp.ring_capacity, dev_, sp.slot_of));
    sequences_.push_back(sp.sequence_bytes > 0
                             ? dev_.Allocate(sp.sequence_bytes * static_cast<std::size_t>(sp.sequence_capacity))
                             : nullptr);
    gradients_.push_back(sp.sequence_bytes > 0
                             ? dev_.Allocate(sp.sequence_bytes * static_cast<std::size_t>(sp.gradient_capacity))
                             : nullptr);
  }
  if (plan.packed) lengths_.assign(static_cast<std::size_t>(plan.sequences), 0);
  if (plan.unit_inputs.elements() > 0) unit_inputs_ = dev_.Allocate(plan.unit_inputs.bytes());
  if (plan.unit_labels.elements() > 0) unit_labels_ = dev_.Allocate(plan.unit_labels.bytes());
  buffers_.assign(plan.local_stages.size(), {});
  for (const BufferPlan& b : plan.buffers) {
    buffers_[static_cast<std::size_t>(b.local)][b.kind] = dev_.Allocate(b.tensor.bytes() * static_cast<std::size_t>(b.count));
  }
  dev_.ConfigureMessages(plan.message_bytes, wait_timeout_s);
  if (plan.wide_gradients) {
    if (!dev_.host_memory() || sh.active()) {
      throw ConfigError(fmt::format("rank {}: gradients in double (train.grad_accum_dtype: fp64) are summed on the "
                                    "CPU, with each stage's whole gradients (ZeRO 0 or 1)",
                                    rank_));
    }
    for (auto& st : stages_) st->Widen();
  }
  if (plan.tied.peer >= 0) {
    tied_inbox_ = dev_.Allocate(plan.tied.floats * (plan.wide_gradients ? sizeof(double) : sizeof(float)));
  }
  if (!dev_.host_memory()) {
    if (plan.has_inputs) inputs_ = dev_.Allocate(plan.inputs.bytes());
    if (plan.has_labels) labels_ = dev_.Allocate(plan.labels.bytes());
    if (plan.documents) starts_copy_ = dev_.Allocate(StartsBytes(plan));
  }
  train_ops_ = Bind(plan.step);
  evaluation_ops_ = Bind(plan.evaluation);
  full_rows_.assign(static_cast<std::size_t>(plan.sequences), plan.rows);
  round_rows_.assign(static_cast<std::size_t>(plan.sequences), 0);
  step_rows_.assign(static_cast<std::size_t>(plan.sequences), 0);
  pending_.reserve(static_cast<std::size_t>(plan.sends_per_step));
  replicas_ = std::make_unique<ReplicaSync>(plan, stages_, dev_, replicas, wait_timeout_s);
}

std::byte* Executor::Address(const BufferRef& ref) {
  switch (ref.kind) {
    case BufferRef::kNone:
      return nullptr;
    case BufferRef::kInputs:  // the step's, wherever the batch is: Op::input_offset
    case BufferRef::kLabels:
      return nullptr;
    default: {
      const StagePlan& sp = plan_.local_stages[static_cast<std::size_t>(ref.local)];
      const bool input_side = ref.kind == BufferRef::kInboxF || ref.kind == BufferRef::kOutboxB;
      const std::size_t bytes = (input_side ? sp.input() : sp.output()).bytes();
      return buffers_[static_cast<std::size_t>(ref.local)][ref.kind] + static_cast<std::size_t>(ref.microbatch) * bytes;
    }
  }
}

std::vector<Executor::Op> Executor::Bind(const std::vector<Instruction>& instructions) {
  std::vector<Op> ops;
  ops.reserve(instructions.size());
  for (const Instruction& in : instructions) {
    Op op{&in};
    // The step's inputs and labels of the unit's sequence: its first sample's.
    if (in.in.kind == BufferRef::kInputs) {
      op.input_offset = static_cast<std::size_t>(in.in.microbatch) * static_cast<std::size_t>(plan_.rows) *
                        plan_.inputs.WithRows(1).bytes();
    }
    op.input = Address(in.in);
    op.output = Address(in.out);
    if (in.labels.kind == BufferRef::kLabels) {
      op.labels = static_cast<std::size_t>(in.labels.microbatch) * static_cast<std::size_t>(plan_.rows) *
                  static_cast<std::size_t>(plan_.labels_per_sample);
    }
    ops.push_back(op);
  }
  return ops;
}


std::size_t Executor::EventsPerStep() const {
  // At most one event per action plus one wait per receive and per send.
  return 2 * plan_.step.size() + pending_.capacity();
}

namespace {

// A message's name on both its ends: its direction, the stage that
// receives it and its unit.
std::int64_t MessageKey(bool forward, int receiving_stage, int unit, const RankPlan& plan) {
  return (std::int64_t{forward ? 1 : 0} * plan.stages + receiving_stage) * plan.microbatches + unit;
}

}  // namespace

void Executor::WaitRecorded(int id, const WaitInfo& info, ActionKind kind, int stage, int microbatch) {
  const double start = clock_.recording() ? MonotonicSeconds() : 0.0;
  if (kind == ActionKind::kSendF || kind == ActionKind::kSendB) {
    dev_.WaitSend(id, info);
  } else {
    dev_.WaitRecv(id, info);
    if (timing_messages_) {
      message_times_.push_back(
          {false, info.peer, MessageKey(kind == ActionKind::kRecvF, stage, microbatch, plan_), MonotonicSeconds()});
    }
  }
  clock_.RecordWait(kind, stage, microbatch, start);
}

void Executor::WaitSends() {
  for (const Pending& p : pending_) WaitRecorded(p.id, p.info, p.kind, p.info.stage, p.info.microbatch);
  pending_.clear();
}

StepStats Executor::TrainStep(const Batch& batch, StepObserver* observer) {
  const StepStats stats = ComputeGradients(batch, observer);
  ApplyGradients(observer);
  return stats;
}

StepStats Executor::ComputeGradients(const Batch& batch, StepObserver* observer) {
  if (observer != nullptr) observer->StepStarts();
  const StepStats stats = RunStep(batch);
  SumTiedGradients();
  replicas_->FinishReductions();
  if (plan_.wide_gradients) {
    for (auto& st : stages_) st->NarrowGrads();
  }
  if (observer != nullptr) observer->GradientsDone();
  return stats;
}

void Executor::ApplyGradients(StepObserver* observer) {
  replicas_->StepOptimizers();
  if (observer != nullptr) observer->StepEnds();
}

void Executor::GradientSquares(std::span<double> per_op) {
  for (std::size_t k = 0; k < stages_.size(); ++k) {
    const int local = static_cast<int>(k);
    square_parts_.clear();
    square_ranges_.clear();
    square_ops_.clear();
    replicas_->CountedParts(local, square_parts_);
    for (const ParamRange& part : square_parts_) {
      OpRanges(model_, plan_.local_stages[k], part, square_ranges_, square_ops_);
    }
    square_sums_.resize(square_ranges_.size());
    replicas_->GradientSquares(local, square_ranges_, square_sums_);
    for (std::size_t i = 0; i < square_ops_.size(); ++i) {
      per_op[static_cast<std::size_t>(square_ops_[i])] += square_sums_[i];
    }
  }
}

void Executor::DiscardGradients() {
  for (auto& st : stages_) st->ZeroGrads();
}

void Executor::SumTiedGradients() {
  const TiedPlan& t = plan_.tied;
  if (!t.active) return;
  if (plan_.wide_gradients) {
    SumTiedWide();
    return;
  }
  auto grads = [&](int local, std::size_t offset) {
    return FloatView(stages_[static_cast<std::size_t>(local)]->device().grads() + offset, t.floats);
  };
  if (t.peer < 0) {
    // Both copies here: the sum into one, copied to the other.
    const View e = grads(t.local_embedding, t.embedding_offset), h = grads(t.local_head, t.head_offset);
    StageDevice& dev = stages_[static_cast<std::size_t>(t.local_embedding)]->device();
    dev.AddInto(h, e);
    dev.Copy(h, e);
    return;
  }
  // Each side adds the other's gradient to its own: a + b on one rank, b + a
  // on the other, the same floats.
  const int local = t.local_embedding >= 0 ? t.local_embedding : t.local_head;
  const View mine = grads(local, t.local_embedding >= 0 ? t.embedding_offset : t.head_offset);
  const std::size_t bytes = t.floats * sizeof(float);
  dev_.Irecv(t.recv_request, tied_inbox_, bytes, t.peer, t.tag);
  dev_.Isend(t.send_request, mine.data, bytes, t.peer, t.tag);
  dev_.WaitRecv(t.recv_request, {"RECV tied-embedding gradient", -1, -1, t.peer});
  dev_.WaitSend(t.send_request, {"SEND tied-embedding gradient", -1, -1, t.peer});
  stages_[static_cast<std::size_t>(local)]->device().AddInto(ConstView{tied_inbox_, mine.desc}, mine);
}

void Executor::SumTiedWide() {
  const TiedPlan& t = plan_.tied;
  auto wide = [&](int local, std::size_t offset) {
    return stages_[static_cast<std::size_t>(local)]->wide_grads().subspan(offset, t.floats);
  };
  if (t.peer < 0) {
    const std::span<double> e = wide(t.local_embedding, t.embedding_offset), h = wide(t.local_head, t.head_offset);
    for (std::size_t i = 0; i < t.floats; ++i) e[i] = h[i] = e[i] + h[i];
    return;
  }
  const int local = t.local_embedding >= 0 ? t.local_embedding : t.local_head;
  const std::span<double> mine = wide(local, t.local_embedding >= 0 ? t.embedding_offset : t.head_offset);
  const std::size_t bytes = t.floats * sizeof(double);
  dev_.Irecv(t.recv_request, tied_inbox_, bytes, t.peer, t.tag);
  dev_.Isend(t.send_request, reinterpret_cast<const std::byte*>(mine.data()), bytes, t.peer, t.tag);
  dev_.WaitRecv(t.recv_request, {"RECV tied-embedding gradient", -1, -1, t.peer});
  dev_.WaitSend(t.send_request, {"SEND tied-embedding gradient", -1, -1, t.peer});
  const auto* other = reinterpret_cast<const double*>(tied_inbox_);
  for (std::size_t i = 0; i < t.floats; ++i) mine[i] += other[i];
}

StepStats Executor::RunStep(const Batch& batch) {
  StepStats stats;
  SetStarts(batch.starts.empty() ? nullptr : batch.starts.data(), batch.starts.size());
  host_labels_ = batch.labels.data();
  step_grad_scale_ = batch.targets > 0 ? 1.0f / static_cast<float>(batch.targets) : grad_scale_;
  const int* rows = StepRows(batch, &stats);
  if (!lengths_.empty()) SetLengths(batch.filled.data(), batch.filled.size(), rows);
  // A GPU reads the batch from its own memory: one upload per step, ordered
  // before the first forward by the compute stream.
  const std::byte* inputs = batch.inputs.data();
  const std::int32_t* labels = batch.labels.data();
  if (inputs_ != nullptr) {
    dev_.Upload(inputs_, batch.inputs.data(), plan_.inputs.bytes());
    inputs = inputs_;
  }
  if (labels_ != nullptr) {
    dev_.Upload(labels_, batch.labels.data(), plan_.labels.bytes());
    labels = reinterpret_cast<const std::int32_t*>(labels_);
  }
  Run(train_ops_, Mode::kTrain, inputs, labels, rows, &stats);
  return stats;
}

void Executor::SetStarts(const std::int32_t* starts, std::size_t count) {
  starts_ = starts;
  if (starts == nullptr || dev_.host_memory()) return;
  const std::size_t bytes = count * sizeof(std::int32_t);
  if (starts_copy_ == nullptr || bytes > StartsBytes(plan_)) {
    throw Error(fmt::format("rank {}: {} document starts for a step, room on the device for {}", rank_, count,
                            starts_copy_ == nullptr ? 0 : StartsBytes(plan_) / sizeof(std::int32_t)));
  }
  dev_.Upload(starts_copy_, starts, bytes);  // ordered before the step's first action, as the inputs
  starts_ = reinterpret_cast<const std::int32_t*>(starts_copy_);
}

std::int64_t Executor::LabelsThatCount(const Op& op, const UnitPart& u, int rows, int length) const {
  const auto per_sample = static_cast<std::size_t>(plan_.labels_per_sample);
  const auto begin = static_cast<std::size_t>(u.whole() ? 0 : u.begin);
  const auto tokens = static_cast<std::size_t>(u.whole() && length > 0 ? length : u.Tokens(plan_.labels_per_sample));
  std::int64_t counted = 0;
  for (std::size_t n = 0; n < static_cast<std::size_t>(rows); ++n) {
    const std::int32_t* row = host_labels_ + op.labels + n * per_sample + begin;
    counted += std::count_if(row, row + tokens, [](std::int32_t v) { return v != kIgnoreLabel; });
  }
  return counted;
}

const int* Executor::StepRows(const Batch& batch, StepStats* stats) {
  const bool last_here = plan_.local[static_cast<std::size_t>(plan_.stages - 1)] >= 0;
  const std::int64_t seq = plan_.labels_per_sample;
  if (batch.filled.empty()) {
    if (last_here) {
      stats->microbatches = plan_.sequences;
      stats->positions = std::int64_t(plan_.sequences) * plan_.rows * seq;
    }
    return full_rows_.data();
  }
  const auto R = static_cast<std::size_t>(plan_.rows);
  for (std::size_t j = 0; j < step_rows_.size(); ++j) {
    const std::size_t first = std::min(j * R, batch.filled.size());
    const int rows = RowsRun(batch.filled.subspan(first, std::min(R, batch.filled.size() - first)));
    step_rows_[j] = rows;
    if (last_here && rows > 0) {
      ++stats->microbatches;
      stats->positions += rows * seq;
    }
  }
  return step_rows_.data();
}

SequencePart Executor::PartOf(const Instruction& in) const {
  const UnitPart u = RealPart(in.part);
  SequencePart part{u.begin, u.end, nullptr, nullptr};
  if (starts_ != nullptr) {
    part.starts = starts_ + static_cast<std::size_t>(u.sequence) * static_cast<std::size_t>(plan_.rows) *
                                static_cast<std::size_t>(plan_.labels_per_sample);
  }
  // A slice of a packed sequence: its sequence's length, where the last of
  // its slices that runs ends (its keys' gradients start there).
  part.length = lengths_.empty() ? 0 : lengths_[static_cast<std::size_t>(u.sequence)];
  const auto local = static_cast<std::size_t>(in.local);
  const std::size_t bytes = plan_.local_stages[local].sequence_bytes;
  if (u.sequence_slot >= 0) part.keys_values = sequences_[local] + static_cast<std::size_t>(u.sequence_slot) * bytes;
  if (u.gradient_slot >= 0) part.gradients = gradients_[local] + static_cast<std::size_t>(u.gradient_slot) * bytes;
  return part;
}

void Executor::SetLengths(const std::int32_t* filled, std::size_t samples, const int* rows) {
  for (std::size_t j = 0; j < lengths_.size(); ++j) {
    int longest = 0;
    const std::size_t first = j * static_cast<std::size_t>(plan_.rows);
    for (std::size_t r = 0; r < static_cast<std::size_t>(rows[j]) && first + r < samples; ++r) {
      longest = std::max(longest, static_cast<int>(filled[first + r]));
    }
    lengths_[j] = longest;
  }
}

const std::byte* Executor::UnitRows(const std::byte* batch, std::byte* staging, std::size_t token_bytes,
                                    std::size_t tokens_per_sample, const UnitPart& u, int rows, int length) {
  if (u.whole() && (length == 0 || rows == 1 || static_cast<std::size_t>(length) == tokens_per_sample)) return batch;
  const auto begin = static_cast<std::size_t>(u.begin);
  const auto tokens = static_cast<std::size_t>(u.whole() ? length : u.end - u.begin);
  for (std::size_t n = 0; n < static_cast<std::size_t>(rows); ++n) {
    dev_.Copy(staging + n * tokens * token_bytes, batch + (n * tokens_per_sample + begin) * token_bytes,
              tokens * token_bytes);
  }
  return staging;
}

void Executor::RunForward(const Op& op, const TensorDesc& tensor, bool train, const std::byte* inputs,
                          const std::int32_t* labels, int rows, StepStats* stats) {
  const Instruction& in = *op.in;
  const int s = in.action.stage, j = in.action.microbatch;
  const SequencePart part = PartOf(in);
  const int length = part.length;
  if (in.wait >= 0) {
    WaitRecorded(in.wait, {train ? "RECV_F" : "RECV_F (evaluation)", s, j, in.peer, "F"}, ActionKind::kRecvF, s, j);
  }
  replicas_->BeforeCompute(in);  // after the message: a gather waits only beyond it
  Stage& st = *stages_[static_cast<std::size_t>(in.local)];
  const std::size_t token_bytes = SizeOf(plan_.inputs.dtype);
  const std::byte* first_input =
      in.in.kind != BufferRef::kInputs
          ? nullptr
          : UnitRows(inputs + op.input_offset, unit_inputs_, token_bytes,
                     plan_.inputs.WithRows(1).bytes() / token_bytes, RealPart(in.part), rows, length);
  const ConstView x{first_input != nullptr ? first_input : op.input, tensor};
  const ActionClock::Stamp start = clock_.Mark();
  std::byte* slot = nullptr;
  ActivationStore& store = *stores_[static_cast<std::size_t>(in.local)];
  if (train) {
    slot = store.Acquire(j).data();
    store.Write(j, st.plan().kept_offset[0], {x.data, x.bytes()});
  }
  std::size_t written = 0;
  if (in.labels.kind == BufferRef::kLabels) {
    // One label per token: the loss averages over every token of the batch.
    const UnitPart u = RealPart(in.part);
    const std::int64_t tokens =
        std::int64_t(rows) * (u.whole() && length > 0 ? length : u.Tokens(plan_.labels_per_sample));
    const auto* mine = reinterpret_cast<const std::int32_t*>(
        UnitRows(reinterpret_cast<const std::byte*>(labels + op.labels), unit_labels_, sizeof(std::int32_t),
                 static_cast<std::size_t>(plan_.labels_per_sample), u, rows, length));
    const ConstView l{reinterpret_cast<const std::byte*>(mine), {DType::kI32, {tokens}}};
    st.ForwardLoss(x, slot, l, train ? step_grad_scale_ : 1.0f, &written, part);
    // Packed documents: the labels that count (the mean is over them).
    stats->samples += starts_ == nullptr ? tokens : LabelsThatCount(op, u, rows, length);
  } else {
    st.Forward(x, slot, View{op.output, Stage::Shaped(st.plan().output(), rows, part)}, &written, part);
  }
  if (train) store.CountInPlace(written);
  clock_.Record(ActionKind::kForward, s, j, start);
}

void Executor::Run(const std::vector<Op>& ops, Mode mode, const std::byte* inputs, const std::int32_t* labels,
                   const int* rows_of, StepStats* stats) {
  const bool train = mode == Mode::kTrain;
  timing_messages_ = measuring_links_ && train;  // a training step's messages only
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    WhileWaiting::Run();  // a slow wire's messages that came due go out between actions too
    replicas_->Poll(train);
    const Instruction& in = *op.in;
    const Action& a = in.action;
    const int s = a.stage, j = a.microbatch;
    if (!HasMicrobatch(a.kind)) {
      RunShardingAction(in, train);
      continue;
    }
    const int rows = rows_of[in.part.sequence];
    // Past the end of the evaluation data, an empty microbatch of a step,
    // or a slice past its packed sequence's length.
    if (rows == 0 || !SliceRuns(in.part)) {
      replicas_->AfterAction(i, train);  // a stage's gradient sums start where its last writer would have
      continue;
    }
    const std::size_t flight = flight_.Start(step_, a);
    if (train && hook_ != nullptr && IsCompute(a.kind)) hook_->Before(rank_, step_, KindName(a.kind));
    // A packed microbatch at its length: its messages and views too.
    TensorDesc tensor = in.tensor.elements() > 0 ? in.tensor.WithRows(rows) : in.tensor;
    if (const int length = LengthOf(in.part); length > 0 && tensor.elements() > 0) tensor = tensor.WithTokens(length);
    if (!in.part.whole() && !lengths_.empty() && tensor.elements() > 0) {
      tensor = tensor.WithTokens(RealPart(in.part).end - in.part.begin);  // a slice up to its sequence's length
    }
    switch (a.kind) {
      case ActionKind::kRecvF:
      case ActionKind::kRecvB:
        dev_.Irecv(in.request, op.output, tensor.bytes(), in.peer, in.tag);
        break;
      case ActionKind::kSendF:
      case ActionKind::kSendB: {
        const bool f = a.kind == ActionKind::kSendF;
        if (timing_messages_) {
          message_times_.push_back({true, in.peer, MessageKey(f, f ? s + 1 : s - 1, j, plan_), MonotonicSeconds()});
        }
        dev_.Isend(in.request, op.input, tensor.bytes(), in.peer, in.tag);
        const char* what = train ? (f ? "SEND_F" : "SEND_B") : (f ? "SEND_F (evaluation)" : "SEND_B (evaluation)");
        pending_.push_back({in.request, {what, s, j, in.peer}, a.kind});
        break;
      }
      case ActionKind::kForward:
        RunForward(op, tensor, train, inputs, labels, rows, stats);
        break;
      case ActionKind::kBackward:
      case ActionKind::kBackwardInput: {
        if (in.wait >= 0) {
          WaitRecorded(in.wait, {"RECV_B", s, j, in.peer, KindName(a.kind).data()}, ActionKind::kRecvB, s, j);
        }
        replicas_->BeforeCompute(in);
        Stage& st = *stages_[static_cast<std::size_t>(in.local)];
        ActivationStore& store = *stores_[static_cast<std::size_t>(in.local)];
        const ActionClock::Stamp start = clock_.Mark();
        const bool full = a.kind == ActionKind::kBackward;
        const SequencePart part = PartOf(in);
        // The stage's last gradient writer of the step starts its sums as it goes.
        st.Backward(store.Get(j).data(), ConstView{op.input, Stage::Shaped(st.plan().output(), rows, part)},
                    View{op.output, Stage::Shaped(st.plan().input(), rows, part)}, full,
                    replicas_->BucketHook(i, in.local, train), part);
        if (full) store.Release(j);
        clock_.Record(a.kind, s, j, start);
        break;
      }
      case ActionKind::kBackwardWeight: {
        replicas_->BeforeCompute(in);
        ActivationStore& store = *stores_[static_cast<std::size_t>(in.local)];
        const ActionClock::Stamp start = clock_.Mark();
        stages_[static_cast<std::size_t>(in.local)]->BackwardWeight(
            store.Get(j).data(), rows, replicas_->BucketHook(i, in.local, train), PartOf(in));
        store.Release(j);
        clock_.Record(ActionKind::kBackwardWeight, s, j, start);
        break;
      }
      default:
        break;
    }
    dev_.Progress();
    flight_.Done(flight);
    replicas_->AfterAction(i, train);
  }
  WaitSends();
  replicas_->EndList();
  if (train) TakeLoss(stats);
}

void Executor::RunShardingAction(const Instruction& in, bool train) {
  const Action& a = in.action;
  if (!plan_.sharding.active() || a.kind == ActionKind::kIdle) return;  // a file's, under ZeRO 0 or 1
  const std::size_t flight = flight_.Start(step_, a);
  if (train && hook_ != nullptr && a.kind != ActionKind::kReshard) hook_->Before(rank_, step_, KindName(a.kind));
  replicas_->RunShardingAction(in, train);
  flight_.Done(flight);
}

void Executor::TakeLoss(StepStats* stats) {
  const int last = plan_.local[static_cast<std::size_t>(plan_.stages - 1)];
  if (last < 0) return;
  const LossTotals totals = stages_[static_cast<std::size_t>(last)]->TakeLossTotals();
  stats->loss_sum += totals.loss_sum;
  stats->correct += totals.correct;
}

StepStats Executor::Evaluate(const Dataset& data, std::int64_t begin, std::int64_t end) {
  StepStats stats;
  const int rows = plan_.rows;
  const std::size_t sample_bytes = plan_.inputs.WithRows(1).bytes();  // a whole sequence
  const std::int64_t per_sample = plan_.labels_per_sample;
  begin = std::clamp<std::int64_t>(begin, 0, data.samples);
  end = std::clamp<std::int64_t>(end, begin, data.samples);
  const std::byte* inputs = data.inputs.empty() ? nullptr : data.inputs.data() + begin * sample_bytes;
  const std::int32_t* labels = data.labels.empty() ? nullptr : data.labels.data() + begin * per_sample;
  // Held in memory: read in place; from a source: each round read into the round_ buffers.
  const bool read = data.source != nullptr;
  const std::int64_t samples = end - begin;
  // Rounds of the evaluation schedule: its sequences (whole microbatches)
  // of `rows` samples, the last round's tail shorter (or empty). Every rank
  // knows every count, so both sides of each message agree on its size.
  const int sequences = plan_.sequences;
  // Under ZeRO 3 a round gathers the stages over the replicas: every
  // replica runs as many rounds as the largest share needs, the rounds past
  // its own data computing nothing.
  std::int64_t rounds_of = samples;
  if (plan_.sharding.parameters_sharded()) {
    const std::int64_t D = plan_.reduction.replicas;
    rounds_of = std::max(samples, (data.samples + D - 1) / D);
  }
  for (std::int64_t first = 0; first < rounds_of; first += std::int64_t(sequences) * rows) {
    for (int j = 0; j < sequences; ++j) {
      round_rows_[static_cast<std::size_t>(j)] =
          static_cast<int>(std::clamp<std::int64_t>(samples - first - std::int64_t(j) * rows, 0, rows));
    }
    const std::int64_t round = std::clamp<std::int64_t>(samples - first, 0, std::int64_t(sequences) * rows);
    if (read) ReadRound(data, begin + first, round);
    const std::byte* in = read     ? (data.has_inputs() ? round_inputs_.data() : nullptr)
                          : inputs != nullptr ? inputs + first * sample_bytes
                                              : nullptr;
    const std::int32_t* lab = read     ? (data.has_labels() ? round_labels_.data() : nullptr)
                              : labels != nullptr ? labels + first * per_sample
                                                  : nullptr;
    if (inputs_ != nullptr && in != nullptr) {
      dev_.Upload(inputs_, in, static_cast<std::size_t>(round) * sample_bytes);
      in = inputs_;
    }
    host_labels_ = lab;
    if (labels_ != nullptr && lab != nullptr) {
      dev_.Upload(labels_, lab, static_cast<std::size_t>(round * per_sample) * sizeof(std::int32_t));
      lab = reinterpret_cast<const std::int32_t*>(labels_);
    }
    // Packed: the round's starts and lengths (none past this replica's data).
    const bool any = round > 0 && data.packed();
    SetStarts(!any ? nullptr : read ? round_starts_.data() : data.starts.data() + (begin + first) * per_sample,
              static_cast<std::size_t>(round * per_sample));
    if (!lengths_.empty()) {
      if (any) {
        SetLengths(data.targets.data() + begin + first, static_cast<std::size_t>(round), round_rows_.data());
      } else {
        std::fill(lengths_.begin(), lengths_.end(), 0);
      }
    }
    Run(evaluation_ops_, Mode::kEvaluate, in, lab, round_rows_.data(), &stats);
  }
  starts_ = nullptr;
  TakeLoss(&stats);  // once: the device's totals add every round's losses in order
  return stats;
}

void Executor::ReadRound(const Dataset& data, std::int64_t first, std::int64_t round) {
  const std::size_t samples = static_cast<std::size_t>(plan_.sequences) * static_cast<std::size_t>(plan_.rows);
  const std::size_t f = data.sample_bytes(), l = static_cast<std::size_t>(data.labels_per_sample);
  if (data.has_inputs()) round_inputs_.resize(samples * f);  // (sequences x rows, ...): once, the first round
  if (data.has_labels()) round_labels_.resize(samples * l);
  if (data.packed()) round_starts_.resize(samples * l);
  for (std::size_t i = 0; i < static_cast<std::size_t>(round); ++i) {
    data.ReadSample(first + static_cast<std::int64_t>(i),
                    data.has_inputs() ? std::span<std::byte>(round_inputs_).subspan(i * f, f) : std::span<std::byte>(),
                    data.has_labels() ? std::span<std::int32_t>(round_labels_).subspan(i * l, l)
                                      : std::span<std::int32_t>(),
                    data.packed() ? std::span<std::int32_t>(round_starts_).subspan(i * l, l)
                                  : std::span<std::int32_t>());
  }
}

}  // namespace baton
