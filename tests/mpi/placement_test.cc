// The automatic placement under mpirun: `pipeline.layout: auto` (a GPT)
// and `pipeline.partition: auto` (an MLP) print the placement they chose,
// and train exactly what the printed placement, written in the config,
// trains: the same losses and the same weights, bit for bit, on every rank.
#include <gtest/gtest.h>

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

}  // namespace
