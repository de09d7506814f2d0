#include "executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "baton/error.h"
#include "baton/timing.h"

namespace baton {

Executor::Executor(const ModelDesc& model, const RankPlan& plan, double wait_timeout_s, Transport& transport,
                   RankDevice& device, ReplicaGroup* replicas)
    : model_(model),
      plan_(plan),
      dev_(device),
      rank_(plan.rank),
      grad_scale_(1.0f / static_cast<float>(std::int64_t(plan.global_batch) * plan.labels_per_sample)) {
  if (plan.max_tag > transport.max_tag()) {
    throw ConfigError(fmt::format("{} stages x {} microbatches need message tags up to {}, beyond MPI's limit {}",
                                  plan.stages, plan.microbatches, plan.max_tag, transport.max_tag()));
  }
  // Sharded data parallel: the stages compute with the executor's windows.
  const ShardingPlan& sh = plan.sharding;
  if (sh.active() && !dev_.host_memory()) {
    throw ConfigError(fmt::format("rank {}: data_parallel.zero {} runs on the CPU only (device: cpu)", rank_, sh.zero));
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
  if (plan.unit_inputs.elements() > 0) unit_inputs_ = dev_.Allocate(plan.unit_inputs.bytes());
  if (plan.unit_labels.elements() > 0) unit_labels_ = dev_.Allocate(plan.unit_labels.bytes());
  buffers_.assign(plan.local_stages.size(), {});
  for (const BufferPlan& b : plan.buffers) {
    buffers_[static_cast<std::size_t>(b.local)][b.kind] = dev_.Allocate(b.tensor.bytes() * static_cast<std::size_t>(b.count));
  }
  dev_.ConfigureMessages(plan.message_bytes, wait_timeout_s);
  if (plan.tied.peer >= 0) tied_inbox_ = dev_.Allocate(plan.tied.floats * sizeof(float));
  if (!dev_.host_memory()) {
    if (plan.has_inputs) inputs_ = dev_.Allocate(plan.inputs.bytes());
    if (plan.has_labels) labels_ = dev_.Allocate(plan.labels.bytes());
  }
  train_ops_ = Bind(plan.step);
  evaluation_ops_ = Bind(plan.evaluation);
  full_rows_.assign(static_cast<std::size_t>(plan.sequences), plan.rows);
  round_rows_.assign(static_cast<std::size_t>(plan.sequences), 0);
  pending_.reserve(static_cast<std::size_t>(plan.sends_per_step));
  const ReductionPlan& red = plan.reduction;
  if (red.active()) {
    if (replicas == nullptr || replicas->size() != red.replicas) {
      throw ConfigError(fmt::format("rank {}: the plan sums gradients over {} replicas, but the replica group has {}",
                                    rank_, red.replicas, replicas ? replicas->size() : 1));
    }
    // The largest collective of each request id, for a device that stages
    // them (a bucket's sum; under ZeRO its parameters' all-gather, id + 1).
    std::vector<std::size_t> floats(static_cast<std::size_t>(red.requests), 0);
    for (const BucketPlan& b : red.buckets) {
      for (int id : {b.request, red.zero ? b.request + 1 : b.request}) {
        floats[static_cast<std::size_t>(id)] = std::max(floats[static_cast<std::size_t>(id)], b.count);
      }
    }
    for (const ShardedStage& st : plan.sharding.stages) {
      floats[static_cast<std::size_t>(st.gather_request)] = st.floats;
      floats[static_cast<std::size_t>(st.reduce_request)] = st.floats;
    }
    replicas_ = &dev_.GradientGroup(*replicas, floats);
    replicas_->Configure(red.requests, wait_timeout_s);
    reduce_after_.assign(plan.step.size(), -1);
    for (std::size_t k = 0; k < red.start_after.size(); ++k) {
      if (red.start_after[k] >= 0) reduce_after_[static_cast<std::size_t>(red.start_after[k])] = static_cast<int>(k);
    }
    reduce_order_.assign(red.buckets.size(), -1);
    reduce_next_.assign(red.first_bucket.begin() + 1, red.first_bucket.end());
  }
  if (sh.active()) {
    auto floats_of = [&](std::size_t n) {
      return n == 0 ? nullptr : reinterpret_cast<float*>(dev_.Allocate(n * sizeof(float)));
    };
    for (std::size_t k = 0; k < stages_.size(); ++k) {
      Sharded st;
      st.gradient_shard = floats_of(red.shard_count[k]);
      if (sh.parameters_sharded()) st.parameter_shard = floats_of(red.shard_count[k]);
      sharded_.push_back(st);
    }
    parameter_pool_ = floats_of(static_cast<std::size_t>(sh.parameter_windows) * sh.window_floats);
    gradient_pool_ = floats_of(static_cast<std::size_t>(sh.gradient_windows) * sh.window_floats);
    reducing_.assign(static_cast<std::size_t>(sh.gradient_windows), -1);
    for (std::size_t k = 0; k < stages_.size(); ++k) Rebind(static_cast<int>(k));
  }
}

// Starts a stage's buckets as its last backward of the step finishes them.
struct Executor::BucketStarter final : GradientsReady {
  BucketStarter(Executor* e, int local) : exec(e), local(local) {}
  void Ready(std::size_t from) override { exec->StartReduction(local, from); }
  Executor* exec;
  int local;
};

void Executor::StartReduction(int local, std::size_t from) {
  const ReductionPlan& red = plan_.reduction;
  const auto k = static_cast<std::size_t>(local);
  float* grads = stages_[k]->device().grads();
  int& next = reduce_next_[k];
  while (next > red.first_bucket[k] && red.buckets[static_cast<std::size_t>(next - 1)].offset >= from) {
    const int b = --next;
    if (reduce_started_ == 0) reduction_times_.first_start = MonotonicSeconds();
    const BucketPlan& bucket = red.buckets[static_cast<std::size_t>(b)];
    const std::span<float> data(grads + bucket.offset, bucket.count);
    if (red.zero) {
      replicas_->StartReduceScatter(bucket.request, data, bucket.counts, bucket.displs);
    } else {
      replicas_->StartAllReduce(bucket.request, data);
    }
    reduce_order_[reduce_started_++] = b;
  }
}

void Executor::PollReductions() {
  if (plan_.sharding.active()) {
    for (std::size_t w = 0; w < reducing_.size(); ++w) {
      if (reducing_[w] >= 0) EndReduce(static_cast<int>(w), true);
    }
    return;
  }
  // The oldest first: testing it moves every collective along.
  while (reduce_done_ < reduce_started_) {
    const BucketPlan& bucket = plan_.reduction.buckets[static_cast<std::size_t>(reduce_order_[reduce_done_])];
    if (!replicas_->Test(bucket.request)) return;
    ++reduce_done_;
    reduction_times_.last_end = MonotonicSeconds();
  }
}

void Executor::FinishReductions() {
  if (replicas_ == nullptr) return;
  if (plan_.sharding.active()) {
    FinishSharded();
    return;
  }
  const ReductionPlan& red = plan_.reduction;
  for (std::size_t k = 0; k < red.start_after.size(); ++k) {
    if (red.start_after[k] < 0) StartReduction(static_cast<int>(k));
  }
  const double start = MonotonicSeconds();
  for (; reduce_done_ < reduce_started_; ++reduce_done_) {
    const BucketPlan& bucket = red.buckets[static_cast<std::size_t>(reduce_order_[reduce_done_])];
    const int stage = plan_.local_stages[static_cast<std::size_t>(bucket.local)].stage;
    replicas_->Wait(bucket.request, {"the gradient sum", stage, -1, -1});
    reduction_times_.last_end = MonotonicSeconds();
  }
  reduction_times_.exposed = MonotonicSeconds() - start;
  if (events_) events_->push_back({ActionKind::kReduceGrad, -1, -1, start, MonotonicSeconds()});
  reduce_started_ = reduce_done_ = 0;
  reduce_next_.assign(red.first_bucket.begin() + 1, red.first_bucket.end());
}

void Executor::Rebind(int local) {
  const auto k = static_cast<std::size_t>(local);
  const Sharded& st = sharded_[k];
  const std::size_t n = plan_.local_stages[k].num_params;
  Stage& stage = *stages_[k];
  std::span<float> params;
  if (!plan_.sharding.parameters_sharded()) {
    params = stage.params();  // its own, whole
  } else if (st.parameter_window >= 0) {
    params = {Window(parameter_pool_, st.parameter_window), n};
  }
  std::span<float> grads;
  if (st.gradient_window >= 0) grads = {Window(gradient_pool_, st.gradient_window), n};
  stage.Bind(params, grads);
}

void Executor::Unshard(const Instruction& in) {
  const auto k = static_cast<std::size_t>(in.local);
  const ShardedStage& plan = plan_.sharding.stages[k];
  Sharded& st = sharded_[k];
  st.parameter_window = in.window;
  if (plan.floats > 0) {
    // This replica's shard in its place, then every other's gathered round it.
    float* window = Window(parameter_pool_, in.window);
    const auto me = static_cast<std::size_t>(replicas_->rank());
    std::copy_n(st.parameter_shard, plan.counts[me], window + plan.displs[me]);
    replicas_->StartAllGather(plan.gather_request, {window, plan.floats}, plan.counts, plan.displs);
    st.gathering = true;
    // Its start, as an instant (microbatch 0; a wait for it is microbatch -1).
    if (events_) {
      const double now = MonotonicSeconds();
      events_->push_back({ActionKind::kUnshard, plan_.local_stages[k].stage, 0, now, now});
    }
  }
  Rebind(in.local);
}

void Executor::PollGathers() {
  // MPI moves a non-blocking collective along only inside its calls: test
  // each gather in flight between actions, so that it runs under them.
  for (std::size_t k = 0; k < sharded_.size(); ++k) {
    Sharded& st = sharded_[k];
    if (!st.gathering) continue;
    const double start = events_ ? MonotonicSeconds() : 0.0;
    if (replicas_->Test(plan_.sharding.stages[k].gather_request)) st.gathering = false;
    if (events_) st.polled += MonotonicSeconds() - start;  // the copies a test makes are the rank's time too
  }
}

void Executor::Reshard(int local) {
  const auto k = static_cast<std::size_t>(local);
  Sharded& st = sharded_[k];
  if (st.gathering) {  // freed unused: its gather must still end first
    replicas_->Wait(plan_.sharding.stages[k].gather_request,
                    {"UNSHARD's all-gather", plan_.local_stages[k].stage, -1, -1});
    st.gathering = false;
  }
  st.parameter_window = -1;
  Rebind(local);
}

void Executor::BeforeSharded(const Instruction& in) {
  const auto k = static_cast<std::size_t>(in.local);
  Sharded& st = sharded_[k];
  const int stage = plan_.local_stages[k].stage;
  if (st.gathering || st.polled > 0) {
    // The rank's time in the gather's calls: its tests between actions and
    // this wait, drawn as one wait ending here.
    const double start = events_ ? MonotonicSeconds() : 0.0;
    if (st.gathering) replicas_->Wait(plan_.sharding.stages[k].gather_request, {"UNSHARD's all-gather", stage, -1, -1});
    st.gathering = false;
    if (events_) events_->push_back({ActionKind::kUnshard, stage, -1, start - st.polled, MonotonicSeconds()});
    st.polled = 0;
  }
  if (in.window < 0) return;
  // The stage's first gradient writer of the step: a zeroed window, once
  // the reduce-scatter still in it has ended.
  if (reducing_[static_cast<std::size_t>(in.window)] >= 0) EndReduce(in.window, false);
  st.gradient_window = in.window;
  std::fill_n(Window(gradient_pool_, in.window), plan_.local_stages[k].num_params, 0.0f);
  Rebind(in.local);
}

void Executor::ReduceGrad(int local) {
  const auto k = static_cast<std::size_t>(local);
  const ShardedStage& plan = plan_.sharding.stages[k];
  Sharded& st = sharded_[k];
  const int w = st.gradient_window;
  if (w < 0) return;
  if (reduce_started_ == 0) reduction_times_.first_start = MonotonicSeconds();
  ++reduce_started_;
  replicas_->StartReduceScatter(plan.reduce_request, {Window(gradient_pool_, w), plan.floats}, plan.counts,
                                plan.displs);
  reducing_[static_cast<std::size_t>(w)] = local;
  st.gradient_window = -1;
  if (events_) {  // its start, as an instant (the step's wait for the sums is stage -1)
    const double now = MonotonicSeconds();
    events_->push_back({ActionKind::kReduceGrad, plan_.local_stages[k].stage, 0, now, now});
  }
  Rebind(local);
}

void Executor::EndReduce(int w, bool poll) {
  const int local = reducing_[static_cast<std::size_t>(w)];
  const auto k = static_cast<std::size_t>(local);
  const ShardedStage& plan = plan_.sharding.stages[k];
  if (poll) {
    if (!replicas_->Test(plan.reduce_request)) return;
  } else {
    replicas_->Wait(plan.reduce_request, {"REDUCE_GRAD's reduce-scatter", plan_.local_stages[k].stage, -1, -1});
  }
  const auto me = static_cast<std::size_t>(replicas_->rank());
  std::copy_n(Window(gradient_pool_, w) + plan.displs[me], plan.counts[me], sharded_[k].gradient_shard);
  reducing_[static_cast<std::size_t>(w)] = -1;
  ++reduce_done_;
  reduction_times_.last_end = MonotonicSeconds();
}

void Executor::FreeParameterWindows() {
  if (!plan_.sharding.parameters_sharded()) return;
  for (std::size_t k = 0; k < sharded_.size(); ++k) {
    if (sharded_[k].parameter_window >= 0) Reshard(static_cast<int>(k));
  }
}

void Executor::FinishSharded() {
  // The tied copies' sums, now that the copies' gradients are summed.
  for (std::size_t k = 0; k < sharded_.size(); ++k) {
    if (plan_.sharding.stages[k].after_tied) ReduceGrad(static_cast<int>(k));
  }
  const double start = MonotonicSeconds();
  for (std::size_t w = 0; w < reducing_.size(); ++w) {
    if (reducing_[w] >= 0) EndReduce(static_cast<int>(w), false);
  }
  reduction_times_.exposed = MonotonicSeconds() - start;
  if (events_) events_->push_back({ActionKind::kReduceGrad, -1, -1, start, MonotonicSeconds()});
  reduce_started_ = reduce_done_ = 0;
}

void Executor::SetOptimizers(const OptimizerSpec& spec) {
  const ReductionPlan& red = plan_.reduction;
  const ShardingPlan& sh = plan_.sharding;
  for (std::size_t k = 0; k < stages_.size(); ++k) {
    StageDevice& dev = stages_[k]->device();
    if (!sh.active()) {
      dev.SetOptimizer(spec, red.shard_begin[k], red.shard_count[k]);  // ZeRO 1: this replica's shard
      continue;
    }
    const std::size_t n = red.shard_count[k];
    float* params = sh.parameters_sharded() ? sharded_[k].parameter_shard : stages_[k]->params().data() + red.shard_begin[k];
    dev.SetShardOptimizer(spec, {params, n}, {sharded_[k].gradient_shard, n});
  }
}

void Executor::HoldWhole(int local, std::span<float> whole, bool gather) {
  const auto k = static_cast<std::size_t>(local);
  const ShardedStage& plan = plan_.sharding.stages[k];
  if (gather && plan.floats > 0) {
    const auto me = static_cast<std::size_t>(replicas_->rank());
    std::copy_n(sharded_[k].parameter_shard, plan.counts[me], whole.data() + plan.displs[me]);
    replicas_->StartAllGather(plan.gather_request, whole, plan.counts, plan.displs);
    replicas_->Wait(plan.gather_request, {"the parameters' all-gather", plan_.local_stages[k].stage, -1, -1});
  }
  stages_[k]->Bind(whole, {});
}

void Executor::KeepShard(int local) {
  const auto k = static_cast<std::size_t>(local);
  const ShardedStage& plan = plan_.sharding.stages[k];
  const auto me = static_cast<std::size_t>(plan_.reduction.replica);
  const std::span<float> whole = stages_[k]->params();
  if (plan.floats > 0) std::copy_n(whole.data() + plan.displs[me], plan.counts[me], sharded_[k].parameter_shard);
  stages_[k]->Bind({}, {});
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


Executor::Stamp Executor::Mark() const {
  if (!events_) return {};
  return {MonotonicSeconds(), ThreadCpuSeconds(), device_clock_ ? dev_.MarkClock() : -1};
}

void Executor::Record(ActionKind kind, int stage, int microbatch, Stamp start) {
  if (!events_) return;
  const int end_mark = device_clock_ ? dev_.MarkClock() : -1;
  events_->push_back({kind, stage, microbatch, start.wall, MonotonicSeconds(), ThreadCpuSeconds() - start.cpu, start.mark, end_mark});
}

void Executor::StartDeviceClock() {
  if (!device_clock_) return;
  // Two marks per compute action, and one for the step's end.
  const std::size_t marks = 2 * plan_.step.size() + 1;
  dev_.StartClock(marks);
  clock_seconds_.reserve(marks + 1);
}

double Executor::ApplyDeviceClock(std::size_t first, double step_start) {
  if (!device_clock_) return step_start;
  const int end = dev_.MarkClock();
  dev_.ReadClock(&clock_seconds_);
  for (std::size_t e = first; e < events_->size(); ++e) {
    ActionEvent& ev = (*events_)[e];
    if (ev.start_mark < 0) continue;
    ev.start = step_start + clock_seconds_[static_cast<std::size_t>(ev.start_mark)];
    ev.end = step_start + clock_seconds_[static_cast<std::size_t>(ev.end_mark)];
  }
  return step_start + clock_seconds_[static_cast<std::size_t>(end)];
}

std::size_t Executor::EventsPerStep() const {
  // At most one event per action plus one wait per receive and per send.
  return 2 * plan_.step.size() + pending_.capacity();
}

void Executor::WaitRecorded(int id, const WaitInfo& info, ActionKind kind, int stage, int microbatch) {
  const double start = events_ ? MonotonicSeconds() : 0.0;
  if (kind == ActionKind::kSendF || kind == ActionKind::kSendB) {
    dev_.WaitSend(id, info);
  } else {
    dev_.WaitRecv(id, info);
  }
  if (events_) events_->push_back({kind, stage, microbatch, start, MonotonicSeconds()});
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
  FinishReductions();
  if (observer != nullptr) observer->GradientsDone();
  return stats;
}

void Executor::ApplyGradients(StepObserver* observer) {
  StepOptimizers();
  if (observer != nullptr) observer->StepEnds();
}

void Executor::DiscardGradients() {
  for (auto& st : stages_) st->ZeroGrads();
}

bool Executor::GradientsFinite() {
  const ReductionPlan& red = plan_.reduction;
  if (plan_.sharding.active()) {
    // This replica's shards of the sums (host memory).
    for (std::size_t k = 0; k < stages_.size(); ++k) {
      const float* g = sharded_[k].gradient_shard;
      if (!std::all_of(g, g + red.shard_count[k], [](float x) { return std::isfinite(x); })) return false;
    }
    return true;
  }
  for (std::size_t k = 0; k < stages_.size(); ++k) {
    StageDevice& dev = stages_[k]->device();
    if (replicas_ != nullptr && red.zero) {
      // After the reduce-scatter only this replica's part of each bucket is summed.
      const auto me = static_cast<std::size_t>(replicas_->rank());
      for (const BucketPlan& b : red.buckets) {
        if (b.local != static_cast<int>(k)) continue;
        if (!dev.GradientsFinite(b.offset + static_cast<std::size_t>(b.displs[me]),
                                 static_cast<std::size_t>(b.counts[me]))) {
          return false;
        }
      }
    } else if (!dev.GradientsFinite(0, plan_.local_stages[k].num_params)) {
      return false;
    }
  }
  return true;
}

void Executor::SumTiedGradients() {
  const TiedPlan& t = plan_.tied;
  if (!t.active) return;
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

void Executor::StepOptimizers() {
  for (auto& st : stages_) st->device().OptimizerStep();
  const ShardingPlan& sh = plan_.sharding;
  if (sh.active()) {
    // Each replica updated its shard: ZeRO 2 gathers the others' into its
    // whole parameters (one collective a stage); under 3 the shards rest
    // until the next UNSHARD. The gradient windows are free and zeroed
    // when next taken.
    if (!sh.parameters_sharded()) {
      for (std::size_t k = 0; k < stages_.size(); ++k) {
        const ShardedStage& p = sh.stages[k];
        if (p.floats > 0) replicas_->StartAllGather(p.gather_request, stages_[k]->params(), p.counts, p.displs);
      }
      for (std::size_t k = 0; k < stages_.size(); ++k) {
        if (sh.stages[k].floats == 0) continue;
        replicas_->Wait(sh.stages[k].gather_request, {"the parameters' all-gather", plan_.local_stages[k].stage, -1, -1});
      }
    }
    for (auto& st : stages_) st->device().ParamsUpdated();
    return;
  }
  const ReductionPlan& red = plan_.reduction;
  if (replicas_ != nullptr && red.zero) {
    // Every replica updated its shard: gather the others' into its parameters.
    for (const BucketPlan& b : red.buckets) {
      float* params = stages_[static_cast<std::size_t>(b.local)]->device().params();
      replicas_->StartAllGather(b.request + 1, {params + b.offset, b.count}, b.counts, b.displs);
    }
    for (const BucketPlan& b : red.buckets) {
      const int stage = plan_.local_stages[static_cast<std::size_t>(b.local)].stage;
      replicas_->Wait(b.request + 1, {"the parameters' all-gather", stage, -1, -1});
    }
  }
  for (auto& st : stages_) {
    st->device().ParamsUpdated();
    st->ZeroGrads();
  }
}

StepStats Executor::RunStep(const Batch& batch) {
  StepStats stats;
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
  Run(train_ops_, Mode::kTrain, inputs, labels, full_rows_.data(), &stats);
  return stats;
}

SequencePart Executor::PartOf(const Instruction& in) const {
  const UnitPart& u = in.part;
  SequencePart part{u.begin, u.end, nullptr, nullptr};
  const auto local = static_cast<std::size_t>(in.local);
  const std::size_t bytes = plan_.local_stages[local].sequence_bytes;
  if (u.sequence_slot >= 0) part.keys_values = sequences_[local] + static_cast<std::size_t>(u.sequence_slot) * bytes;
  if (u.gradient_slot >= 0) part.gradients = gradients_[local] + static_cast<std::size_t>(u.gradient_slot) * bytes;
  return part;
}

const std::byte* Executor::UnitRows(const std::byte* batch, std::byte* staging, std::size_t token_bytes,
                                    std::size_t tokens_per_sample, const UnitPart& u, int rows) {
  if (u.whole()) return batch;
  const auto begin = static_cast<std::size_t>(u.begin), tokens = static_cast<std::size_t>(u.end - u.begin);
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
  if (in.wait >= 0) {
    WaitRecorded(in.wait, {train ? "RECV_F" : "RECV_F (evaluation)", s, j, in.peer, "F"}, ActionKind::kRecvF, s, j);
  }
  if (plan_.sharding.active()) BeforeSharded(in);  // after the message: a gather waits only beyond it
  Stage& st = *stages_[static_cast<std::size_t>(in.local)];
  const std::size_t token_bytes = SizeOf(plan_.inputs.dtype);
  const std::byte* first_input =
      in.in.kind != BufferRef::kInputs
          ? nullptr
          : UnitRows(inputs + op.input_offset, unit_inputs_, token_bytes,
                     plan_.inputs.WithRows(1).bytes() / token_bytes, in.part, rows);
  const ConstView x{first_input != nullptr ? first_input : op.input, tensor};
  const Stamp start = Mark();
  std::byte* slot = nullptr;
  ActivationStore& store = *stores_[static_cast<std::size_t>(in.local)];
  if (train) {
    slot = store.Acquire(j).data();
    store.Write(j, st.plan().kept_offset[0], {x.data, x.bytes()});
  }
  std::size_t written = 0;
  if (in.labels.kind == BufferRef::kLabels) {
    // One label per token: the loss averages over every token of the batch.
    const std::int64_t tokens = std::int64_t(rows) * in.part.Tokens(plan_.labels_per_sample);
    const auto* mine = reinterpret_cast<const std::int32_t*>(
        UnitRows(reinterpret_cast<const std::byte*>(labels + op.labels), unit_labels_, sizeof(std::int32_t),
                 static_cast<std::size_t>(plan_.labels_per_sample), in.part, rows));
    const ConstView l{reinterpret_cast<const std::byte*>(mine), {DType::kI32, {tokens}}};
    st.ForwardLoss(x, slot, l, train ? grad_scale_ : 1.0f, &written, part);
    stats->samples += tokens;
  } else {
    st.Forward(x, slot, View{op.output, Stage::Shaped(st.plan().output(), rows, part)}, &written, part);
  }
  if (train) store.CountInPlace(written);
  Record(ActionKind::kForward, s, j, start);
}

void Executor::Run(const std::vector<Op>& ops, Mode mode, const std::byte* inputs, const std::int32_t* labels,
                   const int* rows_of, StepStats* stats) {
  const bool train = mode == Mode::kTrain;
  const bool reducing = train && replicas_ != nullptr;
  const bool sharding = plan_.sharding.active();
  for (std::size_t i = 0; i < ops.size(); ++i) {
    const Op& op = ops[i];
    if (reducing && reduce_done_ < reduce_started_) PollReductions();
    if (sharding) PollGathers();
    const Instruction& in = *op.in;
    const Action& a = in.action;
    const int s = a.stage, j = a.microbatch;
    if (!HasMicrobatch(a.kind)) {
      // UNSHARD, RESHARD, REDUCE_GRAD: sharded data parallel's, when it runs.
      if (!sharding || a.kind == ActionKind::kIdle) continue;
      Flight& flight = flight_[flight_next_++ % kFlight];
      flight = {step_, a, MonotonicSeconds(), -1};
      if (train && fault_.mode != Fault::kNone && a.kind != ActionKind::kReshard) {
        MaybeInjectFault(fault_, rank_, step_, KindName(a.kind));
      }
      if (a.kind == ActionKind::kUnshard) Unshard(in);
      if (a.kind == ActionKind::kReshard) Reshard(in.local);
      if (a.kind == ActionKind::kReduceGrad && train && !plan_.sharding.stages[static_cast<std::size_t>(in.local)].after_tied) {
        ReduceGrad(in.local);
      }
      flight.end = MonotonicSeconds();
      continue;
    }
    const int rows = rows_of[in.part.sequence];
    if (rows == 0) continue;  // past the end of the evaluation data
    Flight& flight = flight_[flight_next_++ % kFlight];
    flight = {step_, a, MonotonicSeconds(), -1};
    if (train && fault_.mode != Fault::kNone && IsCompute(a.kind)) {
      MaybeInjectFault(fault_, rank_, step_, KindName(a.kind));
    }
    const TensorDesc tensor = in.tensor.elements() > 0 ? in.tensor.WithRows(rows) : in.tensor;
    switch (a.kind) {
      case ActionKind::kRecvF:
      case ActionKind::kRecvB:
        dev_.Irecv(in.request, op.output, tensor.bytes(), in.peer, in.tag);
        break;
      case ActionKind::kSendF:
      case ActionKind::kSendB: {
        dev_.Isend(in.request, op.input, tensor.bytes(), in.peer, in.tag);
        const bool f = a.kind == ActionKind::kSendF;
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
        if (sharding) BeforeSharded(in);
        Stage& st = *stages_[static_cast<std::size_t>(in.local)];
        ActivationStore& store = *stores_[static_cast<std::size_t>(in.local)];
        const Stamp start = Mark();
        const bool full = a.kind == ActionKind::kBackward;
        // The stage's last gradient writer of the step starts its sums as it goes.
        BucketStarter starter(this, in.local);
        const bool last = reducing && reduce_after_[i] >= 0;
        const SequencePart part = PartOf(in);
        st.Backward(store.Get(j).data(), ConstView{op.input, Stage::Shaped(st.plan().output(), rows, part)},
                    View{op.output, Stage::Shaped(st.plan().input(), rows, part)}, full, last ? &starter : nullptr,
                    part);
        if (full) store.Release(j);
        Record(a.kind, s, j, start);
        break;
      }
      case ActionKind::kBackwardWeight: {
        if (sharding) BeforeSharded(in);
        ActivationStore& store = *stores_[static_cast<std::size_t>(in.local)];
        const Stamp start = Mark();
        BucketStarter starter(this, in.local);
        const bool last = reducing && reduce_after_[i] >= 0;
        stages_[static_cast<std::size_t>(in.local)]->BackwardWeight(store.Get(j).data(), last ? &starter : nullptr,
                                                                    PartOf(in));
        store.Release(j);
        Record(ActionKind::kBackwardWeight, s, j, start);
        break;
      }
      default:
        break;
    }
    dev_.Progress();
    flight.end = MonotonicSeconds();
    if (reducing && reduce_after_[i] >= 0) StartReduction(reduce_after_[i]);
  }
  WaitSends();
  FreeParameterWindows();
  if (train) TakeLoss(stats);
}

void Executor::TakeLoss(StepStats* stats) {
  const int last = plan_.local[static_cast<std::size_t>(plan_.stages - 1)];
  if (last < 0) return;
  const LossTotals totals = stages_[static_cast<std::size_t>(last)]->TakeLossTotals();
  stats->loss_sum += totals.loss_sum;
  stats->correct += totals.correct;
}

void Executor::WriteFlightRecord(const std::string& path) const {
  std::string out = fmt::format("{{\"rank\": {}, \"step\": {}, \"now\": {:.6f}, \"actions\": [", rank_, step_, MonotonicSeconds());
  const std::size_t n = std::min(flight_next_, kFlight);
  for (std::size_t k = 0; k < n; ++k) {
    const Flight& f = flight_[(flight_next_ - n + k) % kFlight];
    out += fmt::format("{}\n  {{\"step\": {}, \"action\": \"{}\", \"start\": {:.6f}, \"end\": {}, \"state\": \"{}\"}}",
                       k ? "," : "", f.step, ToString(f.action), f.start,
                       f.end < 0 ? std::string("null") : fmt::format("{:.6f}", f.end), f.end < 0 ? "running" : "done");
  }
  out += "\n]}\n";
  // Best effort, and never through an exception: the job is being aborted.
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) return;
  std::fputs(out.c_str(), file);
  std::fclose(file);
  std::fprintf(stderr, "baton: rank %d: flight record in %s\n", rank_, path.c_str());
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
    const std::byte* in = inputs != nullptr ? inputs + first * sample_bytes : nullptr;
    const std::int32_t* lab = labels != nullptr ? labels + first * per_sample : nullptr;
    if (inputs_ != nullptr && in != nullptr) {
      dev_.Upload(inputs_, in, static_cast<std::size_t>(round) * sample_bytes);
      in = inputs_;
    }
    if (labels_ != nullptr && lab != nullptr) {
      dev_.Upload(labels_, lab, static_cast<std::size_t>(round * per_sample) * sizeof(std::int32_t));
      lab = reinterpret_cast<const std::int32_t*>(labels_);
    }
    Run(evaluation_ops_, Mode::kEvaluate, in, lab, round_rows_.data(), &stats);
  }
  TakeLoss(&stats);  // once: the device's totals add every round's losses in order
  return stats;
}

}  // namespace baton
