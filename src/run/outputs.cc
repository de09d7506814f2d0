// FilesOf (baton/train.h): what a training run reads and writes.
#include "baton/train.h"

#include <filesystem>

#include <fmt/format.h>

#include "baton/error.h"
#include "baton/files.h"
#include "baton/machine.h"
#include "baton/schedule.h"

namespace baton {

namespace fs = std::filesystem;

CommandFiles RunInputsOf(const TrainConfig& c) {
  CommandFiles f;
  std::error_code ec;
  if (!c.source.empty() && fs::is_regular_file(c.source, ec)) f.inputs.push_back({"the config file", c.source});
  if (!c.model.init_from.empty()) f.inputs.push_back({"model.init.from", c.model.init_from});
  if (FindGenerator(c.pipeline.schedule) == nullptr) f.inputs.push_back({"pipeline.schedule", c.pipeline.schedule});
  AddProfileInputs(f, "pipeline.profile", c.pipeline.profile);
  switch (c.data.dataset) {
    case DatasetKind::kFashionMnist:
      for (const char* name : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
                               "t10k-labels-idx1-ubyte.gz"}) {
        f.inputs.push_back({"data.path", (fs::path(c.data.path) / name).string()});
      }
      break;
    case DatasetKind::kFortunes:
      f.input_folders.push_back({"data.path", c.data.path});
      break;
    case DatasetKind::kSynthetic:
    case DatasetKind::kSyntheticTokens:
      break;
    case DatasetKind::kMegatron:
      for (const auto& [key, prefix] : {std::pair<const char*, std::string>{"data.path", c.data.path},
                                        {"data.validation_path", c.data.validation_path}}) {
        if (prefix.empty()) continue;
        f.inputs.push_back({key, prefix + ".idx"});
        f.inputs.push_back({key, prefix + ".bin"});
      }
      break;
    case DatasetKind::kLlmc:
    case DatasetKind::kJsonl:
      f.inputs.push_back({"data.path", c.data.path});
      if (!c.data.validation_path.empty()) f.inputs.push_back({"data.validation_path", c.data.validation_path});
      break;
  }
  return f;
}

CommandFiles FilesOf(const TrainConfig& c, int world, const std::vector<NamedPath>& extra_outputs) {
  CommandFiles f = RunInputsOf(c);
  if (!c.log.metrics.empty()) f.outputs.push_back({"log.metrics", c.log.metrics});
  if (!c.log.weights.empty()) f.outputs.push_back({"log.weights", c.log.weights});
  if (!c.log.trace.empty()) f.outputs.push_back({"log.trace", c.log.trace});
  for (const NamedPath& o : extra_outputs) {
    if (!o.path.empty()) f.outputs.push_back(o);  // "": not asked for
  }
  f.standard_output = false;  // train and bench write their outputs to files
  // Where a rank leaves its flight record when a deadline passes (setup.cc).
  const fs::path metrics_dir = fs::path(c.log.metrics).parent_path();
  for (int r = 0; r < world; ++r) {
    f.records.push_back({"a flight record", ((metrics_dir.empty() ? fs::path(".") : metrics_dir) /
                                             fmt::format("flight-rank-{}.json", r))
                                                .string()});
  }
  if (!c.checkpoint.dir.empty() && c.checkpoint.every_steps > 0) f.checkpoint_dir = c.checkpoint.dir;
  return f;
}

}  // namespace baton
