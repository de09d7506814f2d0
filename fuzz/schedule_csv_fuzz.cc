// Fuzzes the schedule CSV reader and the passes that run on what it reads,
// in the order `baton train` runs them (runtime/setup.cc): ReadCsv,
// CheckStructure, Validate, Lower, Validate of the lowered schedule.
//
// Each pass may reject its input with a ScheduleError; nothing else is
// caught, so any other exception, a sanitizer report, a hang or an
// allocation over libFuzzer's -malloc_limit_mb is a crash. Once a schedule
// has passed Validate, the later steps must succeed, and a few properties
// must hold; a violation prints what differs and aborts.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "baton/error.h"
#include "baton/schedule.h"
#include "baton/sim.h"

namespace {

// A schedule file of a few hundred actions exercises every rule; longer ones
// only slow the search (the passes are linear or quadratic in the actions).
constexpr std::size_t kMaxInput = 4096;

[[noreturn]] void Violated(const char* property, const baton::Schedule& s) {
  std::ostringstream csv;
  baton::WriteCsv(s, csv);
  std::fprintf(stderr, "schedule_csv_fuzz: property violated: %s\nschedule (as written back):\n%s\n", property,
               csv.str().c_str());
  std::abort();
}

bool SameSchedule(const baton::Schedule& a, const baton::Schedule& b) {
  return a.ranks == b.ranks && a.stages == b.stages && a.microbatches == b.microbatches &&
         a.stage_rank == b.stage_rank && a.actions == b.actions;
}

// The schedule without idle slots, which lowering drops.
std::vector<std::vector<baton::Action>> WithoutIdle(const baton::Schedule& s) {
  std::vector<std::vector<baton::Action>> rows = s.actions;
  for (auto& row : rows) std::erase_if(row, [](const baton::Action& a) { return a.kind == baton::ActionKind::kIdle; });
  return rows;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > kMaxInput) return -1;  // -1: not added to the corpus
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  baton::Schedule s;
  try {
    s = baton::ReadCsv(in, "fuzz.csv");
    baton::CheckStructure(s);
  } catch (const baton::ScheduleError&) {
    return 0;
  }

  // Files written by baton read back identically (README, "Schedules as plain data").
  std::ostringstream out;
  baton::WriteCsv(s, out);
  std::istringstream back(out.str());
  if (!SameSchedule(baton::ReadCsv(back, "fuzz.csv"), s)) Violated("WriteCsv then ReadCsv gives the same schedule", s);

  try {
    baton::Validate(s);
  } catch (const baton::ScheduleError&) {
    return 0;  // e.g. a deadlock
  }
  // A schedule that validates can be lowered, and the lowered one validates:
  // a ScheduleError from here on escapes and is reported as a crash.
  const baton::Schedule lowered = baton::Lower(s);
  baton::Validate(lowered);
  if (!s.IsLowered() && baton::ComputeOnly(lowered).actions != WithoutIdle(s)) {
    Violated("ComputeOnly(Lower(s)) is s without its idle slots", s);
  }
  return 0;
}
