// The simulator's options, checked against a schedule before it runs.
#include "check_options.h"

#include <fmt/format.h>

#include <cmath>
#include <string>
#include <string_view>
#include <type_traits>

#include "baton/error.h"

namespace baton {

namespace {

// `v` checked; its name (a string, or a function that makes it) is made
// only for the error: the check runs before every simulation, and balanced
// packing prices about a hundred of them a step.
template <class Name>
std::string NameOf(const Name& name) {
  if constexpr (std::is_invocable_v<Name>) {
    return name();
  } else {
    return std::string(name);
  }
}

template <class Name>
void NonNegative(const Name& name, double v) {
  if (v >= 0.0 && std::isfinite(v)) return;
  throw ScheduleError(fmt::format("simulation: {} must be a finite number >= 0, got {}", NameOf(name), v));
}

// The machine model's core pools (SimOptions::cores): one pool a rank,
// every pool's cores and the shared-core factors in range.
void CheckCores(const Schedule& s, const SimOptions& o) {
  if (!o.cores.pool.empty() && static_cast<int>(o.cores.pool.size()) != s.ranks) {
    throw ScheduleError(fmt::format("simulation: {} core pools given for the ranks, but the schedule has {} ranks",
                                    o.cores.pool.size(), s.ranks));
  }
  if (o.cores.pool.empty() && !o.cores.pool_cores.empty()) {
    throw ScheduleError("simulation: pool_cores given without core_pool (which pool each rank is in)");
  }
  for (std::size_t r = 0; r < o.cores.pool.size(); ++r) {
    if (o.cores.pool[r] < 0 || o.cores.pool[r] >= static_cast<int>(o.cores.pool_cores.size())) {
      throw ScheduleError(fmt::format("simulation: rank {} is in core pool {}, but there are {} pools (0..{})", r,
                                      o.cores.pool[r], o.cores.pool_cores.size(),
                                      static_cast<int>(o.cores.pool_cores.size()) - 1));
    }
  }
  if (!(o.cores.shared.action_cost > 0.0) || !std::isfinite(o.cores.shared.action_cost)) {
    throw ScheduleError(
        fmt::format("simulation: action_cost must be a finite number > 0, got {}", o.cores.shared.action_cost));
  }
  if (!(o.cores.shared.waiting_share >= 0.0 && o.cores.shared.waiting_share <= 1.0)) {
    throw ScheduleError(
        fmt::format("simulation: waiting_share must be in [0, 1], got {}", o.cores.shared.waiting_share));
  }
  for (std::size_t k = 0; k < o.cores.pool_cores.size(); ++k) {
    if (!(o.cores.pool_cores[k] > 0.0) || !std::isfinite(o.cores.pool_cores[k])) {
      throw ScheduleError(fmt::format("simulation: core pool {} must have a finite number of cores > 0, got {}", k,
                                      o.cores.pool_cores[k]));
    }
  }
}

// Sliced schedules' slice shares and uneven microbatches' shares
// (SimOptions::slices, SimOptions::microbatches): one each, in range.
void CheckShares(const Schedule& s, const SimOptions& o) {
  for (const auto& [what, shares] :
       {std::pair{"slice_cost", &o.slices.cost}, std::pair{"slice_memory", &o.slices.memory},
        std::pair{"slice_message", &o.slices.message}}) {
    if (!shares->empty() && static_cast<int>(shares->size()) != s.slices) {
      throw ScheduleError(fmt::format("simulation: {} {} shares given, but the schedule has {} slices a microbatch",
                                      shares->size(), what, s.slices));
    }
    for (std::size_t i = 0; i < shares->size(); ++i) {
      if (!((*shares)[i] > 0.0 && (*shares)[i] <= 1.0)) {
        throw ScheduleError(fmt::format("simulation: {} of slice {} must be in (0, 1], got {}", what, i, (*shares)[i]));
      }
    }
  }
  const MicrobatchShares& mb = o.microbatches;
  const std::size_t j = static_cast<std::size_t>(s.sequences());
  if (!mb.cost.empty() && mb.cost.size() != j && mb.cost.size() != j * static_cast<std::size_t>(s.stages)) {
    throw ScheduleError(
        fmt::format("simulation: {} microbatch cost shares given, but the schedule has {} microbatches "
                    "(one each, or one each per stage: {})",
                    mb.cost.size(), j, j * static_cast<std::size_t>(s.stages)));
  }
  if (!mb.message.empty() && mb.message.size() != j) {
    throw ScheduleError(fmt::format(
        "simulation: {} microbatch message shares given, but the schedule has {} microbatches", mb.message.size(), j));
  }
  const std::size_t units = static_cast<std::size_t>(s.sequences()) * static_cast<std::size_t>(s.slices);
  if (!mb.unit_cost.empty() && mb.unit_cost.size() != units &&
      mb.unit_cost.size() != units * static_cast<std::size_t>(s.stages)) {
    throw ScheduleError(fmt::format("simulation: {} unit cost shares given, but the schedule has {} units (one each, "
                                    "or one each per stage: {})",
                                    mb.unit_cost.size(), units, units * static_cast<std::size_t>(s.stages)));
  }
  if (!mb.unit_message.empty() && mb.unit_message.size() != units) {
    throw ScheduleError(fmt::format("simulation: {} unit message shares given, but the schedule has {} units",
                                    mb.unit_message.size(), units));
  }
  for (std::size_t i = 0; i < mb.unit_cost.size(); ++i) {
    NonNegative([&] { return fmt::format("unit cost share {}", i); }, mb.unit_cost[i]);
  }
  for (std::size_t i = 0; i < mb.unit_message.size(); ++i) {
    NonNegative([&] { return fmt::format("unit message share {}", i); }, mb.unit_message[i]);
  }
  for (std::size_t i = 0; i < mb.cost.size(); ++i) {
    NonNegative([&] { return fmt::format("microbatch cost share {}", i); }, mb.cost[i]);
  }
  for (std::size_t i = 0; i < mb.message.size(); ++i) {
    NonNegative([&] { return fmt::format("microbatch message share {}", i); }, mb.message[i]);
  }
}

// The optimizer's step: one time a stage each, none negative.
void CheckUpdate(const Schedule& s, const SimOptions& o) {
  for (const auto& [what, per_stage] :
       {std::pair{"update time", &o.update.stage_time}, std::pair{"clip time", &o.update.clip}}) {
    if (!per_stage->empty() && static_cast<int>(per_stage->size()) != s.stages) {
      throw ScheduleError(fmt::format("simulation: {} per-stage {}s given, but the schedule has {} stages",
                                      per_stage->size(), what, s.stages));
    }
    for (std::size_t i = 0; i < per_stage->size(); ++i)
      NonNegative([&, what = what] { return fmt::format("stage {} {}", i, what); }, (*per_stage)[i]);
  }
  NonNegative("the clip's norm exchange", o.update.exchange);
}

}  // namespace

void CheckOptions(const Schedule& s, const SimOptions& o) {
  auto check_costs = [&](const auto& where, const Costs& c) {
    NonNegative([&] { return fmt::format("{} forward cost", NameOf(where)); }, c.forward);
    NonNegative([&] { return fmt::format("{} backward_input cost", NameOf(where)); }, c.backward_input);
    NonNegative([&] { return fmt::format("{} backward_weight cost", NameOf(where)); }, c.backward_weight);
    if (c.forward_backward) {
      NonNegative([&] { return fmt::format("{} forward_backward cost", NameOf(where)); }, *c.forward_backward);
    }
  };
  check_costs("the per-rank", o.compute.uniform);
  if (!o.compute.stages.empty() && static_cast<int>(o.compute.stages.size()) != s.stages) {
    throw ScheduleError(fmt::format("simulation: {} per-stage costs given, but the schedule has {} stages",
                                    o.compute.stages.size(), s.stages));
  }
  for (std::size_t i = 0; i < o.compute.stages.size(); ++i)
    check_costs([&] { return fmt::format("stage {}", i); }, o.compute.stages[i]);
  NonNegative("comm", o.messages.latency);
  NonNegative("bandwidth", o.messages.bandwidth);
  NonNegative("message_bytes", o.messages.bytes);
  NonNegative("microbatch_memory_bytes", o.memory.microbatch_bytes);
  if (!o.memory.stage_bytes.empty() && static_cast<int>(o.memory.stage_bytes.size()) != s.stages) {
    throw ScheduleError(fmt::format("simulation: {} per-stage memory sizes given, but the schedule has {} stages",
                                    o.memory.stage_bytes.size(), s.stages));
  }
  for (std::size_t i = 0; i < o.memory.stage_bytes.size(); ++i) {
    NonNegative([&] { return fmt::format("stage {} memory bytes", i); }, o.memory.stage_bytes[i]);
  }
  const std::size_t links = static_cast<std::size_t>(s.ranks) * static_cast<std::size_t>(s.ranks);
  if (!o.messages.link_delay.empty() && o.messages.link_delay.size() != links) {
    throw ScheduleError(
        fmt::format("simulation: {} link delays given, but the schedule has {} ranks: it needs {} (ranks x ranks)",
                    o.messages.link_delay.size(), s.ranks, links));
  }
  for (std::size_t i = 0; i < o.messages.link_delay.size(); ++i) {
    NonNegative(
        [&] {
          return fmt::format("the delay of the link from rank {} to rank {}", i / static_cast<std::size_t>(s.ranks),
                             i % static_cast<std::size_t>(s.ranks));
        },
        o.messages.link_delay[i]);
  }
  if (!o.memory.rank_static_bytes.empty() && static_cast<int>(o.memory.rank_static_bytes.size()) != s.ranks) {
    throw ScheduleError(fmt::format("simulation: {} per-rank static memory sizes given, but the schedule has {} ranks",
                                    o.memory.rank_static_bytes.size(), s.ranks));
  }
  if (!o.sums.stage_time.empty() && static_cast<int>(o.sums.stage_time.size()) != s.stages) {
    throw ScheduleError(fmt::format("simulation: {} per-stage gradient-sum times given, but the schedule has {} stages",
                                    o.sums.stage_time.size(), s.stages));
  }
  for (std::size_t i = 0; i < o.sums.stage_time.size(); ++i) {
    NonNegative([&] { return fmt::format("stage {} gradient-sum time", i); }, o.sums.stage_time[i]);
  }
  for (std::size_t i = 0; i < o.memory.rank_static_bytes.size(); ++i) {
    NonNegative([&] { return fmt::format("rank {} static memory bytes", i); }, o.memory.rank_static_bytes[i]);
  }
  CheckCores(s, o);
  CheckShares(s, o);
  for (const auto& [what, per_stage] :
       {std::pair{"gather time", &o.shards.gather_time}, std::pair{"reduce-scatter time", &o.shards.reduce_time},
        std::pair{"gathered bytes", &o.shards.gathered_bytes}, std::pair{"after-step time", &o.shards.after_step}}) {
    if (!per_stage->empty() && static_cast<int>(per_stage->size()) != s.stages) {
      throw ScheduleError(fmt::format("simulation: {} per-stage sharding {}s given, but the schedule has {} stages",
                                      per_stage->size(), what, s.stages));
    }
    for (std::size_t i = 0; i < per_stage->size(); ++i)
      NonNegative([&, what = what] { return fmt::format("stage {} {}", i, what); }, (*per_stage)[i]);
  }
  CheckUpdate(s, o);
  NonNegative("sequence_memory", o.memory.sequence_share);
  if (!o.memory.stage_sequence_bytes.empty() && static_cast<int>(o.memory.stage_sequence_bytes.size()) != s.stages) {
    throw ScheduleError(fmt::format("simulation: {} per-stage sequence sizes given, but the schedule has {} stages",
                                    o.memory.stage_sequence_bytes.size(), s.stages));
  }
  if (!(o.memory.weight_ratio >= 0.0 && o.memory.weight_ratio <= 1.0)) {
    throw ScheduleError(
        fmt::format("simulation: weight_memory_ratio (M_W/M_B) must be in [0, 1], got {}", o.memory.weight_ratio));
  }
}

}  // namespace baton
