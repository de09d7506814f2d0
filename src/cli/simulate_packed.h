// Private to the CLI: `baton simulate CONFIG --profile P` for a config of
// packed documents (data.packing): each step priced by its microbatches'
// real lengths.
#ifndef BATON_SRC_CLI_SIMULATE_PACKED_H_
#define BATON_SRC_CLI_SIMULATE_PACKED_H_

#include <optional>
#include <string>

#include "baton/config.h"
#include "baton/plan.h"
#include "baton/profile.h"

namespace baton {

struct PackedSimulation {
  int steps = 10;               // the run's first steps priced
  std::string lengths;          // a lengths file instead: one step (SimulatePacked)
  std::optional<std::string> svg, trace, json;  // the first step's picture and trace; every step's numbers
  std::string config_path, profile_path, source;
  std::optional<int> cores;     // --cores: the CPUs the ranks share (0: one each), the arrangement's too
};

// Prints the step of whole microbatches (every position a token), then
// each step's prediction from its microbatches (the dataset's, packed as
// the config says, in the run's order; or the lengths file's one step),
// and the median. A lengths file: one line a microbatch, replica 0's
// first (plan.microbatches x data_parallel.size lines); its samples
// separated by ';', each its documents' lengths (spaces or commas), at most
// data.max_tokens a sample and plan.rows samples a line; '#' starts a
// comment. Throws ConfigError naming the file, line and rule.
void SimulatePacked(const TrainConfig& config, const RunPlan& plan, const Profile& profile,
                    const PackedSimulation& what);

}  // namespace baton

#endif  // BATON_SRC_CLI_SIMULATE_PACKED_H_
