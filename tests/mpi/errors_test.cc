// Setup errors under mpirun end the whole job quickly with exit code 2, the
// error printed exactly once (not once per rank), and nothing written: no
// metrics file, no weights file. Each case runs
//   timeout 60 mpirun -np N baton train CONFIG ...
// in its own temporary folder, so a job that hangs fails the test instead of
// blocking it.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "support/job.h"

namespace {

namespace fs = std::filesystem;

using baton_test::Count;
using baton_test::JobResult;
using baton_test::ReadAll;
using baton_test::Shell;
using baton_test::WriteFile;

// A fresh folder per test (tests may run in parallel processes).
class TrainErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) / ("baton_errors_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs `mpirun -np ranks baton train config <sets> --set log.metrics=... --set
  // log.weights=...` in dir_, under `timeout 60`.
  JobResult Train(int ranks, const std::string& config, const std::vector<std::string>& sets) {
    std::string cmd = "cd '" + dir_.string() + "' && timeout 60 '" BATON_MPIEXEC "' -np " + std::to_string(ranks) +
                      " '" BATON_BINARY "' train '" + config + "'";
    for (const std::string& s : sets) cmd += " --set '" + s + "'";
    cmd += " --set log.metrics=" + (dir_ / "metrics.jsonl").string();
    cmd += " --set log.weights=" + (dir_ / "weights.safetensors").string();
    cmd += " > '" + (dir_ / "log.txt").string() + "' 2>&1";
    last_command_ = cmd;
    return baton_test::RunJob(cmd, dir_ / "log.txt");
  }

  // The job failed as a setup error: exit code 2 (not a timeout: 124), one
  // error message, and no metrics or weights file.
  void ExpectCleanFailure(const JobResult& r) {
    EXPECT_NE(r.code, 0) << last_command_ << "\n" << r.output;
    EXPECT_NE(r.code, 124) << "the job hung until `timeout 60` killed it\n" << last_command_ << "\n" << r.output;
    EXPECT_EQ(r.code, 2) << last_command_ << "\n" << r.output;
    EXPECT_EQ(Count(r.output, "baton: error"), 1u) << last_command_ << "\n" << r.output;
    EXPECT_FALSE(fs::exists(dir_ / "metrics.jsonl")) << "a failed job left a metrics file\n" << r.output;
    EXPECT_FALSE(fs::exists(dir_ / "weights.safetensors")) << "a failed job left a weights file\n" << r.output;
    EXPECT_LT(r.seconds, 60.0);
  }

  std::string Tiny() const { return BATON_SOURCE_DIR "/tests/mpi/tiny.yaml"; }

  fs::path dir_;
  std::string last_command_;
};

TEST_F(TrainErrors, RanksDoNotMatchTheJob) {
  const JobResult r = Train(2, Tiny(), {"pipeline.ranks=4"});
  ExpectCleanFailure(r);
  EXPECT_NE(r.output.find("pipeline.ranks is 4 but the job has 2 ranks"), std::string::npos) << r.output;
}

TEST_F(TrainErrors, ReplicasTimesRanksDoNotMatchTheJob) {
  const JobResult r = Train(3, Tiny(), {"pipeline.ranks=2", "data_parallel.size=2", "pipeline.microbatches=4"});
  ExpectCleanFailure(r);
  EXPECT_NE(r.output.find("pipeline.ranks 2 x data_parallel.size 2 = 4 ranks, but the job has 3 (mpirun -np 4)"),
            std::string::npos)
      << r.output;
}

TEST_F(TrainErrors, UnknownKeyInTheConfig) {
  WriteFile(dir_ / "typo.yaml", R"(model:
  layers: [{type: linear, out: 8}, {type: relu}, {type: linear, out: 4}]
pipeline:
  ranks: 2
  microbatchs: 4
data: {dataset: synthetic, samples: 64, features: 12, classes: 4}
train: {batch_size: 16, steps: 1}
)");
  const JobResult r = Train(2, "typo.yaml", {});
  ExpectCleanFailure(r);
  EXPECT_NE(r.output.find("typo.yaml:5:3: unknown key 'pipeline.microbatchs'; did you mean 'microbatches'?"),
            std::string::npos)
      << r.output;
}

TEST_F(TrainErrors, FashionMnistFolderIsEmpty) {
  fs::create_directories(dir_ / "empty");
  WriteFile(dir_ / "fmnist.yaml", R"(model:
  layers: [{type: linear, out: 16}, {type: relu}, {type: linear, out: 10}]
pipeline: {ranks: 2, microbatches: 2}
data: {dataset: fashion_mnist, path: empty}
train: {batch_size: 8, steps: 1}
)");
  const JobResult r = Train(2, "fmnist.yaml", {});
  ExpectCleanFailure(r);
  EXPECT_NE(r.output.find("empty/train-images-idx3-ubyte.gz' not found"), std::string::npos) << r.output;
}

// Writes `bytes` gzip-compressed to `path` (through the gzip tool).
void WriteGzip(const fs::path& path, const std::vector<unsigned char>& bytes) {
  const fs::path raw = path.string() + ".raw";
  {
    std::ofstream out(raw, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  ASSERT_EQ(Shell("gzip -n -c '" + raw.string() + "' > '" + path.string() + "'"), 0);
  fs::remove(raw);
}

void PutBigEndian(std::vector<unsigned char>& v, std::uint32_t x) {
  for (int shift = 24; shift >= 0; shift -= 8) v.push_back(static_cast<unsigned char>(x >> shift));
}

// A setup error on a rank other than 0 is printed once, by that rank. Here
// the labels file's payload is short; only the last stage's rank (rank 1)
// reads label payloads, rank 0 reads only the headers and succeeds.
TEST_F(TrainErrors, DataErrorOnlyOnTheLastRankIsPrintedOnce) {
  fs::create_directories(dir_ / "short");
  constexpr std::uint32_t kSamples = 64;
  std::vector<unsigned char> images, labels;
  PutBigEndian(images, 0x00000803);
  PutBigEndian(images, kSamples);
  PutBigEndian(images, 28);
  PutBigEndian(images, 28);
  images.resize(images.size() + kSamples * 784, 0);
  PutBigEndian(labels, 0x00000801);
  PutBigEndian(labels, kSamples);
  labels.resize(labels.size() + 10, 1);  // 10 of the 64 labels
  WriteGzip(dir_ / "short" / "train-images-idx3-ubyte.gz", images);
  WriteGzip(dir_ / "short" / "train-labels-idx1-ubyte.gz", labels);
  WriteFile(dir_ / "fmnist.yaml", R"(model:
  layers: [{type: linear, out: 16}, {type: relu}, {type: linear, out: 10}]
pipeline: {ranks: 2, microbatches: 2}
data: {dataset: fashion_mnist, path: short, evaluate: false}
train: {batch_size: 8, steps: 1}
)");
  const JobResult r = Train(2, "fmnist.yaml", {});
  ExpectCleanFailure(r);
  EXPECT_NE(r.output.find("short/train-labels-idx1-ubyte.gz' is truncated"), std::string::npos) << r.output;
}

TEST_F(TrainErrors, DeadlockingScheduleFile) {
  // Rank 0 waits for the gradient of microbatch 0 while rank 1 waits for the
  // forward of microbatch 1.
  WriteFile(dir_ / "deadlock.csv", "0F0,0B0,0F1,0B1\n1F1,1B1,1F0,1B0\n");
  const JobResult r =
      Train(2, Tiny(),
            {"pipeline.ranks=2", "pipeline.microbatches=2", "pipeline.schedule=" + (dir_ / "deadlock.csv").string()});
  ExpectCleanFailure(r);
  EXPECT_NE(r.output.find("deadlock"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rank 0, position 1 (0B0)"), std::string::npos) << r.output;
}

TEST_F(TrainErrors, MicrobatchesDoNotDivideTheBatch) {
  const JobResult r = Train(2, Tiny(), {"pipeline.ranks=2", "pipeline.microbatches=5"});
  ExpectCleanFailure(r);
  EXPECT_NE(r.output.find("(--set pipeline.microbatches): pipeline.microbatches: 5 microbatches do not divide "
                          "train.batch_size 32"),
            std::string::npos)
      << r.output;
}

// An unwritable metrics file is a setup error agreed by every rank: the job
// ends at once with exit code 2 (the lowered deadline makes a regression fail
// fast instead of hanging).
TEST_F(TrainErrors, UnwritableMetricsFileEndsTheJobCleanly) {
  fs::create_directories(dir_ / "metrics.jsonl");  // a folder where the file should go
  const JobResult r = Train(2, Tiny(), {"pipeline.ranks=2", "pipeline.wait_timeout_s=10"});
  EXPECT_NE(r.code, 124) << "the job hung\n" << r.output;
  EXPECT_EQ(r.code, 2) << last_command_ << "\n" << r.output;
  EXPECT_EQ(Count(r.output, "baton: error"), 1u) << r.output;
  EXPECT_EQ(Count(r.output, "timed out waiting"), 0u) << r.output;
  EXPECT_NE(r.output.find("log.metrics: " + (dir_ / "metrics.jsonl").string() + ": is a folder, not a file"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(dir_ / "weights.safetensors")) << r.output;
  EXPECT_LT(r.seconds, 10.0) << r.output;
}

TEST_F(TrainErrors, MissingConfigFile) {
  const JobResult r = Train(2, "absent.yaml", {});
  ExpectCleanFailure(r);
  EXPECT_NE(r.output.find("absent.yaml: no such config file"), std::string::npos) << r.output;
}

TEST_F(TrainErrors, BadSetOnTheCommandLine) {
  const JobResult r = Train(2, Tiny(), {"pipeline.ranks=2", "train.batch_size=zero"});
  ExpectCleanFailure(r);
  EXPECT_NE(r.output.find("(--set train.batch_size): train.batch_size: expected an integer, got 'zero'"),
            std::string::npos)
      << r.output;
}

// The positive counterpart: the same tiny config trains on 2 ranks and
// writes both files where log.* says (so the checks above can fail).
TEST_F(TrainErrors, ValidConfigTrainsAndWritesBothFiles) {
  const JobResult r = Train(2, Tiny(), {"pipeline.ranks=2"});
  EXPECT_EQ(r.code, 0) << last_command_ << "\n" << r.output;
  EXPECT_EQ(Count(r.output, "error"), 0u) << r.output;
  EXPECT_TRUE(fs::exists(dir_ / "metrics.jsonl")) << r.output;
  EXPECT_TRUE(fs::exists(dir_ / "weights.safetensors")) << r.output;
}

TEST_F(TrainErrors, MoreStagesThanLayers) {
  const JobResult r = Train(2, Tiny(), {"pipeline.ranks=2", "pipeline.schedule=interleaved_1f1b", "pipeline.chunks=5"});
  ExpectCleanFailure(r);
  EXPECT_NE(r.output.find("pipeline needs 10 stages (2 ranks x 5 chunks) but the model has only 9 layers; every "
                          "stage needs at least one layer"),
            std::string::npos)
      << r.output;
}

TEST_F(TrainErrors, PartitionForTheWrongNumberOfStages) {
  const JobResult r = Train(2, Tiny(), {"pipeline.ranks=2", "pipeline.partition=[3, 3, 3]"});
  ExpectCleanFailure(r);
  EXPECT_NE(r.output.find("pipeline.partition lists 3 stages, but the pipeline has 2 (2 ranks x 1 chunks)"),
            std::string::npos)
      << r.output;
}

TEST_F(TrainErrors, InitialWeightsFileIsMissing) {
  const JobResult r = Train(2, Tiny(), {"pipeline.ranks=2", "model.init.from=" + (dir_ / "none.safetensors").string()});
  ExpectCleanFailure(r);
  EXPECT_NE(r.output.find("none.safetensors"), std::string::npos) << r.output;
}

TEST_F(TrainErrors, CheckpointEveryStepsWithoutAFolder) {
  const JobResult r = Train(2, Tiny(), {"pipeline.ranks=2", "checkpoint.every_steps=2"});
  ExpectCleanFailure(r);
  EXPECT_NE(r.output.find("checkpoint.every_steps: needs checkpoint.dir"), std::string::npos) << r.output;
}

TEST_F(TrainErrors, CudaDeviceWhereThereIsNone) {
  // Without the CUDA backend, or without a GPU: one clear error, exit 2.
  const JobResult r = Train(2, Tiny(), {"pipeline.ranks=2", "device=cuda"});
  ExpectCleanFailure(r);
  const bool explained =
      r.output.find("device: cuda: this baton was built without the CUDA backend") != std::string::npos ||
      r.output.find("sees no CUDA device") != std::string::npos;
  EXPECT_TRUE(explained) << r.output;
}

// device: cuda loads the CUDA backend module; one that is not where it is
// looked for, or is not baton's module, is one clear error naming the file.
TEST_F(TrainErrors, CudaModuleThatIsMissingOrForeignIsNamed) {
  auto train = [&](const std::string& module) {
    return Shell("cd '" + dir_.string() + "' && BATON_CUDA_MODULE='" + module + "' timeout 60 '" BATON_MPIEXEC
                 "' -np 1 -x BATON_CUDA_MODULE '" BATON_BINARY "' train '" + Tiny() +
                 "' --set device=cuda > log.txt 2>&1");
  };
  const std::string missing = (dir_ / "nowhere" / "libbaton_cuda.so").string();
  EXPECT_EQ(train(missing), 2);
  std::string log = ReadAll(dir_ / "log.txt");
  EXPECT_NE(log.find("device: cuda: "), std::string::npos) << log;
  EXPECT_NE(log.find(missing), std::string::npos) << log;  // where it looked
  EXPECT_EQ(Count(log, "baton: error"), 1u) << log;
  // A shared object that is not the module (zlib's).
  const std::string foreign = (dir_ / "libbaton_cuda.so").string();
  fs::copy_file(ZLIB_LIBRARY, foreign);
  EXPECT_EQ(train(foreign), 2);
  log = ReadAll(dir_ / "log.txt");
  EXPECT_NE(log.find(foreign + " is not baton's CUDA backend module"), std::string::npos) << log;
}

TEST(Validate, TinyConfigIsValidAndPrintsThePlan) {
  const fs::path log = fs::path(::testing::TempDir()) / ("baton_validate_" + std::to_string(::getpid()) + ".txt");
  const std::string cmd =
      "timeout 60 '" BATON_BINARY "' validate '" BATON_SOURCE_DIR "/tests/mpi/tiny.yaml' > '" + log.string() + "' 2>&1";
  const int code = Shell(cmd);
  const std::string out = ReadAll(log);
  fs::remove(log);
  EXPECT_EQ(code, 0) << cmd << "\n" << out;
  EXPECT_NE(out.find("ok: " BATON_SOURCE_DIR "/tests/mpi/tiny.yaml is valid"), std::string::npos) << out;
  EXPECT_NE(out.find("# plan: 1 ranks, schedule 1f1b (1 stages, 8 microbatches of 4 samples)"), std::string::npos)
      << out;
  EXPECT_NE(out.find("#   stage 0 on rank 0: layers 0..8, ring capacity 1 microbatches"), std::string::npos) << out;
  EXPECT_EQ(Count(out, "error"), 0u) << out;
}

TEST(Validate, TwoRanksPlanMapsEachStageToItsRank) {
  const fs::path log = fs::path(::testing::TempDir()) / ("baton_validate2_" + std::to_string(::getpid()) + ".txt");
  const std::string cmd = "timeout 60 '" BATON_BINARY "' validate '" BATON_SOURCE_DIR
                          "/tests/mpi/tiny.yaml' --set pipeline.ranks=2 --set pipeline.schedule=interleaved_1f1b "
                          "--set pipeline.chunks=2 > '" +
                          log.string() + "' 2>&1";
  const int code = Shell(cmd);
  const std::string out = ReadAll(log);
  fs::remove(log);
  EXPECT_EQ(code, 0) << cmd << "\n" << out;
  EXPECT_NE(out.find("ok: "), std::string::npos) << out;
  EXPECT_NE(out.find("# plan: 2 ranks, schedule interleaved_1f1b (4 stages"), std::string::npos) << out;
  // Interleaved: stage s on rank s mod 2.
  EXPECT_NE(out.find("#   stage 0 on rank 0:"), std::string::npos) << out;
  EXPECT_NE(out.find("#   stage 1 on rank 1:"), std::string::npos) << out;
  EXPECT_NE(out.find("#   stage 2 on rank 0:"), std::string::npos) << out;
  EXPECT_NE(out.find("#   stage 3 on rank 1:"), std::string::npos) << out;
}

}  // namespace
