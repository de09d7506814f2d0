#include "outputs.h"

#include <sys/stat.h>

#include <filesystem>

#include <fmt/format.h>

#include "baton/error.h"
#include "baton/files.h"
#include "baton/schedule.h"

namespace baton {
namespace {

namespace fs = std::filesystem;

bool IsDevice(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode);
}

std::string Name(const RunFile& f) { return fmt::format("{} ({})", f.key, f.path); }

}  // namespace

RunFiles FilesOf(const TrainConfig& c, int world, const std::vector<RunFile>& extra_outputs) {
  RunFiles f;
  std::error_code ec;
  if (!c.source.empty() && fs::is_regular_file(c.source, ec)) f.inputs.push_back({"the config file", c.source});
  if (!c.model.init_from.empty()) f.inputs.push_back({"model.init.from", c.model.init_from});
  if (FindGenerator(c.pipeline.schedule) == nullptr) f.inputs.push_back({"pipeline.schedule", c.pipeline.schedule});
  if (!c.pipeline.profile.empty()) f.inputs.push_back({"pipeline.profile", c.pipeline.profile});
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
  }
  if (!c.log.metrics.empty()) f.outputs.push_back({"log.metrics", c.log.metrics});
  if (!c.log.weights.empty()) f.outputs.push_back({"log.weights", c.log.weights});
  for (const RunFile& o : extra_outputs) {
    if (!o.path.empty() && o.path != "-") f.outputs.push_back(o);
  }
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

void CheckRunFiles(const RunFiles& files) {
  for (const RunFile& o : files.outputs) CheckOutputFile(o.path, o.key);
  if (!files.checkpoint_dir.empty()) CheckOutputFolder(files.checkpoint_dir, "checkpoint.dir");
  std::vector<std::pair<RunFile, FileId>> written;
  for (const RunFile& o : files.outputs) written.emplace_back(o, IdOf(o.path));
  for (const RunFile& o : files.records) written.emplace_back(o, IdOf(o.path));
  for (std::size_t i = 0; i < written.size(); ++i) {
    const auto& [out, id] = written[i];
    for (const RunFile& in : files.inputs) {
      if (IdOf(in.path) == id) {
        throw OutputError(fmt::format("{} is the same file as {}: the run would overwrite its own input; give {} "
                                      "another path",
                                      Name(out), Name(in), out.key));
      }
    }
    const fs::path parent = fs::weakly_canonical(fs::absolute(out.path).parent_path());
    for (const RunFile& folder : files.input_folders) {
      std::error_code ec;
      if (fs::exists(folder.path, ec) && fs::equivalent(parent, folder.path, ec)) {
        throw OutputError(fmt::format("{} is inside {}, whose every file is read as data: give {} another folder",
                                      Name(out), Name(folder), out.key));
      }
    }
    if (!files.checkpoint_dir.empty() && IdOf(files.checkpoint_dir) == id) {
      throw OutputError(fmt::format("{} is checkpoint.dir ({}): give them different paths", Name(out),
                                    files.checkpoint_dir));
    }
    for (std::size_t j = 0; j < i; ++j) {
      const auto& [other, other_id] = written[j];
      if (other_id == id && !IsDevice(out.path)) {
        throw OutputError(fmt::format("{} and {} are the same file: one would overwrite the other; give them "
                                      "different paths",
                                      Name(other), Name(out)));
      }
    }
  }
}

}  // namespace baton
