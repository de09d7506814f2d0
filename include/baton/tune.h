// The tuner core: picks a schedule, microbatch count, chunk count,
// checkpointing policy (and sequence slices, placement, ZeRO stage) for a pipeline by simulating every candidate against
// the caller's costs and a per-rank memory budget.
//
// Pure: it depends on the schedule and sim libraries only (no MPI, Eigen or
// CUDA). A front end (`baton tune`) turns a run config and measured costs
// into a TuneSpace and a CostModel, calls Tune(), prints the ranking and
// writes the winner as a config overlay.
//
// Typical use:
//
//   TuneSpace space;
//   space.ranks = 4;
//   space.schedules = {"1f1b", "zb_h1", "zb_auto", "interleaved_1f1b", "dualpipev"};
//   space.microbatches = {8, 16, 32};
//   space.chunks = {2, 4};
//   space.checkpointing = {Checkpointing::kNone, Checkpointing::kSelective, Checkpointing::kFull};
//   TuneOptions options;
//   options.memory_bytes = 40e9;
//   TuneReport report = Tune(space, [&](const Candidate& c) { return MyCosts(c); }, options);
//   if (const CandidateResult* best = report.Best()) { ... best->candidate ... }
//   else if (report.smallest) { ... "needs at least report.smallest->max_peak_bytes" ... }
#ifndef BATON_TUNE_H_
#define BATON_TUNE_H_

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "baton/choices.h"
#include "baton/costs.h"
#include "baton/sim.h"

namespace baton {

// GenerateOptions::memory_limit for a candidate, derived from the budget:
// the most activation memory (in M_B of the candidate's heaviest rank) that
// fits next to every rank's static bytes. Only for schedules that take a
// memory limit (zb_auto, v_zb, interleaved_1f1b).
inline constexpr double kMemoryLimitFromBudget = -1.0;

// One point of the search.
struct Candidate {
  std::string schedule;       // a generator name (GeneratorNames())
  int microbatches = 0;       // m
  int chunks = 0;             // stages per rank v, always resolved (never 0)
  Checkpointing checkpointing = Checkpointing::kNone;
  // The generator's memory limit in M_B: 0 = the schedule's default,
  // kMemoryLimitFromBudget = derived from the budget, > 0 = as given.
  double memory_limit = 0.0;
  // The placement: the first top-level layer of each stage and the layer
  // count (ranks x chunks + 1 entries); empty = the cost model's own.
  // Filled by the placement search (TuneSpace::cuts).
  std::vector<int> bounds;
  // Sequence slices a microbatch (GeneratorTraits::slices) and where they
  // are cut; 1: whole sequences.
  int slices = 1;
  SeqSplit seq_split = SeqSplit::kEven;
  // Sharded data parallel's stage (data_parallel.zero): 2 and 3 place the
  // schedule's REDUCE_GRAD (and UNSHARD, RESHARD) where the run places
  // them (PlaceRunShardingActions, baton/plan.h).
  ZeroStage zero{};
};

// What one candidate costs. Times may be in any one unit (the step time
// comes out in it); sizes are bytes. Stage s of the candidate's
// ranks x chunks stages sits on the rank its schedule places it on (loop
// placement for one chunk and the interleaved schedules, V placement for
// zbv, dualpipev, v_min, v_half, v_zb; see StageRank()).
struct CandidateCosts {
  // Non-empty: the candidate cannot run, and this says why (for example
  // "22 layers do not split into 16 stages"); nothing else is read.
  std::string invalid;
  // The price: the simulator's options for the candidate's stages (its
  // schedule comes from the search), as PriceRun builds a run's
  // (baton/price.h), in their parts (baton/sim.h): compute.stages, one per
  // stage, the forward, input-backward and weight-backward time of one
  // microbatch through the stage, the checkpointing policy's recomputation
  // included in its backward (and optionally forward_backward, an F and a B
  // overlapped, for dualpipev); messages; memory: stage_bytes, one per
  // stage, the bytes one microbatch's forward keeps until its backward
  // under the policy (sliced: a slice's ring slot), rank_static_bytes, one
  // per rank (required), the bytes the schedule does not change
  // (parameters, gradients, optimizer state, recomputation workspace,
  // message buffers), weight_ratio, the share still held after I until W
  // (M_W / M_B), and sliced, stage_sequence_bytes, a sequence's key/value
  // slot; the cores the ranks share; a sliced candidate's slices' shares;
  // ZeRO's collectives (shards). Its schedule's generator plans with the
  // same costs and message time.
  SimOptions price;
  // What only the search reads beside the price.
  // How activation memory is held. false: as it lives, the rank's peak of
  // the stages' live microbatches at once (the simulator's memory). true:
  // in ring stores allocated up front, each stage's ring as deep as its own
  // peak in flight (baton's runs): a rank holds the sum of those, and
  // sliced, a key/value slot for each live sequence and again for each
  // sequence running backward.
  bool ring_memory = false;
  // ZeRO 2 and 3: per stage its parameters' bytes (RunPlan::StageParamBytes),
  // the size of its windows, and 1 where its gradient window is held to
  // the step's end (RunPlan::SummedAtEnd: a tied copy). The search adds to
  // each rank's static bytes (which then hold only the shards) as many
  // windows of its largest stage as its placed actions hold at once
  // (PlaceShardingWindows, as the plan's pools take them).
  std::vector<double> parameter_bytes;
  std::vector<char> summed_at_end;
};

// Called once per candidate, in the order of TuneSpace (schedules, then
// microbatches, chunks, checkpointing, memory limits). May throw; Tune()
// lets the exception through.
using CostModel = std::function<CandidateCosts(const Candidate&)>;

// The grid searched. Every combination is one candidate, except that a
// schedule with a fixed chunk count (TraitsOf(name).any_chunks false) gets
// only its own, and one that takes no memory limit only the limit 0.
struct TuneSpace {
  int ranks = 0;                       // p, >= 1
  std::vector<std::string> schedules;  // generator names
  std::vector<int> microbatches;       // m values, each >= 1
  std::vector<int> chunks = {2};       // v values for interleaved_1f1b / interleaved_zb
  std::vector<Checkpointing> checkpointing = {Checkpointing::kNone};
  std::vector<double> memory_limits = {0.0, kMemoryLimitFromBudget};
  // Sequence slices: every k for the schedules that run slices
  // (GeneratorTraits::slices; a schedule that with one slice is another's,
  // seq1f1b, only k > 1), each split for k > 1; the others k = 1.
  std::vector<int> slices = {1};
  std::vector<SeqSplit> seq_splits = {SeqSplit::kEven};
  // ZeRO stages (0-3), every candidate at each.
  std::vector<ZeroStage> zero = {ZeroStage()};
  // The placement search: where a stage may start (top-level layer indices
  // in (0, layers), ascending) for a model of `layers` top-level layers.
  // Empty: no search (the cost model places the stages). Otherwise every
  // candidate is searched over every contiguous placement of its stages on
  // these cuts: each placement's lower bound (the busiest rank's, or
  // shared cores', compute) orders them, and they are simulated in that
  // order until the bound reaches the best feasible step found: exact, and
  // deterministic. More than `max_layouts` placements: the candidate is
  // refused, saying so.
  std::vector<int> cuts;
  int layers = 0;
  std::size_t max_layouts = 1000000;
};

struct TuneOptions {
  double memory_bytes = 0.0;  // per-rank budget, > 0
};

// A candidate's outcome.
struct CandidateResult {
  Candidate candidate;
  bool simulated = false;  // false: the cost model or generator refused it
  bool feasible = false;   // simulated and every rank within the budget
  // Empty when feasible; otherwise why not: the refusal, or which rank
  // needs how much over the budget.
  std::string why_not;
  double step_time = 0.0;          // makespan of one step
  double bubble_rate = 0.0;        // 1 - sum busy / (ranks x step time)
  std::vector<double> peak_bytes;  // per rank: static + peak activation bytes
  double max_peak_bytes = 0.0;     // the largest of peak_bytes
  int max_peak_rank = 0;           // the rank holding it
  // The placement search: placements priced (bounded) and simulated.
  std::size_t layouts = 0, layouts_simulated = 0;
};

struct TuneReport {
  // Every candidate: the feasible ones by step time (ties by less memory,
  // then by schedule name, microbatches, chunks, policy, limit); then those
  // over the budget by memory needed; then those that could not run, in
  // search order.
  std::vector<CandidateResult> ranked;
  std::size_t feasible = 0;   // the first `feasible` entries of ranked
  std::size_t simulated = 0;  // candidates simulated
  // The placement search: schedule x m x v x policy x placement points
  // searched (priced and bounded, or simulated), and how many simulated.
  std::size_t layouts = 0, layouts_simulated = 0;
  double seconds = 0.0;       // wall time of the whole search
  // When no candidate fits: the simulated one needing the least memory
  // (its max_peak_bytes) and which one it is.
  std::optional<CandidateResult> smallest;

  // The winner, or nullptr when none fits the budget.
  const CandidateResult* Best() const { return feasible > 0 ? &ranked.front() : nullptr; }
  // Points searched per second: with the placement search, every
  // placement of every candidate (`layouts`).
  double CandidatesPerSecond() const {
    const std::size_t n = layouts > 0 ? layouts : ranked.size();
    return seconds > 0.0 ? static_cast<double>(n) / seconds : 0.0;
  }
};

// Simulates every candidate of `space` with the costs `model` gives and
// ranks them against the budget. Schedules whose order does not depend on
// costs are generated once per (schedule, m, v, limit) and reused.
// Throws ScheduleError when the space or options are malformed (no ranks,
// an unknown schedule, a non-positive budget) or when the model returns
// vectors of the wrong size (naming the candidate and the field); a
// generator refusing a candidate is not an error but that candidate's
// why_not.
TuneReport Tune(const TuneSpace& space, const CostModel& model, const TuneOptions& options);

}  // namespace baton

#endif  // BATON_TUNE_H_
