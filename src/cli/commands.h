// Subcommands of the `baton` command. Each Add* registers its options on the
// app and returns a callback that runs it; errors propagate as exceptions
// (ConfigError, ScheduleError) for main() to report.
#ifndef BATON_CLI_COMMANDS_H_
#define BATON_CLI_COMMANDS_H_

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "baton/choices.h"
#include "baton/comm.h"
#include "baton/named_enum.h"
#include "baton/error.h"
#include "baton/config.h"

namespace baton {

void AddSimulateCommand(CLI::App& app);
void AddScheduleCommand(CLI::App& app);
void AddTrainCommand(CLI::App& app);  // train, bench and validate
void AddTuneCommand(CLI::App& app);
void AddProfileCommand(CLI::App& app);
void AddDoctorCommand(CLI::App& app);  // baton doctor: what the job sees
void AddDataCommand(CLI::App& app);    // baton data stats: a token dataset's documents and lengths
void AddPlotCommand(CLI::App& app);    // baton plot: a run's metrics file drawn

// Writes `content` to `path` through a temporary file renamed into place, so
// a failure never leaves a half-written file; "-" writes to standard output.
// Creates missing parent folders.
void WriteOutput(const std::string& path, std::string_view content);

// A comma-separated list's items (empty items skipped).
std::vector<std::string> Split(const std::string& list);

// A comma-separated list of a named enum's values, for `command`'s `flag`.
template <NamedEnum E>
std::vector<E> EnumList(const std::string& text, const char* command, const char* flag) {
  std::vector<E> out;
  for (const std::string& word : Split(text)) {
    const std::optional<E> value = ParseEnum<E>(word);
    if (!value) {
      throw ConfigError(fmt::format("{}: {}: '{}' is not one of {}", command, flag, word, EnumNameList<E>()));
    }
    out.push_back(*value);
  }
  return out;
}

// A comma-separated list of whole numbers ("4,8,16"; empty items skipped).
// Throws ConfigError "<what>: '<item>' is not a whole number".
std::vector<int> WholeNumbers(const std::string& list, const std::string& what);

// --zero's ZeRO stage; ConfigError "--zero must be 0, 1, 2 or 3, got N".
inline ZeroStage ZeroFlag(int number) {
  if (!ZeroStage::Valid(number)) throw ConfigError(fmt::format("--zero must be 0, 1, 2 or 3, got {}", number));
  return ZeroStage(number);
}

// Replaces "{schedule}" in a path with the schedule's name.
std::string ExpandPath(std::string_view pattern, std::string_view schedule);

}  // namespace baton

#endif  // BATON_CLI_COMMANDS_H_
