// The metrics file: emptied for a new run, trimmed to the resumed step for a
// resumed one, locked against a second writer, and every failed write an
// error.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

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
