#include "migrate.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <string>

#include <fmt/format.h>

#include "baton/error.h"
#include "baton/placement.h"
#include "baton/timing.h"
#include "checkpoint.h"
#include "fault.h"
#include "params.h"
#include "wire.h"

namespace baton {
namespace {

// Request ids and tag of the moves: nothing else is in flight at a step
// boundary.
constexpr int kSendId = 0, kRecvId = 1, kMoveTag = 0;

std::vector<std::string> NamesOf(const std::vector<NamedTensor>& tensors) {
  std::vector<std::string> out;
  for (const NamedTensor& t : tensors) out.push_back(t.name);
  return out;
}

// Rank 0: every wanted tensor with the rank that holds it, in the wanting
// ranks' order. `records[r]` is rank r's tensors (TensorNamesJson).
std::vector<Move> MoveList(const std::vector<std::string>& records) {
  std::map<std::string, int> holder;
  std::vector<std::vector<std::string>> wants(records.size());
  for (std::size_t r = 0; r < records.size(); ++r) {
    TensorNames names = ParseTensorNames(records[r]);
    for (const std::string& name : names.held) {
      if (!holder.emplace(name, static_cast<int>(r)).second) {
        throw RunError(fmt::format("moving the model state: tensor '{}' is held by ranks {} and {}", name,
                                   holder[name], r));
      }
    }
    wants[r] = std::move(names.wanted);
  }
  std::vector<Move> out;
  for (std::size_t r = 0; r < wants.size(); ++r) {
    for (const std::string& name : wants[r]) {
      const auto it = holder.find(name);
      if (it == holder.end()) {
        throw RunError(fmt::format("moving the model state: rank {} needs tensor '{}', which no rank holds", r, name));
      }
      out.push_back({name, it->second, static_cast<int>(r)});
    }
  }
  return out;
}

// The replicas' own microbatches, if they differ, are one a replica, each
// at least one, and add up to the global batch's.
bool SharesTheGlobalBatch(const TrainConfig& c) {
  const std::vector<int>& split = c.pipeline.replica_microbatches;
  if (split.empty()) return true;
  int total = 0;
  for (const int m : split) {
    if (m < 1) return false;
    total += m;
  }
  return static_cast<int>(split.size()) == c.data_parallel.size &&
         total == c.pipeline.microbatches * c.data_parallel.size;
}

// The settings every number depends on, the plan (schedule, chunks,
// placement) left out.
std::string AllButPlan(const TrainConfig& config) {
  TrainConfig c = config;
  c.pipeline.partition = Partition::kBalanced;
  c.pipeline.partition_counts.clear();
  c.pipeline.layout = {};
  c.pipeline.schedule.clear();
  c.pipeline.chunks = 0;
  return MathSettings(c);
}

// `u` built for `config` from `plan` in place of what it had: the device,
// the executor and the parameter store (no values drawn: the caller
// restores the state), the transport sized for both plans' messages.
void Build(const TrainConfig& config, const RunComms& comms, RunSetup& u, RunPlan plan, RankPlan rank_plan) {
  Transport& t = u.wire ? *u.wire : comms.pipeline;
  u.params.reset();
  u.exec.reset();
  u.device.reset();
  u.plan = std::move(plan);
  u.rank_plan = std::move(rank_plan);
  t.Configure(std::max(u.rank_plan.requests, 2), config.pipeline.wait_timeout_s);
  u.device = MakeRankDevice(config.device, t, config.precision);
  u.exec = std::make_unique<Executor>(u.plan.model, u.rank_plan, config.pipeline.wait_timeout_s, t, *u.device,
                                      &comms.replicas);
  u.params = std::make_unique<ParamStore>(u.plan, u.rank_plan, *u.exec);
  u.params->Prepare(config.train.optimizer);  // an optimizer; every value is restored next
}

// After the state is in place: the transport sized for the plan, the
// executor's rank, fault and flight records.
void Rewire(const TrainConfig& config, const RunComms& comms, RunSetup& u) {
  Transport& t = u.wire ? *u.wire : comms.pipeline;
  t.Configure(u.rank_plan.requests, config.pipeline.wait_timeout_s);
  u.exec->set_world_rank(u.world_rank);
  u.ArmFaults();
  SetFlightRecords(config, comms, u);
}

std::size_t NumElements(const std::vector<std::int64_t>& shape) {
  std::size_t n = 1;
  for (std::int64_t d : shape) n *= static_cast<std::size_t>(d);
  return n;
}

}  // namespace

std::vector<NamedTensor> StateTensorsToFill(RunSetup& u) {
  std::vector<NamedTensor> tensors = u.params->CheckpointTensors({});
  for (NamedTensor& t : tensors) t.data.resize(NumElements(t.shape));
  return tensors;
}

std::vector<float> Flatten(const std::vector<NamedTensor>& tensors, const char* what) {
  std::size_t n = 0;
  for (const NamedTensor& nt : tensors) n += NumElements(nt.shape);
  std::vector<float> all;
  all.reserve(n);
  for (const NamedTensor& nt : tensors) {
    if (nt.data.size() != NumElements(nt.shape)) {
      throw RunError(fmt::format("{}: tensor '{}' has {} floats, not {}", what, nt.name, nt.data.size(),
                                 NumElements(nt.shape)));
    }
    all.insert(all.end(), nt.data.begin(), nt.data.end());
  }
  return all;
}

void Unflatten(std::span<const float> all, std::vector<NamedTensor>& tensors, const char* what) {
  std::size_t n = 0;
  for (const NamedTensor& nt : tensors) n += NumElements(nt.shape);
  if (all.size() != n) {
    throw RunError(fmt::format("{}: {} floats came for {} tensors of {} floats", what, all.size(), tensors.size(), n));
  }
  std::size_t at = 0;
  for (NamedTensor& nt : tensors) {
    const std::size_t k = NumElements(nt.shape);
    nt.data.assign(all.begin() + static_cast<std::ptrdiff_t>(at), all.begin() + static_cast<std::ptrdiff_t>(at + k));
    at += k;
  }
}

std::size_t ShareFromReplica(ReplicaGroup& replicas, std::vector<NamedTensor>& tensors, int from) {
  std::size_t n = 0;
  for (const NamedTensor& nt : tensors) n += NumElements(nt.shape);
  const bool first = replicas.rank() == from;
  const std::string sharing = fmt::format("sharing the model state of replica {}", from);
  std::vector<float> all = first ? Flatten(tensors, sharing.c_str()) : std::vector<float>(n);
  if (n > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
    throw RunError(fmt::format("sharing the model state: {} floats on one rank, more than one collective carries", n));
  }
  // A broadcast as an all-gather whose parts are all member `from`'s (the
  // others' empty, before it at 0 and after it at n).
  const auto size = static_cast<std::size_t>(replicas.size());
  std::vector<int> counts(size, 0), displs(size, 0);
  for (std::size_t r = 0; r < size; ++r) displs[r] = static_cast<int>(r) > from ? static_cast<int>(n) : 0;
  counts[static_cast<std::size_t>(from)] = static_cast<int>(n);
  replicas.StartAllGather(0, all, counts, displs);
  const std::string what = fmt::format("replica {}'s model state, to every replica", from);
  replicas.Wait(0, {what.c_str(), -1, -1, -1});
  Unflatten(all, tensors, sharing.c_str());
  return first ? n * sizeof(float) * (size - 1) : 0;
}


std::size_t MoveTensors(Transport& t, const std::vector<NamedTensor>& held, std::vector<NamedTensor>& wanted) {
  std::vector<std::string> records;
  t.GatherStrings(TensorNamesJson({NamesOf(held), NamesOf(wanted)}), &records, "every rank's tensors to move");
  std::string list;
  Agree(t, "rank 0 listing the model state's moves", [&] {
    if (t.rank() == 0) list = MovesJson(MoveList(records));
  });
  t.BroadcastString(&list);
  std::map<std::string, const NamedTensor*> mine;
  for (const NamedTensor& h : held) mine[h.name] = &h;
  std::map<std::string, NamedTensor*> into;
  for (NamedTensor& w : wanted) into[w.name] = &w;
  std::size_t sent = 0;
  const int me = t.rank();
  for (const auto& [name, from, to] : ParseMoves(list)) {
    if (from != me && to != me) continue;
    if (from == me && to == me) {
      const NamedTensor& h = *mine.at(name);
      NamedTensor& w = *into.at(name);
      if (h.data.size() != w.data.size()) {
        throw RunError(fmt::format("moving the model state: tensor '{}' has {} floats here but {} are wanted", name,
                                   h.data.size(), w.data.size()));
      }
      w.data = h.data;
      continue;
    }
    if (from == me) {
      const NamedTensor& h = *mine.at(name);
      t.Isend(kSendId, h.data.data(), h.data.size() * sizeof(float), to, kMoveTag);
      t.Wait(kSendId, {"SEND of a moved tensor", -1, -1, to});
      sent += h.data.size() * sizeof(float);
    } else {
      NamedTensor& w = *into.at(name);
      t.Irecv(kRecvId, w.data.data(), w.data.size() * sizeof(float), from, kMoveTag);
      t.Wait(kRecvId, {"RECV of a moved tensor", -1, -1, from});
    }
  }
  return sent;
}

PlanSwap SwapPlan(const TrainConfig& running, const TrainConfig& next, const RunComms& comms, RunSetup& u,
                  std::int64_t done) {
  const double start = MonotonicSeconds();
  Transport& t = comms.pipeline;
  RunPlan plan;
  RankPlan rank_plan;
  Agree(comms.world, "every rank planning the new plan", [&] {
    const bool same = AllButPlan(next) == AllButPlan(running) && next.pipeline.ranks == running.pipeline.ranks &&
                      next.pipeline.microbatches == running.pipeline.microbatches &&
                      next.data_parallel.size == running.data_parallel.size && next.device == running.device &&
                      SharesTheGlobalBatch(next);
    if (!same) {
      throw ConfigError(fmt::format("{}: a plan changed between steps may change only the schedule, its chunks, "
                                    "the placement and the replicas' shares of the microbatches (the ranks, "
                                    "microbatches, replicas, device and every number stay)",
                                    next.source));
    }
    plan = PlanRun(ReplicaConfig(next, u.replica));
    rank_plan = PlanRank(plan, t.rank(), u.replica);
    if (rank_plan.has_inputs != u.first_rank || rank_plan.has_labels != u.last_rank) {
      throw ConfigError(fmt::format("{}: the new plan moves the first or the last stage to another rank, whose "
                                    "data this rank does not hold",
                                    next.source));
    }
  });
  if (u.faults) u.faults->Replanning(done);
  // The state as it is, by name (the optimizer's too); then the old stages
  // go and the new plan's are built in their place (the executor and the
  // store refer to u.plan and u.rank_plan). Should any rank fail to build
  // it, every rank builds the old plan again from the state it kept, and
  // the run goes on as it was.
  // Under ZeRO 1-3 the first replica gathers each stage's shards and
  // every replica gets them whole, so that each pipeline moves, and each
  // replica keeps (Restore), its own shard of the new stages.
  u.params->Pull();
  std::vector<NamedTensor> held = u.params->CheckpointTensors(u.params->WholeState(comms.replicas));
  PlanSwap swap;
  const bool sharded = u.rank_plan.reduction.shards_optimizer;
  if (sharded) swap.bytes_sent += ShareFromReplica(comms.replicas, held, 0);
  RunPlan old_plan = u.plan;
  RankPlan old_rank_plan = u.rank_plan;
  try {
    Agree(comms.world, "every rank building the new plan", [&] {
      if (u.faults) u.faults->Building(done);
      Build(next, comms, u, std::move(plan), std::move(rank_plan));
    });
  } catch (const Error& e) {
    Build(running, comms, u, std::move(old_plan), std::move(old_rank_plan));
    u.params->Restore(held, "the model state kept", done);
    if (u.faults) u.faults->BuildFailed();
    Rewire(running, comms, u);
    swap.failed = e.what();
    swap.failed_here = dynamic_cast<const PeerFailed*>(&e) == nullptr;
    swap.seconds = MonotonicSeconds() - start;
    return swap;
  }
  // The new stages' tensors by name and shape, each sized for the whole
  // tensor the move brings (no gather of the state just built).
  std::vector<NamedTensor> wanted = StateTensorsToFill(u);
  swap.bytes_sent += MoveTensors(t, held, wanted);
  u.params->Restore(wanted, "the moved model state", done);
  Rewire(next, comms, u);
  if (next.pipeline.replica_microbatches != running.pipeline.replica_microbatches) {
    // Another share of the global batch: its rows, where the data stood.
    const std::int64_t per_epoch = u.loader->batches_per_epoch();
    MakeLoader(next, u);
    u.loader->Seek(done / per_epoch, done % per_epoch);
  }
  const std::string id = u.run.run_id;
  u.run = CheckpointRunOf(next, u.plan, u.total_steps);
  u.run.run_id = id;
  swap.seconds = MonotonicSeconds() - start;
  return swap;
}

void ChangePlan(TrainConfig next, const RunComms& comms, RunSetup& u, std::int64_t done, bool tty,
                TrainConfig& running) {
  const PlanSwap swap = SwapPlan(running, next, comms, u, done);
  if (!swap.failed.empty()) {  // every rank went back to the running plan
    if (swap.failed_here) {
      std::fprintf(stderr, "%sbaton: rank %d: warning: the plan change after step %lld failed: %s; the run goes on as "
                   "planned\n", tty ? "\n" : "", u.world_rank, static_cast<long long>(done), swap.failed.c_str());
    }
    return;
  }
  running = std::move(next);
  if (comms.world.rank() != 0) return;
  const int chunks = u.plan.lowered.chunks();
  std::fprintf(stderr, "%sbaton: plan changed after step %lld: %s%s layout %s (rank 0 sent %.1f KiB of its state; %.1f ms)\n",
               tty ? "\n" : "", static_cast<long long>(done), running.pipeline.schedule.c_str(),
               chunks > 1 ? fmt::format(" ({} chunks)", chunks).c_str() : "",
               LayoutText(running, u.plan.model, u.plan.bounds).c_str(), swap.bytes_sent / 1024.0, swap.seconds * 1e3);
}

}  // namespace baton
