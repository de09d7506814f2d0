// `baton profile CONFIG`, profiles for `baton tune` and `baton validate`,
// and the automatic placement (pipeline.partition: auto, pipeline.layout:
// auto) at a run's start.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <vector>

#include "baton/bench.h"
#include "baton/comm.h"
#include "baton/config.h"
#include "baton/error.h"
#include "baton/files.h"
#include "baton/machine.h"
#include "baton/train.h"
#include "baton/plan.h"
#include "baton/placement.h"
#include "baton/profile_price.h"
#include "baton/profile.h"
#include "baton/schedule.h"
#include "baton/timing.h"
#include "commands.h"
#include "baton/measure_profile.h"

namespace baton {

void AddProfileCommand(CLI::App& app) {
  struct Flags {
    std::string config, out = "out/profile.json", rows;
    std::vector<std::string> set;
    ProfileOptions options;
    int calibrate_steps = 10;
  };
  auto f = std::make_shared<Flags>();
  CLI::App* cmd = app.add_subcommand(
      "profile",
      "Measure each top-level layer's F, I, W, B and recomputation on the configured device (and, under mpirun -np "
      "2, the messages between ranks): the costs baton tune and automatic placement plan with");
  cmd->add_option("config", f->config, "YAML training config")->required();
  cmd->add_option("--set", f->set, "override a key (repeatable)");
  cmd->add_option("--out", f->out, "the profile's JSON file (default out/profile.json)");
  cmd->add_option("--rows", f->rows,
                  "samples per microbatch to profile, e.g. 4,8,16 (default: those of p, 2p, 4p, 8p microbatches and "
                  "the config's own)");
  cmd->add_option("--warmup", f->options.warmup, "untimed calls before each median (default 2)");
  cmd->add_option("--repetitions", f->options.repetitions, "timed calls a median (default 7)");
  cmd->add_option("--calibrate-steps", f->calibrate_steps,
                  "with more processes than CPUs: measured steps of the config's own pipeline that the cost of "
                  "actions on shared cores is fitted to (default 10; 0: no fit, factor 1)");
  cmd->callback([f] {
    ProfileOptions o = f->options;
    o.rows = WholeNumbers(f->rows, "profile: --rows");
    // What the command reads and writes; `machine`, the machine model's
    // file, once the profile knows the machine.
    auto files = [&](const TrainConfig& config, const std::string& machine) {
      CommandFiles out = RunInputsOf(config);
      out.outputs.push_back({"--out", f->out});
      if (!machine.empty()) out.outputs.push_back({"the machine model's file", machine});
      return out;
    };
    auto job = [&](Transport& world, const TrainConfig& config, const std::string&) {
      if (f->calibrate_steps < 0) throw ConfigError("profile: --calibrate-steps must be >= 0");
      // machine-*cpus.json beside a profile is read as its machine model.
      if (IsMachineFileName(std::filesystem::path(f->out).filename().string())) {
        throw OutputError(fmt::format("--out {}: a name of the form machine-*cpus.json is a machine model's, read "
                                      "with the profiles beside it; give the profile another name",
                                      f->out));
      }
      Agree(world, "rank 0 checking the profile's output", [&] {
        if (world.rank() == 0) CheckCommandFiles(files(config, ""));
      });
      Profile p;
      try {
        p = MeasureProfile(config, world, o);
      } catch (const ResourceError& e) {
        throw ResourceError(fmt::format("profile: {} while measuring {} (fewer --rows)", e.what(),
                                        f->rows.empty() ? "the config's microbatch sizes" : "--rows " + f->rows));
      }
      if (p.cpu_clock && f->calibrate_steps > 0) CalibrateSharing(world, config, f->calibrate_steps, p);
      if (world.rank() != 0) return;
      // The machine model (measured by two processes or more) in its own
      // file beside the profile, named after the machine.
      const std::string machine = p.processes > 1 && f->out != "-"
                                      ? MachineFileName(f->out, p.identity.machine, p.identity.cores)
                                      : std::string();
      CheckCommandFiles(files(config, machine));
      WriteOutput(f->out, ProfileJson(p));
      std::string wrote = f->out;
      if (!machine.empty()) {
        WriteOutput(machine, MachineJson(p.machine));
        wrote += " and the machine model " + machine;
      }
      // With --out - standard output carries the JSON alone; the report goes to standard error.
      (f->out == "-" ? std::cerr : std::cout) << DescribeProfile(p) << "wrote " << wrote << "\n";
    };
    // Not started by mpirun: one process, without MPI (errors go to main).
    if (DetectLaunch().kind == Launch::kSingle && !Env::Default().Variable("PMIX_RANK")) {
      const std::unique_ptr<Transport> solo = MakeSoloTransport();
      job(*solo, LoadTrainConfig(f->config, f->set), "");
      return;
    }
    const int code = RunOnAnyRanks(f->config, f->set, job);
    if (code != 0) std::exit(code);
  });
}

}  // namespace baton
