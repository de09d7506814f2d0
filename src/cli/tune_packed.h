// Private to the CLI: `baton tune CONFIG` for a config of packed documents
// (data.packing): the token budget and the packing searched with the rest,
// each point's best candidates repriced by their real steps.
#ifndef BATON_SRC_CLI_TUNE_PACKED_H_
#define BATON_SRC_CLI_TUNE_PACKED_H_

#include <string>
#include <vector>

#include "baton/config.h"
#include "baton/tune.h"
#include "baton/tune_config.h"

namespace baton {

struct PackedTuneRequest {
  std::string config_path;        // the config and its --set overrides, parsed again per point
  std::vector<std::string> sets;
  std::vector<int> budgets;       // data.max_tokens to try; empty: the config's
  std::vector<Packing> packings;  // empty: greedy and balanced
  int steps = 8;                  // the run's first steps priced at each point
  // The profile of the config's own budget, or with {max_tokens} in it
  // each budget's; a budget without one is profiled here.
  std::string profile_path;
};

// One point: a budget and a packing, the global batch held at the config's
// positions (train.batch_size x data.max_tokens), and the candidate of the
// tuner's best (kPackedFinalists, fitting) whose steps cost least a real token.
struct PackedPoint {
  int budget = 0, batch_size = 0;
  Packing packing = Packing::kGreedy;
  std::string why_not;            // non-empty: the point cannot run
  TrainConfig config;             // the config at this point, the candidate's settings in it
  CandidateResult candidate;
  std::size_t candidates = 0;     // the tuner's ranking at this point
  double step_s = 0, tokens = 0;  // the mean predicted step and real tokens a step
  double unused = 0;              // the share of slot positions no document fills
  double TokensPerSecond() const { return step_s > 0 ? tokens / step_s : 0.0; }
};
inline constexpr int kPackedFinalists = 3;

// Every point, the best (most real tokens a second) first, then those that
// cannot run. Throws ConfigError for a bad request.
std::vector<PackedPoint> TunePacked(const TrainConfig& config, const TuneRequest& request,
                                    const PackedTuneRequest& packed, std::string* profile_sources);

}  // namespace baton

#endif  // BATON_SRC_CLI_TUNE_PACKED_H_
