// Running `baton train` under mpirun from a test and comparing its outputs
// with another run's: shared by the multi-rank equivalence tests. Built
// with BATON_RANKS_AS_THREADS, the same tests run their ranks as threads
// of the test process instead (every case), and under mpirun a sample.
#ifndef BATON_TESTS_MPI_RUN_HELPERS_H_
#define BATON_TESTS_MPI_RUN_HELPERS_H_

#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "baton/data.h"
#ifdef BATON_RANKS_AS_THREADS
#include <thread>

#include "baton/comm.h"
#include "baton/config.h"
#include "baton/error.h"
#include "baton/files.h"
#include "baton/train.h"
#endif

namespace baton_test {

namespace fs = std::filesystem;

struct RunOutput {
  std::vector<double> losses;
  std::vector<baton::NamedTensor> weights;
  std::vector<double> evaluation;  // each evaluation's loss (test_loss or validation_loss)
  std::vector<double> evaluated;   // and how much it covered (test_samples or validation_tokens)
  std::vector<double> tokens, microbatches;  // packed documents: each step's real tokens and microbatches run
};

inline int Shell(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// What a run left in `dir`: its losses and evaluations (metrics.jsonl) and
// its final weights (weights.safetensors).
inline RunOutput ReadRunOutput(const fs::path& dir) {
  RunOutput out;
  std::ifstream metrics(dir / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) out.losses.push_back(j["loss"].get<double>());
    if (j.contains("microbatches")) out.microbatches.push_back(j["microbatches"].get<double>());
    if (j.contains("tokens")) out.tokens.push_back(j["tokens"].get<double>());
    for (const char* key : {"test_loss", "validation_loss"}) {
      if (j.contains(key)) out.evaluation.push_back(j[key].get<double>());
    }
    for (const char* key : {"test_samples", "validation_tokens"}) {
      if (j.contains(key)) out.evaluated.push_back(j[key].get<double>());
    }
  }
  if (fs::exists(dir / "weights.safetensors")) {
    out.weights = baton::ReadSafetensors((dir / "weights.safetensors").string());
  }
  return out;
}

#ifdef BATON_RANKS_AS_THREADS
// The same run with its ranks as threads of this process (MakeThreadRanks):
// the config's P x D ranks, each calling baton::Train, its metrics and
// weights in a folder of its own. A rank that fails fails the test.
inline RunOutput TrainRun(const std::string& name, const std::string& config, int np,
                          const std::vector<std::string>& sets, std::string* log_text = nullptr) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("baton_threads_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  // The outputs in the run's folder, unless the case names its own.
  std::vector<std::string> all = {"log.metrics=" + (dir / "metrics.jsonl").string(),
                                  "log.weights=" + (dir / "weights.safetensors").string()};
  all.insert(all.end(), sets.begin(), sets.end());
  const std::string path = BATON_SOURCE_DIR "/" + config;
  const baton::TrainConfig c = baton::ParseTrainConfig(baton::ReadTextFile(path), path, all);
  EXPECT_EQ(c.pipeline.ranks * c.data_parallel.size, np) << name;
  std::vector<baton::ThreadRank> ranks =
      baton::MakeThreadRanks({c.pipeline.ranks, c.data_parallel.size}, c.pipeline.wait_timeout_s);
  std::vector<std::string> errors(ranks.size());
  std::vector<std::thread> threads;
  for (std::size_t w = 0; w < ranks.size(); ++w) {
    threads.emplace_back([&, w] {
      baton::ThreadRank& r = ranks[w];
      try {
        baton::Train(c, {*r.world, r.pipeline ? *r.pipeline : *r.world, *r.replicas});
      } catch (const baton::PeerFailed&) {
        errors[w] = "(another rank failed)";
      } catch (const std::exception& e) {
        errors[w] = e.what();
        r.end_job();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (std::size_t w = 0; w < errors.size(); ++w) EXPECT_EQ(errors[w], "") << name << ": rank " << w;
  if (log_text != nullptr) log_text->clear();
  RunOutput out = ReadRunOutput(dir);
  fs::remove_all(dir);
  return out;
}
#else
// Trains `config` (a path under the source folder) with `np` MPI ranks and
// the --set overrides, in a folder of its own (tests run in parallel
// processes); returns the per-step losses and the final weights. A failing
// run fails the test with its log. `log` (optional): what the run printed.
inline RunOutput TrainRun(const std::string& name, const std::string& config, int np,
                          const std::vector<std::string>& sets, std::string* log_text = nullptr) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("baton_run_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::string cmd = "cd '" + dir.string() + "' && '" BATON_MPIEXEC "' -np " + std::to_string(np) + " '" +
                    BATON_BINARY + "' train '" BATON_SOURCE_DIR "/" + config + "'";
  for (const std::string& s : sets) cmd += " --set '" + s + "'";
  cmd += " > log.txt 2>&1";
  const int code = Shell(cmd);
  std::ifstream log(dir / "log.txt");
  std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_EQ(code, 0) << cmd << "\n" << text;
  if (log_text != nullptr) *log_text = text;
  RunOutput out = ReadRunOutput(dir);
  fs::remove_all(dir);
  return out;
}
#endif

// The cases a parameterized suite runs: every one with ranks as threads;
// under mpirun, where each case is a job of its own, every `stride`-th (the
// threads cover the rest, and mpirun checks the same code end to end).
template <typename Case>
std::vector<Case> Sampled(std::vector<Case> cases, std::size_t stride) {
#ifdef BATON_RANKS_AS_THREADS
  (void)stride;
  return cases;
#else
  std::vector<Case> out;
  for (std::size_t i = 0; i < cases.size(); i += stride) out.push_back(cases[i]);
  return out;
#endif
}

// Losses and every weight tensor within `tolerance` relative (to the
// reference tensor's largest magnitude).
inline void ExpectSameRun(const RunOutput& got, const RunOutput& ref, double tolerance = 1e-5) {
  ASSERT_FALSE(ref.losses.empty());
  ASSERT_EQ(got.losses.size(), ref.losses.size());
  for (std::size_t i = 0; i < ref.losses.size(); ++i) {
    EXPECT_NEAR(got.losses[i], ref.losses[i], tolerance * std::abs(ref.losses[i])) << "step " << i + 1;
  }
  ASSERT_FALSE(ref.weights.empty());
  ASSERT_EQ(got.weights.size(), ref.weights.size());
  for (std::size_t t = 0; t < ref.weights.size(); ++t) {
    const auto& a = got.weights[t];
    const auto& b = ref.weights[t];
    ASSERT_EQ(a.name, b.name);
    ASSERT_EQ(a.shape, b.shape);
    double scale = 0, diff = 0;
    for (std::size_t k = 0; k < b.data.size(); ++k) {
      scale = std::max(scale, double(std::abs(b.data[k])));
      diff = std::max(diff, double(std::abs(a.data[k] - b.data[k])));
    }
    EXPECT_LE(diff, tolerance * scale) << a.name;
  }
}

}  // namespace baton_test

#endif  // BATON_TESTS_MPI_RUN_HELPERS_H_
