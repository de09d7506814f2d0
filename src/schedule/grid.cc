#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "baton/schedule.h"

namespace baton {

std::string FormatGrid(const Schedule& s, std::optional<GridMark> mark, int max_steps) {
  std::size_t steps = 0;
  for (const auto& row : s.actions) steps = std::max(steps, row.size());

  std::size_t first = 0, last = steps;  // [first, last) shown
  if (max_steps > 0 && steps > static_cast<std::size_t>(max_steps)) {
    std::size_t centre = mark && mark->position >= 0 ? static_cast<std::size_t>(mark->position) : 0;
    first = centre > static_cast<std::size_t>(max_steps / 2) ? centre - max_steps / 2 : 0;
    last = std::min(steps, first + max_steps);
    first = last - max_steps;
  }

  auto cell = [&](int r, std::size_t step) -> std::string {
    const auto& row = s.actions[r];
    std::string text = step < row.size() ? ToString(row[step]) : "";
    if (mark && mark->rank == r && mark->position == static_cast<int>(step)) {
      return ">" + text + "<";
    }
    return text;
  };

  const int label_width = static_cast<int>(fmt::format("step {}", steps == 0 ? 0 : steps - 1).size());
  std::vector<std::size_t> width(s.ranks);
  for (int r = 0; r < s.ranks; ++r) {
    width[r] = fmt::format("rank {}", r).size();
    for (std::size_t t = first; t < last; ++t) width[r] = std::max(width[r], cell(r, t).size());
  }

  std::string out = fmt::format("{:{}}  ", "", label_width);
  for (int r = 0; r < s.ranks; ++r) out += fmt::format("{:<{}} ", fmt::format("rank {}", r), width[r]);
  while (!out.empty() && out.back() == ' ') out.pop_back();
  out += '\n';
  if (first > 0) out += fmt::format("{:>{}}\n", fmt::format("... {} earlier steps", first), label_width);
  for (std::size_t t = first; t < last; ++t) {
    std::string line = fmt::format("{:>{}}: ", fmt::format("step {}", t), label_width);
    for (int r = 0; r < s.ranks; ++r) line += fmt::format("{:<{}} ", cell(r, t), width[r]);
    while (!line.empty() && line.back() == ' ') line.pop_back();
    if (mark && mark->position == static_cast<int>(t)) line += "   <-- here";
    out += line + '\n';
  }
  if (last < steps) out += fmt::format("{:>{}}\n", fmt::format("... {} later steps", steps - last), label_width);
  return out;
}

}  // namespace baton
