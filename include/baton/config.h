// Configuration files (YAML, strict). Every key is known, every value typed
// and range-checked; an error names file:line:column, the key path, the
// value and the rule, and is thrown as ConfigError before anything runs.
#ifndef BATON_CONFIG_H_
#define BATON_CONFIG_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "baton/model.h"
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

// ---- Training runs: `baton train CONFIG` ----
// Sections model, pipeline, data, train, checkpoint, log; see configs/ and the
// README for every key. Defaults are given below.

struct ModelConfig {
  int input = 0;                  // input features; 0 = the dataset's
  std::vector<LayerSpec> layers;  // the layer list (nn.Sequential order)
  std::uint64_t init_seed = 0;    // per-layer init streams derive from it
  std::string init_from;          // optional safetensors file with all weights
};

struct PipelineConfig {
  std::string schedule = "1f1b";      // generator or CSV schedule file
  int ranks = 1;                      // must equal the MPI world size
  int microbatches = 1;
  int chunks = 0;                     // 0 = the schedule's own
  std::string partition = "balanced"; // balanced | explicit (counts given)
  std::string balance_by = "params";  // params | flops
  std::vector<int> partition_counts;  // layers per stage, if explicit
  std::string checkpointing = "none"; // none | full | selective
  std::vector<std::string> keep;      // selective: layer types whose outputs are kept
  double wait_timeout_s = 300.0;      // deadline of every blocking wait
};

struct DataConfig {
  std::string dataset = "fashion_mnist";  // fashion_mnist | synthetic
  std::string path = "/usr/share/datasets/fashion-mnist";
  bool shuffle = false;
  std::int64_t samples = 4096;  // synthetic
  int features = 784;           // synthetic
  int classes = 10;             // synthetic
  std::uint64_t seed = 1;       // synthetic data / shuffling
  bool evaluate = true;         // test accuracy at epoch ends (fashion_mnist)
};

struct TrainLoopConfig {
  int batch_size = 64;
  int epochs = 1;                // used when steps == 0
  std::int64_t steps = 0;        // > 0: stop after this many steps
  OptimizerSpec optimizer;
};

struct CheckpointConfig {
  std::string dir;         // empty = no checkpoints
  std::int64_t every_steps = 0;
  int keep = 1;
};

struct LogConfig {
  std::int64_t every_steps = 10;  // 0 = no per-step metrics
  std::string metrics = "out/metrics.jsonl";
  std::string weights = "out/weights.safetensors";  // final weights; empty = none
  bool progress = true;
};

struct TrainConfig {
  std::string source;  // config file name, for messages
  ModelConfig model;
  PipelineConfig pipeline;
  DataConfig data;
  TrainLoopConfig train;
  CheckpointConfig checkpoint;
  LogConfig log;
  std::string device = "cpu";      // cpu | cuda: where every rank's stages compute
  std::string precision = "fp32";  // fp32 | bf16 (linear layers' operands; cuda only)
};

// Parses a training config from YAML text, applying `overrides` ("a.b=value",
// value in YAML syntax; list items by index: model.layers.0.out=128) first.
// Strict: unknown keys (with did-you-mean), duplicates, wrong types and bad
// values are ConfigErrors naming file:line:column (or the --set) and the rule.
TrainConfig ParseTrainConfig(const std::string& yaml_text, const std::string& source,
                             const std::vector<std::string>& overrides = {});
// Reads the file and parses it.
TrainConfig LoadTrainConfig(const std::string& path, const std::vector<std::string>& overrides = {});
// Reads a whole file into a string; ConfigError if it cannot.
std::string ReadTextFile(const std::string& path);
// Writes `content` to `path` through a temporary file renamed into place, so a
// failure never leaves a half-written file; creates missing parent folders.
// ConfigError if it cannot.
void WriteTextFile(const std::string& path, std::string_view content);

// The resolved settings, as YAML, for `baton validate`.
std::string DescribeTrainConfig(const TrainConfig& config);

}  // namespace baton

#endif  // BATON_CONFIG_H_
