// baton: pipeline-parallel schedules, simulated.
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

#include "baton/error.h"
#include "baton/heap.h"
#include "baton/host.h"
#include "commands.h"

namespace {

// The commands that compute on the host: they load OpenBLAS (the others,
// `simulate`, `schedule`, `validate` and --help, never do).
bool ComputesOnTheHost(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.starts_with('-')) continue;  // no option before the command takes a value
    return arg == "train" || arg == "bench" || arg == "tune" || arg == "profile";
  }
  return false;
}

// OpenBLAS picks its CPU kernels once, when it loads, from the CPU's model
// number; one older than the CPU falls back to generic SSE3 kernels at about
// a third of the speed. Then start again, once, with the kernels the CPU
// can run named in OPENBLAS_CORETYPE (nothing has run yet: MPI is not
// initialised).
void UseTheCpusBlasKernels(char** argv) {
  if (std::getenv("BATON_BLAS_RESTARTED") != nullptr) return;
  std::string core;
  try {
    core = baton::BetterBlasCore();
  } catch (const baton::Error&) {
    return;  // OpenBLAS cannot load: the run says so when it first computes
  }
  if (core.empty()) return;
  ::setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
  ::setenv("BATON_BLAS_RESTARTED", "1", 1);
  ::execv("/proc/self/exe", argv);  // returns only if it failed: go on with OpenBLAS's own choice
}

}  // namespace

int main(int argc, char** argv) {
  baton::KeepFreedMemory();
  if (ComputesOnTheHost(argc, argv)) UseTheCpusBlasKernels(argv);
  CLI::App app{"baton: pipeline-parallel training schedules - generate, check, simulate, draw"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "baton 0.1.0");
  baton::AddSimulateCommand(app);
  baton::AddScheduleCommand(app);
  baton::AddTrainCommand(app);
  baton::AddTuneCommand(app);
  baton::AddProfileCommand(app);
  baton::AddDoctorCommand(app);
  baton::AddDataCommand(app);
  baton::AddPlotCommand(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  } catch (const baton::ConfigError& e) {
    std::cerr << "baton: error: " << baton::ForTerminal(e.what()) << "\n";
    return 2;
  } catch (const baton::ScheduleError& e) {
    std::cerr << "baton: error: " << baton::ForTerminal(e.what()) << "\n";
    return 2;
  } catch (const baton::OutputError& e) {
    std::cerr << "baton: error: " << baton::ForTerminal(e.what()) << "\n";
    return 2;
  } catch (const baton::ResourceError& e) {  // the machine lacks what the command asked for
    std::cerr << "baton: error: " << baton::ForTerminal(e.what()) << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "baton: internal error: " << baton::ForTerminal(e.what()) << "\n";
    return 1;
  }
  return 0;
}
