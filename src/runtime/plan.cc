#include "plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "baton/error.h"
#include "baton/runtime.h"

namespace baton {
namespace {

// Request kinds, in the order of their id blocks.
enum RequestKind { kRecvF = 0, kRecvB = 1, kSendF = 2, kSendB = 3 };

RequestKind RequestKindOf(ActionKind kind) {
  switch (kind) {
    case ActionKind::kRecvF:
      return kRecvF;
    case ActionKind::kRecvB:
      return kRecvB;
    case ActionKind::kSendF:
      return kSendF;
    default:
      return kSendB;
  }
}

// The schedule's forwards alone, in each rank's order: evaluation runs them.
// Removing backwards removes only waits, so a schedule that finishes still
// does.
Schedule ForwardOnly(const Schedule& schedule) {
  Schedule out = ComputeOnly(schedule);
  out.name = schedule.name + " (forward only)";
  for (auto& row : out.actions) {
    // An overlapped unit (OVERLAP_F_B) contributes its forward.
    for (Action& a : row) {
      if (a.kind == ActionKind::kOverlapFB) a = Action{a.stage, ActionKind::kForward, a.microbatch};
    }
    std::erase_if(row, [](const Action& a) { return a.kind != ActionKind::kForward; });
  }
  return out;
}

// Activation a of the model for `rows` samples: token ids (i32, (rows,
// seq)) entering a model that embeds them; (rows, seq, features) for
// sequences; (rows, features) for feature vectors.
TensorDesc Activation(const ModelDesc& m, int a, int rows) {
  if (a == 0 && m.tokens) return {DType::kI32, {rows, m.seq}};
  const int width = m.width[static_cast<std::size_t>(a)];
  if (m.seq > 1) return {DType::kF32, {rows, m.seq, width}};
  return {DType::kF32, {rows, width}};
}

// Decides what a microbatch keeps, where in its slot, and the workspace.
StagePlan PlanStage(const RunPlan& run, const RankResult& mine, int stage, bool split_backward) {
  const ModelDesc& model = run.model;
  StagePlan p;
  p.stage = stage;
  p.first_layer = run.bounds[static_cast<std::size_t>(stage)];
  p.last_layer = run.bounds[static_cast<std::size_t>(stage) + 1];
  const auto [first_op, last_op] = model.OpRange(p.first_layer, p.last_layer);
  p.first_op = first_op;
  p.rows = run.rows;
  p.is_first = stage == 0;
  p.is_last = stage + 1 == run.stages();
  p.split_backward = split_backward;
  p.checkpointing = run.checkpointing;
  p.param_offset = model.ops[static_cast<std::size_t>(first_op)].param_offset;
  const int K = last_op - first_op;
  int layers = 0;
  for (int i = 0; i <= K; ++i) {
    const int a = first_op + i;
    // The first stage's input is the dataset's; every other tensor the model's.
    p.act.push_back(i == 0 && p.is_first ? run.input.WithRows(run.rows) : Activation(model, a, run.rows));
    p.block_input.push_back(model.block_input[static_cast<std::size_t>(a)]);
  }
  for (int i = 0; i < K; ++i) {
    const OpDesc& op = model.ops[static_cast<std::size_t>(first_op + i)];
    p.layer.push_back(op.is_layer() ? layers++ : -1);
    p.skip.push_back(op.is_layer() ? -1 : op.skip - first_op);
    p.num_params += op.num_params;
  }

  // What each microbatch keeps in its slot: always the stage input; the
  // output a_K never (the next stage or the loss takes it).
  p.kept.assign(K + 1, 0);
  p.kept[0] = 1;
  for (int i = 0; i + 1 < K; ++i) {
    const OpDesc& op = model.ops[static_cast<std::size_t>(first_op + i)];
    switch (run.checkpointing) {
      case Checkpointing::kNone:
        p.kept[i + 1] = 1;
        break;
      case Checkpointing::kFull:
        break;
      case Checkpointing::kSelective:
        p.kept[i + 1] = op.is_layer() && std::find(run.keep.begin(), run.keep.end(), op.type) != run.keep.end();
        break;
    }
  }
  // Layers' own state: what forward saves (kept in the slot when the op is
  // not recomputed) and what I leaves for W (in the slot when W runs later).
  const auto token_rows = static_cast<std::size_t>(run.rows) * static_cast<std::size_t>(model.seq);
  p.tokens_per_sample = model.seq;
  p.saved_bytes.assign(K, 0);
  p.stash_bytes.assign(K, 0);
  p.saved_in_slot.assign(K, 0);
  p.stash_in_slot.assign(K, 0);
  p.saved_offset.assign(K, 0);
  p.stash_offset.assign(K, 0);
  p.ws_saved_offset.assign(K, 0);
  p.ws_stash_offset.assign(K, 0);
  std::size_t state = 0;
  for (int i = 0; i < K; ++i) {
    const OpDesc& op = model.ops[static_cast<std::size_t>(first_op + i)];
    p.saved_bytes[i] = token_rows * op.saved_per_row * sizeof(float);
    p.stash_bytes[i] = token_rows * op.stash_per_row * sizeof(float);
    p.ws_saved_offset[i] = state;
    state += p.saved_bytes[i];
    p.ws_stash_offset[i] = state;
    state += p.stash_bytes[i];
    p.saved_in_slot[i] = p.saved_bytes[i] > 0 && (i + 1 == K || p.kept[i + 1]);
    p.stash_in_slot[i] = p.stash_bytes[i] > 0 && split_backward;
  }
  p.state_workspace_bytes = state;

  // The slot: the forward's part (kept activations, the loss gradient,
  // saved states), then W's (output gradients, stashes).
  p.kept_offset.assign(K + 1, 0);
  std::size_t slot = 0;
  for (int i = 0; i < K; ++i) {
    if (!p.kept[i]) continue;
    p.kept_offset[i] = slot;
    slot += p.act[i].bytes();
  }
  if (p.is_last) {
    p.dlogits_offset = slot;
    slot += p.act[K].bytes();
  }
  for (int i = 0; i < K; ++i) {
    if (!p.saved_in_slot[i]) continue;
    p.saved_offset[i] = slot;
    slot += p.saved_bytes[i];
  }
  p.forward_bytes = slot;
  p.wgrad_offset.assign(K, 0);
  if (split_backward) {
    for (int i = 0; i < K; ++i) {
      if (!model.ops[static_cast<std::size_t>(first_op + i)].has_params()) continue;
      p.wgrad_offset[i] = slot;
      slot += p.act[i + 1].bytes();
    }
  }
  for (int i = 0; i < K; ++i) {
    if (!p.stash_in_slot[i]) continue;
    p.stash_offset[i] = slot;
    slot += p.stash_bytes[i];
  }
  p.slot_bytes = slot;
  p.workspace_offset.assign(K + 1, 0);
  std::size_t ws = 0;
  for (int i = 0; i <= K; ++i) {
    p.workspace_offset[i] = ws;
    ws += p.act[i].bytes();
  }
  p.workspace_bytes = ws;
  const auto it = std::find(mine.stages.begin(), mine.stages.end(), stage);
  p.ring_capacity = mine.peak_in_flight[static_cast<std::size_t>(it - mine.stages.begin())];
  return p;
}

// Resolves one action of rank `rank`'s list into an instruction.
Instruction Resolve(const RankPlan& r, const Action& a) {
  Instruction in;
  in.action = a;
  if (!HasMicrobatch(a.kind)) return in;  // idle, UNSHARD, RESHARD, REDUCE_GRAD: nothing to do
  const int s = a.stage, j = a.microbatch, S = r.stages;
  const auto& rank_of = r.stage_rank;
  in.local = r.local[static_cast<std::size_t>(s)];
  auto buffer = [&](BufferRef::Kind kind, int stage) {
    return BufferRef{kind, r.local[static_cast<std::size_t>(stage)], j};
  };
  switch (a.kind) {
    case ActionKind::kRecvF:
      in.request = r.RequestId(a.kind, s, j);
      in.peer = rank_of[s - 1];
      in.tag = r.TagF(s - 1, j);
      in.out = buffer(BufferRef::kInboxF, s);
      in.tensor = r.stage_input[s];
      break;
    case ActionKind::kRecvB:
      in.request = r.RequestId(a.kind, s, j);
      in.peer = rank_of[s + 1];
      in.tag = r.TagB(s + 1, j);
      in.out = buffer(BufferRef::kInboxB, s);
      in.tensor = r.stage_output[s];
      break;
    case ActionKind::kSendF:
      in.request = r.RequestId(a.kind, s, j);
      in.peer = rank_of[s + 1];
      in.tag = r.TagF(s, j);
      in.in = buffer(BufferRef::kOutboxF, s);
      in.tensor = r.stage_output[s];
      break;
    case ActionKind::kSendB:
      in.request = r.RequestId(a.kind, s, j);
      in.peer = rank_of[s - 1];
      in.tag = r.TagB(s, j);
      in.in = buffer(BufferRef::kOutboxB, s);
      in.tensor = r.stage_input[s];
      break;
    case ActionKind::kForward:
      in.tensor = r.stage_input[s];
      if (s == 0) {
        in.in = BufferRef{BufferRef::kInputs, -1, j};
      } else {
        in.in = buffer(BufferRef::kInboxF, s);
        if (rank_of[s - 1] != r.rank) {
          in.wait = r.RequestId(ActionKind::kRecvF, s, j);
          in.peer = rank_of[s - 1];
        }
      }
      if (s == S - 1) {
        in.labels = BufferRef{BufferRef::kLabels, -1, j};
      } else if (rank_of[s + 1] == r.rank) {
        in.out = buffer(BufferRef::kInboxF, s + 1);  // a local hand-over: the next stage's input
      } else {
        in.out = buffer(BufferRef::kOutboxF, s);
      }
      break;
    case ActionKind::kBackward:
    case ActionKind::kBackwardInput:
      if (s + 1 < S) {
        in.tensor = r.stage_output[s];
        in.in = buffer(BufferRef::kInboxB, s);
        if (rank_of[s + 1] != r.rank) {
          in.wait = r.RequestId(ActionKind::kRecvB, s, j);
          in.peer = rank_of[s + 1];
        }
      }
      if (s > 0) in.out = rank_of[s - 1] == r.rank ? buffer(BufferRef::kInboxB, s - 1) : buffer(BufferRef::kOutboxB, s);
      break;
    default:
      break;  // W: the slot alone
  }
  return in;
}

int CountSends(const std::vector<Action>& actions) {
  return static_cast<int>(std::count_if(actions.begin(), actions.end(), [](const Action& a) {
    return a.kind == ActionKind::kSendF || a.kind == ActionKind::kSendB;
  }));
}

}  // namespace

std::vector<int> PartitionLayers(const TrainConfig& c, const ModelDesc& model, int stages) {
  const int n = model.top_layers();
  if (c.pipeline.partition == Partition::kLayout) {
    // The layout was checked against the model when it was read; only the
    // stage count waits for the schedule.
    const PipelineLayout& layout = c.pipeline.layout;
    if (static_cast<int>(layout.stages.size()) != stages) {
      throw ConfigError(fmt::format(
          "{}: pipeline.layout: lists {} stages, but the pipeline has {} ({} ranks x {} chunks, schedule {}): give "
          "one stage per rank and chunk, in stage order (layout \"{}\")",
          layout.where, layout.stages.size(), stages, c.pipeline.ranks, stages / std::max(c.pipeline.ranks, 1),
          c.pipeline.schedule, layout.text));
    }
    std::vector<int> bounds(stages + 1, 0);
    int first = 0;
    for (int s = 0; s < stages; ++s) {
      const LayoutStage& st = layout.stages[static_cast<std::size_t>(s)];
      bounds[s] = first;
      first += (st.embedding ? kGptEmbeddingLayers : 0) + st.blocks * kGptBlockLayers + (st.loss ? kGptLossLayers : 0);
    }
    if (first != n) {
      throw ConfigError(
          fmt::format("{}: pipeline.layout: covers {} top-level layers, but the model has {}", layout.where, first, n));
    }
    bounds[stages] = n;
    return bounds;
  }
  if (stages > n) {
    throw ConfigError(
        fmt::format("{}: pipeline needs {} stages ({} ranks x {} chunks) but the model has only {} "
                    "layers; every stage needs at least one layer",
                    c.source, stages, c.pipeline.ranks, stages / std::max(c.pipeline.ranks, 1), n));
  }
  std::vector<int> bounds(stages + 1, 0);
  if (c.pipeline.partition == Partition::kExplicit) {
    const auto& counts = c.pipeline.partition_counts;
    if (static_cast<int>(counts.size()) != stages) {
      throw ConfigError(
          fmt::format("{}: pipeline.partition lists {} stages, but the pipeline has {} ({} ranks x {} "
                      "chunks)",
                      c.source, counts.size(), stages, c.pipeline.ranks, stages / c.pipeline.ranks));
    }
    int sum = 0;
    for (int s = 0; s < stages; ++s) {
      if (counts[s] < 1) throw ConfigError(fmt::format("{}: pipeline.partition: stage {} is empty", c.source, s));
      bounds[s] = sum;
      sum += counts[s];
    }
    if (sum != n) {
      throw ConfigError(
          fmt::format("{}: pipeline.partition's counts add up to {} layers, but the model has {}", c.source, sum, n));
    }
    bounds[stages] = n;
    return bounds;
  }
  const bool flops = c.pipeline.balance_by == BalanceBy::kFlops;
  std::vector<double> prefix(n + 1, 0.0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + model.BalanceWeight(i, flops);
  // best[k][i]: the smallest possible heaviest stage when the first i layers
  // form k stages; cut[k][i] the start of the k-th stage in that split.
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(stages + 1, std::vector<double>(n + 1, kInf));
  std::vector<std::vector<int>> cut(stages + 1, std::vector<int>(n + 1, 0));
  best[0][0] = 0;
  for (int k = 1; k <= stages; ++k) {
    for (int i = k; i <= n; ++i) {
      for (int j = k - 1; j < i; ++j) {
        const double v = std::max(best[k - 1][j], prefix[i] - prefix[j]);
        if (v < best[k][i]) {
          best[k][i] = v;
          cut[k][i] = j;
        }
      }
    }
  }
  bounds[stages] = n;
  for (int k = stages, i = n; k > 0; --k) {
    i = cut[k][i];
    bounds[k - 1] = i;
  }
  return bounds;
}

RunPlan PlanRun(const TrainConfig& c) {
  RunPlan plan;
  Schedule s = LoadSchedule(c.pipeline.schedule, c.pipeline.ranks, c.pipeline.microbatches, c.pipeline.chunks);
  Validate(s);
  plan.lowered = Lower(s);
  Validate(plan.lowered);
  // Derived from a validated schedule, and Lower itself refuses an order
  // that cannot progress (CheckStructure would ask for backwards).
  plan.evaluation = Lower(ForwardOnly(plan.lowered));
  SimOptions unit;
  unit.record_timeline = false;
  plan.sim = Simulate(plan.lowered, unit);
  plan.model = DescribeModel(c.model.layers, c.model.input, c.model.seq);
  plan.bounds = PartitionLayers(c, plan.model, plan.lowered.stages);
  plan.replicas = c.data_parallel.size;
  plan.zero = c.data_parallel.zero == 1 && plan.replicas > 1;
  plan.bucket_cap_bytes = c.data_parallel.bucket_cap_mb * 1024 * 1024;
  plan.global_batch = c.train.batch_size;
  plan.batch_size = c.train.batch_size / plan.replicas;
  plan.rows = plan.batch_size / c.pipeline.microbatches;
  plan.input = SampleInput(c.data);
  plan.labels_per_sample = LabelsPerSample(c.data);
  plan.checkpointing = c.pipeline.checkpointing;
  plan.keep = c.pipeline.keep;
  plan.wait_timeout_s = c.pipeline.wait_timeout_s;
  plan.optimizer_states = static_cast<int>(OptimizerStateNames(c.train.optimizer).size());
  return plan;
}

TensorDesc SampleInput(const DataConfig& d) {
  if (IsTokenDataset(d.dataset)) return {DType::kI32, {1, d.seq_len}};
  return {DType::kF32, {1, d.features}};
}

int LabelsPerSample(const DataConfig& d) { return IsTokenDataset(d.dataset) ? d.seq_len : 1; }

void CheckModelInput(const TrainConfig& c, const RunPlan& plan) {
  const bool tokens = plan.input.dtype == DType::kI32;
  if (tokens == plan.model.tokens && (!tokens || plan.input.shape.per_sample() == plan.model.seq)) return;
  throw ConfigError(fmt::format(
      "{}: data.dataset is {}: its samples are {}, but the model takes {}", c.source, EnumName(c.data.dataset),
      ToString(plan.input),
      plan.model.tokens ? fmt::format("{} token ids (an embedding first)", plan.model.seq)
                        : fmt::format("{} f32 features", plan.model.input)));
}

int RankPlan::RequestId(ActionKind kind, int stage, int microbatch) const {
  return (RequestKindOf(kind) * stages + stage) * microbatches + microbatch;
}

std::size_t RankPlan::RingBytes() const {
  std::size_t n = 0;
  for (const StagePlan& st : local_stages) n += st.slot_bytes * static_cast<std::size_t>(st.ring_capacity);
  return n;
}

StagePlan PlanStageAlone(const RunPlan& run, int stage, bool split_backward) {
  RankResult one;
  one.stages = {stage};
  one.peak_in_flight = {1};
  return PlanStage(run, one, stage, split_backward);
}

namespace {

// The gradient buckets of every local stage, where they start, and the
// optimizer shards (ReductionPlan).
ReductionPlan PlanReduction(const RunPlan& run, const RankPlan& r, int replica) {
  ReductionPlan red;
  red.replicas = run.replicas;
  red.replica = replica;
  red.zero = run.zero;
  const auto D = static_cast<std::size_t>(run.replicas);
  const std::size_t cap =
      std::max<std::size_t>(1, static_cast<std::size_t>(run.bucket_cap_bytes / sizeof(float)));
  for (std::size_t k = 0; k < r.local_stages.size(); ++k) {
    const StagePlan& st = r.local_stages[k];
    const std::size_t n = st.num_params;
    red.first_bucket.push_back(static_cast<int>(red.buckets.size()));
    // Replica i's shard: [n i / D, n (i + 1) / D).
    auto shard = [&](std::size_t i) { return n * i / D; };
    const std::size_t mine = red.zero ? static_cast<std::size_t>(replica) : 0;
    red.shard_begin.push_back(red.zero ? shard(mine) : 0);
    red.shard_count.push_back(red.zero ? shard(mine + 1) - shard(mine) : n);
    for (std::size_t at = 0; at < n; at += cap) {
      BucketPlan b;
      b.local = static_cast<int>(k);
      b.offset = at;
      b.count = std::min(cap, n - at);
      b.request = red.requests;
      red.requests += red.zero ? 2 : 1;
      if (red.zero) {
        for (std::size_t i = 0; i < D; ++i) {
          const std::size_t lo = std::clamp(shard(i), at, at + b.count);
          const std::size_t hi = std::clamp(shard(i + 1), at, at + b.count);
          b.displs.push_back(static_cast<int>(lo - at));
          b.counts.push_back(static_cast<int>(hi - lo));
        }
      }
      red.buckets.push_back(std::move(b));
    }
    // After the stage's last gradient writer: its last B, W, or the B part
    // of an overlapped unit (the step lists the parts).
    int last = -1;
    for (std::size_t i = 0; i < r.step.size(); ++i) {
      const Action& a = r.step[i].action;
      if (a.stage == st.stage && (a.kind == ActionKind::kBackward || a.kind == ActionKind::kBackwardWeight)) {
        last = static_cast<int>(i);
      }
    }
    const bool tied = r.tied.active && (r.tied.local_embedding == static_cast<int>(k) ||
                                        r.tied.local_head == static_cast<int>(k));
    red.start_after.push_back(tied ? -1 : last);
  }
  red.first_bucket.push_back(static_cast<int>(red.buckets.size()));
  return red;
}

}  // namespace

RankPlan PlanRank(const RunPlan& run, int rank, int replica) {
  const Schedule& lowered = run.lowered;
  RankPlan r;
  r.rank = rank;
  r.ranks = lowered.ranks;
  r.stages = lowered.stages;
  r.microbatches = lowered.microbatches;
  r.rows = run.rows;
  r.batch_size = run.batch_size;
  r.global_batch = run.global_batch;
  r.stage_rank = lowered.stage_rank;
  r.local.assign(r.stages, -1);
  const int S = r.stages, m = r.microbatches;
  for (int s = 0; s < S; ++s) {
    const int first_op = run.model.OpRange(run.bounds[s], run.bounds[s + 1]).first;
    const int last_op = run.model.OpRange(run.bounds[s], run.bounds[s + 1]).second;
    r.stage_input.push_back(s == 0 ? run.input.WithRows(run.rows) : Activation(run.model, first_op, run.rows));
    r.stage_output.push_back(Activation(run.model, last_op, run.rows));
  }
  const RankResult& mine = run.sim.per_rank[static_cast<std::size_t>(rank)];
  for (int s = 0; s < S; ++s) {
    if (lowered.stage_rank[s] != rank) continue;
    bool split = false;
    for (const Action& a : lowered.actions[rank]) {
      if (a.stage == s && a.kind == ActionKind::kBackwardInput) split = true;
    }
    r.local[s] = static_cast<int>(r.local_stages.size());
    r.local_stages.push_back(PlanStage(run, mine, s, split));
  }
  r.has_inputs = lowered.stage_rank.front() == rank;
  r.has_labels = lowered.stage_rank.back() == rank;
  r.inputs = r.stage_input.front().WithRows(run.batch_size);
  r.labels_per_sample = run.labels_per_sample;
  r.labels = run.labels_per_sample == 1 ? TensorDesc{DType::kI32, {run.batch_size}}
                                        : TensorDesc{DType::kI32, {run.batch_size, run.labels_per_sample}};

  // Message buffers: one microbatch each, for every microbatch of the step.
  r.requests = 4 * S * m;
  r.max_tag = 2 * S * m;
  r.message_bytes.assign(static_cast<std::size_t>(r.requests), 0);
  for (int s = 0; s < S; ++s) {
    const int k = r.local[s];
    if (k < 0) continue;
    const TensorDesc& in = r.stage_input[s];
    const TensorDesc& out = r.stage_output[s];
    const bool next_remote = s + 1 < S && lowered.stage_rank[s + 1] != rank;
    const bool prev_remote = s > 0 && lowered.stage_rank[s - 1] != rank;
    if (s > 0) r.buffers.push_back({BufferRef::kInboxF, k, in, m});
    if (s + 1 < S) r.buffers.push_back({BufferRef::kInboxB, k, out, m});
    if (next_remote) r.buffers.push_back({BufferRef::kOutboxF, k, out, m});
    if (prev_remote) r.buffers.push_back({BufferRef::kOutboxB, k, in, m});
    for (int j = 0; j < m; ++j) {
      if (prev_remote) {
        r.message_bytes[r.RequestId(ActionKind::kRecvF, s, j)] = in.bytes();
        r.message_bytes[r.RequestId(ActionKind::kSendB, s, j)] = in.bytes();
      }
      if (next_remote) {
        r.message_bytes[r.RequestId(ActionKind::kRecvB, s, j)] = out.bytes();
        r.message_bytes[r.RequestId(ActionKind::kSendF, s, j)] = out.bytes();
      }
    }
  }
  // A tied head: where both copies live, and the exchange between their ranks.
  for (const OpDesc& op : run.model.ops) {
    if (op.tied_to < 0) continue;
    const OpDesc& emb = run.model.ops[static_cast<std::size_t>(op.tied_to)];
    auto stage_of = [&](const OpDesc& o) {
      int s = 0;
      while (run.bounds[static_cast<std::size_t>(s) + 1] <= o.top) ++s;
      return s;
    };
    const int se = stage_of(emb), sh = stage_of(op);
    const int re = lowered.stage_rank[se], rh = lowered.stage_rank[sh];
    if (rank != re && rank != rh) break;
    TiedPlan& t = r.tied;
    t.active = true;
    t.floats = op.num_params;
    if (rank == re) {
      t.local_embedding = r.local[se];
      t.embedding_offset = emb.param_offset - r.local_stages[static_cast<std::size_t>(t.local_embedding)].param_offset;
    }
    if (rank == rh) {
      t.local_head = r.local[sh];
      t.head_offset = op.param_offset - r.local_stages[static_cast<std::size_t>(t.local_head)].param_offset;
    }
    if (re != rh) {
      t.peer = rank == re ? rh : re;
      t.send_request = r.requests;
      t.recv_request = r.requests + 1;
      t.tag = r.max_tag + 1;
      r.requests += 2;
      r.max_tag += 1;
      r.message_bytes.resize(static_cast<std::size_t>(r.requests), t.floats * sizeof(float));
    }
    break;
  }
  // An overlapped unit (DualPipeV's F&B) runs on the CPU as its two parts
  // back to back: its F, then its B, each with its own operands and waits.
  for (const Action& a : lowered.actions[rank]) {
    ForEachPart(a, [&](const Action& part) { r.step.push_back(Resolve(r, part)); });
  }
  for (const Action& a : run.evaluation.actions[rank]) r.evaluation.push_back(Resolve(r, a));
  r.sends_per_step = std::max(CountSends(lowered.actions[rank]), CountSends(run.evaluation.actions[rank]));
  r.reduction = PlanReduction(run, r, replica);
  return r;
}

std::vector<RankMemory> PlanMemory(const RunPlan& run) {
  const int ranks = run.lowered.ranks;
  std::vector<RankMemory> out(static_cast<std::size_t>(ranks));
  std::vector<double> slot_bytes(static_cast<std::size_t>(run.stages()), 0.0);
  std::vector<double> static_bytes(static_cast<std::size_t>(ranks), 0.0);
  for (int rank = 0; rank < ranks; ++rank) {
    const RankPlan r = PlanRank(run, rank);
    RankMemory& mem = out[static_cast<std::size_t>(rank)];
    for (const StagePlan& st : r.local_stages) {
      const std::size_t param_bytes = st.num_params * sizeof(float);
      mem.params += param_bytes;
      mem.grads += param_bytes;
      const std::size_t k = static_cast<std::size_t>(r.local[st.stage]);
      mem.optimizer += r.reduction.shard_count[k] * sizeof(float) * static_cast<std::size_t>(run.optimizer_states);
      mem.rings += st.slot_bytes * static_cast<std::size_t>(st.ring_capacity);
      mem.workspaces += 3 * st.workspace_bytes + st.state_workspace_bytes;
      const int max_rows = st.rows * st.tokens_per_sample;
      for (int i = 0; i < st.ops(); ++i) {
        if (st.layer[i] < 0) continue;
        mem.layer_scratch +=
            ScratchFloats(run.model.ops[static_cast<std::size_t>(st.first_op + i)], max_rows) * sizeof(float);
      }
      slot_bytes[static_cast<std::size_t>(st.stage)] = static_cast<double>(st.slot_bytes);
    }
    for (const BufferPlan& b : r.buffers) mem.messages += b.tensor.bytes() * static_cast<std::size_t>(b.count);
    if (r.tied.peer >= 0) mem.messages += r.tied.floats * sizeof(float);
    static_bytes[static_cast<std::size_t>(rank)] = static_cast<double>(mem.static_bytes());
  }
  // The ring slots' life in time: a slot is taken by F and freed by the
  // stage's last backward of the microbatch (B, or W when split: I frees
  // nothing, so M_W / M_B = 1).
  SimOptions o;
  o.stage_memory_bytes = slot_bytes;
  o.rank_static_bytes = static_bytes;
  o.weight_memory_ratio = 1.0;
  o.record_timeline = false;
  const SimResult sim = Simulate(run.lowered, o);
  for (int rank = 0; rank < ranks; ++rank) {
    out[static_cast<std::size_t>(rank)].simulated_peak = sim.per_rank[static_cast<std::size_t>(rank)].peak_memory_bytes;
  }
  return out;
}

std::string DescribePlan(const RunPlan& run) {
  std::string out = fmt::format("# plan: {} ranks, schedule {} ({} stages, {} microbatches of {} samples)\n",
                                run.lowered.ranks, run.lowered.name, run.stages(), run.microbatches(), run.rows);
  std::vector<RankPlan> ranks;
  for (int rank = 0; rank < run.lowered.ranks; ++rank) ranks.push_back(PlanRank(run, rank));
  for (int s = 0; s < run.stages(); ++s) {
    const RankPlan& r = ranks[static_cast<std::size_t>(run.lowered.stage_rank[s])];
    const StagePlan& st = r.local_stages[static_cast<std::size_t>(r.local[s])];
    // Forward FLOPs of the stage's matrix products for one microbatch (every
    // token row of every sample), as `baton bench` and `baton tune` count them.
    const double flops = run.model.GemmFlopsPerRow(st.first_layer, st.last_layer) * st.rows * run.model.seq;
    out += fmt::format(
        "#   stage {} on rank {}: layers {}..{}, ring capacity {} microbatches of {} bytes, {} parameters, "
        "{} -> {}{}, forward {:.0f} FLOPs (matrix products) per microbatch, {} parameter bytes\n",
        st.stage, r.rank, st.first_layer, st.last_layer - 1, st.ring_capacity, st.slot_bytes, st.num_params,
        ToString(st.input()), ToString(st.output()), st.split_backward ? ", split backward" : "", flops,
        st.num_params * sizeof(float));
  }
  for (const RankPlan& r : ranks) {
    int messages = 0;
    std::size_t bytes = 0;
    for (const Instruction& in : r.step) {
      if (in.action.kind == ActionKind::kSendF || in.action.kind == ActionKind::kSendB) {
        ++messages;
        bytes += in.tensor.bytes();
      }
    }
    out += fmt::format("#   rank {}: {} actions per step, sends {} messages ({} bytes), ring memory {} bytes\n",
                       r.rank, r.step.size(), messages, bytes, r.RingBytes());
  }
  // Memory per rank, in MiB: what the executor allocates, and the
  // simulator's peak of it in time.
  auto mib = [](double b) { return fmt::format("{:.2f}", b / (1024.0 * 1024.0)); };
  const std::vector<RankMemory> memory = PlanMemory(run);
  for (std::size_t rank = 0; rank < memory.size(); ++rank) {
    const RankMemory& m = memory[rank];
    out += fmt::format(
        "#   rank {} memory (MiB): parameters {}, gradients {}, optimizer state {}, rings {}, workspaces {}, "
        "layer scratch {}, message buffers {}; allocated {}, simulated peak {}\n",
        rank, mib(double(m.params)), mib(double(m.grads)), mib(double(m.optimizer)), mib(double(m.rings)),
        mib(double(m.workspaces)), mib(double(m.layer_scratch)), mib(double(m.messages)), mib(double(m.total())),
        mib(m.simulated_peak));
  }
  out += fmt::format("# simulated with unit costs: bubble {:.2f}%\n", 100 * run.sim.bubble_rate);
  return out;
}

std::string DescribeRunPlan(const TrainConfig& config) {
  const RunPlan plan = PlanRun(config);
  CheckModelInput(config, plan);
  return DescribePlan(plan);
}

}  // namespace baton
