// What a rank holds, in bytes, from its plan alone (RankMemory): one set of
// sums, used by `baton validate`'s memory lines and by `baton tune` before
// any schedule exists.
#include <algorithm>

#include "baton/price.h"
#include "internal.h"

namespace baton {

RankMemory& RankMemory::operator+=(const RankMemory& o) {
  params += o.params;
  grads += o.grads;
  optimizer += o.optimizer;
  rings += o.rings;
  sequences += o.sequences;
  workspaces += o.workspaces;
  layer_scratch += o.layer_scratch;
  messages += o.messages;
  return *this;
}

namespace plan_detail {

RankMemory StageMemory(const RunPlan& run, const StagePlan& st, std::size_t optimizer_floats,
                       const std::vector<BufferPlan>& buffers) {
  RankMemory mem;
  const std::size_t param_bytes = st.num_params * sizeof(float);
  mem.params = param_bytes;
  mem.grads = st.num_params * (sizeof(float) + (run.wide_gradients ? sizeof(double) : 0));  // Stage's doubles too
  mem.optimizer = optimizer_floats * sizeof(float) * static_cast<std::size_t>(run.optimizer_states);
  mem.workspaces = 3 * st.workspace_bytes + st.state_workspace_bytes;
  // Sliced: the first stage gathers a slice's token ids, the last its labels.
  if (run.slices > 1) {
    const auto slice = static_cast<std::size_t>(st.rows) * static_cast<std::size_t>(run.slice_tokens);
    if (st.is_first) mem.workspaces += slice * SizeOf(run.input.dtype);
    if (st.is_last) mem.workspaces += slice * sizeof(std::int32_t);
  }
  const int max_rows = st.rows * st.tokens_per_sample;
  for (int i = 0; i < st.ops(); ++i) {
    if (st.layer[i] < 0) continue;
    const OpDesc& op = run.model.ops[static_cast<std::size_t>(st.first_op + i)];
    mem.layer_scratch += ScratchBytes(op, max_rows, run.device);
  }
  for (const BufferPlan& b : buffers) mem.messages += b.tensor.bytes() * static_cast<std::size_t>(b.count);
  return mem;
}

}  // namespace plan_detail

RankMemory RankMemoryOf(const RunPlan& run, const RankPlan& r) {
  RankMemory mem;
  for (const StagePlan& st : r.local_stages) {
    const auto k = static_cast<std::size_t>(r.local[st.stage]);
    std::vector<BufferPlan> buffers;
    for (const BufferPlan& b : r.buffers) {
      if (b.local == static_cast<int>(k)) buffers.push_back(b);
    }
    mem += plan_detail::StageMemory(run, st, r.reduction.shard_count[k], buffers);
    mem.rings += st.slot_bytes * static_cast<std::size_t>(st.ring_capacity);
    mem.sequences += st.sequence_bytes * static_cast<std::size_t>(st.sequence_capacity + st.gradient_capacity);
  }
  if (r.tied.peer >= 0) mem.messages += r.tied.floats * run.GradSumBytes();
  // Sharded data parallel: the resting shards and the windows' pools in
  // place of whole gradients (ZeRO 2) and parameters (3).
  const ShardingPlan& sh = r.sharding;
  if (sh.active()) {
    std::size_t shards = 0;
    for (std::size_t count : r.reduction.shard_count) shards += count * sizeof(float);
    const std::size_t window = sh.window_floats * sizeof(float);
    mem.grads = shards + static_cast<std::size_t>(sh.gradient_windows) * window;
    if (sh.parameters_sharded()) mem.params = shards + static_cast<std::size_t>(sh.parameter_windows) * window;
  }
  return mem;
}

std::vector<RankMemory> PlanMemory(const RunPlan& run) {
  const int ranks = run.lowered.ranks;
  std::vector<RankMemory> out(static_cast<std::size_t>(ranks));
  std::vector<double> slot_bytes(static_cast<std::size_t>(run.stages()), 0.0);
  std::vector<double> sequence_bytes(static_cast<std::size_t>(run.stages()), 0.0);
  std::vector<double> static_bytes(static_cast<std::size_t>(ranks), 0.0);
  for (int rank = 0; rank < ranks; ++rank) {
    const RankPlan r = PlanRank(run, rank);
    RankMemory& mem = out[static_cast<std::size_t>(rank)];
    mem = RankMemoryOf(run, r);
    for (const StagePlan& st : r.local_stages) {
      slot_bytes[static_cast<std::size_t>(st.stage)] = static_cast<double>(st.slot_bytes);
      sequence_bytes[static_cast<std::size_t>(st.stage)] = static_cast<double>(st.sequence_bytes);
    }
    static_bytes[static_cast<std::size_t>(rank)] = static_cast<double>(mem.static_bytes());
  }
  // The ring slots' life in time: a slot is taken by F and freed by the
  // stage's last backward of the microbatch (B, or W when split: I frees
  // nothing, so M_W / M_B = 1).
  RunCosts costs;
  costs.memory.stage_bytes = slot_bytes;
  costs.memory.rank_static_bytes = static_bytes;
  costs.memory.weight_ratio = 1.0;
  if (run.slices > 1) costs.memory.stage_sequence_bytes = sequence_bytes;
  const SimOptions o = PriceRun(run, costs);
  const SimResult sim = Simulate(run.lowered, o);
  for (int rank = 0; rank < ranks; ++rank) {
    out[static_cast<std::size_t>(rank)].simulated_peak = sim.per_rank[static_cast<std::size_t>(rank)].peak_memory_bytes;
  }
  return out;
}

std::vector<double> StaticBytesCache::operator()(const RunPlan& shape, Placement placement, int ranks,
                                                 bool split_backward) {
  const int S = shape.stages();
  // The step's units: its microbatches, each in its slices (a message buffer each).
  const int m = shape.batch_size / std::max(shape.rows, 1) * shape.slices;
  std::vector<RankMemory> mem(static_cast<std::size_t>(ranks));
  for (int s = 0; s < S; ++s) {
    const int rank = StageRank(placement, s, ranks);
    const bool prev_remote = s > 0 && StageRank(placement, s - 1, ranks) != rank;
    const bool next_remote = s + 1 < S && StageRank(placement, s + 1, ranks) != rank;
    const auto key = std::make_tuple(shape.bounds[static_cast<std::size_t>(s)],
                                     shape.bounds[static_cast<std::size_t>(s) + 1], split_backward, prev_remote,
                                     next_remote);
    auto it = memo_.find(key);
    if (it == memo_.end()) {
      const StagePlan st = PlanStageAlone(shape, s, split_backward);
      // ZeRO: the largest replica's shard (the last; shards differ by a float at most).
      const std::size_t optimizer =
          shape.zero.shards_optimizer() ? ShardOf(st.num_params, shape.replicas - 1, shape.replicas).count : st.num_params;
      RankMemory stage = plan_detail::StageMemory(shape, st, optimizer,
                                                  plan_detail::StageBuffers(st, 0, S, m, prev_remote, next_remote));
      // ZeRO 2 and 3 before a schedule places their windows: each stage's
      // resting shards; the windows are the placed schedule's (the tuner
      // counts them from its actions, CandidateCosts::parameter_bytes).
      if (shape.zero.shards_gradients()) stage.grads = optimizer * sizeof(float);
      if (shape.zero.shards_parameters()) stage.params = optimizer * sizeof(float);
      it = memo_.emplace(key, stage).first;
    }
    mem[static_cast<std::size_t>(rank)] += it->second;
  }
  // A tied head's gradient inbox, where its copies are on two ranks.
  const plan_detail::TiedStages tied = plan_detail::FindTiedStages(shape.model, shape.bounds);
  if (tied.embedding >= 0) {
    const int re = StageRank(placement, tied.embedding, ranks), rh = StageRank(placement, tied.head, ranks);
    if (re != rh) {
      mem[static_cast<std::size_t>(re)].messages += tied.floats * shape.GradSumBytes();
      mem[static_cast<std::size_t>(rh)].messages += tied.floats * shape.GradSumBytes();
    }
  }
  std::vector<double> out;
  for (const RankMemory& r : mem) out.push_back(static_cast<double>(r.static_bytes()));
  return out;
}

std::vector<double> PlanStaticBytes(const RunPlan& shape, Placement placement, int ranks, bool split_backward) {
  return StaticBytesCache()(shape, placement, ranks, split_backward);
}

}  // namespace baton
