// Hostile-but-honest input against the whole program, family by family
// (checkpoints, outputs, write failures, memory, numbers, faults, start-up,
// data, schedule files, initial weights): every case ends with one clear
// error and a non-zero exit, loses and overwrites no file, and ends before
// its deadline. Each case runs
//   timeout 60 mpirun -np N baton train CONFIG ...
// in a folder of its own, so a job that hangs fails the case instead of
// blocking the suite.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "baton/data.h"
#include "support/job.h"
#include "support/test_folder.h"

namespace {

namespace fs = std::filesystem;

using baton_test::Count;
using baton_test::ReadAll;
using baton_test::WriteFile;
using Job = baton_test::JobResult;

// Every file under `dir` (but the job's log) with its size and a hash of
// its bytes: to show that a failed run changed nothing.
std::vector<std::string> Snapshot(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    const std::string name = fs::relative(e.path(), dir).string();
    if (!e.is_regular_file() || name == "log.txt") continue;
    const std::string bytes = ReadAll(e.path());
    out.push_back(name + " " + std::to_string(bytes.size()) + " " + std::to_string(std::hash<std::string>{}(bytes)));
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Each metrics line a JSON object (no NaN, no cut line); the rows.
std::vector<nlohmann::json> MetricsRows(const fs::path& path) {
  std::vector<nlohmann::json> rows;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    nlohmann::json row;
    EXPECT_NO_THROW(row = nlohmann::json::parse(line)) << path << ": not JSON: " << line;
    rows.push_back(row);
  }
  return rows;
}

class Hostile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = baton_test::FreshTestFolder("baton_hostile");
  }
  void TearDown() override { fs::remove_all(dir_); }

  // `mpirun -np ranks baton train CONFIG ARGS` in dir_ under `timeout 60`,
  // with `env` before it (BATON_FAULT=...); `config` defaults to the tiny MLP.
  Job Train(int ranks, const std::string& args, const std::string& env = "", std::string config = "") {
    if (config.empty()) config = Tiny();
    last_ = "cd '" + dir_.string() + "' && " + env + " timeout 60 '" BATON_MPIEXEC "' -np " + std::to_string(ranks) +
            " '" BATON_BINARY "' train '" + config + "' " + args + " > log.txt 2>&1";
    return Run(last_);
  }
  Job Run(const std::string& command) { return baton_test::RunJob(command, dir_ / "log.txt"); }

  // One error, exit code 2, well before any deadline.
  void ExpectRefused(const Job& j, const std::string& says) {
    EXPECT_EQ(j.code, 2) << last_ << "\n" << j.output;
    EXPECT_EQ(Count(j.output, "baton: error"), 1u) << j.output;
    EXPECT_NE(j.output.find(says), std::string::npos) << "expected: " << says << "\n" << j.output;
    EXPECT_LT(j.seconds, 30.0) << j.output;
  }

  static std::string Tiny() { return BATON_SOURCE_DIR "/tests/mpi/tiny.yaml"; }
  fs::path dir_;
  std::string last_;
};

const char* kCheckpoints = "--set pipeline.ranks=2 --set checkpoint.dir=ck --set checkpoint.every_steps=2 ";

// ---- checkpoints: a run owns its checkpoints ----

TEST_F(Hostile, AFreshRunRefusesAFolderHoldingAnEarlierRunsCheckpoints) {
  ASSERT_EQ(Train(2, std::string(kCheckpoints) + "--set train.steps=4").code, 0);
  const auto before = Snapshot(dir_);
  const Job j = Train(2, std::string(kCheckpoints) + "--set train.steps=6");
  ExpectRefused(j, "the folder holds 1 checkpoint folder(s) of an earlier run: step-00000004 (run ");
  EXPECT_NE(j.output.find("step 4 of 4)"), std::string::npos) << j.output;
  EXPECT_NE(j.output.find("continue that run with --resume"), std::string::npos) << j.output;
  EXPECT_EQ(Snapshot(dir_), before) << "the refused run changed a file";
}

// A finished run's last checkpoint resumes to no steps and writes the
// final weights, byte for byte the run's own: what a run whose weights
// could not be written at its end (its output folder lost mid-run) needs.
// Another length is not its run.
TEST_F(Hostile, AFinishedRunResumesToItsFinalWeightsAndAnotherLengthIsNotItsRun) {
  const std::string weights = "--set log.weights=out/w.safetensors ";
  ASSERT_EQ(Train(2, std::string(kCheckpoints) + weights + "--set train.steps=4").code, 0);
  const std::string written = ReadAll(dir_ / "out/w.safetensors");
  ASSERT_FALSE(written.empty());
  fs::remove_all(dir_ / "out");
  const auto before = Snapshot(dir_);
  const Job again = Train(2, std::string(kCheckpoints) + weights + "--set train.steps=4 --resume");
  EXPECT_EQ(again.code, 0) << again.output;
  EXPECT_NE(again.output.find("resumed after step 4 (run "), std::string::npos) << again.output;
  EXPECT_NE(again.output.find("its last step; writing its final weights"), std::string::npos) << again.output;
  EXPECT_EQ(ReadAll(dir_ / "out/w.safetensors"), written);
  fs::remove_all(dir_ / "out");
  EXPECT_EQ(Snapshot(dir_), before) << "resuming the last step changed the checkpoints or the metrics";
  ExpectRefused(Train(2, std::string(kCheckpoints) + "--set train.steps=3 --resume"),
                "train.steps: checkpoint 4, this run 3");
  EXPECT_EQ(Snapshot(dir_), before);
}

// The final weights cannot be written when the run ends (here a device
// that is always full; likewise a folder lost mid-run): one error that
// names the last checkpoint, and resuming it writes the weights the
// uninterrupted run writes.
TEST_F(Hostile, FinalWeightsThatCannotBeWrittenComeFromTheLastCheckpoint) {
  ASSERT_EQ(Train(2, "--set pipeline.ranks=2 --set train.steps=4 --set log.weights=whole.safetensors").code, 0);
  const Job lost = Train(2, std::string(kCheckpoints) + "--set train.steps=4 --set log.weights=/dev/full");
  ExpectRefused(lost, "The run's last checkpoint holds its final weights");
  EXPECT_NE(lost.output.find("--resume ck/step-00000004 to write them"), std::string::npos) << lost.output;
  const Job again =
      Train(2, std::string(kCheckpoints) + "--set train.steps=4 --set log.weights=w.safetensors --resume ck/step-00000004");
  ASSERT_EQ(again.code, 0) << again.output;
  EXPECT_EQ(ReadAll(dir_ / "w.safetensors"), ReadAll(dir_ / "whole.safetensors"));
}

TEST_F(Hostile, TwoRunsCannotWriteOneCheckpointFolder) {
  fs::create_directories(dir_ / "ck");
  // Another run's lock, as baton takes it (flock on ck/.baton-lock).
  const int fd = ::open((dir_ / "ck/.baton-lock").c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
  ExpectRefused(Train(2, std::string(kCheckpoints)), "another run is writing checkpoints into this folder");
  EXPECT_FALSE(fs::exists(dir_ / "metrics.jsonl"));
  ::close(fd);
  EXPECT_EQ(Train(2, std::string(kCheckpoints)).code, 0) << ReadAll(dir_ / "log.txt");
}

TEST_F(Hostile, AResumedRunNeverPrunesAnotherRunsCheckpoints) {
  // Run A killed in step 5 (checkpoints 2 and 4, keep 1: step 4 left).
  EXPECT_NE(Train(2, std::string(kCheckpoints) + "--set train.steps=8", "BATON_FAULT=0:5:F:kill").code, 0);
  ASSERT_TRUE(fs::exists(dir_ / "ck/step-00000004/manifest.json"));
  // Another run's checkpoint copied in beside it.
  ASSERT_EQ(Train(2, "--set pipeline.ranks=2 --set checkpoint.dir=other --set checkpoint.every_steps=2 "
                     "--set train.steps=2 --set log.weights=other.safetensors")
                .code,
            0);
  fs::copy(dir_ / "other/step-00000002", dir_ / "ck/step-00000002");
  const auto before = Snapshot(dir_ / "ck");
  ExpectRefused(Train(2, std::string(kCheckpoints) + "--set train.steps=8 --resume"),
                "the folder holds 1 checkpoint folder(s) of another run: step-00000002 (run ");
  EXPECT_EQ(Snapshot(dir_ / "ck"), before);
}

TEST_F(Hostile, AResumeFromANamedOlderStepContinuesThatStepAndKeepsTheLaterOnes) {
  const std::string ckpt = std::string(kCheckpoints) + "--set checkpoint.keep=3 --set train.steps=6 ";
  ASSERT_EQ(Train(2, ckpt + "--set checkpoint.dir=whole --set log.weights=whole.safetensors").code, 0);
  EXPECT_NE(Train(2, ckpt + "--set log.weights=part.safetensors", "BATON_FAULT=0:5:F:kill").code, 0);
  ASSERT_TRUE(fs::exists(dir_ / "ck/step-00000004/manifest.json"));
  const Job j = Train(2, ckpt + "--set log.weights=resumed.safetensors --resume ck/step-00000002");
  ASSERT_EQ(j.code, 0) << j.output;
  EXPECT_NE(j.output.find("resumed after step 2"), std::string::npos) << j.output;
  // The later checkpoint of the replaced future is kept, under another name.
  EXPECT_TRUE(fs::exists(dir_ / "ck/superseded-step-00000004/manifest.json")) << j.output;
  EXPECT_EQ(ReadAll(dir_ / "resumed.safetensors"), ReadAll(dir_ / "whole.safetensors"));
  // An unfinished step folder is not a checkpoint to resume.
  fs::remove(dir_ / "ck/step-00000006/manifest.json");
  ExpectRefused(Train(2, ckpt + "--resume ck/step-00000006"), "this checkpoint is unfinished");
}

// A manifest whose step was edited is not trusted: its folder's name and
// its shards' own step say otherwise, and nothing is resumed or changed.
TEST_F(Hostile, AnEditedManifestStepIsRefusedByItsFolderAndItsShards) {
  const std::string run = std::string(kCheckpoints) + "--set train.steps=8 --set checkpoint.keep=4 ";
  ASSERT_NE(Train(2, run, "BATON_FAULT=0:7:F:kill").code, 0);
  ASSERT_TRUE(fs::exists(dir_ / "ck/step-00000006/manifest.json"));
  const fs::path manifest = dir_ / "ck/step-00000006/manifest.json";
  std::string text = ReadAll(manifest);
  const std::size_t at = text.find("\"step\": 6");
  ASSERT_NE(at, std::string::npos) << text;
  text.replace(at, 9, "\"step\": 7");
  WriteFile(manifest, text);
  const auto before = Snapshot(dir_);
  ExpectRefused(Train(2, run + "--resume"), "the manifest says step 7, but the folder is step-00000006");
  EXPECT_EQ(Snapshot(dir_), before);
  // The folder renamed to agree: the shards still name step 6.
  fs::rename(dir_ / "ck/step-00000006", dir_ / "ck/step-00000007");
  const auto renamed = Snapshot(dir_);
  ExpectRefused(Train(2, run + "--resume"), "the shard is of step '6', but the manifest says step 7");
  EXPECT_EQ(Snapshot(dir_), renamed);
}

// A checkpoint folder's lock that is a dangling symbolic link: taking the
// lock through it would create its target outside checkpoint.dir.
TEST_F(Hostile, ALockThatIsASymbolicLinkIsRefusedAndCreatesNothing) {
  fs::create_directories(dir_ / "ck");
  fs::create_symlink(dir_ / "elsewhere" / "made-by-the-lock", dir_ / "ck" / ".baton-lock");
  fs::create_directories(dir_ / "elsewhere");
  ExpectRefused(Train(2, std::string(kCheckpoints) + "--set train.steps=2"),
                ".baton-lock: the lock file is a symbolic link");
  EXPECT_FALSE(fs::exists(dir_ / "elsewhere" / "made-by-the-lock"));
  EXPECT_FALSE(fs::exists(dir_ / "metrics.jsonl"));
}

TEST_F(Hostile, MetricsAfterAResumeHoldEachStepOnce) {
  const std::string ckpt = std::string(kCheckpoints) + "--set train.steps=6 --set checkpoint.keep=2 ";
  EXPECT_NE(Train(2, ckpt, "BATON_FAULT=0:6:F:kill").code, 0);  // rows 1..5 logged, checkpoint 4
  ASSERT_EQ(MetricsRows(dir_ / "metrics.jsonl").size(), 5u);
  ASSERT_EQ(Train(2, ckpt + "--resume").code, 0) << ReadAll(dir_ / "log.txt");
  std::vector<std::int64_t> steps, resumed;
  for (const auto& row : MetricsRows(dir_ / "metrics.jsonl")) {
    steps.push_back(row["step"].get<std::int64_t>());
    if (row.contains("resumed_after")) resumed.push_back(row["resumed_after"].get<std::int64_t>());
  }
  EXPECT_EQ(steps, (std::vector<std::int64_t>{1, 2, 3, 4, 5, 6}));
  // The first row after the resume says where it went on from (baton plot marks it).
  EXPECT_EQ(resumed, (std::vector<std::int64_t>{4}));
  EXPECT_TRUE(MetricsRows(dir_ / "metrics.jsonl")[4].contains("resumed_after"));
}

// ---- outputs: no output is an input or another output ----

TEST_F(Hostile, MetricsOverTheConfigFileIsRefused) {
  fs::copy_file(Tiny(), dir_ / "cfg.yaml");
  const std::string config = ReadAll(dir_ / "cfg.yaml");
  ExpectRefused(Train(2, "--set pipeline.ranks=2 --set log.metrics=cfg.yaml", "", (dir_ / "cfg.yaml").string()),
                "log.metrics (cfg.yaml) is the same file as the config file");
  EXPECT_EQ(ReadAll(dir_ / "cfg.yaml"), config);
}

TEST_F(Hostile, MetricsOverTheInitialWeightsIsRefused) {
  ASSERT_EQ(Train(2, "--set pipeline.ranks=2 --set log.weights=w.safetensors").code, 0);
  const std::string weights = ReadAll(dir_ / "w.safetensors");
  ExpectRefused(Train(2, "--set pipeline.ranks=2 --set model.init.from=w.safetensors --set log.metrics=w.safetensors"),
                "log.metrics (w.safetensors) is the same file as model.init.from (w.safetensors)");
  EXPECT_EQ(ReadAll(dir_ / "w.safetensors"), weights);
  // A link is the same file.
  fs::create_symlink(dir_ / "w.safetensors", dir_ / "link.jsonl");
  ExpectRefused(Train(2, "--set pipeline.ranks=2 --set model.init.from=w.safetensors --set log.metrics=link.jsonl"),
                "is the same file as model.init.from");
  EXPECT_EQ(ReadAll(dir_ / "w.safetensors"), weights);
}

// Two outputs, one a link not yet made into a file to the other, are one
// file (as they are once it exists): refused, nothing written.
TEST_F(Hostile, AnOutputThroughADanglingLinkToAnotherIsOneFile) {
  fs::create_symlink("w.safetensors", dir_ / "m.jsonl");
  ExpectRefused(Train(2, "--set pipeline.ranks=2 --set log.metrics=m.jsonl --set log.weights=w.safetensors"),
                "log.metrics (m.jsonl) and log.weights (w.safetensors) are the same file");
  EXPECT_FALSE(fs::exists(dir_ / "w.safetensors"));
}

// BATON_EXIT_FILE is an output of the job: over the config or the metrics
// file it is refused, and the job leaves no record over them.
TEST_F(Hostile, AnExitRecordOverTheConfigOrTheMetricsIsRefused) {
  fs::copy_file(Tiny(), dir_ / "cfg.yaml");
  const std::string config = ReadAll(dir_ / "cfg.yaml");
  ExpectRefused(Train(2, "--set pipeline.ranks=2", "BATON_EXIT_FILE=cfg.yaml", (dir_ / "cfg.yaml").string()),
                "BATON_EXIT_FILE='cfg.yaml': is the config file");
  EXPECT_EQ(ReadAll(dir_ / "cfg.yaml"), config);
  std::ofstream(dir_ / "m.jsonl") << "{\"step\": 1}\n";
  ExpectRefused(Train(2, "--set pipeline.ranks=2 --set log.metrics=m.jsonl", "BATON_EXIT_FILE=m.jsonl"),
                "log.metrics (m.jsonl) and BATON_EXIT_FILE (m.jsonl) are the same file");
  EXPECT_EQ(ReadAll(dir_ / "m.jsonl"), "{\"step\": 1}\n");
}

TEST_F(Hostile, MetricsAndWeightsInOneFileAreRefused) {
  ExpectRefused(Train(2, "--set pipeline.ranks=2 --set log.metrics=out/x --set log.weights=out/x"),
                "log.metrics (out/x) and log.weights (out/x) are the same file");
  EXPECT_FALSE(fs::exists(dir_ / "out"));
}

TEST_F(Hostile, WeightsIntoAFifoAreWrittenThroughNotReplaced) {
  ASSERT_EQ(::mkfifo((dir_ / "w.fifo").c_str(), 0644), 0);
  // A reader takes what the run writes into the FIFO.
  last_ = "cd '" + dir_.string() + "' && (timeout 60 cat w.fifo > got.safetensors &) && timeout 60 '" BATON_MPIEXEC
          "' -np 2 '" BATON_BINARY "' train '" + Tiny() +
          "' --set pipeline.ranks=2 --set log.weights=w.fifo > log.txt 2>&1";
  const Job j = Run(last_);
  ASSERT_EQ(j.code, 0) << j.output;
  struct stat st {};
  ASSERT_EQ(::stat((dir_ / "w.fifo").c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "the FIFO was replaced by a file";
  for (int i = 0; i < 50 && fs::file_size(dir_ / "got.safetensors") == 0; ++i) ::usleep(100000);
  EXPECT_EQ(baton::ReadSafetensors((dir_ / "got.safetensors").string()).size(), 14u);
}

TEST_F(Hostile, AnUnusableWeightsPathIsRefusedBeforeTraining) {
  fs::create_directories(dir_ / "w.safetensors");
  ExpectRefused(Train(2, "--set pipeline.ranks=2 --set log.weights=w.safetensors"),
                "log.weights: w.safetensors: is a folder, not a file");
  EXPECT_FALSE(fs::exists(dir_ / "metrics.jsonl")) << "the run trained before it found its weights path unusable";
  WriteFile(dir_ / "file.txt", "x");
  ExpectRefused(Train(2, "--set pipeline.ranks=2 --set log.weights=file.txt/w.safetensors"),
                "is a file, not a folder, so nothing can be created under it");
  ExpectRefused(Train(2, "--set pipeline.ranks=2 --set checkpoint.dir=file.txt --set checkpoint.every_steps=2"),
                "checkpoint.dir: file.txt: is a file, not a folder");
  EXPECT_FALSE(fs::exists(dir_ / "metrics.jsonl"));
  EXPECT_EQ(ReadAll(dir_ / "file.txt"), "x");
  // A folder that takes no new file whatever its permissions say (root
  // passes access() there): found by making one, before training.
  ExpectRefused(Train(2, "--set pipeline.ranks=2 --set log.weights=/proc/w.safetensors"),
                "log.weights: /proc/w.safetensors: no file can be made in the folder '/proc'");
  EXPECT_FALSE(fs::exists(dir_ / "metrics.jsonl"));
}

TEST_F(Hostile, AWeightsPathTooLongForTheSystemIsRefusedBeforeTraining) {
  std::string deep;
  for (int i = 0; i < 17; ++i) deep += std::string(250, 'w') + "/";
  ExpectRefused(Train(2, "--set pipeline.ranks=2 --set log.weights=" + deep + "w.safetensors"),
                "a path may have at most 4095");
  EXPECT_FALSE(fs::exists(dir_ / "metrics.jsonl"));
}

// ---- every write failure is an error ----

TEST_F(Hostile, AFailedMetricsWriteEndsTheRunAndKeepsTheCheckpoint) {
  const Job j = Train(2, std::string(kCheckpoints) +
                             "--set train.steps=6 --set log.every_steps=3 --set log.metrics=/dev/full");
  ExpectRefused(j, "/dev/full: cannot write the metrics file: No space left on device");
  EXPECT_TRUE(fs::exists(dir_ / "ck/step-00000002/manifest.json")) << j.output;
  EXPECT_FALSE(fs::exists(dir_ / "weights.safetensors")) << j.output;
}

// A disk that fills in the middle of a metrics line (here each rank's
// file-size limit, `ulimit -f`, which fails the write as a full disk does,
// with SIGXFSZ ignored; messages over TCP, since the shared-memory
// transport's files would pass the limit): the run stops with one error and
// every line left in the file is whole JSON.
TEST_F(Hostile, AMetricsFileThatFillsUpKeepsNoCutLine) {
  last_ = "cd '" + dir_.string() + "' && timeout 60 '" BATON_MPIEXEC "' -np 2 --mca btl self,tcp sh -c \"trap '' XFSZ; "
          "ulimit -f 8; exec '" BATON_BINARY "' train '" + Tiny() + "' --set pipeline.ranks=2 --set train.steps=400 "
          "--set log.every_steps=1 --set log.metrics=metrics.jsonl --set 'log.weights=\\\"\\\"'\" > log.txt 2>&1";
  const Job j = Run(last_);
  ExpectRefused(j, "metrics.jsonl: cannot write the metrics file: File too large");
  EXPECT_NE(j.output.find("the file keeps its whole lines"), std::string::npos) << j.output;
  const std::string text = ReadAll(dir_ / "metrics.jsonl");
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n') << "a cut last line: " << text.substr(text.size() > 200 ? text.size() - 200 : 0);
  EXPECT_GT(MetricsRows(dir_ / "metrics.jsonl").size(), 10u);
}

// A disk that fills while the shards of a checkpoint are written (each
// rank's file-size limit, as above): the run stops with one error, and no
// step folder is left without its manifest: the shards written are taken
// back with their folder.
TEST_F(Hostile, ACheckpointThatCannotBeWrittenLeavesNoFolderBehind) {
  last_ = "cd '" + dir_.string() + "' && timeout 60 '" BATON_MPIEXEC "' -np 2 --mca btl self,tcp sh -c \"trap '' XFSZ; "
          "ulimit -f 2; exec '" BATON_BINARY "' train '" + Tiny() + "' " + kCheckpoints + "--set train.steps=4 "
          "--set 'log.metrics=\\\"\\\"' --set 'log.weights=\\\"\\\"'\" > log.txt 2>&1";
  const Job j = Run(last_);
  ExpectRefused(j, "File too large");
  ASSERT_TRUE(fs::is_directory(dir_ / "ck")) << j.output;
  for (const auto& entry : fs::directory_iterator(dir_ / "ck")) {
    EXPECT_EQ(entry.path().filename().string().rfind("step-", 0), std::string::npos)
        << entry.path() << " was left behind: " << j.output;
  }
}

// ---- a lost rank ----

// Where mpirun keeps the survivors of a lost rank (orte_enable_recovery, as
// in-job recovery needs), they would wait for it until their deadline
// (pipeline.wait_timeout_s, 300 s here) and mpirun would then exit 0. The
// watch sees the loss at once: the survivors agree on it, the lowest says
// which rank was lost and how, and mpirun is told to end, non-zero. Rank
// 0, a middle rank and the last, each SIGKILLed mid-step.
TEST_F(Hostile, ALostRankEndsTheJobAtOnceWhereMpirunKeepsTheSurvivors) {
  for (const int victim : {0, 1, 3}) {
    SCOPED_TRACE("rank " + std::to_string(victim) + " killed");
    last_ = "cd '" + dir_.string() + "' && BATON_FAULT=" + std::to_string(victim) + ":20:F:kill timeout 120 '"
            BATON_MPIEXEC "' --mca orte_enable_recovery 1 --mca orte_abort_on_non_zero_status 0 -np 4 '"
            BATON_BINARY "' train '" + Tiny() + "' --set pipeline.ranks=4 --set train.steps=400 "
            "--set log.metrics=metrics.jsonl --set 'log.weights=\"\"' > log.txt 2>&1";
    const Job j = Run(last_);
    EXPECT_NE(j.code, 0) << j.output;
    EXPECT_NE(j.code, 124) << "the survivors waited: " << j.output;
    EXPECT_EQ(Count(j.output, "baton: error: lost rank"), 1u) << j.output;
    // Seen by the rank that says it, or told by the neighbour that saw it.
    EXPECT_NE(j.output.find("lost rank " + std::to_string(victim) + " (rank " + std::to_string(victim) + ": "),
              std::string::npos)
        << j.output;
    EXPECT_NE(j.output.find("connection clos"), std::string::npos) << j.output;
    EXPECT_NE(j.output.find("the 3 survivors agreed"), std::string::npos) << j.output;
    EXPECT_LT(j.seconds, 60.0) << j.output;
    // The metrics file keeps whole lines, up to the step before the loss.
    const auto rows = MetricsRows(dir_ / "metrics.jsonl");
    EXPECT_LE(rows.size(), 20u);
    fs::remove(dir_ / "metrics.jsonl");
  }
}

// Under the same settings mpirun exits 0 for ranks that all exit 2 on a
// config error (or call MPI_Abort): rank 0 tells it to end, so the job
// still fails from the launcher's side.
TEST_F(Hostile, AnErrorEndsMpirunNonZeroWhereItKeepsTheSurvivors) {
  last_ = "cd '" + dir_.string() + "' && timeout 120 '" BATON_MPIEXEC "' --mca orte_enable_recovery 1 --mca "
          "orte_abort_on_non_zero_status 0 -np 4 '" BATON_BINARY "' train '" + Tiny() + "' --set pipeline.ranks=3 "
          "> log.txt 2>&1";
  const Job j = Run(last_);
  EXPECT_NE(j.code, 0) << j.output;
  EXPECT_NE(j.code, 124) << j.output;
  EXPECT_EQ(Count(j.output, "baton: error"), 1u) << j.output;
  EXPECT_NE(j.output.find("pipeline.ranks is 3 but the job has 4 ranks"), std::string::npos) << j.output;
}

// ---- memory is checked before anything is allocated ----

TEST_F(Hostile, AModelThatCannotFitIsRefusedBeforeAllocating) {
  const Job j = Train(2, "--set pipeline.ranks=2 --set model.layers.6.out=2000000000");
  ExpectRefused(j, "but the host has");
  EXPECT_NE(j.output.find("Nothing was allocated"), std::string::npos) << j.output;
  EXPECT_LT(j.seconds, 15.0);
  ExpectRefused(Train(2, "--set pipeline.ranks=2 --set train.batch_size=2000000000"), "but the host has");
}

// ---- non-finite numbers stop the run ----

TEST_F(Hostile, DivergenceStopsTheRunAtItsStep) {
  const Job j = Train(2, "--set pipeline.ranks=2 --set train.optimizer.lr=1e30 --set train.steps=8");
  ExpectRefused(j, ": the loss is not finite (NaN or infinite) on rank 1 (stage 1, the last)");
  EXPECT_NE(j.output.find("step 2: "), std::string::npos) << j.output;
  EXPECT_FALSE(fs::exists(dir_ / "weights.safetensors"));
  EXPECT_EQ(MetricsRows(dir_ / "metrics.jsonl").size(), 1u);  // step 1, finite
}

TEST_F(Hostile, SkippingDropsTheNonFiniteStepsAndSaysSo) {
  // lr 1e30: step 1's update is finite and huge; every later step is not.
  ASSERT_EQ(Train(2, "--set pipeline.ranks=2 --set train.steps=1 --set log.weights=one.safetensors "
                     "--set train.optimizer.lr=1e30")
                .code,
            0);
  const Job j = Train(2, "--set pipeline.ranks=2 --set train.optimizer.lr=1e30 --set train.steps=4 "
                         "--set train.on_nonfinite=skip");
  ASSERT_EQ(j.code, 0) << j.output;
  EXPECT_NE(j.output.find("3 skipped (not finite)"), std::string::npos) << j.output;
  const auto rows = MetricsRows(dir_ / "metrics.jsonl");
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_TRUE(rows[2]["loss"].is_null());
  EXPECT_TRUE(rows[2]["nonfinite"].get<bool>());
  EXPECT_TRUE(rows[2]["skipped"].get<bool>());
  // The skipped steps left the weights as step 1 made them.
  EXPECT_EQ(ReadAll(dir_ / "weights.safetensors"), ReadAll(dir_ / "one.safetensors"));
  // Bounded: with train.max_skipped 2, the third in a row (step 4) stops
  // the run as stop would, saying why; no weights.
  fs::remove(dir_ / "weights.safetensors");
  const Job bounded = Train(2, "--set pipeline.ranks=2 --set train.optimizer.lr=1e30 --set train.steps=6 "
                               "--set train.on_nonfinite=skip --set train.max_skipped=2");
  ExpectRefused(bounded, "step 4: the loss is not finite (NaN or infinite) on rank 1 (stage 1, the last); the run "
                         "stops (train.on_nonfinite: skip, after 2 steps skipped in a row, train.max_skipped)");
  EXPECT_FALSE(fs::exists(dir_ / "weights.safetensors"));
  ExpectRefused(Train(2, "--set pipeline.ranks=2 --set train.max_skipped=3"),
                "train.max_skipped: only applies with train.on_nonfinite: skip");
}

TEST_F(Hostile, InitialWeightsThatAreNotFiniteOrNotTheModelsAreRefused) {
  ASSERT_EQ(Train(2, "--set pipeline.ranks=2 --set log.weights=w.safetensors").code, 0);
  auto tensors = baton::ReadSafetensors((dir_ / "w.safetensors").string());
  auto nan = tensors;
  nan[3].data[5] = std::nanf("");
  baton::WriteSafetensors((dir_ / "nan.safetensors").string(), nan);
  ExpectRefused(Train(2, "--set pipeline.ranks=2 --set model.init.from=nan.safetensors"),
                "holds nan at index 5: initial weights must be finite");
  auto extra = tensors;
  extra.push_back({"6.weigth", {2}, {1.0f, 2.0f}});
  baton::WriteSafetensors((dir_ / "extra.safetensors").string(), extra);
  ExpectRefused(Train(2, "--set pipeline.ranks=2 --set model.init.from=extra.safetensors"),
                "model.init.from holds 1 tensor(s) this model does not have: '6.weigth'");
}

// ---- faults that could never fire are refused ----

TEST_F(Hostile, AFaultThatCanNeverFireIsRefused) {
  ExpectRefused(Train(2, "--set pipeline.ranks=2", "BATON_FAULT=9:2:F:kill"),
                "rank 9 is not in this job (2 ranks: 0..1): the fault would never fire");
  ExpectRefused(Train(2, "--set pipeline.ranks=2", "BATON_FAULT=0:99:F:kill"), "step 99 is not in this run (steps 1..4)");
  ExpectRefused(Train(2, "--set pipeline.ranks=2", "BATON_FAULT=0:-1:F:kill"), "step -1 is not in this run");
  ExpectRefused(Train(2, "--set pipeline.ranks=2 --set pipeline.schedule=zbv", "BATON_FAULT=1:2:B:kill"),
                "rank 1 runs no B action in this schedule");
  ExpectRefused(Train(2, "--set pipeline.ranks=2", "BATON_FAULT=0:2:checkpoint:kill"), "the run writes no checkpoints");
}

TEST_F(Hostile, ARankStalledInACheckpointIsNamedAtTheDeadline) {
  const Job j = Train(2, std::string(kCheckpoints) + "--set pipeline.wait_timeout_s=3",
                      "BATON_FAULT=1:2:checkpoint:stall");
  EXPECT_NE(j.code, 0) << j.output;
  EXPECT_NE(j.code, 124) << j.output;
  EXPECT_LT(j.seconds, 20.0) << j.output;
  EXPECT_NE(j.output.find("rank 0: timed out waiting for every rank's shard record of checkpoint step-00000002"),
            std::string::npos)
      << j.output;
  EXPECT_NE(j.output.find("rank 1 did not arrive"), std::string::npos) << j.output;
  EXPECT_FALSE(fs::exists(dir_ / "ck/step-00000002/manifest.json"));
}

// ---- start-up ----

TEST_F(Hostile, AConfigThatBlocksRankZeroEndsAtTheDeadlineNamingIt) {
  ASSERT_EQ(::mkfifo((dir_ / "cfg.yaml").c_str(), 0644), 0);  // no writer: reading it never ends
  const Job j = Train(2, "--set pipeline.wait_timeout_s=3", "", (dir_ / "cfg.yaml").string());
  EXPECT_NE(j.code, 0) << j.output;
  EXPECT_NE(j.code, 124) << "the job outlived its deadline until `timeout` killed it\n" << j.output;
  EXPECT_LT(j.seconds, 20.0) << j.output;
  EXPECT_NE(j.output.find("timed out waiting for rank 0 reading the config file"), std::string::npos) << j.output;
}

TEST_F(Hostile, AFolderOrAnEmptyFileAsTheConfigIsNamed) {
  fs::create_directories(dir_ / "folder.yaml");
  ExpectRefused(Train(2, "", "", (dir_ / "folder.yaml").string()), "folder.yaml: is a folder, not a config file");
  WriteFile(dir_ / "empty.yaml", "# nothing\n");
  ExpectRefused(Train(2, "", "", (dir_ / "empty.yaml").string()), "empty.yaml: the config file is empty");
}

TEST_F(Hostile, ATerminatedJobExitsNonZeroSayingSo) {
  // SIGTERM to mpirun, as a scheduler or `kill` sends it; a watchdog in
  // place of `timeout`, which would take the signal itself.
  last_ = "cd '" + dir_.string() + "' && ('" BATON_MPIEXEC "' -np 2 '" BATON_BINARY "' train '" + Tiny() +
          "' --set pipeline.ranks=2 --set train.steps=100000000 --set log.every_steps=0 > log.txt 2>&1 & pid=$!; "
          "sleep 3; kill -TERM $pid; for i in $(seq 150); do kill -0 $pid 2>/dev/null || break; sleep 0.2; done; "
          "kill -KILL $pid 2>/dev/null; wait $pid)";
  const Job j = Run(last_);
  EXPECT_NE(j.code, 0) << j.output;
  EXPECT_NE(j.code, 124) << j.output;
  // It stops at a step boundary, every rank together (preemption-safe
  // stops), saying that without checkpoint.dir nothing was saved.
  EXPECT_NE(j.output.find("baton: stopped by SIGTERM after step"), std::string::npos) << j.output;
  EXPECT_NE(j.output.find("with no checkpoint.dir: the steps since the start are lost"), std::string::npos) << j.output;
  // mpirun signalled itself reports 1, not the ranks' 75: the message says so.
  EXPECT_NE(j.output.find("mpirun, if it was sent SIGTERM or SIGINT itself (it passes both on as SIGTERM), exits 1"),
            std::string::npos)
      << j.output;
  EXPECT_FALSE(fs::exists(dir_ / "weights.safetensors"));
}

// ---- data ----

TEST_F(Hostile, AFileGivenAsTheFortunesFolderIsNamed) {
  WriteFile(dir_ / "corpus.txt", "a fortune\n%\n");
  ExpectRefused(Train(1, "--set 'data={dataset: fortunes, path: corpus.txt, seq_len: 8}' --set model.vocab=256", "",
                      BATON_SOURCE_DIR "/tests/mpi/tiny_gpt.yaml"),
                "fortunes folder 'corpus.txt' is a file, not a folder");
}

// ---- schedule files ----

// A file with sharded data parallel's actions (as PyTorch's FSDP dumps have)
// run without sharding: the run goes on, and says the actions do nothing.
TEST_F(Hostile, AScheduleFilesShardingActionsUnderZeroZeroAreNamedNotSilent) {
  const Job j = Train(2, "--set pipeline.ranks=2 --set pipeline.microbatches=4 --set train.steps=2 "
                         "--set pipeline.schedule=" BATON_SOURCE_DIR "/schedules/gpipe_2x4_pytorch.csv");
  EXPECT_EQ(j.code, 0) << j.output;
  EXPECT_NE(j.output.find("holds sharded data parallel's UNSHARD/RESHARD/REDUCE_GRAD; data_parallel.zero is 0 "
                          "here, so they do nothing"),
            std::string::npos)
      << j.output;
}

TEST_F(Hostile, AnOversizedScheduleFileIsRefusedWithoutReadingIt) {
  {
    std::ofstream out(dir_ / "big.csv");
    const std::string row(1 << 20, ',');
    for (int i = 0; i < 17; ++i) out << "0F0" << row << "\n";
  }
  ExpectRefused(Train(1, "--set pipeline.schedule=big.csv"), "the schedule file is 17825860 bytes; baton reads at most 16 MiB of it");
}

TEST_F(Hostile, UntrustedBytesInAScheduleAreEscapedAndCut) {
  WriteFile(dir_ / "escape.csv", "0F0,\x1b]0;owned\x07\x1b[31mX\n");
  Job j = Train(1, "--set pipeline.schedule=escape.csv");
  ExpectRefused(j, "cannot read action \"\\x1b]0;owned\\x07\\x1b[31mX\"");
  EXPECT_EQ(j.output.find('\x1b'), std::string::npos) << "a raw escape byte reached the terminal";
  WriteFile(dir_ / "huge.csv", "0F0," + std::string(5 << 20, 'Z') + "\n");
  j = Train(1, "--set pipeline.schedule=huge.csv");
  ExpectRefused(j, "more bytes)");
  EXPECT_LT(j.output.size(), 20000u);
}

}  // namespace

namespace {

// The processes whose command line holds `mark` (from /proc).
std::vector<pid_t> Running(const std::string& mark) {
  std::vector<pid_t> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = ReadAll(e.path() / "cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (cmdline.find(mark) != std::string::npos) out.push_back(static_cast<pid_t>(std::stol(name)));
  }
  return out;
}
bool AnyRunning(const std::string& mark) { return !Running(mark).empty(); }

// mpirun killed outright (SIGKILL: it cannot stop its ranks): the ranks,
// orphaned, are told to stop (their launcher's end, PR_SET_PDEATHSIG), and
// stop at a step boundary with a checkpoint, instead of training on with
// nobody to wait for them; the run resumes from it. The wait for them to
// end is bounded; anything left is killed and the test fails.
TEST_F(Hostile, RanksWhoseMpirunIsKilledStopWithACheckpoint) {
  const std::string mark = (dir_ / "orphans.jsonl").string();
  const std::string run = "cd '" + dir_.string() + "' && exec setsid '" BATON_MPIEXEC "' -np 2 '" BATON_BINARY
                          "' train '" + Tiny() + "' --set pipeline.ranks=2 --set train.steps=100000000 "
                          "--set checkpoint.dir=ck --set checkpoint.every_steps=100000000 --set log.metrics=" + mark +
                          " > log.txt 2>&1";
  const pid_t launcher = ::fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    ::execl("/bin/sh", "sh", "-c", run.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Until it has taken some steps (bounded).
  const auto start = std::chrono::steady_clock::now();
  auto waited = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  while (waited() < 60 && Count(ReadAll(mark), "\n") < 20) ::usleep(50000);
  ::kill(launcher, SIGKILL);
  ::waitpid(launcher, nullptr, 0);
  while (waited() < 90 && AnyRunning(mark)) ::usleep(50000);
  const bool ended = !AnyRunning(mark);
  if (!ended) {
    for (const pid_t p : Running(mark)) ::kill(p, SIGKILL);
  }
  ASSERT_TRUE(ended) << "the orphaned ranks did not stop: " << ReadAll(dir_ / "log.txt");
  bool checkpoint = false;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir_ / "ck", ec)) {
    checkpoint = checkpoint || fs::exists(e.path() / "manifest.json");
  }
  EXPECT_TRUE(checkpoint) << ReadAll(dir_ / "log.txt");
  for (const nlohmann::json& row : MetricsRows(mark)) EXPECT_TRUE(row.is_object());
}

}  // namespace
