#include <algorithm>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "baton/error.h"
#include "baton/schedule.h"

namespace baton {

bool Schedule::IsLowered() const {
  for (const auto& row : actions) {
    for (const Action& a : row) {
      if (IsComm(a.kind)) return true;
    }
  }
  return false;
}

std::size_t Schedule::CountActions() const {
  std::size_t n = 0;
  for (const auto& row : actions) {
    n += static_cast<std::size_t>(
        std::count_if(row.begin(), row.end(), [](const Action& a) { return a.kind != ActionKind::kIdle; }));
  }
  return n;
}

int StageRank(Placement placement, int stage, int ranks) {
  if (placement == Placement::kLoop) return stage % ranks;
  return stage < ranks ? stage : 2 * ranks - 1 - stage;
}

Schedule LoadSchedule(std::string_view name_or_path, int ranks, int microbatches, int chunks) {
  GenerateOptions options;
  options.chunks = chunks;
  return LoadSchedule(name_or_path, ranks, microbatches, options);
}

Schedule LoadSchedule(std::string_view name_or_path, int ranks, int microbatches, const GenerateOptions& options) {
  const int chunks = options.chunks;
  if (FindGenerator(name_or_path) != nullptr) {
    if (ranks <= 0) {
      throw ScheduleError(fmt::format("schedule {}: the number of ranks must be at least 1, got {}",
                                      name_or_path, ranks));
    }
    return Generate(name_or_path, ranks, microbatches, options);
  }
  std::string path(name_or_path);
  if (!std::filesystem::exists(path)) {
    throw ScheduleError(fmt::format(
        "schedule \"{}\" is neither a generator ({}) nor an existing schedule file", path,
        fmt::join(GeneratorNames(), ", ")));
  }
  Schedule s = ReadCsvFile(path);
  auto check = [&](std::string_view what, int wanted, int got) {
    if (wanted > 0 && wanted != got) {
      throw ScheduleError(fmt::format("{}: the file holds {} {}, but {} were asked for", path, got,
                                      what, wanted));
    }
  };
  check("ranks (rows)", ranks, s.ranks);
  check("microbatches", microbatches, s.sequences());
  check("chunks per rank", chunks, s.chunks());
  check("sequence slices a microbatch", options.slices, s.slices);
  return s;
}

}  // namespace baton
