// A pipeline schedule as plain data, and the pure functions over it:
// generators, lowering (adding SEND/RECV), structural checks, CSV I/O and the
// rank x step grid.
//
// A schedule is, per rank, an ordered list of actions. Stage s of
// S = ranks x chunks lives on exactly one rank (stage_rank[s]).
#ifndef BATON_SCHEDULE_H_
#define BATON_SCHEDULE_H_

#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "baton/action.h"

namespace baton {

// How stages are placed on ranks.
enum class Placement {
  kLoop,  // stage s on rank s mod ranks (interleaved schedules)
  kV,     // stage s on rank s < ranks ? s : 2*ranks-1-s (V-shaped schedules)
};

struct Schedule {
  std::string name;       // generator name or file path
  int ranks = 0;          // number of rows
  int stages = 0;         // S = ranks x chunks
  int microbatches = 0;   // m
  std::vector<int> stage_rank;                 // stage -> rank, size `stages`
  std::vector<std::vector<Action>> actions;    // per rank, execution order

  int chunks() const { return ranks > 0 ? stages / ranks : 0; }
  // True when any action is a SEND/RECV (the compute_comms form).
  bool IsLowered() const;
  // Number of actions that are not idle, over all ranks.
  std::size_t CountActions() const;
};

// ---- Generators: pure functions of ranks p, microbatches m, chunks v. ----
// Each throws ScheduleError naming the rule and the value when a constraint
// fails (p >= 1, m >= 1, m >= p for the zero-bubble schedules, m a multiple of
// p for interleaved_1f1b, v = 2 for zbv, v = 1 for the single-chunk ones).

Schedule GenerateGPipe(int ranks, int microbatches);
Schedule Generate1F1B(int ranks, int microbatches);
Schedule GenerateInterleaved1F1B(int ranks, int microbatches, int chunks);
Schedule GenerateZbH1(int ranks, int microbatches);
Schedule GenerateZbH2(int ranks, int microbatches);
Schedule GenerateZbv(int ranks, int microbatches, int chunks = 2);

// Names accepted by Generate(): gpipe, 1f1b, interleaved_1f1b, zb_h1, zb_h2, zbv.
const std::vector<std::string>& GeneratorNames();

// Runs the generator called `name`. `chunks` = 0 means the generator's
// default (2 for interleaved_1f1b and zbv, 1 otherwise).
Schedule Generate(std::string_view name, int ranks, int microbatches, int chunks = 0);

// A generator name, or else a path to a CSV schedule file. For a file, a
// non-zero `ranks` / `microbatches` / `chunks` must match what the file holds.
Schedule LoadSchedule(std::string_view name_or_path, int ranks = 0, int microbatches = 0,
                      int chunks = 0);

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
void CheckStructure(const Schedule& schedule);

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
// Reading accepts files written by baton and by PyTorch's _dump_csv (CRLF
// line ends, ragged rows); stages, microbatches and stage_rank are inferred
// from the cells. Errors quote the cell and give row (rank) and column.
Schedule ReadCsv(std::istream& in, std::string_view source_name);
Schedule ReadCsvFile(const std::string& path);
// Writes the schedule as it is (compute_only or compute_comms form).
void WriteCsv(const Schedule& schedule, std::ostream& out);

// Rank of a stage under a placement.
int StageRank(Placement placement, int stage, int ranks);

}  // namespace baton

#endif  // BATON_SCHEDULE_H_
