// baton plot's pieces: a metrics file read into its series, and the
// picture drawn from one or more of them.
#ifndef BATON_CLI_PLOT_H_
#define BATON_CLI_PLOT_H_

#include <string>
#include <utility>
#include <vector>

namespace baton {

// One logged training step (NaN where the row lacks the value).
struct MetricsStep {
  double step = 0;
  double loss = 0;
  double step_time_s = 0;
  double tokens_per_s = 0;   // packed runs: real tokens a second
  double samples_per_s = 0;
  double lr = 0;
  double grad_norm = 0;
  bool skipped = false;      // train.on_nonfinite: skip, or a loss that was not finite
};

struct MetricsRun {
  std::string path;
  std::vector<MetricsStep> steps;
  std::vector<std::pair<double, double>> validation;  // (step, validation or test loss)
  bool test_split = false;                            // the evaluations are test_loss rows
  std::vector<std::pair<double, std::string>> events; // (step, "replan" | "recovered" | ...)
};

// Reads log.metrics's rows. ConfigError "PATH:LINE: ..." for a line that
// is not a JSON object, a loss row without a numeric step, an event that is
// not a string; "PATH: no step rows" where it logged no step.
MetricsRun ReadMetricsRun(const std::string& path);

// The picture: a panel a quantity, stacked, over one step axis; a colour a run.
std::string PlotSvg(const std::vector<MetricsRun>& runs);

}  // namespace baton

#endif  // BATON_CLI_PLOT_H_
