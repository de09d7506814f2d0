// Setting up a run on every rank (schedule, stages, data, optimizers, the
// metrics file) and the ranks' agreement that it worked; shared by training
// and benchmarking.
#ifndef BATON_RUNTIME_SETUP_H_
#define BATON_RUNTIME_SETUP_H_

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "baton/comm.h"
#include "baton/config.h"
#include "baton/data.h"
#include "baton/error.h"
#include "baton/train.h"
#include "baton/host.h"
#include "baton/stage_device.h"
#include "executor.h"
#include "params.h"
#include "baton/plan.h"

namespace baton {

// metrics.jsonl, written by rank 0 (one JSON object per line, flushed).
class MetricsLog {
 public:
  MetricsLog(const std::string& path, bool append) : path_(path) {
    if (path.empty()) return;
    const std::filesystem::path p(path);
    std::error_code ec;
    if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
    if (ec) throw OutputError(fmt::format("{}: cannot create the metrics file's folder: {}", path, ec.message()));
    out_.open(path, append ? std::ios::app : std::ios::trunc);
    if (!out_) throw OutputError(fmt::format("{}: cannot write the metrics file", path));
  }
  // Closes and deletes the file (setup failed elsewhere: leave nothing behind).
  void Discard() {
    if (!out_.is_open()) return;
    out_.close();
    std::error_code ec;
    std::filesystem::remove(path_, ec);
  }
  void Line(const std::string& json) {
    if (!out_.is_open()) return;
    out_ << json << '\n';
    out_.flush();
  }

 private:
  std::string path_;
  std::ofstream out_;
};

// Everything a rank runs with: the plan, and what was allocated from it.
struct RunSetup {
  RunPlan plan;                        // every rank's (the same on all)
  RankPlan rank_plan;                  // this rank's
  std::unique_ptr<RankDevice> device;  // before exec: the stages compute on it
  std::unique_ptr<Executor> exec;
  std::unique_ptr<ParamStore> params;  // the executor's stages' parameters, named, and their optimizer state
  Dataset train, test;
  std::unique_ptr<BatchLoader> loader;
  bool first_rank = false, last_rank = false;
  std::unique_ptr<MetricsLog> metrics;  // rank 0
  Fault fault;                          // BATON_FAULT, for testing
  int replica = 0;                      // this rank's replica (data parallelism)
  bool evaluation = false;              // epochs end with an evaluation
  // This replica's share of the evaluation set: samples [eval_begin,
  // eval_end) of `test` (replica r of D: [r N / D, (r + 1) N / D)).
  std::int64_t eval_begin = 0, eval_end = 0;
  int world_rank = 0;
};

// Plans and builds `u` on every rank (PlanRun, PlanRank, then the device,
// the executor, the parameter store: initial weights and optimizers; the
// data, the metrics file), then
// all ranks Agree: on success it returns everywhere; otherwise the lowest
// failing rank throws its error and the others throw PeerFailed, and no file
// is left behind.
// `append_metrics`: a resumed run adds to the metrics file instead of starting it anew.
void SetUpRun(const TrainConfig& config, const RunComms& comms, RunSetup& u, bool append_metrics = false);

}  // namespace baton

#endif  // BATON_RUNTIME_SETUP_H_
