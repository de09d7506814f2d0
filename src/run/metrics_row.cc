// Metrics rows (metrics_row.h).
#include "metrics_row.h"

#include <cmath>

#include <fmt/format.h>

namespace baton {

std::string Json(double v, const char* format) {
  return std::isfinite(v) ? fmt::format(fmt::runtime(format), v) : std::string("null");
}

std::string Row(const std::vector<std::pair<const char*, std::string>>& fields) {
  std::string out = "{";
  bool nonfinite = false;
  for (const auto& [key, value] : fields) {
    out += fmt::format("{}\"{}\": {}", out.size() > 1 ? ", " : "", key, value);
    nonfinite = nonfinite || value == "null";
  }
  return out + (nonfinite ? ", \"nonfinite\": true}" : "}");
}

void WriteRow(Transport& t, MetricsLog* metrics, const std::string& row) {
  Agree(t, "rank 0 writing the metrics file", [&] {
    if (t.rank() == 0 && metrics != nullptr) metrics->Line(row);
  });
}

}  // namespace baton
