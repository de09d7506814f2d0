// The automatic placement under mpirun: `pipeline.layout: auto` (a GPT)
// and `pipeline.partition: auto` (an MLP) print the placement they chose,
// and train exactly what the printed placement, written in the config,
// trains: the same losses and the same weights, bit for bit, on every rank.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <regex>

#include "baton/config.h"
#include "baton/machine.h"
#include "baton/plan.h"
#include "baton/placement.h"
#include "baton/profile_price.h"
#include "baton/profile.h"
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

// `baton profile` under mpirun with more processes than CPUs fits the cost
// of actions on shared cores to a short run of the config's own pipeline,
// and says so in the profile: the run, its measured step, the step the
// profiled costs gave it, and the factor, which then gives the measured
// step; with enough CPUs there is no fit.
TEST(Placement, AProfileOfRanksSharingCoresFitsTheirCostToARun) {
  const baton_test::fs::path dir =
      baton_test::fs::path(::testing::TempDir()) / ("baton_profile_shared_" + std::to_string(::getpid()));
  baton_test::fs::create_directories(dir);
  const std::string out = (dir / "p.json").string();
  const std::string cmd = "'" BATON_MPIEXEC "' -np 4 '" BATON_BINARY "' profile '" BATON_SOURCE_DIR
                          "/tests/mpi/tiny.yaml' --set pipeline.ranks=4 --set pipeline.microbatches=4 --rows 4 "
                          "--repetitions 2 --calibrate-steps 3 --out '" + out + "' > '" + (dir / "log.txt").string() +
                          "' 2>&1";
  ASSERT_EQ(baton_test::Shell(cmd), 0) << cmd;
  // The machine model beside the profile, named after this machine.
  const baton::Profile read = baton::ReadProfile(out);
  std::ifstream in(baton::MachineFileName(out, read.identity.machine, read.identity.cores));
  ASSERT_TRUE(in.good()) << "no machine model beside " << out;
  const nlohmann::json j = nlohmann::json::parse(in);
  std::ifstream log_in(dir / "log.txt");
  const std::string log((std::istreambuf_iterator<char>(log_in)), std::istreambuf_iterator<char>());
  if (sysconf(_SC_NPROCESSORS_ONLN) >= 4) {
    EXPECT_TRUE(j["calibration"].empty()) << j.dump();
  } else {
    ASSERT_FALSE(j["calibration"].empty()) << j.dump();
    // The config's own pipeline, zb_h1 at its placement, and the own at
    // the placement that evens out the profiled costs where that differs.
    // The fit is to bench's steps, which end at their gradients: priced
    // without the optimizer's step the profile also measured.
    baton::Profile p = baton::ReadProfile(out);
    EXPECT_FALSE(p.update.empty());
    p.update.clear();
    p.clip.clear();
    const baton::TrainConfig own = baton::LoadTrainConfig(BATON_SOURCE_DIR "/tests/mpi/tiny.yaml",
                                                          {"pipeline.ranks=4", "pipeline.microbatches=4"});
    const baton::RunPlan own_plan = baton::PlanRun(own);
    baton::TrainConfig zb = baton::WithPlacement(own, own_plan.model, own_plan.bounds);
    zb.pipeline.schedule = "zb_h1";
    std::vector<baton::RunPlan> plans{own_plan, baton::PlanRun(zb)};
    const std::vector<int> even = baton::BottleneckPlacement(own, own_plan.model, baton::LayersAt(p, own_plan.rows), 4);
    if (even != own_plan.bounds) plans.push_back(baton::PlanRun(baton::WithPlacement(own, own_plan.model, even)));
    ASSERT_EQ(j["calibration"].size(), plans.size()) << j.dump();
    EXPECT_EQ(j["calibration"][0]["run"].get<std::string>().rfind("1f1b m4 v1 none ", 0), 0u) << j.dump();
    EXPECT_EQ(j["calibration"][1]["run"].get<std::string>().rfind("zb_h1 m4 v1 none ", 0), 0u) << j.dump();
    const double scale = j["action_cost"].get<double>();
    EXPECT_GE(scale, baton::kMinSharedCoreCost);
    EXPECT_LE(scale, baton::kMaxSharedCoreCost);
    EXPECT_GE(p.machine.shared.waiting_share, 0.0);
    EXPECT_LE(p.machine.shared.waiting_share, 1.0);
    if (plans.size() < 3) {
      EXPECT_EQ(p.machine.shared.waiting_share, p.machine.probed_waiting_share);
    }
    // Each run's steps as the profile simulates them, before the fit (the
    // probe's share, factor 1) and after; within the fit's range, the
    // measured steps lie on both sides of the simulated ones (their log
    // errors cancel).
    double log_error = 0;
    for (std::size_t k = 0; k < plans.size(); ++k) {
      const baton::MachineModel::Calibration& c = p.machine.calibration[k];
      EXPECT_GT(c.measured_step_s, 0.0);
      EXPECT_NEAR(baton::PredictFromProfile(plans[k], p).sim.makespan, c.fitted_step_s, 1e-9) << k;
      baton::Profile before = p;
      before.machine.shared.action_cost = 1.0;
      before.machine.shared.waiting_share = p.machine.probed_waiting_share;
      EXPECT_NEAR(baton::PredictFromProfile(plans[k], before).sim.makespan, c.unfitted_step_s, 1e-9) << k;
      log_error += std::log(c.fitted_step_s / c.measured_step_s);
    }
    if (scale > baton::kMinSharedCoreCost && scale < baton::kMaxSharedCoreCost) {
      EXPECT_NEAR(log_error, 0.0, 1e-6);
    }
    EXPECT_NE(log.find("core sharing fitted to runs of the config's own pipeline"), std::string::npos) << log;
    EXPECT_NE(log.find("  zb_h1 m4 v1 none "), std::string::npos) << log;
    // The tuner says what it applies.
    const std::string tuned = (dir / "tune.txt").string();
    const std::string tune = "'" BATON_BINARY "' tune '" BATON_SOURCE_DIR
                             "/tests/mpi/tiny.yaml' --set pipeline.ranks=4 --set pipeline.microbatches=4 --top 1 --memory-bytes 1e9 "
                             "--profile '" + out + "' > '" + tuned + "' 2>&1";
    ASSERT_EQ(baton_test::Shell(tune), 0) << tune;
    std::ifstream tune_in(tuned);
    const std::string tune_text((std::istreambuf_iterator<char>(tune_in)), std::istreambuf_iterator<char>());
    EXPECT_NE(tune_text.find(fmt::format("4 processes sharing {} CPUs: each action at {:.3f}x its profiled time",
                                         j["cores"].get<int>(), scale)),
              std::string::npos)
        << tune_text;
  }
  baton_test::fs::remove_all(dir);
}

}  // namespace
