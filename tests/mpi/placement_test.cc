// The automatic placement under mpirun: `pipeline.layout: auto` (a GPT)
// and `pipeline.partition: auto` (an MLP) print the placement they chose,
// and train exactly what the printed placement, written in the config,
// trains: the same losses and the same weights, bit for bit, on every rank.
#include <gtest/gtest.h>

#include <unistd.h>

#include <regex>

#include "run_helpers.h"

namespace {

void ExpectAutoTrainsItsPrintedPlacement(const std::string& config, const std::string& key, int np,
                                         const std::vector<std::string>& extra) {
  std::vector<std::string> sets = extra;
  sets.push_back("pipeline.ranks=" + std::to_string(np));
  std::vector<std::string> automatic = sets;
  automatic.push_back("pipeline." + key + "=auto");
  std::string text, text2;
  const baton_test::RunOutput placed = baton_test::TrainRun("place_auto", config, np, automatic, &text);
  std::smatch m;
  const std::regex line("placement: " + key + " (\\S+) \\(searched (\\d+) placements.*predicted step ([0-9.]+) ms");
  ASSERT_TRUE(std::regex_search(text, m, line)) << text;
  const std::string layout = m[1];
  EXPECT_GT(std::stoi(m[2]), 0);
  EXPECT_GT(std::stod(m[3]), 0.0);
  std::vector<std::string> explicit_sets = sets;
  explicit_sets.push_back("pipeline." + key + "=" + layout);
  const baton_test::RunOutput given = baton_test::TrainRun("place_given", config, np, explicit_sets, &text2);
  EXPECT_EQ(text2.find("placement:"), std::string::npos) << text2;
  baton_test::ExpectSameRun(placed, given, 0.0);
}

TEST(Placement, GptLayoutAutoTrainsItsPrintedLayoutBitForBit) {
  ExpectAutoTrainsItsPrintedPlacement("tests/mpi/tiny_gpt.yaml", "layout", 2, {});
}

TEST(Placement, MlpPartitionAutoTrainsItsPrintedPartitionBitForBit) {
  ExpectAutoTrainsItsPrintedPlacement("tests/mpi/tiny.yaml", "partition", 3, {"pipeline.schedule=zb_h1"});
}

// `baton profile` under mpirun with more processes than CPUs fits the
// waiting share to a short run of the config's own pipeline, and says so
// in the profile: the run, its measured step, the step the probe's share
// gave it, and the probe's share; with enough CPUs it keeps the probe's.
TEST(Placement, AProfileOfRanksSharingCoresFitsTheWaitingShareToARun) {
  const baton_test::fs::path dir =
      baton_test::fs::path(::testing::TempDir()) / ("baton_profile_shared_" + std::to_string(::getpid()));
  baton_test::fs::create_directories(dir);
  const std::string out = (dir / "p.json").string();
  const std::string cmd = "'" BATON_MPIEXEC "' -np 4 '" BATON_BINARY "' profile '" BATON_SOURCE_DIR
                          "/tests/mpi/tiny.yaml' --set pipeline.ranks=4 --set pipeline.microbatches=4 --rows 4 "
                          "--repetitions 2 --calibrate-steps 3 --out '" + out + "' > '" + (dir / "log.txt").string() +
                          "' 2>&1";
  ASSERT_EQ(baton_test::Shell(cmd), 0) << cmd;
  std::ifstream in(out);
  const nlohmann::json j = nlohmann::json::parse(in);
  std::ifstream log_in(dir / "log.txt");
  const std::string log((std::istreambuf_iterator<char>(log_in)), std::istreambuf_iterator<char>());
  if (sysconf(_SC_NPROCESSORS_ONLN) >= 4) {
    EXPECT_FALSE(j.contains("calibration")) << j.dump();
  } else {
    ASSERT_TRUE(j.contains("calibration")) << j.dump();
    EXPECT_EQ(j["calibration"]["run"].get<std::string>().rfind("1f1b m4 v1 none ", 0), 0u) << j.dump();
    EXPECT_GT(j["calibration"]["measured_step_s"].get<double>(), 0.0);
    EXPECT_GT(j["calibration"]["unfitted_step_s"].get<double>(), 0.0);
    EXPECT_GE(j["waiting_share"].get<double>(), 0.0);
    EXPECT_LE(j["waiting_share"].get<double>(), 1.0);
    EXPECT_TRUE(j.contains("probed_waiting_share"));
    EXPECT_NE(log.find("core sharing fitted to the config's own pipeline (1f1b m4"), std::string::npos) << log;
  }
  baton_test::fs::remove_all(dir);
}

}  // namespace
