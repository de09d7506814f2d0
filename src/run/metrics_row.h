// A metrics row (one JSON object a line of metrics.jsonl) and the one way
// every row is written: rank 0 writes it, and the ranks agree on how it
// went, so that a full disk ends every rank alike.
#ifndef BATON_SRC_TRAIN_METRICS_ROW_H_
#define BATON_SRC_TRAIN_METRICS_ROW_H_

#include <string>
#include <utility>
#include <vector>

#include "baton/comm.h"
#include "setup.h"

namespace baton {

// A number as JSON: JSON has no NaN or infinity, so those are null (and
// the row says "nonfinite": true; Row). `format`: fmt's, for a double.
std::string Json(double v, const char* format = "{:.7g}");

// A metrics row from its fields (JSON text each), with "nonfinite": true
// when one of them is null.
std::string Row(const std::vector<std::pair<const char*, std::string>>& fields);

// Rank 0 writes `row` (no metrics file: nothing); a failed write ends the
// run on every rank (the error is agreed), with the last complete
// checkpoint intact. Collective over `t`.
void WriteRow(Transport& t, MetricsLog* metrics, const std::string& row);

}  // namespace baton

#endif  // BATON_SRC_TRAIN_METRICS_ROW_H_
