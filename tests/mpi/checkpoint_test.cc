// Checkpoints under mpirun: a run resumed at step k ends bit-identical to an
// uninterrupted one; a damaged, missing or mismatched checkpoint is refused
// with a message; an unfinished newest checkpoint falls back to the previous.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <chrono>
#include <random>
#include <thread>
#include <csignal>
#include <string>
#include <vector>

#include "baton/data.h"

namespace {

namespace fs = std::filesystem;

const char* kCommon =
    " --set pipeline.ranks=2 --set pipeline.schedule=zb_h1 --set data.shuffle=true --set data.samples=128"
    " --set 'train.optimizer={type: adamw, lr: 0.01}' --set checkpoint.every_steps=2 --set checkpoint.keep=2";

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) / ("baton_ckpt_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs the tiny config on 2 ranks; returns the exit code.
  int Train(const std::string& args) { return TrainOn(2, args); }
  // The same on `np` ranks (data parallelism: --set data_parallel.size in
  // `args`), with BATON_FAULT=fault if any (a run interrupted on purpose).
  int TrainOn(int np, const std::string& args, const std::string& fault = "") {
    const std::string env = fault.empty() ? "" : "BATON_FAULT='" + fault + "' ";
    const std::string cmd = "cd '" + dir_.string() + "' && " + env + "timeout 120 '" BATON_MPIEXEC "' -np " +
                            std::to_string(np) + " '" + BATON_BINARY +
                            "' train '" BATON_SOURCE_DIR "/tests/mpi/tiny.yaml'" + kCommon + " " + args +
                            " > log.txt 2>&1";
    const int status = std::system(cmd.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  std::string Read(const std::string& name) {
    std::ifstream in(dir_ / name, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }

  // The last run resumed after step 6 and ended with the uninterrupted
  // run's weights (whole.safetensors), bit for bit (resumed.safetensors).
  void ExpectResumedLikeWhole() {
    EXPECT_NE(Read("log.txt").find("resumed after step 6"), std::string::npos) << Read("log.txt");
    const std::string whole = Read("whole.safetensors");
    ASSERT_FALSE(whole.empty());
    EXPECT_EQ(Read("resumed.safetensors"), whole);
  }

  // Every tensor of two weight files within 1e-5 of the first's largest magnitude.
  void ExpectClose(const std::string& a, const std::string& b) {
    const auto x = baton::ReadSafetensors((dir_ / a).string());
    const auto y = baton::ReadSafetensors((dir_ / b).string());
    ASSERT_EQ(x.size(), y.size());
    for (std::size_t t = 0; t < x.size(); ++t) {
      double scale = 0, diff = 0;
      for (std::size_t k = 0; k < x[t].data.size(); ++k) {
        scale = std::max(scale, double(std::abs(x[t].data[k])));
        diff = std::max(diff, double(std::abs(y[t].data[k] - x[t].data[k])));
      }
      EXPECT_LE(diff, 1e-5 * scale) << x[t].name;
    }
  }

  fs::path dir_;
};

TEST_F(CheckpointTest, ResumedRunIsBitIdenticalToAnUninterruptedOne) {
  ASSERT_EQ(Train("--set train.steps=10 --set checkpoint.dir=ck_whole --set log.weights=whole.safetensors"), 0)
      << Read("log.txt");
  // Two uninterrupted runs agree to the bit: the runs are reproducible.
  ASSERT_EQ(Train("--set train.steps=10 --set checkpoint.dir=ck_again --set log.weights=again.safetensors"), 0)
      << Read("log.txt");
  EXPECT_EQ(Read("again.safetensors"), Read("whole.safetensors"));
  // Killed in step 7 (checkpoints at 2, 4, 6), then resumed to 10. A run
  // resumes only itself: the same settings, train.steps included.
  ASSERT_NE(TrainOn(2, "--set train.steps=10 --set checkpoint.dir=ck --set log.weights=part.safetensors", "0:7:F:kill"),
            0)
      << Read("log.txt");
  EXPECT_FALSE(fs::exists(dir_ / "part.safetensors"));
  EXPECT_TRUE(fs::exists(dir_ / "ck/step-00000006/manifest.json"));
  EXPECT_TRUE(fs::exists(dir_ / "ck/step-00000004/manifest.json"));
  EXPECT_FALSE(fs::exists(dir_ / "ck/step-00000002")) << "keep: 2 keeps only the newest two";
  ASSERT_EQ(Train("--set train.steps=10 --set checkpoint.dir=ck --set log.weights=resumed.safetensors --resume"), 0)
      << Read("log.txt");
  ExpectResumedLikeWhole();
}

TEST_F(CheckpointTest, UnfinishedNewestCheckpointFallsBackToThePrevious) {
  ASSERT_EQ(Train("--set train.steps=10 --set checkpoint.dir=ck_whole --set log.weights=whole.safetensors"), 0)
      << Read("log.txt");
  ASSERT_NE(TrainOn(2, "--set train.steps=10 --set checkpoint.dir=ck", "0:7:F:kill"), 0) << Read("log.txt");
  // A crash between the shards and the manifest: step 6 has shards, no manifest.
  fs::remove(dir_ / "ck/step-00000006/manifest.json");
  ASSERT_EQ(Train("--set train.steps=10 --set checkpoint.dir=ck --set log.weights=resumed.safetensors --resume ck"), 0)
      << Read("log.txt");
  EXPECT_NE(Read("log.txt").find("resumed after step 4"), std::string::npos) << Read("log.txt");
  EXPECT_EQ(Read("resumed.safetensors"), Read("whole.safetensors"));
}

TEST_F(CheckpointTest, MismatchedCheckpointIsRefusedSayingWhatDiffers) {
  ASSERT_NE(TrainOn(2, "--set train.steps=4 --set checkpoint.dir=ck", "0:3:F:kill"), 0) << Read("log.txt");
  EXPECT_EQ(Train("--set train.steps=4 --set checkpoint.dir=ck --set pipeline.microbatches=4 --resume"), 2);
  EXPECT_NE(Read("log.txt").find("cannot resume: the checkpoint does not match this run"), std::string::npos)
      << Read("log.txt");
  EXPECT_NE(Read("log.txt").find("microbatches: checkpoint 8, this run 4"), std::string::npos) << Read("log.txt");
  // Each setting that differs, by its key.
  EXPECT_EQ(Train("--set train.steps=4 --set checkpoint.dir=ck --set train.optimizer.lr=0.02 --resume"), 2);
  EXPECT_NE(Read("log.txt").find("train.optimizer: checkpoint {type: adamw, lr: 0.01"), std::string::npos)
      << Read("log.txt");
  EXPECT_NE(Read("log.txt").find("this run {type: adamw, lr: 0.02"), std::string::npos) << Read("log.txt");
  EXPECT_EQ(Train("--set train.steps=8 --set checkpoint.dir=ck --resume"), 2);
  EXPECT_NE(Read("log.txt").find("train.steps: checkpoint 4, this run 8"), std::string::npos) << Read("log.txt");
  // The deadline changes no number: it may change on resume.
  EXPECT_EQ(Train("--set train.steps=4 --set checkpoint.dir=ck --set pipeline.wait_timeout_s=77 --resume"), 0)
      << Read("log.txt");
  EXPECT_NE(Read("log.txt").find("resumed after step 2"), std::string::npos) << Read("log.txt");
}

TEST_F(CheckpointTest, DamagedOrMissingCheckpointIsAnError) {
  EXPECT_EQ(Train("--set train.steps=4 --set checkpoint.dir=nothing --resume"), 2);
  EXPECT_NE(Read("log.txt").find("no complete checkpoint to resume from"), std::string::npos) << Read("log.txt");
  ASSERT_NE(TrainOn(2, "--set train.steps=4 --set checkpoint.dir=ck", "0:3:F:kill"), 0) << Read("log.txt");
  fs::resize_file(dir_ / "ck/step-00000002/rank-00001.safetensors", 100);
  EXPECT_EQ(Train("--set train.steps=4 --set checkpoint.dir=ck --resume"), 2);
  EXPECT_NE(Read("log.txt").find("it is damaged"), std::string::npos) << Read("log.txt");
  EXPECT_NE(Read("log.txt").find("rank-00001.safetensors"), std::string::npos) << Read("log.txt");
  // A missing shard: one agreed message naming it (no rank aborts the job).
  fs::remove(dir_ / "ck/step-00000002/rank-00001.safetensors");
  EXPECT_EQ(Train("--set train.steps=4 --set checkpoint.dir=ck --resume"), 2);
  EXPECT_NE(Read("log.txt").find("rank-00001.safetensors: the checkpoint shard of pipeline rank 1 is missing"),
            std::string::npos)
      << Read("log.txt");
  EXPECT_EQ(Read("log.txt").find("MPI_ABORT"), std::string::npos) << Read("log.txt");
}

// Two replicas of a 2-rank pipeline, optimizer state sharded (ZeRO 1): the
// first replica writes one shard per pipeline rank (the sharded state
// gathered into it), and a resumed run is bit-identical to an
// uninterrupted one.
const char* kTwoByTwo = " --set data_parallel.size=2 --set data_parallel.zero=1 --set data_parallel.bucket_cap_mb=0.001";

TEST_F(CheckpointTest, DataParallelResumeIsBitIdentical) {
  ASSERT_EQ(TrainOn(4, std::string(kTwoByTwo) +
                           " --set train.steps=10 --set checkpoint.dir=ck_whole --set log.weights=whole.safetensors"),
            0)
      << Read("log.txt");
  ASSERT_NE(TrainOn(4, std::string(kTwoByTwo) + " --set train.steps=10 --set checkpoint.dir=ck", "0:7:F:kill"), 0)
      << Read("log.txt");
  // One shard per pipeline rank: the replicas write no copies.
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir_ / "ck/step-00000006")) files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"manifest.json", "rank-00000.safetensors", "rank-00001.safetensors"}));
  EXPECT_NE(Read("ck/step-00000006/manifest.json").find("\"data_parallel\": 2"), std::string::npos);
  ASSERT_EQ(TrainOn(4, std::string(kTwoByTwo) +
                           " --set train.steps=10 --set checkpoint.dir=ck --set log.weights=resumed.safetensors --resume"),
            0)
      << Read("log.txt");
  ExpectResumedLikeWhole();
}

// ZeRO 3: the parameters rest as shards; a checkpoint gathers them whole,
// and a resumed run scatters them back and is bit-identical.
const char* kTwoByTwoZero3 = " --set data_parallel.size=2 --set data_parallel.zero=3";

TEST_F(CheckpointTest, ShardedParametersResumeBitIdentical) {
  ASSERT_EQ(TrainOn(4, std::string(kTwoByTwoZero3) +
                           " --set train.steps=10 --set checkpoint.dir=ck_whole --set log.weights=whole.safetensors"),
            0)
      << Read("log.txt");
  ASSERT_NE(TrainOn(4, std::string(kTwoByTwoZero3) + " --set train.steps=10 --set checkpoint.dir=ck", "2:7:F:kill"), 0)
      << Read("log.txt");
  EXPECT_NE(Read("ck/step-00000006/manifest.json").find("\"zero\": 3"), std::string::npos);
  ASSERT_EQ(TrainOn(4, std::string(kTwoByTwoZero3) +
                           " --set train.steps=10 --set checkpoint.dir=ck --set log.weights=resumed.safetensors --resume"),
            0)
      << Read("log.txt");
  ExpectResumedLikeWhole();
}

// A checkpoint holds whole tensors whatever ZeRO stage and D wrote it: one
// written at ZeRO 3 over 2 replicas resumes with one replica, and one at
// ZeRO 1 resumes at ZeRO 2 and at 3, each the same training up to the
// order of the gradients' sums.
TEST_F(CheckpointTest, CheckpointsMoveBetweenZeroStagesAndReplicaCounts) {
  ASSERT_EQ(TrainOn(4, std::string(kTwoByTwo) +
                           " --set train.steps=10 --set checkpoint.dir=ck_whole --set log.weights=whole.safetensors"),
            0)
      << Read("log.txt");
  struct Move {
    std::string from, to;
    int np_to;
  };
  const std::vector<Move> moves = {{kTwoByTwoZero3, "", 2},
                                   {kTwoByTwo, " --set data_parallel.size=2 --set data_parallel.zero=2", 4},
                                   {kTwoByTwo, kTwoByTwoZero3, 4}};
  for (const Move& m : moves) {
    SCOPED_TRACE(m.from + " -> " + m.to);
    fs::remove_all(dir_ / "ck");
    ASSERT_NE(TrainOn(4, m.from + " --set train.steps=10 --set checkpoint.dir=ck", "0:7:F:kill"), 0) << Read("log.txt");
    ASSERT_EQ(TrainOn(m.np_to, m.to + " --set train.steps=10 --set checkpoint.dir=ck --set log.weights=moved.safetensors "
                                      "--resume"),
              0)
        << Read("log.txt");
    EXPECT_NE(Read("log.txt").find("resumed after step 6"), std::string::npos) << Read("log.txt");
    ExpectClose("whole.safetensors", "moved.safetensors");
  }
}

// Preemption-safe stops: a stop signal on one rank (a scheduler's SIGTERM,
// here sent by BATON_FAULT's term mode) stops every rank at the next step
// boundary with a checkpoint of the last finished step and exit 75; run
// again with --resume auto, the run ends with the uninterrupted run's
// bytes. Signals in an input backward, in an F, inside a regular checkpoint
// (between shards and manifest) and before the first step.
TEST_F(CheckpointTest, AStopSignalCheckpointsAtAStepBoundaryAndResumeAutoContinues) {
  const std::string run = " --set train.steps=10 --set checkpoint.dir=ck --set checkpoint.resume=auto";
  ASSERT_EQ(Train("--set train.steps=10 --set checkpoint.dir=ck_whole --set log.weights=whole.safetensors"), 0)
      << Read("log.txt");
  struct Case {
    std::string fault;
    std::int64_t stopped_after;  // 0: before the first step
  };
  for (const Case& k : {Case{"1:6:I:term", 6}, Case{"0:3:F:term", 3}, Case{"1:4:checkpoint:term", 4},
                        Case{"0:1:start:term", 0}}) {
    SCOPED_TRACE(k.fault);
    fs::remove_all(dir_ / "ck");
    fs::remove(dir_ / "resumed.safetensors");
    EXPECT_EQ(TrainOn(2, run + " --set log.weights=resumed.safetensors", k.fault), 75) << Read("log.txt");
    const std::string log = Read("log.txt");
    EXPECT_FALSE(fs::exists(dir_ / "resumed.safetensors")) << "a stopped run writes no final weights";
    if (k.stopped_after > 0) {
      char step[32];
      std::snprintf(step, sizeof step, "step-%08lld", static_cast<long long>(k.stopped_after));
      EXPECT_NE(log.find("baton: stopped by SIGTERM after step " + std::to_string(k.stopped_after)), std::string::npos)
          << log;
      EXPECT_TRUE(fs::exists(dir_ / "ck" / step / "manifest.json")) << log;
    } else {
      EXPECT_NE(log.find("baton: stopped by SIGTERM before its first step: nothing to save"), std::string::npos) << log;
    }
    // Run again, as a requeued job would, with nothing changed.
    ASSERT_EQ(TrainOn(2, run + " --set log.weights=resumed.safetensors"), 0) << Read("log.txt");
    if (k.stopped_after > 0) {
      EXPECT_NE(Read("log.txt").find("resumed after step " + std::to_string(k.stopped_after)), std::string::npos)
          << Read("log.txt");
    }
    EXPECT_EQ(Read("resumed.safetensors"), Read("whole.safetensors"));
  }
}

// A signal during an epoch's evaluation (the tiny GPT on a corpus of 40
// fortunes: epochs of 17 steps, each ending with the validation loss)
// stops the run after that epoch's last step; resumed, it ends as an
// uninterrupted run does.
TEST_F(CheckpointTest, AStopSignalDuringAnEvaluationStopsAfterIt) {
  {
    fs::create_directories(dir_ / "corpus");
    std::ofstream corpus(dir_ / "corpus" / "tiny");
    const char* words[] = {"pipeline", "stage", "bubble", "rank", "schedule", "gradient", "microbatch", "signal"};
    for (int f = 0; f < 40; ++f) {
      for (int w = 0; w < 8; ++w) corpus << (w ? " " : "") << words[(f * 7 + w * 3) % 8];
      corpus << "\n%\n";
    }
  }
  const std::string gpt = " --set pipeline.ranks=2 --set 'data={dataset: fortunes, path: corpus, seq_len: 8}' "
                          "--set model.vocab=256 --set train.steps=30 --set checkpoint.dir=ck --set checkpoint.every_steps=100 "
                          "--set checkpoint.resume=auto";
  auto run = [&](const std::string& args, const std::string& fault) {
    const std::string env = fault.empty() ? "" : "BATON_FAULT='" + fault + "' ";
    const std::string cmd = "cd '" + dir_.string() + "' && " + env + "timeout 120 '" BATON_MPIEXEC "' -np 2 '" +
                            BATON_BINARY + "' train '" BATON_SOURCE_DIR "/tests/mpi/tiny_gpt.yaml'" + args +
                            " > log.txt 2>&1";
    const int status = std::system(cmd.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  ASSERT_EQ(run(gpt + " --set checkpoint.dir=ck_whole --set log.weights=whole.safetensors", ""), 0) << Read("log.txt");
  EXPECT_NE(Read("metrics.jsonl").find("validation_loss"), std::string::npos) << Read("metrics.jsonl");
  EXPECT_EQ(run(gpt + " --set log.weights=resumed.safetensors", "1:17:evaluate:term"), 75) << Read("log.txt");
  EXPECT_NE(Read("log.txt").find("baton: stopped by SIGTERM after step 17"), std::string::npos) << Read("log.txt");
  ASSERT_EQ(run(gpt + " --set log.weights=resumed.safetensors", ""), 0) << Read("log.txt");
  EXPECT_NE(Read("log.txt").find("resumed after step 17"), std::string::npos) << Read("log.txt");
  EXPECT_EQ(Read("resumed.safetensors"), Read("whole.safetensors"));
}

// A scheduler's signals at a random moment of a real job: SIGUSR1 to
// mpirun (which hands it to every rank), and a second one right after it
// while the ranks agree and checkpoint. The job stops within a step and a
// checkpoint, exits 75, and run again with --resume auto ends with the
// uninterrupted run's bytes.
TEST_F(CheckpointTest, SignalsAtARandomMomentCostAtMostAStep) {
  const std::string run = " --set train.steps=40000 --set log.every_steps=1000 --set checkpoint.dir=ck "
                          "--set checkpoint.every_steps=20000 --set checkpoint.resume=auto";
  ASSERT_EQ(Train(" --set train.steps=40000 --set checkpoint.dir=ck_whole --set checkpoint.every_steps=20000 "
                  "--set log.weights=whole.safetensors"),
            0)
      << Read("log.txt");
  std::random_device random;
  const int delay_ms = 200 + static_cast<int>(random() % 700);
  SCOPED_TRACE("signal after " + std::to_string(delay_ms) + " ms");
  const std::string cmd = "cd '" + dir_.string() + "' && exec '" BATON_MPIEXEC "' -np 2 '" BATON_BINARY
                          "' train '" BATON_SOURCE_DIR "/tests/mpi/tiny.yaml'" + std::string(kCommon) + run +
                          " --set log.weights=resumed.safetensors > log.txt 2>&1";
  const pid_t job = fork();
  ASSERT_GE(job, 0);
  if (job == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
  ::kill(job, SIGUSR1);
  const auto signalled = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  ::kill(job, SIGUSR1);
  int status = 0;
  ASSERT_EQ(waitpid(job, &status, 0), job);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - signalled).count();
  ASSERT_TRUE(WIFEXITED(status)) << Read("log.txt");
  const std::string log = Read("log.txt");
  if (log.find("baton: stopped by SIGUSR1") == std::string::npos) {
    // The run can end before the signal on a fast machine: then nothing to test.
    ASSERT_EQ(WEXITSTATUS(status), 0) << log;
    GTEST_SKIP() << "the run ended before the signal (" << delay_ms << " ms)";
  }
  EXPECT_EQ(WEXITSTATUS(status), 75) << log;
  EXPECT_LT(seconds, 5.0) << log;
  std::printf("stopped %.3f s after the signal\n", seconds);
  // Stopped after a step: its checkpoint is resumed; during start-up: nothing was saved.
  const bool stepped = log.find("baton: stopped by SIGUSR1 after step") != std::string::npos;
  ASSERT_EQ(TrainOn(2, run + " --set log.weights=resumed.safetensors"), 0) << Read("log.txt");
  EXPECT_EQ(Read("log.txt").find("resumed after step") != std::string::npos, stepped) << log << Read("log.txt");
  EXPECT_EQ(Read("resumed.safetensors"), Read("whole.safetensors"));
}

// A stop at the step the test chose, on any machine: BATON_FAULT's wait
// holds rank 1 at step 5's forward until mpirun hands it the signal; the
// job stops after step 5 (exit 75), and the same command again, fault and
// all (as a requeued job repeats its environment), resumes after step 5
// without injecting it again and ends with the uninterrupted run's bytes.
TEST_F(CheckpointTest, WaitFaultStopsAtTheChosenStepAndTheResumeSkipsIt) {
  const std::string run = " --set train.steps=12 --set checkpoint.dir=ck --set checkpoint.every_steps=100 "
                          "--set checkpoint.resume=auto --set log.weights=resumed.safetensors";
  ASSERT_EQ(Train(" --set train.steps=12 --set checkpoint.dir=ck_whole --set log.weights=whole.safetensors"), 0)
      << Read("log.txt");
  const std::string cmd = "cd '" + dir_.string() + "' && BATON_FAULT=1:5:F:wait exec '" BATON_MPIEXEC
                          "' -np 2 '" BATON_BINARY "' train '" BATON_SOURCE_DIR "/tests/mpi/tiny.yaml'" +
                          std::string(kCommon) + run + " > log.txt 2>&1";
  const pid_t job = fork();
  ASSERT_GE(job, 0);
  if (job == 0) {
    execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // A guard against a hang only: the run reaches step 5 in well under a second.
  bool waiting = false;
  for (int i = 0; i < 1200 && !waiting; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    waiting = Read("log.txt").find("waiting for a stop signal") != std::string::npos;
  }
  ::kill(job, SIGUSR1);
  int status = 0;
  ASSERT_EQ(waitpid(job, &status, 0), job);
  const std::string log = Read("log.txt");
  ASSERT_TRUE(waiting) << log;
  ASSERT_TRUE(WIFEXITED(status)) << log;
  EXPECT_EQ(WEXITSTATUS(status), 75) << log;
  EXPECT_NE(log.find("baton: stopped by SIGUSR1 after step 5"), std::string::npos) << log;
  ASSERT_EQ(TrainOn(2, run, "1:5:F:wait"), 0) << Read("log.txt");
  EXPECT_NE(Read("log.txt").find("resumed after step 5"), std::string::npos) << Read("log.txt");
  EXPECT_NE(Read("log.txt").find("fault at step 5 is before this run (resumed after step 5)"), std::string::npos)
      << Read("log.txt");
  EXPECT_EQ(Read("resumed.safetensors"), Read("whole.safetensors"));
}

// checkpoint.resume: auto takes only a checkpoint of a run like this one,
// and needs a folder to look in.
TEST_F(CheckpointTest, ResumeAutoRefusesAnotherRunsCheckpointAndNeedsAFolder) {
  ASSERT_EQ(Train("--set train.steps=4 --set checkpoint.dir=ck"), 0) << Read("log.txt");
  EXPECT_EQ(Train("--set train.steps=4 --set checkpoint.dir=ck --set checkpoint.resume=auto "
                  "--set 'train.optimizer={type: sgd, lr: 0.5}'"),
            2);
  EXPECT_NE(Read("log.txt").find("cannot resume: the checkpoint does not match this run"), std::string::npos)
      << Read("log.txt");
  EXPECT_EQ(Train("--set checkpoint.resume=auto"), 2);
  EXPECT_NE(Read("log.txt").find("checkpoint.resume: auto needs checkpoint.dir"), std::string::npos) << Read("log.txt");
  EXPECT_EQ(Train("--set checkpoint.resume=later"), 2);
  EXPECT_NE(Read("log.txt").find("checkpoint.resume: 'later' is not one of: never, auto"), std::string::npos)
      << Read("log.txt");
}

// A checkpoint holds the whole optimizer state whatever D wrote it, so a
// run with another replica count (or none) resumes from it: the same
// training, up to the order of the gradients' sums.
TEST_F(CheckpointTest, DataParallelCheckpointResumesWithAnotherReplicaCount) {
  ASSERT_EQ(TrainOn(4, std::string(kTwoByTwo) +
                           " --set train.steps=10 --set checkpoint.dir=ck_whole --set log.weights=whole.safetensors"),
            0)
      << Read("log.txt");
  ASSERT_NE(TrainOn(4, std::string(kTwoByTwo) + " --set train.steps=10 --set checkpoint.dir=ck", "0:7:F:kill"), 0)
      << Read("log.txt");
  ASSERT_EQ(Train("--set train.steps=10 --set checkpoint.dir=ck --set log.weights=one.safetensors --resume"), 0)
      << Read("log.txt");
  EXPECT_NE(Read("log.txt").find("resumed after step 6"), std::string::npos) << Read("log.txt");
  ExpectClose("whole.safetensors", "one.safetensors");
}

}  // namespace
