// A pipeline schedule as plain data, and the pure functions over it:
// generators, lowering (adding SEND/RECV), structural checks, CSV I/O and the
// rank x step grid.
//
// A schedule is, per rank, an ordered list of actions. Stage s of
// S = ranks x chunks lives on exactly one rank (stage_rank[s]).
#ifndef BATON_SCHEDULE_H_
#define BATON_SCHEDULE_H_

#include <cstddef>
#include <iosfwd>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "baton/action.h"
#include "baton/costs.h"

namespace baton {

// How stages are placed on ranks.
enum class Placement {
  kLoop,  // stage s on rank s mod ranks (interleaved schedules)
  kV,     // stage s on rank s < ranks ? s : 2*ranks-1-s (V-shaped schedules)
};

// A sliced schedule's units (Schedule::slices k): unit u = j x k + s is
// slice s of sequence (whole microbatch) j. The one place that says so.
inline int SequenceOfUnit(int unit, int slices) { return unit / slices; }
inline int SliceOfUnit(int unit, int slices) { return unit % slices; }
inline int UnitOf(int sequence, int slice, int slices) { return sequence * slices + slice; }

struct Schedule {
  std::string name;       // generator name or file path
  int ranks = 0;          // number of rows
  int stages = 0;         // S = ranks x chunks
  int microbatches = 0;   // the pipeline's units: m, or m x slices
  // Sequence slices (Seq1F1B): each microbatch's sequence cut into k
  // slices, each slice a unit of its own: unit u = j x k + s is slice s of
  // microbatch j, and `microbatches` counts units (m x k). On every stage a
  // slice's forward comes after the forward of the slice before it (its
  // attention reads their keys and values) and its input backward (B or I)
  // before theirs (it sends gradients into their keys and values). 1: whole
  // sequences, every schedule's form without slices.
  int slices = 1;
  std::vector<int> stage_rank;                 // stage -> rank, size `stages`
  std::vector<std::vector<Action>> actions;    // per rank, execution order

  int chunks() const { return ranks > 0 ? stages / ranks : 0; }
  // Whole microbatches (sequences): microbatches / slices.
  int sequences() const { return slices > 0 ? microbatches / slices : 0; }
  // A unit's sequence and slice, and the unit of a sequence's slice.
  int SequenceOf(int unit) const { return SequenceOfUnit(unit, slices); }
  int SliceOf(int unit) const { return SliceOfUnit(unit, slices); }
  int Unit(int sequence, int slice) const { return UnitOf(sequence, slice, slices); }
  // True when any action is a SEND/RECV (the compute_comms form).
  bool IsLowered() const;
  // Number of actions that are not idle, over all ranks.
  std::size_t CountActions() const;
};

// ---- Generators: pure functions of ranks p, microbatches m, chunks v. ----
// Each throws ScheduleError naming the rule and the value when a constraint
// fails (p >= 1, m >= 1, m >= p for zb_h1/zb_h2, m >= 2p for dualpipev, the
// chunk counts and memory limits each one allows; see each below).

// What the generators beyond (p, m) take. Each field says who reads it;
// the defaults give every generator its standard form.
struct GenerateOptions {
  // Stages per rank v; 0 = the schedule's own (2 for interleaved_1f1b,
  // interleaved_zb, zbv, v_min, v_half, v_zb, dualpipev; 1 otherwise).
  int chunks = 0;
  // Activation memory one rank may hold, in units of M_B (one microbatch's
  // activations through all of a rank's stages); 0 = the schedule's default.
  //   zb_auto: the zero-bubble authors' M_limit (p = ZB-1p, the default;
  //            2p = ZB-2p); at least 1.
  //   v_zb:    default p (ZB-V's memory).
  //   interleaved_1f1b: caps each rank's warm-up so that no rank holds more
  //            (default: no cap); at least ((v-1)g + 1)/v, g the group size
  //            (with k slices ((v-1)gk + k)/(vk), a unit holding 1/(vk)).
  double memory_limit = 0.0;
  // zb_auto, v_zb: the costs the search plans with. Per rank, a chunk
  // costing 1/v (`costs`), or one per stage (`stage_costs`, which wins).
  // v_zb uses the median stage's costs, as its authors' code does.
  Costs costs;
  std::vector<Costs> stage_costs;
  double comm = 0.0;                 // zb_auto, v_zb: time of one message between ranks
  double weight_memory_ratio = 0.5;  // zb_auto, v_zb: M_W / M_B, in [0, 1]
  // interleaved_1f1b: microbatches per group, Megatron-LM's
  // microbatch_group_size_per_vp_stage, in [p, m], whose last group (m mod
  // g) must be empty or hold at least p; 0 = the smallest such g from p up
  // (p itself when p divides m). With k slices the groups are of whole
  // sequences and p counts units: g k >= p, and (m mod g) k 0 or >= p.
  int microbatch_group = 0;
  // GeneratorTraits::slices (every generator but 1f1b): each microbatch's
  // sequence in this many slices (Schedule::slices); 0 or 1 = whole:
  // seq1f1b, zb_h1, zb_h2, interleaved_1f1b and zbv in their own sliced order,
  // the others by expanding their order (ExpandSlices). 1f1b refuses more
  // than 1.
  int slices = 0;
};

Schedule GenerateGPipe(int ranks, int microbatches);
Schedule Generate1F1B(int ranks, int microbatches);
// Megatron-LM's order, any m >= p when v > 1 (microbatch groups, the last
// one taking the remainder); see GenerateOptions for the group size and the
// memory-capped warm-up. With slices, the same table over units (m k >= p),
// groups of whole sequences, each sequence's backwards last slice first.
// PyTorch's ScheduleLoopedBFS (breadth-first pipeline parallelism): on
// each rank every microbatch's forward through its first chunk, then
// through its next, ...; then the backwards, last chunk first. Any m and
// v; GPipe's memory per chunk. Under sharded data parallel a chunk is
// used in two runs, its forwards and its backwards, and gathered for each.
Schedule GenerateLoopedBfs(int ranks, int microbatches, int chunks);
Schedule GenerateInterleaved1F1B(int ranks, int microbatches, int chunks);
Schedule GenerateInterleaved1F1B(int ranks, int microbatches, const GenerateOptions& options);
// A schedule over whole microbatches with each action expanded in place
// into its k slices: F(s, j) into F(s, jk), ..., F(s, jk + k - 1); B, I
// and W (s, j) into the same for jk + k - 1 down to jk; an OVERLAP_F_B unit
// into k units pairing the forward's slice i with the backward's slice
// k - 1 - i. Valid for any valid schedule (a slice waits only on the same
// slice upstream, which comes in the same order), with the fill and drain
// a slice long instead of a microbatch, and its memory: it holds as many
// whole microbatches as the schedule it expands. k = 1: the schedule.
Schedule ExpandSlices(const Schedule& whole, int slices);

// Seq1F1B (Sun et al. 2024): 1F1B over the slices of each microbatch's
// sequence, `slices` units a microbatch; forwards in unit order, backwards
// microbatch by microbatch with each one's slices last to first; rank r
// warms up with p - r - 1 + slices - 1 forwards. slices = 1 is 1F1B.
Schedule GenerateSeq1F1B(int ranks, int microbatches, int slices);
// ZB-H1 and ZB-H2, optionally over sequence slices as Seq1F1B orders them.
Schedule GenerateZbH1(int ranks, int microbatches, int slices = 1);
Schedule GenerateZbH2(int ranks, int microbatches, int slices = 1);
Schedule GenerateZbv(int ranks, int microbatches, int chunks = 2, int slices = 1);
// PyTorch's ScheduleInterleavedZeroBubble: interleaved 1F1B with I/W split
// (ZB-1p on the loop placement). m must be a multiple of max(1, m div p).
Schedule GenerateInterleavedZb(int ranks, int microbatches, int chunks = 2);
// DeepSeek's DualPipeV (PyTorch's ScheduleDualPipeV order): 2 chunks, "v"
// placement, m >= 2p; OVERLAP_F_B units in the steady state.
Schedule GenerateDualPipeV(int ranks, int microbatches);
// The zero-bubble authors' automatic schedule (their heuristic: eight
// settings of its three switches, the shortest kept) under
// options.memory_limit, from options' costs and comm. One chunk.
Schedule GenerateZbAuto(int ranks, int microbatches, const GenerateOptions& options);
// "Pipeline Parallelism with Controllable Memory" (Qi et al. 2024), V
// placement, 2 chunks: V-Min (about 1/3 of 1F1B's activation memory) and
// V-Half (about 1/2) from their repeating building blocks, squeezed by the
// authors' greedy pass; V-ZB their zero-bubble V search under
// options.memory_limit.
Schedule GenerateVMin(int ranks, int microbatches);
Schedule GenerateVHalf(int ranks, int microbatches);
Schedule GenerateVZb(int ranks, int microbatches, const GenerateOptions& options);

// ---- The registry: every generator and what it is ----
// What a generator reads beyond (p, m) and what its schedules hold, for
// every tool that enumerates schedules or plans for one (the tuner, the
// plan, the CLI, the config checks): they read these, never the name.
struct GeneratorTraits {
  int default_chunks = 1;                  // the chunks it uses when asked for 0
  bool any_chunks = false;                 // takes any chunk count >= 1 (else only default_chunks)
  bool split_backward = false;             // runs I and W apart (a slot keeps W's output gradients)
  bool overlapped_units = false;           // holds OVERLAP_F_B units
  bool memory_limit = false;               // reads GenerateOptions::memory_limit
  bool plans_with_costs = false;           // its order depends on GenerateOptions' costs and comm
  Placement placement = Placement::kLoop;  // where its stages go
  bool slices = false;                     // runs sequence slices (GenerateOptions::slices)
  std::string_view one_slice_is{};         // with one slice it is this generator's schedule (seq1f1b: 1f1b)
  // Slices by its whole-microbatch order with every action expanded in
  // place into its k slices (ExpandSlices); false: its own sliced order.
  bool expands_slices = false;
  // The one-chunk order that runs the backward the other way (whole B
  // against I and W apart), for a run of this generator at one chunk a
  // rank: 1f1b's is zb_h1 and zb_h1's 1f1b; "" if none.
  std::string_view other_backward{};
};

struct GeneratorEntry {
  std::string_view name;   // as configs and flags spell it: "interleaved_1f1b"
  std::string_view title;  // as papers and messages name it: "interleaved 1F1B"
  GeneratorTraits traits;
  // The generator, given options whose chunks are resolved (never 0) and
  // allowed by the traits.
  Schedule (*generate)(int ranks, int microbatches, const GenerateOptions& options);
};

// Every generator, in the order users see them listed: gpipe, 1f1b,
// seq1f1b, interleaved_1f1b, looped_bfs, zb_h1, zb_h2, zbv, interleaved_zb, dualpipev, zb_auto,
// v_min, v_half, v_zb.
std::span<const GeneratorEntry> Generators();
// The entry called `name`, or null.
const GeneratorEntry* FindGenerator(std::string_view name);
// The same; throws ScheduleError naming the known ones for an unknown name.
const GeneratorEntry& GeneratorOf(std::string_view name);
// The registry's names, in its order.
const std::vector<std::string>& GeneratorNames();
// GeneratorOf(name).traits.
GeneratorTraits TraitsOf(std::string_view name);
// The generator that runs `name`'s order over sequence slices: `name`
// itself if it takes slices, else the one whose one_slice_is is `name`
// (1f1b: seq1f1b); null if none.
const GeneratorEntry* SlicedFormOf(std::string_view name);

// Runs the generator called `name`. `chunks` = 0 means the generator's
// default (see GenerateOptions::chunks).
Schedule Generate(std::string_view name, int ranks, int microbatches, int chunks = 0);
Schedule Generate(std::string_view name, int ranks, int microbatches, const GenerateOptions& options);

// A generator name, or else a path to a CSV schedule file. For a file, a
// non-zero `ranks` / `microbatches` / `chunks` must match what the file holds.
Schedule LoadSchedule(std::string_view name_or_path, int ranks = 0, int microbatches = 0,
                      int chunks = 0);
Schedule LoadSchedule(std::string_view name_or_path, int ranks, int microbatches, const GenerateOptions& options);

// ---- Lowering ----
// Adds SEND/RECV actions to a compute-only schedule, the way PyTorch's
// _add_send_recv does: the ranks' compute lists are walked in lock-step; when
// a compute action whose result crosses to another rank is placed, its SEND
// follows it on the sender and the matching RECV is appended to the receiver's
// list at that moment (receives placed by the sender's side). Consecutive
// stages on one rank hand over locally, with no message. Idle slots are
// dropped. Throws ScheduleError if the compute order cannot make progress.
Schedule Lower(const Schedule& compute_only);

// Removes SEND/RECV actions (the inverse of Lower, idle slots aside).
Schedule ComputeOnly(const Schedule& schedule);

// ---- Structural checks (no timing) ----
// Every stage on exactly one rank; every microbatch of every stage has exactly
// one F and either one B or one I and one W; I/B after F and W after I on the
// rank; in a lowered schedule every cross-rank hand-over has exactly one SEND
// after its producer and one RECV on the receiving rank, and no other
// messages. Throws ScheduleError naming rank, position and action, with the
// grid and the bad cell marked. Deadlocks are found by Validate() in sim.h.
// Also CheckSharding below.
void CheckStructure(const Schedule& schedule);

// The sharding actions (sharded data parallel: ZeRO-2 and -3), checked on
// each rank in its order, for each of its stages. A stage that an UNSHARD
// or RESHARD names rests as a shard of its parameters: its F, B, I and W
// run only between an UNSHARD (which gathers it) and the RESHARD after it
// (which frees the gathered copy); a gathered stage is not gathered again
// (its copy would never be freed), nor is a resharded one resharded; a
// gather still held when the rank's list ends is freed at the step's end
// (PyTorch's files end so). REDUCE_GRAD sums a stage's gradients over the
// replicas once, after its last B or W of the step. A schedule without
// these actions passes.
// Throws ScheduleError naming rank, position and action, with the grid.
void CheckSharding(const Schedule& schedule);

// Sharded data parallel's windows on one rank's actions, in its order (an
// overlapped unit's parts listed apart), as a run takes them, the lowest
// free one first: a parameter window from each UNSHARD to its stage's
// RESHARD; a gradient window from a stage's first B or W to its
// REDUCE_GRAD, or to the end for a stage in `held_to_end` (per stage; a
// tied copy, summed after the tied gradients; empty: none). The plan
// assigns them (ShardingPlan); the tuner counts them. REQUIRES: the
// actions pass CheckSharding.
struct ShardingWindows {
  std::vector<int> window;  // per action: the window an UNSHARD, or a stage's first B or W, takes; else -1
  int parameter_windows = 0, gradient_windows = 0;  // the most held at once
};
ShardingWindows PlaceShardingWindows(const std::vector<Action>& actions, int stages,
                                     const std::vector<char>& held_to_end);

// ---- Grid ----
struct GridMark {
  int rank = -1;
  int position = -1;
};
// The schedule as a grid: one line per step, one column per rank (PyTorch's
// layout). With a mark, the cell is shown as >cell< and its line flagged; with
// max_steps > 0 only that many steps around the mark (or from the start) are
// shown, so error messages stay readable for long schedules.
std::string FormatGrid(const Schedule& schedule, std::optional<GridMark> mark = std::nullopt,
                       int max_steps = 0);

// ---- CSV ----
// One row per rank (row index = rank), one action per cell, empty cell = idle.
// A sliced schedule (slices > 1) starts with the line "# seq_slices: k" and
// its cells number units (j x k + s); PyTorch's reader does not know that
// line (nor has it a runtime for slices).
// Reading accepts files written by baton and by PyTorch's _dump_csv (CRLF
// line ends, ragged rows); stages, microbatches and stage_rank are inferred
// from the cells. Errors quote the cell (escaped, cut; error.h Quote) and
// give row (rank) and column. A file over kMaxScheduleFileBytes is refused
// before its actions take memory.
inline constexpr std::size_t kMaxScheduleFileBytes = 16u << 20;
Schedule ReadCsv(std::istream& in, std::string_view source_name);
Schedule ReadCsvFile(const std::string& path);
// Writes the schedule as it is (compute_only or compute_comms form).
void WriteCsv(const Schedule& schedule, std::ostream& out);

// Rank of a stage under a placement.
int StageRank(Placement placement, int stage, int ranks);

}  // namespace baton

#endif  // BATON_SCHEDULE_H_
