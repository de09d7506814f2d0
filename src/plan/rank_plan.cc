// A rank's part of the plan: its stages, message buffers and request ids,
// every action resolved into an instruction, the tied head's exchange and
// the gradient sums over the replicas.
#include <algorithm>

#include "internal.h"

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

// The gradient buckets of every local stage, where they start, and the
// optimizer shards (ReductionPlan).
ReductionPlan PlanReduction(const RunPlan& run, const RankPlan& r, int replica) {
  ReductionPlan red;
  red.replicas = run.replicas;
  red.replica = replica;
  red.shards_optimizer = run.zero.shards_optimizer();
  const bool buckets = !run.zero.has_actions();  // ZeRO 2 and 3 sum each stage in one collective (ShardingPlan)
  const std::size_t cap =
      std::max<std::size_t>(1, static_cast<std::size_t>(run.bucket_cap_bytes / sizeof(float)));
  for (std::size_t k = 0; k < r.local_stages.size(); ++k) {
    const StagePlan& st = r.local_stages[k];
    const std::size_t n = st.num_params;
    red.first_bucket.push_back(static_cast<int>(red.buckets.size()));
    // This replica's optimizer shard (ZeRO), or the whole stage.
    const Shard mine = red.shards_optimizer ? ShardOf(n, replica, run.replicas) : Shard{0, n};
    red.shard_begin.push_back(mine.begin);
    red.shard_count.push_back(mine.count);
    for (std::size_t at = 0; buckets && at < n; at += cap) {
      BucketPlan b;
      b.local = static_cast<int>(k);
      b.offset = at;
      b.count = std::min(cap, n - at);
      b.request = red.requests;
      red.requests += red.shards_optimizer ? 2 : 1;
      if (red.shards_optimizer) {
        for (int i = 0; i < run.replicas; ++i) {
          const Shard shard = ShardOf(n, i, run.replicas);
          const std::size_t lo = std::clamp(shard.begin, at, at + b.count);
          const std::size_t hi = std::clamp(shard.begin + shard.count, at, at + b.count);
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
    red.start_after.push_back(tied || !buckets ? -1 : last);
  }
  red.first_bucket.push_back(static_cast<int>(red.buckets.size()));
  return red;
}


// Sharded data parallel's collectives and windows (ShardingPlan): the
// stages' shards and request ids, and each list's windows
// (PlaceShardingWindows).
void PlanSharding(const RunPlan& run, RankPlan& r) {
  ShardingPlan& sh = r.sharding;
  if (!run.zero.has_actions()) return;
  sh.zero = run.zero;
  ReductionPlan& red = r.reduction;
  for (std::size_t k = 0; k < r.local_stages.size(); ++k) {
    ShardedStage st;
    st.floats = r.local_stages[k].num_params;
    for (int i = 0; i < run.replicas; ++i) {
      const Shard shard = ShardOf(st.floats, i, run.replicas);
      st.displs.push_back(static_cast<int>(shard.begin));
      st.counts.push_back(static_cast<int>(shard.count));
    }
    st.gather_request = red.requests++;
    st.reduce_request = red.requests++;
    st.after_tied = r.tied.active && (r.tied.local_embedding == static_cast<int>(k) ||
                                      r.tied.local_head == static_cast<int>(k));
    sh.window_floats = std::max(sh.window_floats, st.floats);
    sh.stages.push_back(std::move(st));
  }
  // A tied copy's gradient window is held to the step's end, where it is summed.
  const std::vector<char> held_to_end = run.SummedAtEnd();
  auto windows = [&](std::vector<Instruction>& list) {
    std::vector<Action> actions;
    for (Instruction& in : list) {
      actions.push_back(in.action);
      if (!HasMicrobatch(in.action.kind) && in.action.kind != ActionKind::kIdle) {
        in.local = r.local[static_cast<std::size_t>(in.action.stage)];  // -1 only off this rank: CheckShardedRun
      }
    }
    const ShardingWindows w = PlaceShardingWindows(actions, r.stages, held_to_end);
    for (std::size_t i = 0; i < list.size(); ++i) list[i].window = w.window[i];
    sh.parameter_windows = std::max(sh.parameter_windows, w.parameter_windows);
    sh.gradient_windows = std::max(sh.gradient_windows, w.gradient_windows);
  };
  windows(r.step);
  windows(r.evaluation);
  if (!sh.parameters_sharded()) sh.parameter_windows = 0;
}

// The rank's message buffers and the bytes of every request id it uses.
void PlanMessages(const RunPlan& run, RankPlan& r) {
  const Schedule& lowered = run.lowered;
  const int S = r.stages, m = r.microbatches;
  r.requests = 4 * S * m;
  r.max_tag = 2 * S * m;
  r.message_bytes.assign(static_cast<std::size_t>(r.requests), 0);
  for (int s = 0; s < S; ++s) {
    const int k = r.local[s];
    if (k < 0) continue;
    const bool next_remote = s + 1 < S && lowered.stage_rank[s + 1] != r.rank;
    const bool prev_remote = s > 0 && lowered.stage_rank[s - 1] != r.rank;
    const std::vector<BufferPlan> buffers = plan_detail::StageBuffers(
        r.local_stages[static_cast<std::size_t>(k)], k, S, m, prev_remote, next_remote);
    r.buffers.insert(r.buffers.end(), buffers.begin(), buffers.end());
    const std::size_t in = r.stage_input[s].bytes(), out = r.stage_output[s].bytes();
    for (int j = 0; j < m; ++j) {
      if (prev_remote) {
        r.message_bytes[r.RequestId(ActionKind::kRecvF, s, j)] = in;
        r.message_bytes[r.RequestId(ActionKind::kSendB, s, j)] = in;
      }
      if (next_remote) {
        r.message_bytes[r.RequestId(ActionKind::kRecvB, s, j)] = out;
        r.message_bytes[r.RequestId(ActionKind::kSendF, s, j)] = out;
      }
    }
  }
}

// A tied head: where both copies live, and the exchange between their ranks.
void PlanTied(const RunPlan& run, RankPlan& r) {
  const plan_detail::TiedStages tied = plan_detail::FindTiedStages(run.model, run.bounds);
  if (tied.embedding < 0) return;
  const int re = run.lowered.stage_rank[tied.embedding], rh = run.lowered.stage_rank[tied.head];
  if (r.rank != re && r.rank != rh) return;
  const OpDesc* head = nullptr;
  for (const OpDesc& op : run.model.ops) {
    if (op.tied_to >= 0) head = &op;
  }
  const OpDesc& emb = run.model.ops[static_cast<std::size_t>(head->tied_to)];
  TiedPlan& t = r.tied;
  t.active = true;
  t.floats = tied.floats;
  if (r.rank == re) {
    t.local_embedding = r.local[tied.embedding];
    t.embedding_offset = emb.param_offset - r.local_stages[static_cast<std::size_t>(t.local_embedding)].param_offset;
  }
  if (r.rank == rh) {
    t.local_head = r.local[tied.head];
    t.head_offset = head->param_offset - r.local_stages[static_cast<std::size_t>(t.local_head)].param_offset;
  }
  if (re != rh) {
    t.peer = r.rank == re ? rh : re;
    t.send_request = r.requests;
    t.recv_request = r.requests + 1;
    t.tag = r.max_tag + 1;
    r.requests += 2;
    r.max_tag += 1;
    r.message_bytes.resize(static_cast<std::size_t>(r.requests), t.floats * run.GradSumBytes());
  }
}

// The lowest free slot of `held` (per slot: taken or not), taken.
int TakeSlot(std::vector<char>& held) {
  std::size_t at = std::find(held.begin(), held.end(), 0) - held.begin();
  if (at == held.size()) held.push_back(0);
  held[at] = 1;
  return static_cast<int>(at);
}

// Sequence slices on stage p.stage of rank `rank`, in the order the rank
// runs its actions: each unit takes the lowest free ring slot at its F and
// frees it at its last backward (B, or W); each microbatch takes a
// sequence slot at its first slice's F and frees it after its units' last
// backwards (training), or after its last slice's F (evaluation), and a
// gradient slot from its first input backward (B or I) to its last.
void PlanSliceSlots(const RunPlan& run, int rank, StagePlan& p) {
  const int k = run.slices, units = run.microbatches(), sequences = run.lowered.sequences();
  p.slot_of.assign(static_cast<std::size_t>(units), -1);
  p.sequence_slot.assign(static_cast<std::size_t>(sequences), -1);
  p.evaluation_sequence_slot.assign(static_cast<std::size_t>(sequences), -1);
  p.gradient_slot.assign(static_cast<std::size_t>(sequences), -1);
  std::vector<char> slots, seq_slots, grad_slots;
  std::vector<int> left(static_cast<std::size_t>(sequences), k);      // units not yet released
  std::vector<int> backward(static_cast<std::size_t>(sequences), 0);  // input backwards run
  for (const Action& a : run.lowered.actions[static_cast<std::size_t>(rank)]) {
    ForEachPart(a, [&](const Action& part) {
      if (part.stage != p.stage || !IsCompute(part.kind)) return;
      const auto u = static_cast<std::size_t>(part.microbatch);
      const auto j = static_cast<std::size_t>(run.lowered.SequenceOf(part.microbatch));
      if (part.kind == ActionKind::kForward) {
        p.slot_of[u] = TakeSlot(slots);
        if (p.sequence_slot[j] < 0) p.sequence_slot[j] = TakeSlot(seq_slots);
        return;
      }
      if (part.kind != ActionKind::kBackwardWeight) {  // B or I: the input gradient
        if (backward[j]++ == 0) p.gradient_slot[j] = TakeSlot(grad_slots);
        if (backward[j] == k) grad_slots[static_cast<std::size_t>(p.gradient_slot[j])] = 0;
      }
      if (part.kind == ActionKind::kBackwardInput) return;  // W releases
      slots[static_cast<std::size_t>(p.slot_of[u])] = 0;
      if (--left[j] == 0) seq_slots[static_cast<std::size_t>(p.sequence_slot[j])] = 0;
    });
  }
  p.ring_capacity = std::max<int>(1, static_cast<int>(slots.size()));
  std::vector<char> eval_slots;
  std::vector<int> forwarded(static_cast<std::size_t>(sequences), 0);
  for (const Action& a : run.evaluation.actions[static_cast<std::size_t>(rank)]) {
    if (a.stage != p.stage || a.kind != ActionKind::kForward) continue;
    const auto j = static_cast<std::size_t>(run.evaluation.SequenceOf(a.microbatch));
    if (p.evaluation_sequence_slot[j] < 0) p.evaluation_sequence_slot[j] = TakeSlot(eval_slots);
    if (++forwarded[j] == k) eval_slots[static_cast<std::size_t>(p.evaluation_sequence_slot[j])] = 0;
  }
  p.sequence_capacity = static_cast<int>(std::max(seq_slots.size(), eval_slots.size()));
  p.gradient_capacity = static_cast<int>(grad_slots.size());
}

// Each instruction's unit part (UnitPart): its sequence, and sliced, its
// tokens, its tensors' tokens and its stage's sequence and gradient slots.
void ResolveUnitParts(const RunPlan& run, RankPlan& r) {
  const Schedule& units = run.lowered;
  auto resolve = [&](Instruction& in, bool train) {
    const Action& a = in.action;
    if (!HasMicrobatch(a.kind)) return;
    UnitPart& u = in.part;
    u.sequence = units.SequenceOf(a.microbatch);
    if (in.in.kind == BufferRef::kInputs) in.in.microbatch = u.sequence;
    if (in.labels.kind == BufferRef::kLabels) in.labels.microbatch = u.sequence;
    if (run.slices == 1) return;
    u.begin = run.SliceBegin(a.microbatch);
    u.end = run.SliceEnd(a.microbatch);
    if (in.tensor.elements() > 0) in.tensor = in.tensor.WithTokens(u.end - u.begin);
    if (!IsCompute(a.kind)) return;
    const StagePlan& sp = r.local_stages[static_cast<std::size_t>(in.local)];
    if (sp.sequence_bytes == 0) return;
    const auto j = static_cast<std::size_t>(u.sequence);
    u.sequence_slot = train ? sp.sequence_slot[j] : sp.evaluation_sequence_slot[j];
    u.gradient_slot = train ? sp.gradient_slot[j] : -1;
  };
  for (Instruction& in : r.step) resolve(in, true);
  for (Instruction& in : r.evaluation) resolve(in, false);
  r.sequences = units.sequences();
  if (run.slices > 1) {
    if (r.has_inputs) r.unit_inputs = run.input.WithRows(run.rows).WithTokens(run.slice_tokens);
    if (r.has_labels) r.unit_labels = TensorDesc{DType::kI32, {run.rows, run.slice_tokens}};
  }
  r.packed = run.packed;
  r.documents = run.documents;
  if (run.packed && run.slices == 1 && run.rows > 1) {
    if (r.has_inputs) r.unit_inputs = run.input.WithRows(run.rows);
    if (r.has_labels) r.unit_labels = TensorDesc{DType::kI32, {run.rows, run.labels_per_sample}};
  }
}

// Every stage's boundary tensors, and the rank's own stages.
void PlanStages(const RunPlan& run, RankPlan& r) {
  const Schedule& lowered = run.lowered;
  const int tokens = run.slices > 1 ? run.slice_tokens : 0;  // a slice's, or the sequence's
  for (int s = 0; s < r.stages; ++s) {
    const auto [first_op, last_op] = run.model.OpRange(run.bounds[s], run.bounds[s + 1]);
    TensorDesc in = s == 0 ? run.input.WithRows(run.rows) : plan_detail::Activation(run.model, first_op, run.rows, tokens);
    if (s == 0 && tokens > 0) in = in.WithTokens(tokens);
    r.stage_input.push_back(in);
    r.stage_output.push_back(plan_detail::Activation(run.model, last_op, run.rows, tokens));
  }
  const RankResult& mine = run.sim.per_rank[static_cast<std::size_t>(r.rank)];
  for (int s = 0; s < r.stages; ++s) {
    if (lowered.stage_rank[s] != r.rank) continue;
    const bool split = SplitsBackward(lowered, s);
    // The ring holds the simulator's peak in-flight microbatches.
    const auto at = std::find(mine.stages.begin(), mine.stages.end(), s) - mine.stages.begin();
    r.local[s] = static_cast<int>(r.local_stages.size());
    r.local_stages.push_back(plan_detail::PlanStage(run, s, split, mine.peak_in_flight[static_cast<std::size_t>(at)]));
    if (run.slices > 1) PlanSliceSlots(run, r.rank, r.local_stages.back());
  }
}

}  // namespace

namespace plan_detail {

std::vector<BufferPlan> StageBuffers(const StagePlan& st, int local, int stages, int m, bool prev_remote,
                                     bool next_remote) {
  std::vector<BufferPlan> out;
  if (st.stage > 0) out.push_back({BufferRef::kInboxF, local, st.input(), m});
  if (st.stage + 1 < stages) out.push_back({BufferRef::kInboxB, local, st.output(), m});
  if (next_remote) out.push_back({BufferRef::kOutboxF, local, st.output(), m});
  if (prev_remote) out.push_back({BufferRef::kOutboxB, local, st.input(), m});
  return out;
}

TiedStages FindTiedStages(const ModelDesc& model, const std::vector<int>& bounds) {
  auto stage_of = [&](const OpDesc& o) {
    int s = 0;
    while (bounds[static_cast<std::size_t>(s) + 1] <= o.top) ++s;
    return s;
  };
  for (const OpDesc& op : model.ops) {
    if (op.tied_to < 0) continue;
    return {stage_of(model.ops[static_cast<std::size_t>(op.tied_to)]), stage_of(op), op.num_params};
  }
  return {};
}

}  // namespace plan_detail

std::vector<char> RunPlan::SummedAtEnd() const {
  std::vector<char> out(static_cast<std::size_t>(stages()), 0);
  const plan_detail::TiedStages tied = plan_detail::FindTiedStages(model, bounds);
  if (tied.embedding < 0) return out;
  out[static_cast<std::size_t>(tied.embedding)] = 1;
  out[static_cast<std::size_t>(tied.head)] = 1;
  return out;
}

int RankPlan::RequestId(ActionKind kind, int stage, int microbatch) const {
  return (RequestKindOf(kind) * stages + stage) * microbatches + microbatch;
}

std::size_t RankPlan::RingBytes() const {
  std::size_t n = 0;
  for (const StagePlan& st : local_stages) n += st.slot_bytes * static_cast<std::size_t>(st.ring_capacity);
  return n;
}

bool SplitsBackward(const Schedule& schedule, int stage) {
  for (const std::vector<Action>& rank : schedule.actions) {
    for (const Action& a : rank) {
      if (a.stage == stage && a.kind == ActionKind::kBackwardInput) return true;
    }
  }
  return false;
}

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
  r.wide_gradients = run.wide_gradients;
  r.stage_rank = lowered.stage_rank;
  r.local.assign(r.stages, -1);
  PlanStages(run, r);
  r.has_inputs = lowered.stage_rank.front() == rank;
  r.has_labels = lowered.stage_rank.back() == rank;
  r.inputs = run.input.WithRows(run.batch_size);  // whole sequences, however they are sliced
  r.labels_per_sample = run.labels_per_sample;
  r.labels = run.labels_per_sample == 1 ? TensorDesc{DType::kI32, {run.batch_size}}
                                        : TensorDesc{DType::kI32, {run.batch_size, run.labels_per_sample}};
  // Message buffers: one microbatch each, for every microbatch of the step.
  PlanMessages(run, r);
  PlanTied(run, r);
  // An overlapped unit (DualPipeV's F&B) runs on the CPU as its two parts
  // back to back: its F, then its B, each with its own operands and waits.
  for (const Action& a : lowered.actions[rank]) {
    ForEachPart(a, [&](const Action& part) { r.step.push_back(Resolve(r, part)); });
  }
  for (const Action& a : run.evaluation.actions[rank]) r.evaluation.push_back(Resolve(r, a));
  ResolveUnitParts(run, r);
  r.sends_per_step = std::max(CountSends(lowered.actions[rank]), CountSends(run.evaluation.actions[rank]));
  r.reduction = PlanReduction(run, r, replica);
  PlanSharding(run, r);
  return r;
}

}  // namespace baton
