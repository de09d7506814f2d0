#include <limits>

#include <fmt/format.h>

#include "baton/config.h"
#include "baton/error.h"
#include "yaml_reader.h"

namespace baton {
namespace {

Costs ReadCosts(YamlMap& map, Costs fallback) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  Costs c;
  c.forward = map.GetNumber("forward", fallback.forward, 0.0, kInf);
  c.backward_input = map.GetNumber("backward_input", fallback.backward_input, 0.0, kInf);
  c.backward_weight = map.GetNumber("backward_weight", fallback.backward_weight, 0.0, kInf);
  // An OVERLAP_F_B unit (DualPipe's F&B); absent: forward + B.
  c.forward_backward = fallback.forward_backward;
  if (map.Has("forward_backward")) c.forward_backward = map.GetNumber("forward_backward", 0.0, 0.0, kInf);
  map.Finish();
  return c;
}

}  // namespace

SimulateConfig LoadSimulateConfig(const std::string& path) {
  YAML::Node root = LoadYamlFile(path);
  YamlMap top(root, path, "");
  SimulateConfig c;

  constexpr int kMaxInt = std::numeric_limits<int>::max();
  constexpr double kInf = std::numeric_limits<double>::infinity();
  c.schedule = top.Get<std::string>("schedule", c.schedule);
  c.ranks = top.GetInt("ranks", c.ranks, 1, kMaxInt);
  c.microbatches = top.GetInt("microbatches", c.microbatches, 1, kMaxInt);
  c.chunks = top.GetInt("chunks", c.chunks, 0, kMaxInt);
  c.seq_slices = top.GetInt("seq_slices", c.seq_slices, 1, kMaxInt);
  c.seq_split = Choice(top, "seq_split", c.seq_split);
  c.seq_len = top.GetInt("seq_len", c.seq_len, 0, kMaxInt);  // 0: 1024 a slice
  c.attention_cost_share = top.GetNumber("attention_cost_share", 0.0, 0.0, 1.0);
  c.attention_memory_share = top.GetNumber("attention_memory_share", 0.0, 0.0, 1.0);
  c.kv_memory_share = top.GetNumber("kv_memory_share", 0.0, 0.0, 1.0);

  YamlMap costs = top.Map("costs");
  c.options.compute.uniform = ReadCosts(costs, c.options.compute.uniform);
  for (YamlMap& stage : top.MapList("stage_costs")) c.options.compute.stages.push_back(ReadCosts(stage, Costs{}));

  YamlMap comm = top.Map("comm");
  c.options.messages.latency = comm.GetNumber("latency", 0.0, 0.0, kInf);
  c.options.messages.bandwidth = comm.GetNumber("bandwidth", 0.0, 0.0, kInf);
  c.options.messages.bytes = comm.GetNumber("message_bytes", 0.0, 0.0, kInf);
  comm.Finish();

  YamlMap memory = top.Map("memory");
  c.options.memory.weight_ratio = memory.GetNumber("weight_ratio", c.options.memory.weight_ratio, 0.0, 1.0);
  c.options.memory.microbatch_bytes = memory.GetNumber("microbatch_bytes", 0.0, 0.0, kInf);
  memory.Finish();

  YamlMap sharding = top.Map("sharding");
  c.sharding.zero = ZeroStage(sharding.GetInt("zero", 0, 0, ZeroStage::kLast));  // ZeRO-1 has no schedule actions
  c.sharding.gather_time = sharding.GetNumber("gather_time", 0.0, 0.0, kInf);
  c.sharding.reduce_scatter_time = sharding.GetNumber("reduce_scatter_time", 0.0, 0.0, kInf);
  c.sharding.gathered_bytes = sharding.GetNumber("gathered_bytes", 0.0, 0.0, kInf);
  sharding.Finish();

  c.cores = top.GetNumber("cores", 0.0, 0.0, kInf);
  c.compare = top.Get<std::vector<std::string>>("compare", {});

  YamlMap output = top.Map("output");
  c.json_path = output.Get<std::string>("json", "");
  c.trace_path = output.Get<std::string>("trace", "");
  c.svg_path = output.Get<std::string>("svg", "");
  output.Finish();

  top.Finish();
  return c;
}

}  // namespace baton
