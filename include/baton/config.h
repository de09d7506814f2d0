// Configuration files (YAML, strict). Every key is known, every value typed
// and range-checked; an error names file:line:column, the key path, the
// value and the rule, and is thrown as ConfigError before anything runs.
#ifndef BATON_CONFIG_H_
#define BATON_CONFIG_H_

#include <string>
#include <vector>

#include "baton/sim.h"

namespace baton {

// What `baton simulate` runs. Keys of the YAML file (all optional):
//   schedule: 1f1b            # generator name or CSV schedule file
//   ranks: 4                  # p
//   microbatches: 8           # m
//   chunks: 0                 # v; 0 = the generator's default
//   costs: {forward: 1, backward_input: 1, backward_weight: 1}   # per rank
//   stage_costs: [{forward: .., backward_input: .., backward_weight: ..}, ...]
//   comm: {latency: 0, bandwidth: 0, message_bytes: 0}
//   memory: {weight_ratio: 0.5, microbatch_bytes: 0}
//   compare: [gpipe, 1f1b, ...]   # simulate several schedules side by side
//   output: {json: PATH, trace: PATH, svg: PATH}   # "{schedule}" in a path
//                                                   # is replaced by the name
struct SimulateConfig {
  std::string schedule = "1f1b";
  int ranks = 4;
  int microbatches = 8;
  int chunks = 0;
  SimOptions options;
  std::vector<std::string> compare;
  std::string json_path;
  std::string trace_path;
  std::string svg_path;
};

// Reads a simulate config. Throws ConfigError.
SimulateConfig LoadSimulateConfig(const std::string& path);

}  // namespace baton

#endif  // BATON_CONFIG_H_
