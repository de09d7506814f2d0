// CheckRunFiles: a run's outputs checked before it starts against each
// other and against its inputs.
#include "baton/train.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "baton/error.h"
#include "support/test_folder.h"

namespace baton {
namespace {

namespace fs = std::filesystem;

class RunFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = baton_test::FreshTestFolder("baton_outputs");
    std::ofstream(dir_ / "config.yaml") << "model: {}\n";
    std::ofstream(dir_ / "init.safetensors") << "x";
    config_.source = (dir_ / "config.yaml").string();
    config_.data.dataset = DatasetKind::kSynthetic;
    config_.log.metrics = (dir_ / "out/metrics.jsonl").string();
    config_.log.weights = (dir_ / "out/weights.safetensors").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The message CheckRunFiles throws for the config, or "" if it passes.
  std::string Refusal(const TrainConfig& c, const std::vector<NamedPath>& extra = {}) {
    try {
      CheckCommandFiles(FilesOf(c, 2, extra));
    } catch (const OutputError& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
  TrainConfig config_;
};

TEST_F(RunFilesTest, DistinctWritableOutputsPassAndCreateNothing) {
  EXPECT_EQ(Refusal(config_), "");
  EXPECT_FALSE(fs::exists(dir_ / "out"));
}

TEST_F(RunFilesTest, AnOutputThatIsAnInputIsRefused) {
  TrainConfig c = config_;
  c.log.metrics = c.source;
  EXPECT_NE(Refusal(c).find("is the same file as the config file"), std::string::npos) << Refusal(c);
  c = config_;
  c.model.init_from = (dir_ / "init.safetensors").string();
  c.log.weights = (dir_ / "." / "init.safetensors").string();  // another spelling of it
  EXPECT_NE(Refusal(c).find("log.weights"), std::string::npos);
  EXPECT_NE(Refusal(c).find("is the same file as model.init.from"), std::string::npos) << Refusal(c);
  fs::create_hard_link(dir_ / "init.safetensors", dir_ / "hard.jsonl");
  c.log.weights = config_.log.weights;
  c.log.metrics = (dir_ / "hard.jsonl").string();  // a hard link is the same file
  EXPECT_NE(Refusal(c).find("is the same file as model.init.from"), std::string::npos) << Refusal(c);
}

TEST_F(RunFilesTest, TwoOutputsInOneFileAreRefusedButADeviceMayDiscardBoth) {
  TrainConfig c = config_;
  c.log.weights = c.log.metrics;
  EXPECT_NE(Refusal(c).find("are the same file"), std::string::npos) << Refusal(c);
  EXPECT_NE(Refusal(config_, {{"--json", config_.log.metrics}}).find("are the same file"), std::string::npos);
  c.log.metrics = c.log.weights = "/dev/null";
  EXPECT_EQ(Refusal(c), "");
}

TEST_F(RunFilesTest, OutputsOfTheWrongKindAreRefused) {
  TrainConfig c = config_;
  fs::create_directories(dir_ / "folder");
  c.log.weights = (dir_ / "folder").string();
  EXPECT_NE(Refusal(c).find("log.weights: " + c.log.weights + ": is a folder, not a file"), std::string::npos)
      << Refusal(c);
  c.log.weights = (dir_ / "config.yaml/w.safetensors").string();
  EXPECT_NE(Refusal(c).find("is a file, not a folder, so nothing can be created under it"), std::string::npos)
      << Refusal(c);
  c = config_;
  c.checkpoint.dir = c.source;
  c.checkpoint.every_steps = 5;
  EXPECT_NE(Refusal(c).find("checkpoint.dir: " + c.source + ": is a file, not a folder"), std::string::npos)
      << Refusal(c);
}

TEST_F(RunFilesTest, AnOutputInsideAFolderReadAsDataIsRefused) {
  TrainConfig c = config_;
  c.data.dataset = DatasetKind::kFortunes;
  c.data.path = (dir_ / "out").string();
  fs::create_directories(dir_ / "out");
  EXPECT_NE(Refusal(c).find("whose every file is read as data"), std::string::npos) << Refusal(c);
}

TEST_F(RunFilesTest, TheScheduleFileAndTheFlightRecordsCount) {
  TrainConfig c = config_;
  std::ofstream(dir_ / "order.csv") << "0F0,0B0\n";
  c.pipeline.schedule = (dir_ / "order.csv").string();
  c.log.weights = c.pipeline.schedule;
  EXPECT_NE(Refusal(c).find("is the same file as pipeline.schedule"), std::string::npos) << Refusal(c);
  // A rank's flight record lands beside the metrics.
  c = config_;
  c.log.weights = (dir_ / "out/flight-rank-1.json").string();
  EXPECT_NE(Refusal(c).find("are the same file"), std::string::npos) << Refusal(c);
}

}  // namespace
}  // namespace baton
