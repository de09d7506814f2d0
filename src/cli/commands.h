// Subcommands of the `baton` command. Each Add* registers its options on the
// app and returns a callback that runs it; errors propagate as exceptions
// (ConfigError, ScheduleError) for main() to report.
#ifndef BATON_CLI_COMMANDS_H_
#define BATON_CLI_COMMANDS_H_

#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

namespace baton {

void AddSimulateCommand(CLI::App& app);
void AddScheduleCommand(CLI::App& app);
void AddTrainCommand(CLI::App& app);  // train and validate

// Writes `content` to `path` through a temporary file renamed into place, so
// a failure never leaves a half-written file; "-" writes to standard output.
// Creates missing parent folders.
void WriteOutput(const std::string& path, std::string_view content);

// Replaces "{schedule}" in a path with the schedule's name.
std::string ExpandPath(std::string_view pattern, std::string_view schedule);

}  // namespace baton

#endif  // BATON_CLI_COMMANDS_H_
