// The files a run reads and writes, checked before it starts: every output
// writable and of the right kind, and none the same file as another output
// or as an input, so that a run never overwrites its own inputs or loses one
// output to another.
#ifndef BATON_TRAIN_OUTPUTS_H_
#define BATON_TRAIN_OUTPUTS_H_

#include <string>
#include <utility>
#include <vector>

#include "baton/config.h"

namespace baton {

// A file by the setting that names it ("log.weights", "model.init.from").
struct RunFile {
  std::string key;
  std::string path;
};

struct RunFiles {
  std::vector<RunFile> inputs;         // files read (config, initial weights, data, schedule, profile)
  std::vector<RunFile> input_folders;  // folders whose every file is an input (fortunes' data.path)
  std::vector<RunFile> outputs;        // files written (metrics, weights, reports)
  std::vector<RunFile> records;        // written only on a failure (flight records): checked for clashes only
  std::string checkpoint_dir;          // "" if the run writes no checkpoints
};

// The files of a training run of `config` on `world` ranks (its config file
// is config.source), plus `extra_outputs` (bench's reports).
RunFiles FilesOf(const TrainConfig& config, int world, const std::vector<RunFile>& extra_outputs = {});

// Throws OutputError (before anything runs; creates nothing) if an output
// cannot be written (CheckOutputFile), the checkpoint folder cannot be
// (CheckOutputFolder), or two of the files are one: an output and an
// input, two outputs (a device such as /dev/null may be given twice: it
// discards), or an output inside an input folder or the checkpoint folder's
// place.
void CheckRunFiles(const RunFiles& files);

}  // namespace baton

#endif  // BATON_TRAIN_OUTPUTS_H_
