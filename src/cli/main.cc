// baton: pipeline-parallel schedules, simulated.
#include <iostream>

#include <CLI/CLI.hpp>

#include "baton/error.h"
#include "commands.h"

int main(int argc, char** argv) {
  CLI::App app{"baton: pipeline-parallel training schedules - generate, check, simulate, draw"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "baton 0.1.0");
  baton::AddSimulateCommand(app);
  baton::AddScheduleCommand(app);
  baton::AddTrainCommand(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  } catch (const baton::ConfigError& e) {
    std::cerr << "baton: error: " << e.what() << "\n";
    return 2;
  } catch (const baton::ScheduleError& e) {
    std::cerr << "baton: error: " << e.what() << "\n";
    return 2;
  } catch (const baton::OutputError& e) {
    std::cerr << "baton: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "baton: internal error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
