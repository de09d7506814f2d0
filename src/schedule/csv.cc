#include <algorithm>
#include <filesystem>
#include <charconv>
#include <fstream>
#include <istream>
#include <map>
#include <ostream>
#include <sstream>
#include <utility>

#include <fmt/format.h>

#include "baton/error.h"
#include "baton/files.h"
#include "baton/schedule.h"

namespace baton {
namespace {

// Splits one CSV record. Action cells never contain commas or quotes, but a
// cell wrapped in double quotes (as some spreadsheet tools write) is unwrapped.
std::vector<std::string_view> SplitCells(std::string_view line) {
  std::vector<std::string_view> cells;
  std::size_t start = 0;
  while (true) {
    std::size_t comma = line.find(',', start);
    std::string_view cell = line.substr(start, comma == std::string_view::npos ? line.npos : comma - start);
    if (cell.size() >= 2 && cell.front() == '"' && cell.back() == '"') {
      cell = cell.substr(1, cell.size() - 2);
    }
    cells.push_back(cell);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return cells;
}

// "# seq_slices: k", the header line of a sliced schedule: k.
int ReadSlicesLine(const std::string& line, std::string_view source_name) {
  constexpr std::string_view kKey = "# seq_slices:";
  long long k = 0;
  const std::size_t at = line.find_first_not_of(' ', kKey.size());
  if (line.rfind(kKey, 0) == 0 && at != std::string::npos) {
    const char* first = line.data() + at;
    const char* last = line.data() + line.size();
    const auto [end, ec] = std::from_chars(first, last, k);
    if (ec != std::errc() || end != last) k = 0;
  }
  if (k < 1 || k > 1'000'000) {
    throw ScheduleError(fmt::format("{}: row 1: {}: the one header line a schedule file may have is "
                                    "\"# seq_slices: k\", k a whole number >= 1",
                                    source_name, Quote(line)));
  }
  return static_cast<int>(k);
}

// A file's cells as read, row by row, with what the checks need.
struct Cells {
  int slices = 1;                       // "# seq_slices: k"
  std::vector<std::vector<Action>> rows;
  // Where each stage was first seen: (rank, column), to explain a conflict.
  // A map, not a vector indexed by stage: a cell like "2000000000F0" must not
  // make the reader allocate in proportion to the number it names.
  std::map<int, std::pair<int, int>> first_seen;
  long long max_stage = -1, max_mb = -1, compute_cells = 0, action_cells = 0;
};

// Every cell of every row, parsed; a stage on two ranks is refused here,
// where its second cell is.
Cells ReadCells(std::istream& in, std::string_view source_name) {
  Cells c;
  std::string line;
  bool first_line = true;
  std::size_t bytes = 0;
  while (std::getline(in, line)) {
    // A schedule of 64 ranks x 1,024 microbatches is a few MiB; a bigger
    // file is refused before its actions take memory.
    bytes += line.size() + 1;
    if (bytes > kMaxScheduleFileBytes) {
      throw ScheduleError(fmt::format("{}: the schedule file is over {} MiB (at row {}); baton reads at most that much",
                                      source_name, kMaxScheduleFileBytes >> 20, c.rows.size() + 1));
    }
    if (!line.empty() && line.back() == '\r') line.pop_back();  // PyTorch writes CRLF
    if (std::exchange(first_line, false) && line.rfind("#", 0) == 0) {
      c.slices = ReadSlicesLine(line, source_name);
      continue;
    }
    const int rank = static_cast<int>(c.rows.size());
    auto& row = c.rows.emplace_back();
    int column = 0;
    for (std::string_view cell : SplitCells(line)) {
      std::string where = fmt::format("{}: row {} (rank {}), column {}", source_name, rank + 1, rank, column + 1);
      Action a = ParseAction(cell, where);
      // An OVERLAP_F_B cell holds two actions, each with its own stage.
      ForEachPart(a, [&](const Action& part) {
        if (part.kind == ActionKind::kIdle) return;
        c.compute_cells += IsCompute(part.kind);
        ++c.action_cells;
        auto [it, inserted] = c.first_seen.try_emplace(part.stage, rank, column);
        const auto& seen = it->second;
        if (!inserted && seen.first != rank) {
          throw ScheduleError(
              fmt::format("{}: stage {} appears on two ranks: rank {} (\"{}\", column {}) and rank {} "
                          "(column {}); each stage must live on exactly one rank",
                          where, part.stage, rank, ToString(a), column + 1, seen.first, seen.second + 1));
        }
        c.max_stage = std::max<long long>(c.max_stage, part.stage);
        if (HasMicrobatch(part.kind)) c.max_mb = std::max<long long>(c.max_mb, part.microbatch);
      });
      row.push_back(a);
      ++column;
    }
    // A row of one empty cell is a rank with nothing to do.
    if (row.size() == 1 && row[0].kind == ActionKind::kIdle) row.clear();
  }
  // Blank lines at the end of a file are not ranks.
  while (!c.rows.empty() && c.rows.back().empty()) c.rows.pop_back();
  return c;
}

}  // namespace

Schedule ReadCsv(std::istream& in, std::string_view source_name) {
  Cells c = ReadCells(in, source_name);
  // A blank line inside the file is a rank without work, which no placement allows.
  for (std::size_t r = 0; r < c.rows.size(); ++r) {
    const bool idle = std::all_of(c.rows[r].begin(), c.rows[r].end(),
                                  [](const Action& a) { return a.kind == ActionKind::kIdle; });
    if (idle) {
      throw ScheduleError(fmt::format("{}: row {} (rank {}) holds no action; every rank must hold at least one stage",
                                      source_name, r + 1, r));
    }
  }
  if (c.rows.empty()) throw ScheduleError(fmt::format("{}: the schedule file has no rows", source_name));
  // Every stage appears in some cell, so stage numbers beyond the number of
  // cells leave a gap; saying so first keeps every later table small.
  if (c.max_stage >= c.action_cells) {
    throw ScheduleError(fmt::format("{}: the file names stage {} but holds only {} actions; stages must be numbered "
                                    "0..S-1 without gaps",
                                    source_name, c.max_stage, c.action_cells));
  }
  for (long long stage = 0; stage <= c.max_stage; ++stage) {
    if (!c.first_seen.count(static_cast<int>(stage))) {
      throw ScheduleError(fmt::format(
          "{}: stage {} has no action on any rank, but stage {} does; stages must be numbered 0..{} without gaps",
          source_name, stage, c.max_stage, c.max_stage));
    }
  }
  // Every stage needs an F and a backward for every microbatch, so a file
  // naming stage S and microbatch M that holds fewer than (S+1)(M+1) compute
  // cells is far from complete; it is refused here, before any pass sizes its
  // tables by those numbers (the structure check explains smaller gaps).
  const double needed = static_cast<double>(c.max_stage + 1) * static_cast<double>(std::max(c.max_mb + 1, 1LL));
  if (c.max_mb >= 0 && needed > static_cast<double>(c.compute_cells)) {
    throw ScheduleError(fmt::format(
        "{}: the file names stages up to {} and microbatches up to {}, which needs an F and a backward for each "
        "of {} (stage, microbatch) pairs, but it holds only {} compute actions",
        source_name, c.max_stage, c.max_mb, needed, c.compute_cells));
  }
  Schedule s;
  s.name = std::string(source_name);
  s.slices = c.slices;
  s.ranks = static_cast<int>(c.rows.size());
  s.stages = static_cast<int>(c.max_stage + 1);
  s.microbatches = static_cast<int>(c.max_mb + 1);
  if (s.microbatches % s.slices != 0) {
    throw ScheduleError(fmt::format("{}: the file has {} units, which is not a whole number of sequences of {} slices "
                                    "(seq_slices); units number j x {} + s",
                                    source_name, s.microbatches, s.slices, s.slices));
  }
  s.stage_rank.resize(s.stages);
  for (int stage = 0; stage < s.stages; ++stage) s.stage_rank[stage] = c.first_seen[stage].first;
  s.actions = std::move(c.rows);
  return s;
}

Schedule ReadCsvFile(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw ScheduleError(fmt::format("{}: is a folder, not a schedule file", path));
  }
  // The OS room's reader: capped (a file without an end is refused rather
  // than read whole), and a FIFO nobody writes to is refused within its
  // wait rather than blocking.
  std::string text;
  try {
    text = ReadTextFile(path, "schedule file", kMaxScheduleFileBytes);
  } catch (const ConfigError& e) {
    throw ScheduleError(e.what());
  }
  std::istringstream stream(std::move(text));
  return ReadCsv(stream, path);
}

void WriteCsv(const Schedule& s, std::ostream& out) {
  std::string line;
  if (s.slices > 1) out << "# seq_slices: " << s.slices << '\n';
  for (const auto& row : s.actions) {
    line.clear();
    for (std::size_t i = 0; i < row.size(); ++i) {
      if (i > 0) line += ',';
      line += ToString(row[i]);
    }
    line += '\n';
    out << line;
  }
}

}  // namespace baton
