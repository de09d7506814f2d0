// The metrics file: emptied for a new run, trimmed to the resumed step for a
// resumed one, locked against a second writer, and every failed write an
// error.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>

#include "baton/env.h"
#include "baton/error.h"
#include "support/test_folder.h"
#include "setup.h"

namespace baton {
namespace {

namespace fs = std::filesystem;

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class MetricsLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = baton_test::FreshTestFolder("baton_metrics");
    path_ = (dir_ / "m.jsonl").string();
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
  std::string path_;
};

TEST_F(MetricsLogTest, ANewRunEmptiesItAResumedOneKeepsTheStepsItResumes) {
  std::ofstream(path_) << "{\"step\": 1}\n{\"step\": 2, \"test_loss\": 1}\n{\"step\": 3}\n{\"step\": 4, \"lo";
  {
    MetricsLog log(path_);
    EXPECT_NE(ReadAll(path_).find("\"step\": 3"), std::string::npos) << "opening changed the file";
    log.Start(2);
    log.Line("{\"step\": 3, \"again\": true}");
  }
  EXPECT_EQ(ReadAll(path_), "{\"step\": 1}\n{\"step\": 2, \"test_loss\": 1}\n{\"step\": 3, \"again\": true}\n");
  {
    MetricsLog log(path_);
    log.Start(0);
  }
  EXPECT_EQ(ReadAll(path_), "");
}

// A disk that fills mid-line (here the file-size limit, RLIMIT_FSIZE, which
// fails a write past it as a full disk does): the write fails, and the file
// keeps its whole lines only, never a cut one.
TEST_F(MetricsLogTest, AWriteThatFailsPartWayLeavesOnlyWholeLines) {
  MetricsLog log(path_);
  log.Start(0);
  log.Line("{\"step\": 1}");
  const std::string kept = ReadAll(path_);
  struct rlimit old {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  const auto previous = std::signal(SIGXFSZ, SIG_IGN);  // the write fails with EFBIG instead
  struct rlimit small = old;
  small.rlim_cur = kept.size() + 8;  // room for 8 bytes of the next line
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string error;
  try {
    log.Line("{\"step\": 2, \"loss\": 0.5}");
  } catch (const OutputError& e) {
    error = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, previous);
  EXPECT_NE(error.find("cannot write the metrics file"), std::string::npos) << error;
  EXPECT_NE(error.find("keeps its whole lines"), std::string::npos) << error;
  EXPECT_EQ(ReadAll(path_), kept);
}

// The file's operations come from the OS room (Env::OpenLog): a fake fails
// them one at a time. An append that writes half a line and fails is cut
// back to the whole lines; a lock another process holds is a second
// writer; a file that cannot be cut says so.
TEST_F(MetricsLogTest, TheOsRoomsFailuresAreErrorsAndLeaveWholeLines) {
  {
    const auto env = MakeFakeEnv({.file_faults = {{"append", "m.jsonl", 1, ENOSPC}}});
    MetricsLog log(path_, *env);
    log.Start(0);
    log.Line("{\"step\": 1}");
    try {
      log.Line("{\"step\": 2, \"loss\": 0.5}");
      FAIL() << "a failed append passed";
    } catch (const OutputError& e) {
      EXPECT_NE(std::string(e.what()).find(std::strerror(ENOSPC)), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("keeps its whole lines"), std::string::npos) << e.what();
    }
    EXPECT_EQ(ReadAll(path_), "{\"step\": 1}\n");
  }
  {
    const auto env = MakeFakeEnv({.file_faults = {{"lock", "m.jsonl", 0, EWOULDBLOCK}}});
    try {
      MetricsLog log(path_, *env);
      FAIL() << "a held lock passed";
    } catch (const OutputError& e) {
      EXPECT_NE(std::string(e.what()).find("another run is writing this metrics file"), std::string::npos);
    }
  }
  {
    const auto env = MakeFakeEnv({.file_faults = {{"truncate", "m.jsonl", 0, EIO}}});
    MetricsLog log(path_, *env);
    EXPECT_THROW(log.Start(0), OutputError);
  }
  EXPECT_EQ(ReadAll(path_), "{\"step\": 1}\n");
}

TEST_F(MetricsLogTest, ASecondWriterIsRefusedAndKeepsTheRows) {
  MetricsLog first(path_);
  first.Start(0);
  first.Line("{\"step\": 1}");
  try {
    MetricsLog second(path_);
    FAIL() << "two runs write one metrics file";
  } catch (const OutputError& e) {
    EXPECT_NE(std::string(e.what()).find("another run is writing this metrics file"), std::string::npos);
  }
  EXPECT_EQ(ReadAll(path_), "{\"step\": 1}\n");
}

// A run that stopped after a lost rank (recovery.on_lost_rank: stop)
// leaves an event row of no step after the step its checkpoint holds: the
// resumed run keeps it, the record of the loss.
TEST_F(MetricsLogTest, AResumeKeepsTheLostRankRowOfTheStepsBefore) {
  const std::string rows = "{\"step\": 1}\n{\"step\": 2}\n{\"event\": \"lost_rank\", \"checkpoint_step\": 2}\n";
  std::ofstream(path_) << rows << "{\"step\": 3}\n";
  {
    MetricsLog log(path_);
    log.Start(2);
    log.Line("{\"step\": 3}");
  }
  EXPECT_EQ(ReadAll(path_), rows + "{\"step\": 3}\n");
}

// The survivors of a loss take over a metrics file that a rank they
// excluded (paused, not dead) still holds locked: a new file in its place,
// the rows kept, the excluded holder's late rows landing in the old one.
TEST_F(MetricsLogTest, TheSurvivorsTakeOverAFileAnExcludedRankStillHolds) {
  auto paused = std::make_unique<MetricsLog>(path_);
  paused->Start(0);
  paused->Line("{\"step\": 1}");
  EXPECT_THROW(MetricsLog(path_, Env::Default(), /*take_over=*/false), OutputError);
  MetricsLog survivors(path_, Env::Default(), /*take_over=*/true);
  survivors.Line("{\"step\": 2}");
  paused->Line("{\"step\": 99}");  // late: cannot land
  EXPECT_EQ(ReadAll(path_), "{\"step\": 1}\n{\"step\": 2}\n");
}

TEST_F(MetricsLogTest, AWriteThatFailsIsAnError) {
  MetricsLog full("/dev/full");
  full.Start(0);
  EXPECT_THROW(full.Line("{\"step\": 1}"), OutputError);
  MetricsLog null("/dev/null");  // a device: written through, nothing cut
  null.Start(5);
  EXPECT_NO_THROW(null.Line("{\"step\": 6}"));
}

}  // namespace
}  // namespace baton
