// `baton schedule show|export|check`: look at, convert and check schedules.
#include <iostream>
#include <memory>
#include <sstream>

#include <fmt/format.h>

#include "baton/error.h"
#include "baton/schedule.h"
#include "baton/sim.h"
#include "baton/files.h"
#include "commands.h"

namespace baton {
namespace {

struct ScheduleFlags {
  std::string schedule;
  int ranks = 0;
  int microbatches = 0;
  int chunks = 0;
  int slices = 0;  // 0: a generator's whole sequences, a file's own
  double memory_limit = 0.0;
  int zero = 0;              // 2 or 3: sharded data parallel's actions placed (AddShardingActions)
  double gather_time = 0.0;  // a stage's gather, against unit compute costs
  bool lowered = false;
  std::string form = "compute_only";
  std::string output = "-";
};

// Generators get defaults (4 ranks, 8 microbatches); a file keeps its own.
Schedule Load(const ScheduleFlags& f) {
  const bool generator = FindGenerator(f.schedule) != nullptr;
  const int ranks = generator && f.ranks == 0 ? 4 : f.ranks;
  const int microbatches = generator && f.microbatches == 0 ? 8 : f.microbatches;
  if (!(f.memory_limit >= 0.0)) {
    throw ConfigError(
        fmt::format("--memory-limit must be >= 0 (M_B; 0 = the schedule's default), got {}", f.memory_limit));
  }
  GenerateOptions options;
  options.chunks = f.chunks;
  options.memory_limit = f.memory_limit;
  if (f.slices < 0) throw ConfigError(fmt::format("--seq-slices must be at least 1, got {}", f.slices));
  options.slices = f.slices;
  Schedule s = LoadSchedule(f.schedule, ranks, microbatches, options);
  Validate(s);
  const ZeroStage zero = ZeroFlag(f.zero);
  if (!zero.has_actions()) return s;
  if (!(f.gather_time >= 0.0)) throw ConfigError(fmt::format("--gather-time must be >= 0, got {}", f.gather_time));
  for (const auto& row : s.actions) {
    for (const Action& a : row) {
      if (IsSharding(a.kind)) {
        throw ConfigError(fmt::format("--zero {}: {} holds sharding actions of its own ({}); place them on a "
                                      "schedule without them",
                                      f.zero, f.schedule, ToString(a)));
      }
    }
  }
  SimOptions price;  // unit compute costs, the gathers' as given
  price.shards.gather_time.assign(static_cast<std::size_t>(s.stages), f.gather_time);
  s = AddShardingActions(s, zero, price);
  Validate(s);
  return s;
}

std::string Summary(const Schedule& s) {
  const std::string units = s.slices > 1 ? fmt::format("{} microbatches x {} slices ({} units)", s.sequences(),
                                                      s.slices, s.microbatches)
                                       : fmt::format("{} microbatches", s.microbatches);
  return fmt::format("{}: {} ranks, {} stages ({} per rank), {}, {} actions, {} form", s.name, s.ranks, s.stages,
                     s.chunks(), units, s.CountActions(), s.IsLowered() ? "compute_comms" : "compute_only");
}

void AddCommonOptions(CLI::App* cmd, ScheduleFlags& f) {
  cmd->add_option("schedule", f.schedule, "generator name or CSV schedule file")->required();
  cmd->add_option("-p,--ranks", f.ranks, "pipeline ranks (generators: default 4; files: must match)");
  cmd->add_option("-m,--microbatches", f.microbatches, "microbatches (generators: default 8; files: must match)");
  cmd->add_option("-v,--chunks", f.chunks, "stages per rank (default: the schedule's own)");
  cmd->add_option("--memory-limit", f.memory_limit,
                  "activation memory a rank may hold, M_B (zb_auto, v_zb, interleaved_1f1b; default: the schedule's)");
  cmd->add_option("--seq-slices", f.slices,
                  "each microbatch's sequence in k slices, the units j*k+s (every generator but 1f1b; files: must match)");
  cmd->add_option("--zero", f.zero,
                  "sharded data parallel: 2 adds a REDUCE_GRAD after each stage's last backward, 3 also an UNSHARD "
                  "before its first use and a RESHARD after its last (as baton simulate --zero places them)");
  cmd->add_option("--gather-time", f.gather_time,
                  "with --zero 3: a stage's gather against unit compute costs (F = I = W = 1 a rank), where to "
                  "place it (default 0: right before the stage's first use)");
}

}  // namespace

void AddScheduleCommand(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("schedule", "Show, export or check a schedule");
  cmd->require_subcommand(1);

  auto show = std::make_shared<ScheduleFlags>();
  CLI::App* show_cmd = cmd->add_subcommand("show", "Print the rank x step grid");
  AddCommonOptions(show_cmd, *show);
  show_cmd->add_flag("--lowered", show->lowered, "show the lowered form, with SEND/RECV actions");
  show_cmd->callback([show] {
    Schedule s = Load(*show);
    if (show->lowered) s = Lower(s);
    std::cout << Summary(s) << "\n\n" << FormatGrid(s);
  });

  auto exp = std::make_shared<ScheduleFlags>();
  CLI::App* export_cmd = cmd->add_subcommand("export", "Write the schedule as CSV (PyTorch-compatible)");
  AddCommonOptions(export_cmd, *exp);
  export_cmd->add_option("--form", exp->form, "compute_only (F/B/I/W) or compute_comms (with SEND/RECV)")
      ->check(CLI::IsMember({"compute_only", "compute_comms"}));
  export_cmd->add_option("-o,--output", exp->output, "output file ('-' = standard output)");
  export_cmd->callback([exp] {
    CommandFiles files;
    if (FindGenerator(exp->schedule) == nullptr) files.inputs.push_back({"the schedule file", exp->schedule});
    files.outputs.push_back({"--output", exp->output});
    CheckCommandFiles(files);
    Schedule s = Load(*exp);
    s = exp->form == "compute_comms" ? Lower(s) : ComputeOnly(s);
    std::ostringstream csv;
    WriteCsv(s, csv);
    WriteOutput(exp->output, csv.str());
  });

  auto check = std::make_shared<ScheduleFlags>();
  CLI::App* check_cmd = cmd->add_subcommand("check", "Check a schedule and explain any error");
  AddCommonOptions(check_cmd, *check);
  check_cmd->callback([check] {
    const Schedule s = Load(*check);
    SimOptions unit;
    unit.record_timeline = false;
    const SimResult r = Simulate(s, unit);
    std::cout << Summary(s) << "\nok: every action present once, in a valid order, and the schedule runs to "
              << fmt::format("completion (with unit costs: makespan {:.6g}, bubble {:.2f}%)\n", r.makespan,
                             100 * r.bubble_rate);
  });
}

}  // namespace baton
