// The automatic placement under mpirun: `pipeline.layout: auto` (a GPT)
// and `pipeline.partition: auto` (an MLP) print the placement they chose,
// and train exactly what the printed placement, written in the config,
// trains: the same losses and the same weights, bit for bit, on every rank.
#include <gtest/gtest.h>

#include <regex>

#include "run_helpers.h"

namespace {

using baton_test::fs::path;

// Runs `baton train` with `sets` in a folder of its own and returns what it
// printed and its weights.
std::pair<std::string, baton_test::RunOutput> TrainPrinting(const std::string& name, const std::string& config,
                                                            int np, const std::vector<std::string>& sets) {
  const path dir = path(::testing::TempDir()) / ("baton_place_" + std::to_string(::getpid()) + "_" + name);
  baton_test::fs::remove_all(dir);
  baton_test::fs::create_directories(dir);
  std::string cmd = "cd '" + dir.string() + "' && '" BATON_MPIEXEC "' -np " + std::to_string(np) + " '" +
                    BATON_BINARY + "' train '" BATON_SOURCE_DIR "/" + config + "'";
  for (const std::string& s : sets) cmd += " --set '" + s + "'";
  cmd += " > log.txt 2>&1";
  const int code = baton_test::Shell(cmd);
  std::ifstream log(dir / "log.txt");
  const std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_EQ(code, 0) << cmd << "\n" << text;
  baton_test::RunOutput out;
  std::ifstream metrics(dir / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) out.losses.push_back(j["loss"].get<double>());
  }
  if (baton_test::fs::exists(dir / "weights.safetensors")) {
    out.weights = baton::ReadSafetensors((dir / "weights.safetensors").string());
  }
  baton_test::fs::remove_all(dir);
  return {text, out};
}

void ExpectAutoTrainsItsPrintedPlacement(const std::string& config, const std::string& key, int np,
                                         const std::vector<std::string>& extra) {
  std::vector<std::string> sets = extra;
  sets.push_back("pipeline.ranks=" + std::to_string(np));
  std::vector<std::string> automatic = sets;
  automatic.push_back("pipeline." + key + "=auto");
  const auto [text, placed] = TrainPrinting("auto", config, np, automatic);
  std::smatch m;
  const std::regex line("placement: " + key + " (\\S+) \\(searched (\\d+) placements.*predicted step ([0-9.]+) ms");
  ASSERT_TRUE(std::regex_search(text, m, line)) << text;
  const std::string layout = m[1];
  EXPECT_GT(std::stoi(m[2]), 0);
  EXPECT_GT(std::stod(m[3]), 0.0);
  std::vector<std::string> explicit_sets = sets;
  explicit_sets.push_back("pipeline." + key + "=" + layout);
  const auto [text2, given] = TrainPrinting("given", config, np, explicit_sets);
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
