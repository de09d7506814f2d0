// Training with ranks as threads (MakeThreadRanks): the whole of Train —
// setup and its agreements, the executor's messages, the gradient sums of
// the replicas, checkpoints and resuming — in one process under plain
// ctest, against a run of one rank.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "baton/comm.h"
#include "baton/config.h"
#include "baton/data.h"
#include "baton/env.h"
#include "baton/error.h"
#include "baton/files.h"
#include "baton/model.h"
#include "baton/placement.h"
#include "baton/plan.h"
#include "baton/profile.h"
#include "baton/train.h"
#include "baton/measure_profile.h"
#include "run_trace.h"
#include "support/job.h"
#include "support/test_folder.h"

namespace baton {
namespace {

namespace fs = std::filesystem;

struct RunResult {
  std::vector<std::string> errors;  // per world rank: "" (returned), "PeerFailed" or the message
  std::vector<double> losses;
  std::vector<double> lrs;  // each logged step's rate
  std::vector<double> grad_norms;  // each logged step's gradient norm (before a clip)
  // Each logged step's optimizer step and the clip's part of it (where
  // the run clips), rank 0's seconds.
  std::vector<double> update_s, clip_s;
  std::string weights;  // the weights file's bytes
};

class ThreadsTrain : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = baton_test::FreshTestFolder("baton_threads"); }
  void TearDown() override { fs::remove_all(dir_); }

  // Trains tests/mpi/tiny.yaml with `sets` on P x D ranks as threads, its
  // outputs in dir_/name.
  static TrainConfig Config(std::vector<std::string> sets) {
    const std::string path = BATON_SOURCE_DIR "/tests/mpi/tiny.yaml";
    return ParseTrainConfig(ReadTextFile(path), path, sets);
  }

  RunResult Train(const std::string& name, int pipeline_ranks, int replicas, std::vector<std::string> sets,
            TrainOptions options = {}) {
    const fs::path out = dir_ / name;
    sets.push_back("pipeline.ranks=" + std::to_string(pipeline_ranks));
    sets.push_back("data_parallel.size=" + std::to_string(replicas));
    sets.push_back("log.metrics=" + (out / "metrics.jsonl").string());
    sets.push_back("log.weights=" + (out / "weights.safetensors").string());
    const TrainConfig config = Config(sets);
    std::vector<ThreadRank> ranks = MakeThreadRanks({pipeline_ranks, replicas}, 30);
    RunResult run;
    run.errors.resize(ranks.size());
    std::vector<std::thread> threads;
    for (std::size_t w = 0; w < ranks.size(); ++w) {
      threads.emplace_back([&, w] {
        ThreadRank& r = ranks[w];
        try {
          baton::Train(config, {*r.world, r.pipeline ? *r.pipeline : *r.world, *r.replicas}, options);
        } catch (const PeerFailed&) {
          run.errors[w] = "PeerFailed";
        } catch (const std::exception& e) {
          run.errors[w] = e.what();
          r.end_job();
        }
      });
    }
    for (auto& t : threads) t.join();
    std::ifstream metrics(out / "metrics.jsonl");
    for (std::string line; std::getline(metrics, line);) {
      const auto row = nlohmann::json::parse(line);
      if (row.contains("loss")) run.losses.push_back(row["loss"].get<double>());
      if (row.contains("lr")) run.lrs.push_back(row["lr"].get<double>());
      if (row.contains("grad_norm") && row["grad_norm"].is_number()) {
        run.grad_norms.push_back(row["grad_norm"].get<double>());
      }
      if (row.contains("update_s")) run.update_s.push_back(row["update_s"].get<double>());
      if (row.contains("clip_s")) run.clip_s.push_back(row["clip_s"].get<double>());
    }
    run.weights = baton_test::ReadAll(out / "weights.safetensors");
    return run;
  }

  static void ExpectClean(const RunResult& r) {
    for (std::size_t w = 0; w < r.errors.size(); ++w) EXPECT_EQ(r.errors[w], "") << "rank " << w;
    EXPECT_FALSE(r.weights.empty());
  }

  fs::path dir_;
};

// A pipeline on threads learns exactly what one rank learns, to the bit.
TEST_F(ThreadsTrain, EveryKindOfScheduleMatchesOneRankBitForBit) {
  const RunResult one = Train("one", 1, 1, {});
  ExpectClean(one);
  ASSERT_EQ(one.losses.size(), 4u);
  for (const auto& [name, ranks, sets] :
       std::vector<std::tuple<std::string, int, std::vector<std::string>>>{
           {"1f1b_2", 2, {}},
           {"zb_h1_2", 2, {"pipeline.schedule=zb_h1"}},
           {"interleaved_2", 2, {"pipeline.schedule=interleaved_1f1b", "pipeline.chunks=2"}},
           {"zbv_2", 2, {"pipeline.schedule=zbv"}},
           {"1f1b_4", 4, {}},
           {"full_recompute_4", 4, {"pipeline.checkpointing=full"}}}) {
    const RunResult r = Train(name, ranks, 1, sets);
    ExpectClean(r);
    EXPECT_EQ(r.losses, one.losses) << name;
    EXPECT_EQ(r.weights, one.weights) << name;
  }
}

// AdamW on every cut of a 2-rank pipeline gives one rank's bytes: each
// parameter's update rounds the same wherever it lies in its stage's
// buffer (Eigen's fast packet sqrt once made the last few differ).
// A microbatch of two rows too: a layer norm's saved moments are 16 bytes
// then, and every tensor after them in the slot started off a 64-byte
// boundary on some partitions, where Eigen's sums and exp round otherwise.
TEST_F(ThreadsTrain, AdamWMatchesOneRankOnEveryPartition) {
  for (const int batch : {32, 16}) {
    const std::vector<std::string> adamw = {"train.optimizer={type: adamw, lr: 0.01}", "train.steps=6",
                                            "train.batch_size=" + std::to_string(batch)};
    const RunResult one = Train(fmt::format("adamw_one_{}", batch), 1, 1, adamw);
    ExpectClean(one);
    for (int first = 1; first <= 8; ++first) {
      std::vector<std::string> sets = adamw;
      sets.push_back(fmt::format("pipeline.partition=[{}, {}]", first, 9 - first));
      const RunResult r = Train(fmt::format("adamw_{}_{}", batch, first), 2, 1, sets);
      ExpectClean(r);
      EXPECT_TRUE(r.weights == one.weights) << "batch " << batch << ", partition [" << first << ", " << 9 - first << "]";
    }
  }
}

// The plan changed between steps: after step 2 (and again after step 5)
// the layers move to other ranks, the parameters and the optimizer's state
// with them (MoveTensors, the function a re-plan over MPI calls), the
// executor is rebuilt from the new plan, and the run ends with the bytes of
// a run that never moved: every placement trains the same floats.
TEST_F(ThreadsTrain, APlacementChangedBetweenStepsTrainsTheSameBits) {
  const std::vector<std::string> base = {"train.steps=8", "train.optimizer={type: adamw, lr: 0.01}"};
  for (const auto& [name, ranks, sets, first, second] :
       std::vector<std::tuple<std::string, int, std::vector<std::string>, std::string, std::string>>{
           {"1f1b_2", 2, {}, "[2, 7]", "[6, 3]"},
           {"interleaved_2", 2, {"pipeline.schedule=interleaved_1f1b", "pipeline.chunks=2"}, "[1, 3, 3, 2]",
            "[3, 2, 2, 2]"},
           {"zb_h1_4", 4, {"pipeline.schedule=zb_h1"}, "[4, 1, 2, 2]", "[1, 2, 3, 3]"},
           {"gpipe_2", 2, {"pipeline.schedule=gpipe"}, "[5, 4]", "[2, 7]"},
           {"zbv_2", 2, {"pipeline.schedule=zbv"}, "[1, 4, 2, 2]", "[3, 1, 1, 4]"},
           {"dualpipev_2", 2, {"pipeline.schedule=dualpipev"}, "[2, 2, 4, 1]", "[1, 3, 3, 2]"},
           {"interleaved_zb_2", 2, {"pipeline.schedule=interleaved_zb", "pipeline.chunks=2"}, "[2, 2, 2, 3]",
            "[3, 3, 2, 1]"}}) {
    std::vector<std::string> still = base;
    still.insert(still.end(), sets.begin(), sets.end());
    const RunResult whole = Train(name + "_still", ranks, 1, still);
    ExpectClean(whole);
    TrainOptions options;
    options.next_plan = [&](std::int64_t done, const TrainConfig& running) -> std::optional<TrainConfig> {
      if (done != 2 && done != 5) return std::nullopt;
      TrainConfig next = running;
      std::vector<std::string> cut = still;
      cut.push_back("pipeline.partition=" + (done == 2 ? first : second));
      cut.push_back("pipeline.ranks=" + std::to_string(ranks));
      cut.push_back("log.metrics=" + running.log.metrics);
      cut.push_back("log.weights=" + running.log.weights);
      next = Config(cut);
      return next;
    };
    const RunResult moved = Train(name + "_moved", ranks, 1, still, options);
    ExpectClean(moved);
    EXPECT_EQ(moved.losses, whole.losses) << name;
    EXPECT_TRUE(moved.weights == whole.weights) << name << ": the moved run's weights differ";
  }
}

// With replicas, every pipeline moves the same way; under ZeRO 1-3 each
// replica's shard of the optimizer state is cut from other stages after
// the move (the first replica's whole state goes to every replica, each
// keeps its part). The run ends with the bytes of one that never moved.
TEST_F(ThreadsTrain, APlacementChangedWithReplicasAndZeroTrainsTheSameBits) {
  for (int zero = 0; zero <= 3; ++zero) {
    const std::string name = fmt::format("zero{}", zero);
    const std::vector<std::string> still = {"train.steps=7", "train.optimizer={type: adamw, lr: 0.01}",
                                            "data_parallel.zero=" + std::to_string(zero),
                                            "data_parallel.bucket_cap_mb=0.001"};
    const RunResult whole = Train(name + "_still", 2, 2, still);
    ExpectClean(whole);
    TrainOptions options;
    options.next_plan = [&](std::int64_t done, const TrainConfig& running) -> std::optional<TrainConfig> {
      if (done != 2 && done != 5) return std::nullopt;
      std::vector<std::string> cut = still;
      cut.push_back("pipeline.partition=" + std::string(done == 2 ? "[2, 7]" : "[6, 3]"));
      cut.push_back("pipeline.ranks=2");
      cut.push_back("data_parallel.size=2");
      cut.push_back("log.metrics=" + running.log.metrics);
      cut.push_back("log.weights=" + running.log.weights);
      return Config(cut);
    };
    const RunResult moved = Train(name + "_moved", 2, 2, still, options);
    ExpectClean(moved);
    EXPECT_EQ(moved.losses, whole.losses) << name;
    EXPECT_TRUE(moved.weights == whole.weights) << name << ": the moved run's weights differ";
  }
}

// The replicas' shares of a 2 x 2 run's 16 microbatches changed to 12 + 4
// after step 2, then to 3 + 13 after step 5, with another placement of its
// two stages (`placement`).
TrainOptions ReSplitAfterSteps2And5(bool placement = true) {
  TrainOptions options;
  options.next_plan = [placement](std::int64_t done, const TrainConfig& running) -> std::optional<TrainConfig> {
    if (done != 2 && done != 5) return std::nullopt;
    TrainConfig next = running;
    next.pipeline.replica_microbatches = done == 2 ? std::vector<int>{12, 4} : std::vector<int>{3, 13};
    if (done == 5 && placement) next = WithPlacement(next, PlanRun(running).model, {0, 6, 9});
    return next;
  };
  return options;
}

// pipeline.adapt: full's move: the replicas' shares of the global batch's
// microbatches changed between steps (16 as 12 + 4 after step 2, then 3 +
// 13 with another placement after step 5), under ZeRO 0 and 1. The steps
// before the first change are the unchanged run's to the bit; after it
// every row of the global batch is still read once a step, by the replica
// that runs its microbatch, and the sums differ only in their grouping:
// the final weights within 1e-6 of the unchanged run's (a replica reading
// the wrong rows would be off by 1e-2). The same moves again give the same
// bytes.
TEST_F(ThreadsTrain, TheReplicasSharesOfTheMicrobatchesChangedBetweenStepsTrainTheSameSums) {
  for (int zero = 0; zero <= 1; ++zero) {
    const std::string name = fmt::format("zero{}", zero);
    const std::vector<std::string> still = {"train.steps=8", "data_parallel.zero=" + std::to_string(zero)};
    const RunResult whole = Train(name + "_still", 2, 2, still);
    ExpectClean(whole);
    const TrainOptions options = ReSplitAfterSteps2And5();
    const RunResult moved = Train(name + "_moved", 2, 2, still, options);
    ExpectClean(moved);
    ASSERT_EQ(moved.losses.size(), whole.losses.size());
    for (std::size_t s = 0; s < 2; ++s) EXPECT_EQ(moved.losses[s], whole.losses[s]) << name << " step " << s + 1;
    for (std::size_t s = 2; s < whole.losses.size(); ++s) {
      EXPECT_NEAR(moved.losses[s], whole.losses[s], 1e-5) << name << " step " << s + 1;
    }
    const auto a = ReadSafetensors((dir_ / (name + "_still") / "weights.safetensors").string());
    const auto b = ReadSafetensors((dir_ / (name + "_moved") / "weights.safetensors").string());
    ASSERT_EQ(a.size(), b.size());
    double most = 0;
    for (std::size_t t = 0; t < a.size(); ++t) {
      ASSERT_EQ(a[t].data.size(), b[t].data.size());
      for (std::size_t i = 0; i < a[t].data.size(); ++i) most = std::max(most, double(std::fabs(a[t].data[i] - b[t].data[i])));
    }
    EXPECT_LT(most, 1e-6) << name;
    EXPECT_TRUE(moved.weights != whole.weights) << name << ": the sums' grouping changed, and so do the last bits";
    const RunResult again = Train(name + "_again", 2, 2, still, options);
    EXPECT_TRUE(again.weights == moved.weights) << name;
  }
}

// The same moves with the gradients summed in double (train.grad_accum_dtype:
// fp64, what pipeline.adapt: full and recovery.on_lost_rank: shrink get by
// default) and AdamW, which turns a last-bit difference on a near-zero
// gradient into an lr-sized step: each microbatch's float gradients are
// added into doubles, exactly, so the sums do not depend on the split, and
// the run ends with the bytes of the unchanged one (in fp32 they differ).
// Also in plans of two stages a rank (a loop and a V schedule, the shares
// alone changed): each rank's stages start their sums in one order whatever
// its replica's share (schedule/generators_test).
TEST_F(ThreadsTrain, WithGradientsSummedInDoubleChangedSharesTrainTheSameBits) {
  for (const auto& [name, sets, placement] : std::vector<std::tuple<std::string, std::vector<std::string>, bool>>{
           {"wide_zero0", {"data_parallel.zero=0"}, true},
           {"wide_zero1", {"data_parallel.zero=1"}, true},
           {"looped_zero1", {"data_parallel.zero=1", "pipeline.schedule=looped_bfs", "pipeline.chunks=2"}, false},
           {"zbv_zero0", {"data_parallel.zero=0", "pipeline.schedule=zbv", "pipeline.chunks=2"}, false}}) {
    std::vector<std::string> still = sets;
    still.insert(still.end(), {"train.steps=8", "train.optimizer={type: adamw, lr: 0.01}",
                               "data_parallel.bucket_cap_mb=0.001", "train.grad_accum_dtype=fp64"});
    const TrainOptions options = ReSplitAfterSteps2And5(placement);
    const RunResult whole = Train(name + "_still", 2, 2, still);
    ExpectClean(whole);
    const RunResult moved = Train(name + "_moved", 2, 2, still, options);
    ExpectClean(moved);
    EXPECT_EQ(moved.losses, whole.losses) << name;
    EXPECT_TRUE(moved.weights == whole.weights) << name << ": the re-split run's weights differ";
    // In fp32 the same moves change the last bits.
    still.back() = "train.grad_accum_dtype=fp32";
    const RunResult narrow = Train(name + "_narrow_still", 2, 2, still);
    const RunResult narrow_moved = Train(name + "_narrow_moved", 2, 2, still, options);
    ExpectClean(narrow_moved);
    EXPECT_TRUE(narrow.weights != narrow_moved.weights) << name;
  }
}

// The schedule changed between steps too, with its chunks and placement:
// within the loop family (the first stage on rank 0, the last on the last
// rank) and within the V family (both on rank 0), the run ends with the
// bytes of a run that never changed. A change that moves the last stage
// to another rank (loop to V) is refused: that rank holds no labels.
TEST_F(ThreadsTrain, AScheduleChangedBetweenStepsTrainsTheSameBits) {
  const std::vector<std::string> base = {"train.steps=8", "train.optimizer={type: adamw, lr: 0.01}"};
  struct Change {
    std::string schedule;
    int chunks;
    std::string partition;
  };
  for (const auto& [name, start, first, second] : std::vector<std::tuple<std::string, std::vector<std::string>, Change, Change>>{
           {"loop", {}, {"zb_h1", 1, "[6, 3]"}, {"interleaved_1f1b", 2, "[1, 3, 3, 2]"}},
           {"v", {"pipeline.schedule=zbv"}, {"dualpipev", 2, "[2, 2, 4, 1]"}, {"v_half", 2, "[3, 1, 1, 4]"}}}) {
    std::vector<std::string> still = base;
    still.insert(still.end(), start.begin(), start.end());
    const RunResult whole = Train(name + "_still", 2, 1, still);
    ExpectClean(whole);
    TrainOptions options;
    options.next_plan = [&](std::int64_t done, const TrainConfig& running) -> std::optional<TrainConfig> {
      if (done != 2 && done != 5) return std::nullopt;
      const Change& c = done == 2 ? first : second;
      std::vector<std::string> sets = still;
      sets.push_back("pipeline.schedule=" + c.schedule);
      sets.push_back("pipeline.chunks=" + std::to_string(c.chunks));
      sets.push_back("pipeline.partition=" + c.partition);
      sets.push_back("pipeline.ranks=2");
      sets.push_back("log.metrics=" + running.log.metrics);
      sets.push_back("log.weights=" + running.log.weights);
      return Config(sets);
    };
    const RunResult changed = Train(name + "_changed", 2, 1, still, options);
    ExpectClean(changed);
    EXPECT_EQ(changed.losses, whole.losses) << name;
    EXPECT_TRUE(changed.weights == whole.weights) << name << ": the changed run's weights differ";
  }
  TrainOptions to_v;
  to_v.next_plan = [&](std::int64_t done, const TrainConfig& running) -> std::optional<TrainConfig> {
    if (done != 1) return std::nullopt;
    return Config({"pipeline.schedule=zbv", "pipeline.ranks=2", "log.metrics=" + running.log.metrics,
                   "log.weights=" + running.log.weights});
  };
  const RunResult refused = Train("to_v", 2, 1, {}, to_v);
  bool named = false;
  for (const std::string& e : refused.errors) named = named || e.find("holds no labels") != std::string::npos ||
                                                   e.find("does not hold") != std::string::npos;
  EXPECT_TRUE(named) << refused.errors[0] << " / " << refused.errors[1];
}

// A plan change that is more than a placement is refused on every rank,
// naming what may change.
TEST_F(ThreadsTrain, APlanChangeBeyondThePlacementIsRefused) {
  TrainOptions options;
  options.next_plan = [&](std::int64_t done, const TrainConfig& running) -> std::optional<TrainConfig> {
    if (done != 1) return std::nullopt;
    TrainConfig next = running;
    next.pipeline.microbatches = 4;
    return next;
  };
  const RunResult r = Train("refused", 2, 1, {}, options);
  bool named = false;
  for (const std::string& e : r.errors) {
    named = named || e.find("may change only the schedule, its chunks, the placement and the replicas' shares of the microbatches") != std::string::npos;
  }
  EXPECT_TRUE(named) << r.errors[0] << " / " << r.errors[1];
}

// Replicas on threads: the gradient sums in buckets, and ZeRO's sharded
// optimizer state; the same training up to the order of the sums.
TEST_F(ThreadsTrain, ReplicasMatchOneRankWithinRounding) {
  const RunResult one = Train("one", 1, 1, {"train.optimizer={type: adamw, lr: 0.01}"});
  ExpectClean(one);
  for (const auto& [name, p, d, zero] : std::vector<std::tuple<std::string, int, int, int>>{
           {"2x2", 2, 2, 0}, {"2x2_zero", 2, 2, 1}, {"1x4_zero", 1, 4, 1}}) {
    const RunResult r = Train(name, p, d,
                        {"train.optimizer={type: adamw, lr: 0.01}", "data_parallel.zero=" + std::to_string(zero),
                         "data_parallel.bucket_cap_mb=0.001"});
    ExpectClean(r);
    ASSERT_EQ(r.losses.size(), one.losses.size()) << name;
    for (std::size_t i = 0; i < one.losses.size(); ++i) EXPECT_NEAR(r.losses[i], one.losses[i], 1e-5) << name;
    const auto a = ReadSafetensors((dir_ / name / "weights.safetensors").string());
    const auto b = ReadSafetensors((dir_ / "one" / "weights.safetensors").string());
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t t = 0; t < a.size(); ++t) {
      for (std::size_t k = 0; k < a[t].data.size(); ++k) EXPECT_NEAR(a[t].data[k], b[t].data[k], 1e-5) << a[t].name;
    }
  }
}

// Checkpoints written by threads resume on threads, bit for bit: the run
// that stopped after step 4 (its step-6 checkpoint never finished) ends as
// the uninterrupted one.
TEST_F(ThreadsTrain, ACheckpointResumesBitForBit) {
  const std::vector<std::string> ckpt = {"train.steps=6", "checkpoint.every_steps=2", "checkpoint.keep=3",
                                         "data.shuffle=true", "checkpoint.dir=" + (dir_ / "ck").string()};
  const RunResult whole = Train("whole", 2, 1, ckpt);
  ExpectClean(whole);
  ASSERT_TRUE(fs::exists(dir_ / "ck/step-00000006/manifest.json"));
  fs::remove(dir_ / "ck/step-00000006/manifest.json");  // a crash between the shards and the manifest
  TrainOptions resume;
  resume.resume = true;
  const RunResult resumed = Train("resumed", 2, 1, ckpt, resume);
  ExpectClean(resumed);
  EXPECT_EQ(resumed.weights, whole.weights);
  EXPECT_TRUE(fs::exists(dir_ / "ck/step-00000006/manifest.json"));
  // Under another schedule, its chunks and placement (the plan a run with
  // adaptive plans may have moved to): the same bytes.
  fs::remove(dir_ / "ck/step-00000006/manifest.json");
  std::vector<std::string> other = ckpt;
  other.insert(other.end(), {"pipeline.schedule=interleaved_1f1b", "pipeline.chunks=2", "pipeline.partition=[1,3,3,2]"});
  const RunResult replanned = Train("replanned", 2, 1, other, resume);
  ExpectClean(replanned);
  EXPECT_EQ(replanned.weights, whole.weights);
}

// A stop request (a scheduler's SIGTERM) comes from the OS room: a fake
// Env gives one to the ranks from the fourth step boundary on, without a
// real signal. Every rank stops there together, after a checkpoint of step
// 3 and its metrics rows, no final weights; resumed, the run ends as the
// uninterrupted one, bit for bit.
TEST_F(ThreadsTrain, AStopRequestStopsEveryRankAtOneBoundaryAndResumesBitForBit) {
  const std::vector<std::string> ckpt = {"train.steps=6", "checkpoint.every_steps=4", "checkpoint.keep=3",
                                         "checkpoint.dir=" + (dir_ / "ck").string()};
  const RunResult whole = Train("whole", 2, 1, ckpt);
  ExpectClean(whole);
  fs::remove_all(dir_ / "ck");
  std::atomic<int> asked{0};
  const auto env = MakeFakeEnv({.stop_signal = [&] { return ++asked > 2 * 3 ? SIGTERM : 0; }});
  TrainOptions stopping;
  stopping.env = env.get();
  const RunResult stopped = Train("stopped", 2, 1, ckpt, stopping);
  for (const std::string& e : stopped.errors) EXPECT_EQ(e, "");
  EXPECT_EQ(stopped.losses.size(), 3u);
  EXPECT_TRUE(stopped.weights.empty()) << "a stopped run wrote its final weights";
  EXPECT_TRUE(fs::exists(dir_ / "ck/step-00000003/manifest.json"));
  EXPECT_EQ(asked.load(), 2 * 4) << "each rank asks once a step boundary";
  TrainOptions resume;
  resume.resume = true;
  const RunResult resumed = Train("stopped", 2, 1, ckpt, resume);
  ExpectClean(resumed);
  EXPECT_EQ(resumed.losses, whole.losses);
  EXPECT_EQ(resumed.weights, whole.weights);
}

// train.lr_schedule on a 2-rank pipeline: each step's rate in its metrics
// row is the schedule's formula (a warm-up, a cosine decay to min_lr at
// step 5, then flat), the run ends with the bytes of one rank under the
// same schedule (and not those of a constant rate), and a run resumed
// from its checkpoint of step 3 goes on at the same rates to the same
// bytes: the schedule's state is the step.
TEST_F(ThreadsTrain, ALearningRateScheduleRatesEveryStepAlikeOnPRanksOnOneAndAcrossAResume) {
  const std::string ck = "checkpoint.dir=" + (dir_ / "ck").string();
  const std::vector<std::string> sched = {"train.steps=6", "checkpoint.every_steps=3", "checkpoint.keep=3", ck,
                                          "train.lr_schedule={type: cosine, warmup_steps: 2, min_lr: 0.01, "
                                          "decay_steps: 5}"};
  const RunResult two = Train("two", 2, 1, sched);
  ExpectClean(two);
  const LrSchedule s{LrDecay::kCosine, 2, 0.01, 5};
  ASSERT_EQ(two.lrs.size(), 6u);
  for (int k = 0; k < 6; ++k) EXPECT_NEAR(two.lrs[static_cast<std::size_t>(k)], LearningRateAt(s, 0.1, k + 1, 6), 1e-10);
  EXPECT_DOUBLE_EQ(two.lrs[0], 0.05);  // half the peak after one of two warm-up steps
  EXPECT_DOUBLE_EQ(two.lrs[5], 0.01);
  fs::remove(dir_ / "ck/step-00000006/manifest.json");
  TrainOptions resume;
  resume.resume = true;
  const RunResult resumed = Train("resumed", 2, 1, sched, resume);
  ExpectClean(resumed);
  EXPECT_EQ(resumed.weights, two.weights);
  ASSERT_EQ(resumed.lrs.size(), 3u);
  EXPECT_EQ(resumed.lrs[0], two.lrs[3]);
  fs::remove_all(dir_ / "ck");
  const RunResult one = Train("one", 1, 1, sched);
  ExpectClean(one);
  EXPECT_EQ(one.weights, two.weights);
  fs::remove_all(dir_ / "ck");
  EXPECT_NE(Train("flat", 2, 1, {"train.steps=6"}).weights, two.weights);
}

// train.clip_grad_norm, small enough to clip every step, with a cosine
// schedule: on 2 ranks under 1F1B, ZB-H1, ZB-V, interleaved 1F1B and
// DualPipeV, and 2 x 2 under ZeRO 0 and 1 (fp64 sums and one rank's
// microbatch size, as replicas need for bytes), each step's norm is one
// rank's to the bit and the run ends with one rank's bytes; under ZeRO 2
// and 3 both within 1e-6. And the clip is the norm's: one SGD step (no
// momentum) from the same weights moves them by lr x X, where unclipped it
// moves them by lr x the norm (both within float rounding).
TEST_F(ThreadsTrain, ClippingByTheGlobalNormLearnsWhatOneRankLearns) {
  const std::vector<std::string> clip = {"train.steps=6", "train.clip_grad_norm=0.05", "train.grad_accum_dtype=fp64",
                                         "train.lr_schedule={type: cosine, warmup_steps: 2, min_lr: 0.01}"};
  const RunResult one = Train("one", 1, 1, clip);
  ExpectClean(one);
  ASSERT_EQ(one.grad_norms.size(), 6u);
  for (const double n : one.grad_norms) EXPECT_GT(n, 0.05) << "a step that did not clip";
  // The replicas' microbatches hold 2 samples (32 / 2 replicas / 8): one rank's the same.
  std::vector<std::string> rows2 = clip;
  rows2.push_back("pipeline.microbatches=16");
  const RunResult one_rows2 = Train("one_rows2", 1, 1, rows2);
  ExpectClean(one_rows2);
  for (const auto& [name, ranks, replicas, sets] : std::vector<std::tuple<std::string, int, int, std::vector<std::string>>>{
           {"1f1b", 2, 1, {}},
           {"zb_h1", 2, 1, {"pipeline.schedule=zb_h1"}},
           {"zbv", 2, 1, {"pipeline.schedule=zbv"}},
           {"interleaved", 2, 1, {"pipeline.schedule=interleaved_1f1b", "pipeline.chunks=2"}},
           {"dualpipev", 2, 1, {"pipeline.schedule=dualpipev"}},
           {"dp_zero0", 2, 2, {}},
           {"dp_zero1", 2, 2, {"data_parallel.zero=1"}}}) {
    std::vector<std::string> all = clip;
    all.insert(all.end(), sets.begin(), sets.end());
    const RunResult got = Train(name, ranks, replicas, all);
    ExpectClean(got);
    const RunResult& want = replicas > 1 ? one_rows2 : one;
    EXPECT_EQ(got.grad_norms, want.grad_norms) << name;
    EXPECT_EQ(got.weights, want.weights) << name;
  }
  // ZeRO 2 and 3 reduce-scatter each microbatch's gradients as they come
  // (the sums in another order): every step's norm and the final weights
  // within 1e-6 of one rank's.
  auto floats = [&](const std::string& name) {
    std::vector<float> w;
    for (const NamedTensor& t : ReadSafetensors((dir_ / name / "weights.safetensors").string())) {
      w.insert(w.end(), t.data.begin(), t.data.end());
    }
    return w;
  };
  // (Their gradient windows are floats: fp32 sums, one rank's too.)
  std::vector<std::string> fp32 = {"train.steps=6", "train.clip_grad_norm=0.05", "pipeline.microbatches=16",
                                   "train.lr_schedule={type: cosine, warmup_steps: 2, min_lr: 0.01}"};
  const RunResult one_fp32 = Train("one_fp32", 1, 1, fp32);
  ExpectClean(one_fp32);
  const std::vector<float> want_w = floats("one_fp32");
  for (const int zero : {2, 3}) {
    std::vector<std::string> all = fp32;
    all.push_back("data_parallel.zero=" + std::to_string(zero));
    const std::string name = "dp_zero" + std::to_string(zero);
    const RunResult got = Train(name, 2, 2, all);
    ExpectClean(got);
    ASSERT_EQ(got.grad_norms.size(), one_fp32.grad_norms.size()) << name;
    for (std::size_t k = 0; k < got.grad_norms.size(); ++k) {
      EXPECT_NEAR(got.grad_norms[k], one_fp32.grad_norms[k], 1e-6 * one_fp32.grad_norms[k]) << name << " step " << k + 1;
    }
    const std::vector<float> w = floats(name);
    ASSERT_EQ(w.size(), want_w.size()) << name;
    double worst = 0;
    for (std::size_t i = 0; i < w.size(); ++i) worst = std::max(worst, std::abs(static_cast<double>(w[i]) - want_w[i]));
    EXPECT_LE(worst, 1e-6) << name;
  }
  // The clip's size, from the weights: W0 from two unclipped steps of lr
  // and 2 lr (W0 = 2 Wa - Wc), then a clipped one.
  auto step = [&](const std::string& name, const std::vector<std::string>& extra) {
    std::vector<std::string> sets = {"train.steps=1", "train.optimizer={type: sgd, lr: 0.1}"};
    sets.insert(sets.end(), extra.begin(), extra.end());
    const RunResult r = Train(name, 2, 1, sets);
    ExpectClean(r);
    // The row times the optimizer step, and the clip's part where it clips.
    EXPECT_EQ(r.update_s.size(), 1u) << name;
    for (const double u : r.update_s) EXPECT_GT(u, 0) << name;
    EXPECT_EQ(r.clip_s.size(), name == "clipped" ? 1u : 0u) << name;
    for (const double x : r.clip_s) {
      EXPECT_GT(x, 0) << name;
      EXPECT_LT(x, r.update_s.at(0)) << name;
    }
    std::vector<float> w;
    for (const NamedTensor& t : ReadSafetensors((dir_ / name / "weights.safetensors").string())) {
      w.insert(w.end(), t.data.begin(), t.data.end());
    }
    return std::pair{w, r.grad_norms.at(0)};
  };
  const auto [wa, norm] = step("sgd", {});
  const auto [wc, norm_c] = step("sgd2", {"train.optimizer={type: sgd, lr: 0.2}"});
  const auto [wb, norm_b] = step("clipped", {"train.clip_grad_norm=0.05"});
  EXPECT_EQ(norm_b, norm);
  EXPECT_EQ(norm_c, norm);
  ASSERT_GT(norm, 0.05);
  double moved = 0, unclipped = 0;
  for (std::size_t i = 0; i < wa.size(); ++i) {
    const double w0 = 2.0 * wa[i] - wc[i];
    moved += (wb[i] - w0) * (wb[i] - w0);
    unclipped += (wa[i] - w0) * (wa[i] - w0);
  }
  EXPECT_NEAR(std::sqrt(moved), 0.1 * 0.05, 1e-4 * 0.1 * 0.05);
  EXPECT_NEAR(std::sqrt(unclipped), 0.1 * norm, 1e-4 * 0.1 * norm);
}

// The recipe's goal on 2 x 2: a clip small enough to clip every step and a
// cosine schedule with warm-up, under 1F1B, ZB-H1, ZB-V, interleaved 1F1B
// and DualPipeV, with ZeRO 0 and 1 (fp64 sums, one rank's microbatch
// size): each run's norms and final bytes are one rank's; and a run
// stopped after step 3's checkpoint and resumed ends with them too.
TEST_F(ThreadsTrain, AClippedScheduledRunOnTwoByTwoEndsWithOneRanksBytesUnderEverySchedule) {
  const std::vector<std::string> recipe = {"train.steps=6", "train.clip_grad_norm=0.05", "train.grad_accum_dtype=fp64",
                                           "train.lr_schedule={type: cosine, warmup_steps: 2, min_lr: 0.01}",
                                           "pipeline.microbatches=8"};
  std::vector<std::string> one_sets = recipe;
  one_sets.back() = "pipeline.microbatches=16";  // 2 samples a microbatch, as each replica's
  const RunResult one = Train("one", 1, 1, one_sets);
  ExpectClean(one);
  for (const auto& [name, schedule] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"1f1b", {}},
           {"zb_h1", {"pipeline.schedule=zb_h1"}},
           {"zbv", {"pipeline.schedule=zbv"}},
           {"interleaved", {"pipeline.schedule=interleaved_1f1b", "pipeline.chunks=2"}},
           {"dualpipev", {"pipeline.schedule=dualpipev"}}}) {
    for (const int zero : {0, 1}) {
      std::vector<std::string> all = recipe;
      all.insert(all.end(), schedule.begin(), schedule.end());
      all.push_back("data_parallel.zero=" + std::to_string(zero));
      const std::string run = name + "_zero" + std::to_string(zero);
      const RunResult got = Train(run, 2, 2, all);
      ExpectClean(got);
      EXPECT_EQ(got.grad_norms, one.grad_norms) << run;
      EXPECT_EQ(got.weights, one.weights) << run;
    }
  }
  // Stopped after step 3's checkpoint (step 6's taken away), resumed.
  std::vector<std::string> ck = recipe;
  ck.insert(ck.end(), {"pipeline.schedule=zbv", "data_parallel.zero=1", "checkpoint.every_steps=3", "checkpoint.keep=3",
                       "checkpoint.dir=" + (dir_ / "ck").string()});
  ExpectClean(Train("stopped", 2, 2, ck));
  fs::remove(dir_ / "ck/step-00000006/manifest.json");
  TrainOptions resume;
  resume.resume = true;
  const RunResult resumed = Train("resumed", 2, 2, ck, resume);
  ExpectClean(resumed);
  ASSERT_EQ(resumed.grad_norms.size(), 3u);
  EXPECT_EQ(resumed.grad_norms[0], one.grad_norms[3]);
  EXPECT_EQ(resumed.weights, one.weights);
}

// A checkpoint's files go through the run's Env: a fake that fails rank
// 1's shard (its move into place, a full disk) ends every rank at that
// checkpoint with the shard named, and nothing of the checkpoint is left
// (rank 0's shard taken back, the step folder removed); one that fails
// the manifest ends the run there too, the step folder left unfinished
// (a resume moves it aside); one that fails the final weights says so.
TEST_F(ThreadsTrain, TheRunsEnvFailsACheckpointsShardManifestOrWeightsWithOneError) {
  const std::vector<std::string> ckpt = {"train.steps=4", "checkpoint.every_steps=2",
                                         "checkpoint.dir=" + (dir_ / "ck").string()};
  auto failing = [&](const std::string& name, const FileFault& fault) {
    const auto env = MakeFakeEnv({.file_faults = {fault}});
    TrainOptions o;
    o.env = env.get();
    const RunResult r = Train(name, 2, 1, ckpt, o);
    std::string said;
    for (const std::string& e : r.errors) {
      if (!e.empty() && e != "PeerFailed") said = e;
    }
    return std::pair{said, r};
  };
  const auto [shard, shard_run] = failing("shard", {"rename", "rank-00001.safetensors", 0, ENOSPC});
  EXPECT_NE(shard.find("rank-00001.safetensors: cannot move the finished file into place: No space left on device"),
            std::string::npos)
      << shard;
  EXPECT_FALSE(fs::exists(dir_ / "ck/step-00000002")) << "a checkpoint without every shard was left";
  EXPECT_TRUE(shard_run.weights.empty());
  fs::remove_all(dir_ / "ck");
  const auto [manifest, manifest_run] = failing("manifest", {"rename", "manifest.json", 0, EIO});
  EXPECT_NE(manifest.find("manifest.json: cannot move the finished file into place: Input/output error"),
            std::string::npos)
      << manifest;
  EXPECT_FALSE(fs::exists(dir_ / "ck/step-00000002/manifest.json"));
  fs::remove_all(dir_ / "ck");
  const auto [weights, weights_run] = failing("weights", {"rename", "weights.safetensors", 0, ENOSPC});
  EXPECT_NE(weights.find("weights.safetensors: cannot move the finished file into place"), std::string::npos)
      << weights;
  EXPECT_TRUE(weights_run.weights.empty());
  EXPECT_EQ(weights_run.losses.size(), 4u);
}

// A non-finite loss stops every rank at its step: rank 0 says why, the
// others end quietly, and no weights are written.
// baton::Train itself places the stages of `partition: auto` (from
// pipeline.profile here, a profile of this machine whose layers cost what
// the test says): it trains what the placement the tune room chooses
// trains when written out, and what one rank trains.
TEST_F(ThreadsTrain, AnAutomaticPlacementTrainsAsThePlacementItChose) {
  const TrainConfig tiny = Config({"pipeline.ranks=3"});
  const ModelDesc model = DescribeModel(tiny.model.layers, tiny.model.input, tiny.model.seq);
  Profile p;
  p.identity = ThisMachineIdentity(tiny, model);
  ProfileRows rows;
  rows.rows = tiny.train.batch_size / tiny.pipeline.microbatches;
  for (int t = 0; t < model.top_layers(); ++t) {
    // The first layers dear, the rest cheap: not the balanced placement.
    const double cost = t < 2 ? 4e-3 : 1e-4 * (t + 1);
    LayerProfile l{cost, cost, cost, 2 * cost, {}, 1000.0};
    const auto [first, last] = model.OpRange(t, t + 1);
    l.op_forward.assign(static_cast<std::size_t>(last - first), cost / (last - first));
    rows.layers.push_back(l);
  }
  p.rows.push_back(rows);
  const fs::path profile = dir_ / "profile.json";
  WriteTextFile(profile.string(), ProfileJson(p));

  const std::vector<int> bounds = ChoosePlacement(tiny, p).bounds;
  ASSERT_EQ(bounds.size(), 4u);
  const std::string counts =
      fmt::format("pipeline.partition=[{},{},{}]", bounds[1] - bounds[0], bounds[2] - bounds[1], bounds[3] - bounds[2]);
  EXPECT_NE(PlanRun(tiny).bounds, bounds) << "the test's costs should move the placement off the balanced one";

  const RunResult one = Train("one", 1, 1, {});
  const RunResult placed = Train("placed", 3, 1, {counts});
  const RunResult automatic =
      Train("auto", 3, 1, {"pipeline.partition=auto", "pipeline.profile=" + profile.string()});
  ExpectClean(automatic);
  EXPECT_EQ(automatic.losses, placed.losses);
  EXPECT_EQ(automatic.weights, placed.weights);
  EXPECT_EQ(automatic.weights, one.weights);
}

TEST_F(ThreadsTrain, DivergenceStopsEveryRank) {
  const RunResult r = Train("diverged", 2, 1, {"train.optimizer.lr=1e30", "train.steps=8"});
  EXPECT_NE(r.errors[0].find("step 2: the loss is not finite (NaN or infinite) on rank 1"), std::string::npos)
      << r.errors[0];
  EXPECT_EQ(r.errors[1], "PeerFailed");
  EXPECT_TRUE(r.weights.empty());
}

}  // namespace
}  // namespace baton

namespace baton {
namespace {

// log.trace on 2 x 2 ranks under ZB-V (two stages a rank, V-shaped: stage
// 0 and 3 on pipeline rank 0, 1 and 2 on pipeline rank 1): every traced
// step (2 and 4 of 4) holds every world rank's compute actions, 8
// microbatches x 2 stages x F, I and W = 48 a rank; each message between
// ranks is one flow from the rank that made it to the one that used it in
// the same replica (forward: stage 0 -> 1 and 2 -> 3; back: 3 -> 2 and
// 1 -> 0, each microbatch: 32 a replica, 64 a step), never before it left;
// each checkpoint is an instant; ranks on one host have offset 0. Resumed
// from step 2's checkpoint, the file keeps step 2's events and adds step
// 4's after them, once. A trace path that is the metrics file is refused.
TEST_F(ThreadsTrain, TheTraceHoldsEveryRanksActionsAndEachMessageAsAFlow) {
  const std::string trace = (dir_ / "trace.json").string();
  const std::vector<std::string> sets = {"pipeline.schedule=zbv", "log.trace=" + trace, "log.trace_every=2",
                                         "checkpoint.every_steps=2", "checkpoint.keep=3",
                                         "checkpoint.dir=" + (dir_ / "ck").string()};
  ExpectClean(Train("run", 2, 2, sets));
  struct Seen {
    std::map<std::pair<int, int>, int> compute;  // (step, pid) -> compute actions
    std::map<std::int64_t, nlohmann::json> starts, ends;  // flows by id
    std::vector<std::int64_t> checkpoints;
    double last_step2_end = 0, first_step4_start = 1e300;
    std::map<int, std::vector<nlohmann::json>> critical;  // by step, as written (from the end back)
    std::map<int, double> compute_end;                    // by step: the last compute action's end
    std::map<std::pair<int, int>, double> compute_start;  // (step, pid): the rank's first compute action
  };
  auto read = [&] {
    const nlohmann::json t = nlohmann::json::parse(ReadTextFile(trace, "trace", 1 << 30));
    Seen s;
    for (const nlohmann::json& e : t.at("traceEvents")) {
      const std::string ph = e.at("ph");
      if (ph == "M") continue;
      const int step = e.at("args").at("step");
      if (ph == "X" && e.at("cat") == "compute") {
        const int pid = e.at("pid").get<int>();
        const double ts = e.at("ts").get<double>(), end = ts + e.at("dur").get<double>();
        ++s.compute[{step, pid}];
        s.compute_end[step] = std::max(s.compute_end[step], end);
        const auto [at, fresh] = s.compute_start.insert({{step, pid}, ts});
        if (!fresh) at->second = std::min(at->second, ts);
      }
      if (ph == "X" && e.at("cat") == "critical") s.critical[step].push_back(e);
      if (ph == "X" && step == 2) s.last_step2_end = std::max(s.last_step2_end, e.at("ts").get<double>() + e.at("dur").get<double>());
      if (ph == "X" && step == 4) s.first_step4_start = std::min(s.first_step4_start, e.at("ts").get<double>());
      if (ph == "s") s.starts[e.at("id")] = e;
      if (ph == "f") s.ends[e.at("id")] = e;
      if (ph == "i" && e.at("name") == "checkpoint") s.checkpoints.push_back(step);
    }
    EXPECT_EQ(t.at("otherData").at("clock_offsets_s"), nlohmann::json::parse("[0,0,0,0]"));
    return s;
  };
  auto check = [&](const Seen& s) {
    for (const int step : {2, 4}) {
      for (int pid = 0; pid < 4; ++pid) EXPECT_EQ((s.compute.at({step, pid})), 48) << "step " << step << " rank " << pid;
    }
    EXPECT_EQ(s.compute.size(), 8u) << "only steps 2 and 4 traced";
    ASSERT_EQ(s.starts.size(), 2u * 64);
    std::map<int, int> per_step;
    for (const auto& [id, from] : s.starts) {
      ASSERT_TRUE(s.ends.count(id)) << id;
      const nlohmann::json& to = s.ends.at(id);
      EXPECT_NE(from.at("pid"), to.at("pid"));
      EXPECT_EQ(from.at("pid").get<int>() % 2, to.at("pid").get<int>() % 2) << "a flow across replicas";
      EXPECT_LE(from.at("ts").get<double>(), to.at("ts").get<double>()) << from.dump() << " " << to.dump();
      // World rank = pipeline rank x 2 + replica; stages 0 and 3 on pipeline rank 0.
      const int stage = from.at("args").at("stage");
      EXPECT_EQ(from.at("pid").get<int>() / 2, stage == 0 || stage == 3 ? 0 : 1) << from.dump();
      ++per_step[from.at("args").at("step").get<int>()];
    }
    EXPECT_EQ(per_step, (std::map<int, int>{{2, 64}, {4, 64}}));
    EXPECT_EQ(s.checkpoints, (std::vector<std::int64_t>{2, 4}));
    EXPECT_LT(s.last_step2_end, s.first_step4_start);
    // Each traced step's critical path: from the compute action that ended
    // last, back through actions each ending before the next began (on its
    // rank, or as the message it used), to a rank's first action.
    for (const int step : {2, 4}) {
      const std::vector<nlohmann::json>& path = s.critical.at(step);
      ASSERT_GE(path.size(), 2u) << "step " << step;
      const auto end = [](const nlohmann::json& e) { return e.at("ts").get<double>() + e.at("dur").get<double>(); };
      EXPECT_DOUBLE_EQ(end(path.front()), s.compute_end.at(step));
      for (std::size_t k = 1; k < path.size(); ++k) {
        EXPECT_LE(end(path[k]), path[k - 1].at("ts").get<double>() + 1e-3) << path[k].dump() << " " << path[k - 1].dump();
      }
      EXPECT_DOUBLE_EQ(path.back().at("ts").get<double>(),
                       s.compute_start.at({step, path.back().at("pid").get<int>()}));
    }
  };
  check(read());
  // Resumed after step 2: step 2's events kept, step 4's made anew.
  fs::remove(dir_ / "ck/step-00000004/manifest.json");
  TrainOptions resume;
  resume.resume = true;
  ExpectClean(Train("run", 2, 2, sets, resume));
  check(read());
  // The trace path is an output like the others.
  const RunResult clash = Train("clash", 2, 1, {"log.trace=" + (dir_ / "clash" / "metrics.jsonl").string()});
  EXPECT_NE(clash.errors[0].find("the same file"), std::string::npos) << clash.errors[0];
}

// Clock offsets by Cristian's method on 4 thread ranks taken as on other
// hosts: they share one clock, so each estimate is 0 within its own bound
// (half the shortest round trip), and the bound is a round trip's, small.
TEST(ClockOffsets, EachRanksOffsetIsZeroWithinItsBoundOnOneClock) {
  std::vector<ThreadRank> ranks = MakeThreadRanks({4, 1}, 30);
  std::vector<ClockOffsets> got(4);
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&, w] { got[w] = MeasureClockOffsets(*ranks[w].world, {1, 0, 0, 0}, 8); });
  }
  for (auto& t : threads) t.join();
  for (int w = 0; w < 4; ++w) {
    EXPECT_EQ(got[w].offset_s, got[0].offset_s) << "every rank has rank 0's";
    EXPECT_EQ(got[w].offset_s[0], 0.0);
  }
  for (int r = 1; r < 4; ++r) {
    EXPECT_LE(std::abs(got[0].offset_s[r]), got[0].bound_s[r] + 1e-9) << r;
    EXPECT_GT(got[0].bound_s[r], 0.0) << r;
    EXPECT_LT(got[0].bound_s[r], 1.0) << r;
  }
}

}  // namespace
}  // namespace baton
