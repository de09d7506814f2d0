// A run's claim on its checkpoint folder, the checkpoint it resumes and
// what it says when it refuses one; the settings a checkpoint depends on.
#include "checkpoint.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "baton/env.h"
#include "baton/error.h"
#include "support/test_folder.h"

namespace baton {
namespace {

namespace fs = std::filesystem;

class CheckpointFolderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = baton_test::FreshTestFolder("baton_ckfolder");
    run_.run_id = "00000000000000aa";
    run_.settings = "model:\n  input: 12\ntrain:\n  batch_size: 32\n  steps: 10\n";
    run_.digest = "d1";
    run_.schedule = "1f1b";
    run_.ranks = 2;
    run_.chunks = 1;
    run_.microbatches = 8;
    run_.partition = {0, 3, 9};
    run_.total_steps = 10;
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A complete checkpoint of `run` at `step` under `folder` (a manifest; no shards).
  void WriteCheckpoint(const fs::path& folder, std::int64_t step, const CheckpointRun& run) {
    const fs::path d = folder / fmt::format("step-{:08}", step);
    fs::create_directories(d);
    nlohmann::json m = {{"format", "baton-checkpoint-2"}, {"step", step},          {"run_id", run.run_id},
                        {"train_steps", run.total_steps},  {"config_digest", run.digest}, {"settings", run.settings},
                        {"schedule", run.schedule},        {"ranks", run.ranks},   {"chunks", run.chunks},
                        {"microbatches", run.microbatches}, {"partition", run.partition},
                        {"shards", nlohmann::json::array()}};
    std::ofstream(d / "manifest.json") << m.dump(2);
  }
  std::string ClaimError(const std::string& id, const ResumePoint* resumed) {
    try {
      CheckpointFolder::Claim((dir_ / "ck").string(), id, resumed);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
  CheckpointRun run_;
};

TEST_F(CheckpointFolderTest, AFreshRunClaimsAnEmptyOrNewFolderAndLocksIt) {
  CheckpointFolder f = CheckpointFolder::Claim((dir_ / "ck").string(), run_.run_id, nullptr);
  EXPECT_TRUE(fs::is_directory(dir_ / "ck"));
  // A second claim while the first holds the lock (flock: per open file).
  EXPECT_NE(ClaimError("00000000000000bb", nullptr).find("another run is writing checkpoints into this folder"),
            std::string::npos);
  f.Abandon();  // nothing in it: the folder it made goes too
  EXPECT_FALSE(fs::exists(dir_ / "ck"));
}

TEST_F(CheckpointFolderTest, AFreshRunRefusesAnyStepFolderNamingIt) {
  WriteCheckpoint(dir_ / "ck", 600, run_);
  fs::create_directories(dir_ / "ck/step-00000650");  // unfinished
  const std::string e = ClaimError("00000000000000bb", nullptr);
  EXPECT_NE(e.find("holds 2 checkpoint folder(s) of an earlier run: step-00000600 (run 00000000000000aa, step 600 of "
                   "10), step-00000650 (unfinished)"),
            std::string::npos)
      << e;
  EXPECT_TRUE(fs::exists(dir_ / "ck/step-00000600/manifest.json"));
  EXPECT_FALSE(fs::exists(dir_ / "ck/.baton-lock")) << "a refused claim leaves its lock file behind";
}

TEST_F(CheckpointFolderTest, AResumedRunRefusesAnotherRunsAndMovesItsOwnLaterOnesAside) {
  WriteCheckpoint(dir_ / "ck", 2, run_);
  WriteCheckpoint(dir_ / "ck", 4, run_);
  WriteCheckpoint(dir_ / "ck", 6, run_);
  const ResumePoint from = FindResumePoint((dir_ / "ck/step-00000002").string());
  EXPECT_EQ(from.step, 2);
  EXPECT_EQ(from.run_id, run_.run_id);
  {
    CheckpointFolder f = CheckpointFolder::Claim((dir_ / "ck").string(), run_.run_id, &from);
    EXPECT_TRUE(fs::exists(dir_ / "ck/step-00000006/manifest.json")) << "the claim changed what was there";
    EXPECT_EQ(f.SupersedeAfter(from.step, run_.run_id).size(), 2u);
  }
  EXPECT_TRUE(fs::exists(dir_ / "ck/step-00000002/manifest.json"));
  EXPECT_TRUE(fs::exists(dir_ / "ck/superseded-step-00000004/manifest.json"));
  EXPECT_TRUE(fs::exists(dir_ / "ck/superseded-step-00000006/manifest.json"));
  // The newest complete checkpoint is the resumed one again.
  EXPECT_EQ(FindResumePoint((dir_ / "ck").string()).step, 2);
  CheckpointRun other = run_;
  other.run_id = "00000000000000cc";
  WriteCheckpoint(dir_ / "ck", 8, other);
  EXPECT_NE(ClaimError(run_.run_id, &from).find("of another run: step-00000008 (run 00000000000000cc"),
            std::string::npos);
}

// Every folder operation goes through the run's Env, so a fake machine
// fails them: the claim's creation of the folder (nothing left behind),
// the move aside of a later checkpoint (said, the folder left where it
// was), and an unfinished folder's move under resume: auto.
TEST_F(CheckpointFolderTest, TheEnvsFolderOperationsFailWithOneErrorEach) {
  const std::string ck = (dir_ / "ck").string();
  {
    const auto env = MakeFakeEnv({.file_faults = {{"mkdir", "ck", 0, ENOSPC}}});
    try {
      CheckpointFolder::Claim(ck, run_.run_id, nullptr, false, false, *env);
      FAIL() << "the claim went on without its folder";
    } catch (const OutputError& e) {
      EXPECT_EQ(std::string(e.what()), "checkpoint.dir: " + ck + ": cannot create the folder: No space left on device");
    }
    EXPECT_FALSE(fs::exists(ck));
  }
  WriteCheckpoint(dir_ / "ck", 2, run_);
  WriteCheckpoint(dir_ / "ck", 4, run_);
  {
    const auto env = MakeFakeEnv({.file_faults = {{"rename", "superseded-", 0, EIO}}});
    const ResumePoint from = FindResumePoint((dir_ / "ck/step-00000002").string(), *env);
    CheckpointFolder f = CheckpointFolder::Claim(ck, run_.run_id, &from, false, false, *env);
    try {
      f.SupersedeAfter(from.step, run_.run_id);
      FAIL() << "a failed move aside was not said";
    } catch (const OutputError& e) {
      EXPECT_EQ(std::string(e.what()), ck + "/step-00000004: cannot move it aside: Input/output error");
    }
    EXPECT_TRUE(fs::exists(dir_ / "ck/step-00000004/manifest.json"));
  }
  fs::remove_all(dir_ / "ck");
  fs::create_directories(dir_ / "ck/step-00000003");  // unfinished
  {
    const auto env = MakeFakeEnv({.file_faults = {{"rename", "unfinished-", 0, EACCES}}});
    try {
      CheckpointFolder::Claim(ck, run_.run_id, nullptr, /*auto_resume=*/true, false, *env);
      FAIL() << "a failed move aside was not said";
    } catch (const OutputError& e) {
      EXPECT_EQ(std::string(e.what()), ck + "/step-00000003: cannot move it aside: Permission denied");
    }
    EXPECT_TRUE(fs::is_directory(dir_ / "ck/step-00000003"));
    EXPECT_FALSE(fs::exists(dir_ / "ck/.baton-lock")) << "a refused claim leaves its lock file behind";
  }
}

TEST_F(CheckpointFolderTest, FindResumePointSaysWhyThereIsNone) {
  auto error = [&](const std::string& from) {
    try {
      FindResumePoint(from);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error((dir_ / "none").string()).find("no complete checkpoint to resume from: no such folder"),
            std::string::npos);
  fs::create_directories(dir_ / "ck/step-00000004");
  EXPECT_NE(error((dir_ / "ck").string()).find("no complete checkpoint to resume from"), std::string::npos);
  EXPECT_NE(error((dir_ / "ck/step-00000004").string()).find("this checkpoint is unfinished"), std::string::npos);
  std::ofstream(dir_ / "ck/step-00000004/manifest.json") << R"({"format": "baton-checkpoint-1", "step": 4})";
  EXPECT_NE(error((dir_ / "ck").string()).find("a checkpoint of an earlier baton (format 1)"), std::string::npos);
}

TEST_F(CheckpointFolderTest, CheckResumableNamesEverySettingThatDiffers) {
  WriteCheckpoint(dir_ / "ck", 4, run_);
  const ResumePoint p = FindResumePoint((dir_ / "ck").string());
  EXPECT_NO_THROW(CheckResumable(p, run_));
  CheckpointRun other = run_;
  other.digest = "d2";
  other.settings = "model:\n  input: 12\ntrain:\n  batch_size: 64\n  steps: 10\n";
  other.microbatches = 2;
  try {
    CheckResumable(p, other);
    FAIL() << "resumed another run";
  } catch (const ConfigError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("microbatches: checkpoint"), std::string::npos) << m;
    EXPECT_NE(m.find("train.batch_size: checkpoint 32, this run 64"), std::string::npos) << m;
    EXPECT_EQ(m.find("train.steps"), std::string::npos) << m;
  }
  // Another plan (schedule, chunks, placement) trains the same floats: it resumes.
  other = run_;
  other.schedule = "zb_h1";
  other.chunks = 2;
  other.digest = "d3";
  other.settings = run_.settings + "  schedule: zb_h1\n";
  EXPECT_NO_THROW(CheckResumable(p, other));
  other = run_;
  other.total_steps = 4;
  EXPECT_NO_THROW(CheckResumable(p, other));  // its last step: resumed to the run's end (its final weights)
  other.total_steps = 3;
  EXPECT_THROW(CheckResumable(p, other), ConfigError);  // past the run's end
}

TEST(MathSettings, TheDeadlineAndLoggingMayChangeButNotTheLength) {
  TrainConfig a;
  a.model.layers = {LayerSpec{}};
  TrainConfig b = a;
  b.pipeline.wait_timeout_s = 3;
  b.log.metrics = "elsewhere.jsonl";
  b.checkpoint.keep = 7;
  b.data_parallel.size = 4;
  EXPECT_EQ(ConfigDigest(a), ConfigDigest(b));
  b.train.steps = 600;
  EXPECT_NE(ConfigDigest(a), ConfigDigest(b));
  EXPECT_NE(MathSettings(b).find("steps: 600"), std::string::npos);
}

}  // namespace
}  // namespace baton
