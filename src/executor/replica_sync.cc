#include "replica_sync.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "baton/error.h"
#include "baton/host.h"
#include "baton/timing.h"

namespace baton {

ReplicaSync::ReplicaSync(const RankPlan& plan, std::vector<std::unique_ptr<Stage>>& stages, RankDevice& device,
                         ReplicaGroup* group, double wait_timeout_s)
    : plan_(plan), stages_(stages) {
  starter_.sync = this;
  const ReductionPlan& red = plan.reduction;
  const ShardingPlan& sh = plan.sharding;
  if (red.active()) {
    if (group == nullptr || group->size() != red.replicas) {
      throw ConfigError(fmt::format("rank {}: the plan sums gradients over {} replicas, but the replica group has {}",
                                    plan.rank, red.replicas, group ? group->size() : 1));
    }
    // The largest collective of each request id, for a device that stages
    // them (a bucket's sum; under ZeRO its parameters' all-gather, id + 1).
    std::vector<std::size_t> floats(static_cast<std::size_t>(red.requests), 0);
    for (const BucketPlan& b : red.buckets) {
      for (int id : {b.request, red.shards_optimizer ? b.request + 1 : b.request}) {
        floats[static_cast<std::size_t>(id)] = std::max(floats[static_cast<std::size_t>(id)], b.count);
      }
    }
    for (const ShardedStage& st : sh.stages) {
      floats[static_cast<std::size_t>(st.gather_request)] = st.floats;
      floats[static_cast<std::size_t>(st.reduce_request)] = st.floats;
    }
    group_ = &device.GradientGroup(*group, floats);
    group_->Configure(red.requests, wait_timeout_s);
    start_after_.assign(plan.step.size(), -1);
    for (std::size_t k = 0; k < red.start_after.size(); ++k) {
      if (red.start_after[k] >= 0) start_after_[static_cast<std::size_t>(red.start_after[k])] = static_cast<int>(k);
    }
    order_.assign(red.buckets.size(), -1);
    next_.assign(red.first_bucket.begin() + 1, red.first_bucket.end());
  }
  if (!sh.active()) return;
  auto floats_of = [&](std::size_t n) {
    return n == 0 ? nullptr : reinterpret_cast<float*>(device.Allocate(n * sizeof(float)));
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

// ---- Inside an instruction list ----

void ReplicaSync::Poll(bool train) {
  if (reducing(train) && done_ < started_) PollReductions();
  if (plan_.sharding.active()) PollGathers();
}

void ReplicaSync::RunShardingAction(const Instruction& in, bool train) {
  switch (in.action.kind) {
    case ActionKind::kUnshard:
      Unshard(in);
      break;
    case ActionKind::kReshard:
      Reshard(in.local);
      break;
    case ActionKind::kReduceGrad:  // a tied copy's sum waits for the copies' own (FinishSharded)
      if (train && !plan_.sharding.stages[static_cast<std::size_t>(in.local)].after_tied) ReduceGrad(in.local);
      break;
    default:
      break;
  }
}

void ReplicaSync::BeforeCompute(const Instruction& in) {
  if (!plan_.sharding.active()) return;
  const auto k = static_cast<std::size_t>(in.local);
  Sharded& st = sharded_[k];
  if (st.gathering || st.polled > 0) {
    // The rank's time in the gather's calls: its tests between actions and
    // this wait, drawn as one wait ending here.
    const double start = events_ ? MonotonicSeconds() : 0.0;
    if (st.gathering) {
      group_->Wait(plan_.sharding.stages[k].gather_request, {"UNSHARD's all-gather", StageOf(k), -1, -1});
    }
    st.gathering = false;
    if (events_) events_->push_back({ActionKind::kUnshard, StageOf(k), -1, start - st.polled, MonotonicSeconds()});
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

GradientsReady* ReplicaSync::BucketHook(std::size_t i, int local, bool train) {
  if (!reducing(train) || start_after_[i] < 0) return nullptr;
  starter_.local = local;
  return &starter_;
}

void ReplicaSync::AfterAction(std::size_t i, bool train) {
  if (reducing(train) && start_after_[i] >= 0) StartReduction(start_after_[i]);
}

void ReplicaSync::EndList() {
  if (!plan_.sharding.parameters_sharded()) return;
  for (std::size_t k = 0; k < sharded_.size(); ++k) {
    if (sharded_[k].parameter_window >= 0) Reshard(static_cast<int>(k));
  }
}

// ---- Buckets ----

void ReplicaSync::StartReduction(int local, std::size_t from) {
  const ReductionPlan& red = plan_.reduction;
  const auto k = static_cast<std::size_t>(local);
  float* grads = stages_[k]->device().grads();
  double* wide = stages_[k]->wide_grads().data();
  int& next = next_[k];
  while (next > red.first_bucket[k] && red.buckets[static_cast<std::size_t>(next - 1)].offset >= from) {
    const int b = --next;
    if (started_ == 0) times_.first_start = MonotonicSeconds();
    const BucketPlan& bucket = red.buckets[static_cast<std::size_t>(b)];
    auto start = [&](auto* base) {  // the floats, or the doubles of wide gradients
      const std::span data(base + bucket.offset, bucket.count);
      if (red.shards_optimizer) {
        group_->StartReduceScatter(bucket.request, data, bucket.counts, bucket.displs);
      } else {
        group_->StartAllReduce(bucket.request, data);
      }
    };
    if (plan_.wide_gradients) {
      start(wide);
    } else {
      start(grads);
    }
    order_[started_++] = b;
  }
}

void ReplicaSync::PollReductions() {
  if (plan_.sharding.active()) {
    for (std::size_t w = 0; w < reducing_.size(); ++w) {
      if (reducing_[w] >= 0) EndReduce(static_cast<int>(w), true);
    }
    return;
  }
  // The oldest first: testing it moves every collective along.
  while (done_ < started_) {
    const BucketPlan& bucket = plan_.reduction.buckets[static_cast<std::size_t>(order_[done_])];
    if (!group_->Test(bucket.request)) return;
    ++done_;
    times_.last_end = MonotonicSeconds();
  }
}

void ReplicaSync::FinishReductions() {
  if (group_ == nullptr) return;
  if (plan_.sharding.active()) {
    FinishSharded();
    return;
  }
  const ReductionPlan& red = plan_.reduction;
  for (std::size_t k = 0; k < red.start_after.size(); ++k) {
    if (red.start_after[k] < 0) StartReduction(static_cast<int>(k));
  }
  const double start = MonotonicSeconds();
  for (; done_ < started_; ++done_) {
    const BucketPlan& bucket = red.buckets[static_cast<std::size_t>(order_[done_])];
    group_->Wait(bucket.request, {"the gradient sum", StageOf(static_cast<std::size_t>(bucket.local)), -1, -1});
    times_.last_end = MonotonicSeconds();
  }
  times_.exposed = MonotonicSeconds() - start;
  if (events_) events_->push_back({ActionKind::kReduceGrad, -1, -1, start, MonotonicSeconds()});
  started_ = done_ = 0;
  next_.assign(red.first_bucket.begin() + 1, red.first_bucket.end());
}

// ---- Shards and windows (ZeRO 2 and 3) ----

void ReplicaSync::Rebind(int local) {
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

void ReplicaSync::Unshard(const Instruction& in) {
  const auto k = static_cast<std::size_t>(in.local);
  const ShardedStage& plan = plan_.sharding.stages[k];
  Sharded& st = sharded_[k];
  st.parameter_window = in.window;
  if (plan.floats > 0) {
    // This replica's shard in its place, then every other's gathered round it.
    float* window = Window(parameter_pool_, in.window);
    const auto me = static_cast<std::size_t>(group_->rank());
    std::copy_n(st.parameter_shard, plan.counts[me], window + plan.displs[me]);
    group_->StartAllGather(plan.gather_request, {window, plan.floats}, plan.counts, plan.displs);
    st.gathering = true;
    // Its start, as an instant (microbatch 0; a wait for it is microbatch -1).
    if (events_) {
      const double now = MonotonicSeconds();
      events_->push_back({ActionKind::kUnshard, StageOf(k), 0, now, now});
    }
  }
  Rebind(in.local);
}

void ReplicaSync::PollGathers() {
  // MPI moves a non-blocking collective along only inside its calls: test
  // each gather in flight between actions, so that it runs under them.
  for (std::size_t k = 0; k < sharded_.size(); ++k) {
    Sharded& st = sharded_[k];
    if (!st.gathering) continue;
    const double start = events_ ? MonotonicSeconds() : 0.0;
    if (group_->Test(plan_.sharding.stages[k].gather_request)) st.gathering = false;
    if (events_) st.polled += MonotonicSeconds() - start;  // the copies a test makes are the rank's time too
  }
}

void ReplicaSync::Reshard(int local) {
  const auto k = static_cast<std::size_t>(local);
  Sharded& st = sharded_[k];
  if (st.gathering) {  // freed unused: its gather must still end first
    group_->Wait(plan_.sharding.stages[k].gather_request, {"UNSHARD's all-gather", StageOf(k), -1, -1});
    st.gathering = false;
  }
  st.parameter_window = -1;
  Rebind(local);
}

void ReplicaSync::ReduceGrad(int local) {
  const auto k = static_cast<std::size_t>(local);
  const ShardedStage& plan = plan_.sharding.stages[k];
  Sharded& st = sharded_[k];
  const int w = st.gradient_window;
  if (w < 0) return;
  if (started_ == 0) times_.first_start = MonotonicSeconds();
  ++started_;
  group_->StartReduceScatter(plan.reduce_request, {Window(gradient_pool_, w), plan.floats}, plan.counts,
                             plan.displs);
  reducing_[static_cast<std::size_t>(w)] = local;
  st.gradient_window = -1;
  if (events_) {  // its start, as an instant (the step's wait for the sums is stage -1)
    const double now = MonotonicSeconds();
    events_->push_back({ActionKind::kReduceGrad, StageOf(k), 0, now, now});
  }
  Rebind(local);
}

void ReplicaSync::EndReduce(int w, bool poll) {
  const int local = reducing_[static_cast<std::size_t>(w)];
  const auto k = static_cast<std::size_t>(local);
  const ShardedStage& plan = plan_.sharding.stages[k];
  if (poll) {
    if (!group_->Test(plan.reduce_request)) return;
  } else {
    group_->Wait(plan.reduce_request, {"REDUCE_GRAD's reduce-scatter", StageOf(k), -1, -1});
  }
  const auto me = static_cast<std::size_t>(group_->rank());
  std::copy_n(Window(gradient_pool_, w) + plan.displs[me], plan.counts[me], sharded_[k].gradient_shard);
  reducing_[static_cast<std::size_t>(w)] = -1;
  ++done_;
  times_.last_end = MonotonicSeconds();
}

void ReplicaSync::FinishSharded() {
  // The tied copies' sums, now that the copies' gradients are summed.
  for (std::size_t k = 0; k < sharded_.size(); ++k) {
    if (plan_.sharding.stages[k].after_tied) ReduceGrad(static_cast<int>(k));
  }
  const double start = MonotonicSeconds();
  for (std::size_t w = 0; w < reducing_.size(); ++w) {
    if (reducing_[w] >= 0) EndReduce(static_cast<int>(w), false);
  }
  times_.exposed = MonotonicSeconds() - start;
  if (events_) events_->push_back({ActionKind::kReduceGrad, -1, -1, start, MonotonicSeconds()});
  started_ = done_ = 0;
}

// ---- The optimizer ----

void ReplicaSync::StepOptimizers() {
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
        if (p.floats > 0) group_->StartAllGather(p.gather_request, stages_[k]->params(), p.counts, p.displs);
      }
      for (std::size_t k = 0; k < stages_.size(); ++k) {
        if (sh.stages[k].floats == 0) continue;
        group_->Wait(sh.stages[k].gather_request, {"the parameters' all-gather", StageOf(k), -1, -1});
      }
    }
    for (auto& st : stages_) st->device().ParamsUpdated();
    return;
  }
  const ReductionPlan& red = plan_.reduction;
  if (group_ != nullptr && red.shards_optimizer) {
    // Every replica updated its shard: gather the others' into its parameters.
    for (const BucketPlan& b : red.buckets) {
      float* params = stages_[static_cast<std::size_t>(b.local)]->device().params();
      group_->StartAllGather(b.request + 1, {params + b.offset, b.count}, b.counts, b.displs);
    }
    for (const BucketPlan& b : red.buckets) {
      group_->Wait(b.request + 1, {"the parameters' all-gather", StageOf(static_cast<std::size_t>(b.local)), -1, -1});
    }
  }
  for (auto& st : stages_) {
    st->device().ParamsUpdated();
    st->ZeroGrads();
  }
}

bool ReplicaSync::GradientsFinite() {
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
    if (group_ != nullptr && red.shards_optimizer) {
      // After the reduce-scatter only this replica's part of each bucket is summed.
      const auto me = static_cast<std::size_t>(group_->rank());
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

void ReplicaSync::CountedParts(int local, std::vector<ParamRange>& parts) const {
  const ReductionPlan& red = plan_.reduction;
  const auto k = static_cast<std::size_t>(local);
  if (plan_.sharding.active()) {
    parts.push_back({red.shard_begin[k], red.shard_count[k]});
  } else if (group_ != nullptr && red.shards_optimizer) {
    const auto me = static_cast<std::size_t>(group_->rank());
    for (const BucketPlan& b : red.buckets) {
      if (b.local != local) continue;
      parts.push_back({b.offset + static_cast<std::size_t>(b.displs[me]), static_cast<std::size_t>(b.counts[me])});
    }
  } else if (group_ == nullptr || group_->rank() == 0) {
    parts.push_back({0, plan_.local_stages[k].num_params});
  }
}

void ReplicaSync::GradientSquares(int local, std::span<const ParamRange> ranges, std::span<double> sums) {
  const auto k = static_cast<std::size_t>(local);
  if (!plan_.sharding.active()) {
    stages_[k]->device().GradientSquares(ranges, sums);
    return;
  }
  const std::size_t begin = plan_.reduction.shard_begin[k];
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    sums[i] = SumOfSquares({sharded_[k].gradient_shard + (ranges[i].first - begin), ranges[i].count});
  }
}

void ReplicaSync::ScaleGradients(float factor) {
  for (std::size_t k = 0; k < stages_.size(); ++k) {
    if (plan_.sharding.active()) {
      ScaleFloats({sharded_[k].gradient_shard, plan_.reduction.shard_count[k]}, factor);
    } else {
      stages_[k]->device().ScaleGradients(0, plan_.local_stages[k].num_params, factor);
    }
  }
}

// ---- Setup and whole-model copies ----

void ReplicaSync::SetLearningRate(double lr) {
  for (auto& st : stages_) st->device().SetLearningRate(lr);
}

void ReplicaSync::SetOptimizers(const OptimizerSpec& spec) {
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

void ReplicaSync::HoldWhole(int local, std::span<float> whole, bool gather) {
  const auto k = static_cast<std::size_t>(local);
  const ShardedStage& plan = plan_.sharding.stages[k];
  if (gather && plan.floats > 0) {
    const auto me = static_cast<std::size_t>(group_->rank());
    std::copy_n(sharded_[k].parameter_shard, plan.counts[me], whole.data() + plan.displs[me]);
    group_->StartAllGather(plan.gather_request, whole, plan.counts, plan.displs);
    group_->Wait(plan.gather_request, {"the parameters' all-gather", StageOf(k), -1, -1});
  }
  stages_[k]->Bind(whole, {});
}

void ReplicaSync::KeepShard(int local) {
  const auto k = static_cast<std::size_t>(local);
  const ShardedStage& plan = plan_.sharding.stages[k];
  const auto me = static_cast<std::size_t>(plan_.reduction.replica);
  const std::span<float> whole = stages_[k]->params();
  if (plan.floats > 0) std::copy_n(whole.data() + plan.displs[me], plan.counts[me], sharded_[k].parameter_shard);
  stages_[k]->Bind({}, {});
}

}  // namespace baton
