// The discrete-event simulator, full validation and the exporters.
//
// Semantics (docs: ARCHITECTURE.md "Simulation semantics"):
// - Each rank runs its compute actions strictly in list order; an action
//   starts when the rank is free and every input it needs has arrived. An
//   OVERLAP_F_B unit starts when both its parts could and costs
//   Costs::forward_backward (default F + B); both results appear at its end.
// - F(s,j) needs F(s-1,j); I/B(s,j) needs I/B(s+1,j) (F(s,j) on the last
//   stage); W(s,j) needs I(s,j).
// - A hand-over that crosses ranks arrives MessageCosts::Time() after its
//   producer ends (after its SEND, in a lowered schedule, whose consumer also
//   needs the RECV posted earlier in its own list). Sends never block and
//   communication takes no compute time.
// - Ranks sharing cores (SimOptions::cores): while n ranks of a pool
//   compute, each runs at min(1, cores / n) of its speed.
// - Memory in units of M_B (one microbatch's activations through a whole
//   rank): F adds 1/v; I frees (1-r)/v; W frees r/v; B frees 1/v, where
//   r = M_W/M_B. An OVERLAP_F_B unit adds its F's share, then frees its B's.
// - Sliced schedules: a unit (slice s) costs slices.cost[s] of a whole
//   microbatch's time and holds slices.memory[s] of its memory and message;
//   its sequence holds memory.sequence_share while any of its slices is live on
//   the stage, and as much again while it runs backward.
// - Uneven microbatches (SimOptions::microbatches): microbatch j's actions
//   cost its share of a whole one's, and its messages take their share of
//   the bytes.
#ifndef BATON_SIM_H_
#define BATON_SIM_H_

#include <iosfwd>
#include <string>
#include <vector>

#include "baton/choices.h"
#include "baton/costs.h"
#include "baton/schedule.h"

namespace baton {

// The simulator's inputs come in named parts; PriceRun (baton/price.h)
// builds them for a run's plan from one cost source.

// What each compute action costs, in time units.
struct ComputeCosts {
  Costs uniform;              // every stage's, a whole rank's; default F = I = W = 1
  std::vector<Costs> stages;  // empty, or one per stage (overrides `uniform`)
};

// A message between ranks (an activation or its gradient).
struct MessageCosts {
  double latency = 0.0;    // time units
  double bandwidth = 0.0;  // bytes per time unit; 0 = bytes cost nothing
  double bytes = 0.0;      // a whole microbatch's message
  // Empty, or ranks x ranks: what a message from rank a to rank b takes
  // beyond Time() (a slow wire), at a x ranks + b, in the same time unit.
  std::vector<double> link_delay;
  // The time of a message carrying `share` of `bytes`: latency + share x
  // bytes / bandwidth (the latency alone where bandwidth is 0).
  double Time(double share = 1.0) const { return latency + (bandwidth > 0.0 ? share * bytes / bandwidth : 0.0); }
};

// Memory, in units of M_B (one microbatch's activations through a whole
// rank) and, where sizes are given, in bytes.
struct MemoryModel {
  double weight_ratio = 0.5;      // M_W / M_B, in [0, 1]
  double microbatch_bytes = 0.0;  // M_B in bytes; 0 = report units only
  // Empty, or one per stage: bytes one microbatch's forward through the
  // stage keeps (F adds them, I frees 1 - r of them, W r, B all). When
  // given, peak_memory_bytes is the peak of these sums instead of
  // peak_memory x microbatch_bytes, so stages may differ.
  std::vector<double> stage_bytes;
  // Empty, or one per rank: bytes the rank holds for the whole step
  // (parameters, gradients, optimizer state, workspaces, message buffers),
  // added to its peak_memory_bytes.
  std::vector<double> rank_static_bytes;
  // Sliced schedules: what a microbatch's sequence holds on a stage besides
  // its slices' own activations (the keys and values its later slices
  // read), a share of M_B, from its first slice's F to the last backward
  // (B or W) of its slices there; and as much again for their gradients,
  // from its first input backward (B or I) to its last. With stage_bytes:
  // `stage_sequence_bytes`, per stage, in bytes.
  double sequence_share = 0.0;
  std::vector<double> stage_sequence_bytes;
};

// Data parallelism: empty, or one per stage: the time to sum the stage's
// gradients over the replicas (GradientSumTime below). A stage's sum
// starts when its last B or W of the step ends (with at_end set for it:
// when its rank's last action ends, as a tied copy's does); a rank's sums
// run one after another, beside its compute, and the rank is done when the
// last has ended.
struct GradientSums {
  std::vector<double> stage_time;
  std::vector<char> at_end{};  // empty, or one per stage
};

// Ranks sharing cores (more processes than cores on a node): empty pools,
// or one entry per rank naming its pool, an index into pool_cores (the
// cores of the pool, > 0, fractions allowed). While n ranks of a pool
// compute and w wait, each computing one proceeds at
// min(1, cores / (n + waiting_share x w)) of its speed (processor sharing,
// as the kernel's fair scheduler shares them) and every action costs
// action_cost times its cost (the machine model, baton/machine.h). Empty:
// every rank has a core, and the machine model does not apply.
struct CorePools {
  std::vector<int> pool;
  std::vector<double> pool_cores;
  SharedCores shared;
  // The factor on every action's cost: the machine model's where ranks
  // share cores (pools given), else 1.
  double Factor() const { return pool.empty() ? 1.0 : shared.action_cost; }
};

// Sliced schedules (Schedule::slices k > 1): slice s's share of a whole
// microbatch's compute (cost), of its activations (memory) and of its
// message (message; empty: memory), k entries each, in (0, 1]; empty: 1/k
// each. Every cost and memory size above stays a whole microbatch's, so a
// sliced schedule's peak memory reads in the unsliced schedules' unit.
struct SliceShares {
  std::vector<double> cost, memory, message;
};

// Microbatches of uneven size (packed documents, baton/data.h): per
// microbatch (a sliced schedule's sequence) the factor on what a whole one
// costs (ComputeCosts) and sends (MessageCosts::bytes). `cost`: empty, one
// per microbatch (every stage alike) or microbatches x stages (microbatch
// j on stage s at j x stages + s); `message`: empty or one per microbatch;
// each >= 0. A slice's share multiplies its microbatch's. Memory stays a
// whole microbatch's: the ring slots are preallocated at the budget.
// A sliced schedule's units priced each on its own (packed sequences whose
// slices end at their real length): `unit_cost` (one per unit, or units x
// stages) and `unit_message` (one per unit), each unit's factor on a whole
// microbatch's cost and bytes in place of its slice's share times its
// microbatch's (the slice shares and `cost`/`message` then unused; 0: a
// unit that runs nothing).
struct MicrobatchShares {
  std::vector<double> cost, message;
  std::vector<double> unit_cost, unit_message;
  bool empty() const { return cost.empty() && message.empty() && unit_cost.empty() && unit_message.empty(); }
};

// Sharded data parallel (the schedule's UNSHARD and REDUCE_GRAD): empty,
// or one per stage: the time to gather the stage's parameters from the
// replicas' shards (an all-gather) and to reduce-scatter its gradients,
// each on its rank's communication resource, one collective after another
// beside the compute, starting when the rank reaches it in its list; and
// the bytes of the gathered copy, held from the UNSHARD to its RESHARD (or
// the step's end). A compute action of a gathered stage waits for its
// gather; the rank is done when its last collective has ended
// (RankResult::reduce_end). Empty: the actions take no time or memory.
// `after_step`: per stage, the collective that follows the optimizer step
// (ZeRO 2's all-gather of the updated parameters; none under 3, whose
// gathers are the schedule's UNSHARDs), on the rank's communication
// resource after its last collective: part of the step's price.
struct ShardCosts {
  std::vector<double> gather_time, reduce_time, gathered_bytes, after_step;
};

// A tied head (the embedding's weights used again by the last stage): the
// two stages holding its copies, and the bytes of the gradient the two
// ranks exchange after their last actions, before the at-end gradient
// sums (GradientSums::at_end). Where the stages share a rank, or without
// it (stages -1), nothing. Each rank receives the other's gradient: both
// are done at max(end_a + delay a->b, end_b + delay b->a) + the message's
// time for `bytes` (MessageCosts' latency and bandwidth, link_delay's
// delays: a slow wire between them delays every step's end).
struct TiedExchange {
  int stage_a = -1, stage_b = -1;
  double bytes = 0.0;
};

// The optimizer's step that ends a training step, after each rank's
// gradient sums and collectives: empty, or one per stage: `stage_time`, the
// time of the stage's update (its optimizer's step over its parameters, or
// its replica's shard of them), on its rank, one stage after another.
// With a clip (train.clip_grad_norm: `clip` one per stage, else empty) the
// update waits for the gradients' global norm: each rank first takes its
// stages' pass over their gradients (`clip`: their squares, and their
// scaling), then every rank waits for the slowest rank's pass and the
// norm's exchange over every rank (`exchange`), and only then updates.
// Without a clip a rank updates as soon as it is done, while the others
// still compute. The rank is done when its update ends
// (RankResult::update_end); the update and the pass count as busy time.
struct UpdateCosts {
  std::vector<double> stage_time;
  std::vector<double> clip;
  double exchange = 0.0;
  bool empty() const { return stage_time.empty() && clip.empty(); }
};

struct SimOptions {
  ComputeCosts compute{};
  MessageCosts messages{};
  MemoryModel memory{};
  GradientSums sums{};
  CorePools cores{};
  SliceShares slices{};
  MicrobatchShares microbatches{};
  ShardCosts shards{};
  TiedExchange tied{};
  UpdateCosts update{};
  bool record_timeline = true;  // keep every action's start/end
};

// The α–β time of summing `bytes` of gradients over `replicas` ranks in
// buckets of at most `bucket_bytes`: per bucket, a ring all-reduce's
// 2 (D - 1) steps of `latency` plus 2 (D - 1) / D of its bytes over
// `bandwidth` (bytes per time unit); 0 for one replica.
double GradientSumTime(double bytes, int replicas, double bucket_bytes, double latency, double bandwidth);
// The α–β time of one ring all-gather (or reduce-scatter) of `bytes` over
// `replicas` ranks, sharded data parallel's UNSHARD (REDUCE_GRAD): D - 1
// steps of `latency` plus (D - 1) / D of the bytes over `bandwidth`.
double ShardCollectiveTime(double bytes, int replicas, double latency, double bandwidth);

// One executed compute action; or, in a measured timeline (`baton bench`),
// a wait for a message or for the gradient sums (wait true: the action's
// kind says what for: RECV_F, RECV_B, SEND_F or SEND_B, REDUCE_GRAD).
struct TimedAction {
  Action action;
  double start = 0.0;
  double end = 0.0;
  bool wait = false;
  int step = -1;  // the measured step it belongs to, where a timeline holds several (-1: one step)
};

struct RankResult {
  int rank = 0;
  double start = 0.0;        // first compute action's start
  double end = 0.0;          // last compute action's end
  double busy = 0.0;         // sum of compute durations (and the update's, where priced)
  double work = 0.0;         // sum of its actions' costs (= busy unless ranks share cores)
  double span = 0.0;         // end - start
  double peak_memory = 0.0;  // units of M_B
  double peak_memory_bytes = 0.0;   // peak_memory x M_B bytes, or the peak of the stage
                                    // bytes (0 if neither is given); plus the rank's static bytes
  std::vector<int> stages;          // stages held by this rank, ascending
  std::vector<int> peak_in_flight;  // per entry of `stages`: most microbatches
                                    // forwarded but not yet released (B or W)
  // Sliced schedules, per entry of `stages`: most sequences with a slice
  // live at once (first slice's F to their slices' last B or W), and most
  // running backward (first input backward to last). Empty without slices.
  std::vector<int> peak_sequences, peak_backward_sequences;
  // With gradient sums (SimOptions::sums), sharding collectives
  // (SimOptions::shards) or a tied exchange (SimOptions::tied) on this
  // rank: the last one's end (>= end), and the time of them not hidden
  // behind the compute, reduce_end - end.
  double reduce_end = 0.0;
  double exposed_reduce = 0.0;
  // With the optimizer's step priced (SimOptions::update): when this rank's
  // update ends (>= its end and reduce_end), and how long it waited for the
  // clip's norm (the slowest rank's pass and the exchange) before it.
  double update_end = 0.0;
  double clip_wait = 0.0;
};

struct SimResult {
  std::string schedule;
  int ranks = 0;
  int microbatches = 0;           // units: microbatches x slices
  int slices = 1;                 // sequence slices a microbatch (Schedule::slices)
  int chunks = 0;
  double makespan = 0.0;          // max_r end_r (with gradient sums or sharding: max_r reduce_end_r;
                                  // with the update priced: max_r update_end_r)
  double bubble_rate = 0.0;       // 1 - sum busy / (ranks x makespan)
  double span_bubble_rate = 0.0;  // 1 - sum busy / (ranks x max_r span_r)
  std::vector<RankResult> per_rank;
  std::vector<std::vector<TimedAction>> timeline;  // per rank, if recorded
};

// Simulates a schedule in either form. REQUIRES: CheckStructure() passed (it
// is not re-run here). Throws ScheduleError if the schedule cannot finish,
// naming each stuck rank's position, action and what it waits for, with the
// grid; or if the options are out of range.
SimResult Simulate(const Schedule& schedule, const SimOptions& options = {});

// Sharded data parallel's actions placed in `schedule` (either form), as
// `options` prices it (its shards' gather times). ZeRO stage 2: each
// stage's gradients reduce-scattered (REDUCE_GRAD) right after its last B
// or W on its rank. Stage 3 also gathers each stage once a step (UNSHARD)
// and frees it (RESHARD) right after the stage's last use. The gathers are
// placed as late as they can be from the simulator's timeline of the
// schedule without them: from the last first use back, each at the latest
// position of its rank's list from which it ends before its stage's first
// use starts and before the next gather starts (a rank's gathers run one
// after another, in their order of first use), so each hides in the time
// before its use and holds its copy as briefly as that allows; one that
// cannot hide goes, with the gathers before it, to the list's start.
// Without a pipeline (one rank: sharded data parallel over groups of
// layers, each a stage) a stage whose forwards all come before its
// backwards, with other stages' work between, is gathered and freed twice:
// for its forwards and again for its backwards.
// Throws ScheduleError for another stage.
Schedule AddShardingActions(const Schedule& schedule, ZeroStage zero, const SimOptions& options);

// CheckStructure() and a dependency check (the simulator's advance without
// times: which actions can run once their inputs are there): throws
// ScheduleError, as Simulate would, for anything that would stop the
// schedule finishing.
void Validate(const Schedule& schedule);

// ---- Exporters ----
// Chrome Trace Event JSON (Perfetto, chrome://tracing): one process per rank,
// compute actions as complete ("X") events named "F", "B", "I", "W" with
// stage and microbatch in args (and the step, where a timed action has one);
// measured waits (TimedAction::wait) as events named "wait RECV_F", "wait
// RECV_B", "wait SEND" or "wait gradient sums", category "wait"; other
// communication actions are left out. One time unit is written as
// `us_per_unit` microseconds.
void WriteChromeTrace(const SimResult& result, std::ostream& out, double us_per_unit = 1000.0);

// SVG picture of the timeline: ranks as rows, time left to right, one colour
// per kind, microbatch numbers in the boxes, a title with the metrics.
// `axis_end` > 0 stretches the time axis to at least that time, so that two
// pictures drawn one above the other share a scale.
void WriteSvg(const SimResult& result, std::ostream& out, double axis_end = 0.0);

// Two or more pictures (WriteSvg) one above the other in one SVG, on one
// time scale: a measured step above its simulation, say.
void WriteSvgStack(const std::vector<SimResult>& results, std::ostream& out);

// Multiplies every time of `result` (the timeline, the ranks' start, end,
// busy, work, span and gradient sums' end, the makespan) by `factor`: a
// simulation in seconds drawn in milliseconds, say.
void ScaleTimes(SimResult& result, double factor);

// Machine-readable summary with keys schedule, ranks, microbatches (units),
// slices, chunks,
// makespan, bubble_rate, span_bubble_rate, ranks_detail[{rank, start, end,
// busy, span, peak_memory, peak_in_flight}].
std::string ToJson(const SimResult& result);

}  // namespace baton

#endif  // BATON_SIM_H_
