// Profiles without a device: their file round trip, the refusal of a
// profile of another model or machine, an empty one, costs between
// profiled row counts, a stage's price against its layers' sums and what
// its policy recomputes, and the automatic placement against every
// placement predicted one by one.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <limits>
#include <random>

#include "baton/config.h"
#include "baton/error.h"
#include "baton/files.h"
#include "baton/machine.h"
#include "baton/placement.h"
#include "baton/plan.h"
#include "baton/profile.h"
#include "baton/profile_price.h"
#include "baton/tune_config.h"

namespace baton {
namespace {

TrainConfig Tiny(const std::vector<std::string>& sets = {}) {
  return LoadTrainConfig(BATON_SOURCE_DIR "/tests/mpi/tiny.yaml", sets);
}

ModelDesc ModelOf(const TrainConfig& c) { return DescribeModel(c.model.layers, c.model.input, c.model.seq); }

// A made-up profile of `config`'s model: layer t at r rows costs about r
// times its own random rates; each op's forward a share of the layer's.
Profile MadeUp(const TrainConfig& config, const std::vector<int>& rows, unsigned seed) {
  const ModelDesc model = ModelOf(config);
  Profile p;
  p.identity = IdentityOf(config, model, "test machine", 64);
  p.config = config.source;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0.5, 2.0);
  std::vector<double> rate;
  for (int t = 0; t < model.top_layers(); ++t) rate.push_back(u(rng) * 1e-5);
  for (int r : rows) {
    ProfileRows pr;
    pr.rows = r;
    for (int t = 0; t < model.top_layers(); ++t) {
      LayerProfile l;
      l.forward = rate[t] * r;
      l.backward_input = 1.1 * rate[t] * r;
      l.backward_weight = 0.8 * rate[t] * r;
      l.backward = 1.85 * rate[t] * r;
      const auto [first, last] = model.OpRange(t, t + 1);
      for (int k = first; k < last; ++k) l.op_forward.push_back(l.forward / (last - first));
      l.saved_bytes = 1000.0 * r;
      pr.layers.push_back(l);
    }
    p.rows.push_back(pr);
  }
  return p;
}

TEST(Profile, RoundTripsThroughItsFile) {
  const TrainConfig c = Tiny();
  Profile p = MadeUp(c, {4, 8}, 1);
  p.latency_s = 3e-6;
  p.bandwidth_Bps = 5e9;
  const Profile q = ParseProfile(ProfileJson(p), "p.json");
  EXPECT_EQ(q.identity.layers, p.identity.layers);
  EXPECT_EQ(q.identity.machine, "test machine");
  EXPECT_EQ(q.identity.cores, 64);
  ASSERT_EQ(q.rows.size(), 2u);
  EXPECT_EQ(q.rows[1].rows, 8);
  EXPECT_DOUBLE_EQ(q.rows[1].layers[3].backward_weight, p.rows[1].layers[3].backward_weight);
  EXPECT_EQ(q.rows[0].layers[2].op_forward, p.rows[0].layers[2].op_forward);
  EXPECT_DOUBLE_EQ(q.latency_s, 3e-6);
  EXPECT_EQ(q.processes, 1);
  EXPECT_FALSE(q.cpu_clock);
  EXPECT_NO_THROW(CheckProfile(q, p.identity, "p.json"));
  // Four processes on fewer CPUs: timed by CPU time, and said so.
  p.processes = 4;
  p.cpu_clock = true;
  const Profile shared = ParseProfile(ProfileJson(p), "p.json");
  EXPECT_EQ(shared.processes, 4);
  EXPECT_TRUE(shared.cpu_clock);
  EXPECT_TRUE(shared.machine.calibration.empty());
  EXPECT_DOUBLE_EQ(shared.machine.shared.action_cost, 1.0);
  // The cost on shared cores fitted to runs of the config's own pipeline,
  // with the runs kept.
  p.machine.shared.waiting_share = 0.01;
  p.machine.shared.action_cost = 1.27;
  p.machine.calibration = {{"1f1b m8 v1 none [2,2]", 0.04, 0.033, 0.041}, {"zb_h1 m8 v1 none [2,2]", 0.039, 0.03, 0.038}};
  // The machine model is not the profile's: it has its own file.
  EXPECT_DOUBLE_EQ(ParseProfile(ProfileJson(p), "p.json").machine.shared.action_cost, 1.0);
  Profile fitted = shared;
  fitted.machine = ParseMachine(MachineJson(p.machine), "machine.json");
  EXPECT_DOUBLE_EQ(fitted.machine.shared.waiting_share, 0.01);
  EXPECT_DOUBLE_EQ(fitted.machine.shared.action_cost, 1.27);
  ASSERT_EQ(fitted.machine.calibration.size(), 2u);
  EXPECT_EQ(fitted.machine.calibration[1].run, "zb_h1 m8 v1 none [2,2]");
  EXPECT_DOUBLE_EQ(fitted.machine.calibration[1].measured_step_s, 0.039);
  EXPECT_DOUBLE_EQ(fitted.machine.calibration[1].unfitted_step_s, 0.03);
  EXPECT_DOUBLE_EQ(fitted.machine.calibration[1].fitted_step_s, 0.038);
}

// ReadProfile reads the machine model of the profile's machine from the
// file beside it named after the machine; none there: the default model.
// Another machine's model or a damaged one is refused, naming the file.
TEST(Profile, ReadsTheMachineModelBesideIt) {
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / ("baton_machine_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "p.json").string();
  Profile p = MadeUp(Tiny(), {4}, 1);
  p.identity.machine = "AMD EPYC 7B13 (x2)";
  p.identity.cores = 2;
  WriteTextFile(path, ProfileJson(p));
  EXPECT_DOUBLE_EQ(ReadProfile(path).machine.shared.action_cost, 1.0);
  EXPECT_DOUBLE_EQ(ReadProfile(path).machine.shared.waiting_share, 0.0);
  const std::string beside = MachineFileName(path, p.identity.machine, 2);
  EXPECT_EQ(std::filesystem::path(beside).filename(), "machine-AMD-EPYC-7B13-x2-2cpus.json");
  MachineModel m;
  m.machine = p.identity.machine;
  m.cores = 2;
  m.shared = {1.4, 0.25};
  m.calibration = {{"1f1b m8 v1 none [3,3,3]", 0.05, 0.04, 0.049}};
  WriteTextFile(beside, MachineJson(m));
  const Profile q = ReadProfile(path);
  EXPECT_DOUBLE_EQ(q.machine.shared.action_cost, 1.4);
  EXPECT_DOUBLE_EQ(q.machine.shared.waiting_share, 0.25);
  ASSERT_EQ(q.machine.calibration.size(), 1u);
  EXPECT_DOUBLE_EQ(q.machine.calibration[0].fitted_step_s, 0.049);
  // Four CPUs is another machine: its file is another, absent here.
  p.identity.cores = 4;
  WriteTextFile(path, ProfileJson(p));
  EXPECT_DOUBLE_EQ(ReadProfile(path).machine.shared.action_cost, 1.0);
  m.shared.action_cost = 0;
  WriteTextFile(MachineFileName(path, p.identity.machine, 4), MachineJson(m));
  EXPECT_THROW(ReadProfile(path), ConfigError);  // names another machine, and a factor of 0
  std::filesystem::remove_all(dir);
}

// Four ranks on two cores: the cost factor FitSharedCoreCost finds for a
// step the simulator gave at a known factor is that factor (whatever the
// profile held before); a step below what the least factor gives fits the
// least, one above what the most gives fits the most. On enough cores the
// factor does not apply.
TEST(Profile, TheSharedCoreCostFitsTheStepItWasSimulatedAt) {
  const TrainConfig c = Tiny({"pipeline.ranks=4"});
  Profile p = MadeUp(c, {4}, 3);
  p.identity.cores = 2;
  p.machine.shared.waiting_share = 0.02;
  p.machine.shared.action_cost = 2.0;
  const RunPlan plan = PlanRun(c);
  auto step = [&](double scale) {
    Profile q = p;
    q.machine.shared.action_cost = scale;
    return PredictFromProfile(plan, q).sim.makespan;
  };
  ASSERT_LT(step(1.0), step(1.1));  // the factor does slow the step
  for (double scale : {0.8, 1.0, 1.27, 2.5}) {
    EXPECT_NEAR(FitSharedCoreCost({plan}, p, {step(scale)}), scale, 1e-6) << scale;
  }
  EXPECT_EQ(FitSharedCoreCost({plan}, p, {0.5 * step(kMinSharedCoreCost)}), kMinSharedCoreCost);
  EXPECT_EQ(FitSharedCoreCost({plan}, p, {2.0 * step(kMaxSharedCoreCost)}), kMaxSharedCoreCost);
  // Two runs, one measured 10% above the step the factor gives it and one
  // 10% below: the factor itself, where the log errors cancel.
  const RunPlan zb = PlanRun(Tiny({"pipeline.ranks=4", "pipeline.schedule=zb_h1"}));
  Profile at = p;
  at.machine.shared.action_cost = 1.3;
  const double zb_step = PredictFromProfile(zb, at).sim.makespan;
  EXPECT_NEAR(FitSharedCoreCost({plan, zb}, p, {step(1.3) * 1.1, zb_step / 1.1}), 1.3, 1e-6);
  EXPECT_THROW(FitSharedCoreCost({plan, zb}, p, {step(1.3)}), ConfigError);
  EXPECT_EQ(SharedCoreCost(p, 4, 1), 2.0);
  EXPECT_EQ(SharedCoreCost(p, 2, 1), 1.0);
  EXPECT_EQ(SharedCoreCost(p, 2, 2), 2.0);
  p.identity.cores = 4;
  Profile unscaled = p;
  unscaled.machine.shared.action_cost = 1.0;
  EXPECT_EQ(PredictFromProfile(plan, p).sim.makespan, PredictFromProfile(plan, unscaled).sim.makespan);
}

void ExpectRefused(const std::function<void()>& f, const std::string& text) {
  try {
    f();
    ADD_FAILURE() << "not refused; expected: " << text;
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

TEST(Profile, AProfileOfAnotherModelOrMachineIsRefusedNamingTheDifference) {
  const TrainConfig c = Tiny();
  const Profile p = MadeUp(c, {4}, 1);
  const TrainConfig wider = Tiny({"model.layers.6.out=20"});
  ExpectRefused([&] { CheckProfile(p, IdentityOf(wider, ModelOf(wider), "test machine", 64), "p.json"); },
                "p.json: the profile does not match this run: layer 6 is \"linear 24->16\" in the profile, "
                "\"linear 24->20\" in the model");
  ExpectRefused([&] { CheckProfile(p, IdentityOf(c, ModelOf(c), "another machine", 64), "p.json"); },
                "measured on \"test machine\", this is \"another machine\"");
  ExpectRefused([&] { CheckProfile(p, IdentityOf(c, ModelOf(c), "test machine", 8), "p.json"); },
                "measured with 64 CPUs, 8 here");
  const TrainConfig deeper = Tiny({"model.layers=[{type: linear, out: 4}]"});
  ExpectRefused([&] { CheckProfile(p, IdentityOf(deeper, ModelOf(deeper), "test machine", 64), "p.json"); },
                "it has 9 top-level layers, the model 1");
}

TEST(Profile, AnEmptyOrForeignFileIsOneClearError) {
  ExpectRefused([] { ParseProfile("", "e.json"); }, "e.json: not a baton profile");
  ExpectRefused([] { ParseProfile("{}", "e.json"); }, "e.json: not a baton profile (no \"format\"");
  ExpectRefused([] { ParseProfile("{\"format\": 99}", "e.json"); }, "a profile of format 99");
  // The format before: its fitted waiting share means something else now.
  ExpectRefused([] { ParseProfile("{\"format\": 1}", "e.json"); },
                "e.json: a profile of format 1, but this baton reads format 3: profile again");
  const TrainConfig c = Tiny();
  Profile p = MadeUp(c, {4}, 1);
  p.rows.clear();
  ExpectRefused([&] { ParseProfile(ProfileJson(p), "e.json"); }, "e.json: the profile holds no measurements");
  std::string json = ProfileJson(MadeUp(c, {4}, 1));
  const std::size_t at = json.find("\"wall\"");
  ASSERT_NE(at, std::string::npos);
  json.replace(at, 6, "\"sundial\"");
  ExpectRefused([&] { ParseProfile(json, "e.json"); }, "e.json: clock \"sundial\": a profile's clock is");
}

// The optimizer's step a profile measured (per layer: the update, the
// clip's pass): kept through its file, summed over each stage's layers for
// a run of the same optimizer, shared out over the replicas under ZeRO 1,
// the clip priced only where the run clips (with the norm's exchange: a
// reduction and a broadcast over the world's ranks), and a damaged one
// refused.
TEST(Profile, TheOptimizersStepIsPricedForARunOfTheOptimizerItMeasured) {
  const std::vector<std::string> two = {"pipeline.ranks=2", "pipeline.partition=[4, 5]"};
  const TrainConfig c = Tiny(two);
  Profile p = MadeUp(c, {4}, 3);
  p.latency_s = 7e-6;
  p.optimizer = "sgd";
  for (int t = 0; t < 9; ++t) {
    p.update.push_back(1e-4 * (t + 1));
    p.clip.push_back(1e-5 * (t + 1));
  }
  const Profile q = ParseProfile(ProfileJson(p), "p.json");
  EXPECT_EQ(q.optimizer, "sgd");
  ASSERT_EQ(q.update.size(), 9u);
  ASSERT_EQ(q.clip.size(), 9u);
  for (std::size_t t = 0; t < 9; ++t) {
    EXPECT_DOUBLE_EQ(q.update[t], p.update[t]);
    EXPECT_DOUBLE_EQ(q.clip[t], p.clip[t]);
  }
  // Layers 0-3 and 4-8: 1 + 2 + 3 + 4 and 5 + ... + 9 units.
  const RunPlan plan = PlanRun(c);
  const RunCosts costs = ProfileRunCosts(plan, q);
  ASSERT_EQ(costs.update.size(), 2u);
  EXPECT_NEAR(costs.update[0], 10e-4, 1e-15);
  EXPECT_NEAR(costs.update[1], 35e-4, 1e-15);
  EXPECT_NEAR(costs.clip[1], 35e-5, 1e-15);
  const SimOptions unclipped = PriceRun(plan, costs);
  EXPECT_EQ(unclipped.update.stage_time, costs.update);
  EXPECT_TRUE(unclipped.update.clip.empty());
  std::vector<std::string> clipping = two;
  clipping.push_back("train.clip_grad_norm=1.0");
  const RunPlan clipped_plan = PlanRun(Tiny(clipping));
  const SimOptions clipped = PriceRun(clipped_plan, ProfileRunCosts(clipped_plan, q));
  EXPECT_EQ(clipped.update.clip, costs.clip);
  EXPECT_DOUBLE_EQ(clipped.update.exchange, 2 * 1 * 7e-6);  // 2 ranks: one message each way
  EXPECT_GT(PredictFromProfile(clipped_plan, q).sim.makespan, PredictFromProfile(plan, q).sim.makespan);
  // ZeRO 1 over 2 replicas: each updates half, and the norm crosses 4 ranks.
  std::vector<std::string> sharded = clipping;
  sharded.insert(sharded.end(), {"data_parallel.size=2", "data_parallel.zero=1"});
  const RunPlan zero1 = PlanRun(Tiny(sharded));
  const SimOptions halves = PriceRun(zero1, ProfileRunCosts(zero1, q));
  ASSERT_EQ(halves.update.stage_time.size(), 2u);
  EXPECT_NEAR(halves.update.stage_time[1], 35e-4 / 2, 1e-15);
  EXPECT_NEAR(halves.update.clip[0], 10e-5 / 2, 1e-15);
  EXPECT_DOUBLE_EQ(halves.update.exchange, 2 * 2 * 7e-6);
  // Another optimizer's step is not this one's: not priced.
  std::vector<std::string> adamw = two;
  adamw.push_back("train.optimizer={type: adamw, lr: 0.001}");
  const RunPlan other = PlanRun(Tiny(adamw));
  EXPECT_TRUE(ProfileRunCosts(other, q).update.empty());
  EXPECT_TRUE(PriceRun(other, ProfileRunCosts(other, q)).update.empty());
  // A profile without it (an older one) prices no update.
  EXPECT_TRUE(ProfileRunCosts(plan, MadeUp(c, {4}, 3)).update.empty());
  // Damaged: a time a layer short, or negative.
  Profile short_one = p;
  short_one.clip.pop_back();
  ExpectRefused([&] { ParseProfile(ProfileJson(short_one), "d.json"); },
                "d.json: the profile's optimizer step has 9 update and 8 clip times for 9 layers");
  Profile negative = p;
  negative.update[2] = -1;
  ExpectRefused([&] { ParseProfile(ProfileJson(negative), "d.json"); }, "d.json: layer 2's update or clip time is negative");
}

TEST(Profile, CostsBetweenProfiledRowsAreLinear) {
  const Profile p = MadeUp(Tiny(), {4, 8}, 3);
  bool exact = false;
  std::vector<LayerProfile> at = LayersAt(p, 8, &exact);
  EXPECT_TRUE(exact);
  EXPECT_DOUBLE_EQ(at[0].forward, p.rows[1].layers[0].forward);
  at = LayersAt(p, 6, &exact);
  EXPECT_FALSE(exact);
  EXPECT_NEAR(at[5].backward, 0.5 * (p.rows[0].layers[5].backward + p.rows[1].layers[5].backward), 1e-15);
  at = LayersAt(p, 16);  // beyond: in proportion to the nearest
  EXPECT_NEAR(at[2].forward, 2 * p.rows[1].layers[2].forward, 1e-15);
  at = LayersAt(p, 2);
  EXPECT_NEAR(at[2].saved_bytes, 0.5 * p.rows[0].layers[2].saved_bytes, 1e-9);
}

// A stage costs its layers' sums; full checkpointing recomputes every op's
// forward but the stage's last, inside I and again inside W when split.
TEST(Profile, AStageCostsItsLayersAndWhatItsPolicyRecomputes) {
  const TrainConfig none = Tiny({"pipeline.ranks=2", "pipeline.partition=[4, 5]", "train.batch_size=32"});
  const TrainConfig full = Tiny({"pipeline.ranks=2", "pipeline.partition=[4, 5]", "pipeline.checkpointing=full"});
  const Profile p = MadeUp(none, {4}, 5);
  const std::vector<LayerProfile>& l = p.rows[0].layers;
  const RunPlan a = PlanShape(none, ModelOf(none), 2);
  const RunPlan b = PlanShape(full, ModelOf(full), 2);
  ASSERT_EQ(a.rows, 4);
  const ModelDesc model = ModelOf(none);
  double f = 0, i = 0, w = 0, bsum = 0, redo = 0;
  for (int t = 0; t < 4; ++t) {
    f += l[t].forward;
    i += l[t].backward_input;
    w += l[t].backward_weight;
    bsum += l[t].backward;
    for (double x : l[t].op_forward) redo += x;
  }
  const auto [first, last] = model.OpRange(0, 4);
  redo -= l[3].op_forward.back();  // the stage's last op is never recomputed
  (void)first;
  (void)last;
  StagePrice s = PriceStage(a, l, 0, /*split_backward=*/true);
  EXPECT_DOUBLE_EQ(s.costs.forward, f);
  EXPECT_DOUBLE_EQ(s.costs.backward_input, i);
  EXPECT_DOUBLE_EQ(s.costs.backward_weight, w);
  EXPECT_EQ(s.recompute, 0.0);
  s = PriceStage(a, l, 0, /*split_backward=*/false);
  EXPECT_NEAR(s.costs.Backward(), bsum, 1e-15);
  s = PriceStage(b, l, 0, /*split_backward=*/true);
  EXPECT_NEAR(s.recompute, redo, 1e-15);
  EXPECT_NEAR(s.costs.backward_input, i + redo, 1e-15);
  EXPECT_NEAR(s.costs.backward_weight, w + redo, 1e-15);
  EXPECT_LT(s.slot_bytes, PriceStage(a, l, 0, true).slot_bytes);
}

// Three runs whose ranks wait differently (1F1B, ZB-H1, and 1F1B at
// another placement), their steps simulated at a known factor and waiting
// share: FitSharedCores finds both (the share on its grid). With two runs
// it keeps the profile's share and fits the factor alone.
TEST(Profile, TheSharedCoresFitFindsTheFactorAndTheWaitingShareOfThreeRuns) {
  const TrainConfig c = Tiny({"pipeline.ranks=4"});
  Profile p = MadeUp(c, {4}, 3);
  p.identity.cores = 2;
  p.machine.shared.waiting_share = 0.0;
  const ModelDesc model = ModelOf(c);
  const RunPlan own = PlanRun(WithPlacement(c, model, {0, 1, 2, 3, 9}));
  TrainConfig zb = WithPlacement(c, model, own.bounds);
  zb.pipeline.schedule = "zb_h1";
  const std::vector<RunPlan> plans{own, PlanRun(zb), PlanRun(WithPlacement(c, model, {0, 3, 5, 7, 9}))};
  for (const double share : {0.0, 0.35, 0.8}) {
    Profile truth = p;
    truth.machine.shared.action_cost = 1.3;
    truth.machine.shared.waiting_share = share;
    std::vector<double> measured;
    for (const RunPlan& plan : plans) measured.push_back(PredictFromProfile(plan, truth).sim.makespan);
    const SharedCoresFit fit = FitSharedCores(plans, p, measured);
    EXPECT_NEAR(fit.waiting_share, share, 1e-12) << share;
    EXPECT_NEAR(fit.scale, 1.3, 1e-6) << share;
    EXPECT_LT(fit.squared_error, 1e-10) << share;
    // Two runs: the profile's share (0 here), the factor fitted alone.
    const SharedCoresFit two = FitSharedCores({plans[0], plans[1]}, p, {measured[0], measured[1]});
    EXPECT_EQ(two.waiting_share, 0.0);
    EXPECT_NEAR(two.scale, FitSharedCoreCost({plans[0], plans[1]}, p, {measured[0], measured[1]}), 1e-12);
  }
}

// BottleneckPlacement against every contiguous placement of the tiny MLP's
// 9 layers over 2 to 4 stages: the least costliest stage (F + B).
TEST(Profile, TheBottleneckPlacementIsTheLeastCostliestStageOfEveryPlacement) {
  const TrainConfig c = Tiny();
  const ModelDesc model = ModelOf(c);
  for (unsigned seed : {1u, 2u, 3u}) {
    const std::vector<LayerProfile> layers = MadeUp(c, {4}, seed).rows.front().layers;
    auto stage = [&](int a, int b) {
      double t = 0;
      for (int l = a; l < b; ++l) t += layers[l].forward + layers[l].backward;
      return t;
    };
    for (int stages = 2; stages <= 4; ++stages) {
      double best = std::numeric_limits<double>::infinity();
      std::vector<int> cut(stages + 1, 0);
      cut[stages] = 9;
      // Every increasing choice of the stages - 1 inner cuts in 1..8.
      std::function<void(int, int)> walk = [&](int k, int from) {
        if (k == stages) {
          double worst = 0;
          for (int s = 0; s < stages; ++s) worst = std::max(worst, stage(cut[s], cut[s + 1]));
          best = std::min(best, worst);
          return;
        }
        for (int x = from; x <= 9 - (stages - k); ++x) {
          cut[k] = x;
          walk(k + 1, x + 1);
        }
      };
      walk(1, 1);
      const std::vector<int> found = BottleneckPlacement(c, model, layers, stages);
      ASSERT_EQ(found.size(), static_cast<std::size_t>(stages) + 1);
      EXPECT_EQ(found.front(), 0);
      EXPECT_EQ(found.back(), 9);
      double worst = 0;
      for (int s = 0; s < stages; ++s) {
        EXPECT_LT(found[s], found[s + 1]);
        worst = std::max(worst, stage(found[s], found[s + 1]));
      }
      EXPECT_DOUBLE_EQ(worst, best) << "seed " << seed << ", " << stages << " stages";
    }
  }
  EXPECT_TRUE(BottleneckPlacement(c, model, MadeUp(c, {4}, 1).rows.front().layers, 10).empty());
}

// pipeline.partition: auto chooses what predicting every contiguous
// placement one by one (PlanRun, PredictFromProfile) finds fastest, and
// its layout reads back as the same placement.
TEST(Profile, AutomaticPlacementIsTheFastestOfEveryPlacementPredicted) {
  for (const std::string schedule : {"1f1b", "zb_h1", "gpipe"}) {
    for (unsigned seed : {1u, 2u, 3u, 4u}) {
      TrainConfig c = Tiny({"pipeline.ranks=3", "pipeline.schedule=" + schedule, "pipeline.partition=auto"});
      Profile p = MadeUp(c, {4}, seed);
      if (seed == 4) {
        // Three ranks sharing two cores, each action costing 1.4x its
        // profiled time there: the search and the prediction both apply it.
        p.identity.cores = 2;
        p.machine.shared.action_cost = 1.4;
      }
      const PlacementChoice choice = ChoosePlacement(c, p);
      const ModelDesc model = ModelOf(c);
      double best = std::numeric_limits<double>::infinity();
      for (int a = 1; a < 9; ++a) {
        for (int b = a + 1; b < 9; ++b) {
          const RunPlan plan = PlanRun(WithPlacement(c, model, {0, a, b, 9}));
          best = std::min(best, PredictFromProfile(plan, p).sim.makespan);
        }
      }
      EXPECT_NEAR(choice.step_s, best, 1e-12 * best) << schedule << " seed " << seed;
      const RunPlan placed = PlanRun(WithPlacement(c, model, choice.bounds));
      EXPECT_EQ(placed.bounds, choice.bounds);
      EXPECT_NEAR(PredictFromProfile(placed, p).sim.makespan, choice.step_s, 1e-12 * best);
      EXPECT_EQ(choice.layouts, 28u);  // C(8, 2)
      // Its memory per rank is what the run allocates (memory_test measures the heap against it).
      const std::vector<RankMemory> mem = PlanMemory(placed);
      ASSERT_EQ(choice.peak_bytes.size(), mem.size());
      for (std::size_t r = 0; r < mem.size(); ++r) {
        EXPECT_DOUBLE_EQ(choice.peak_bytes[r], static_cast<double>(mem[r].total())) << schedule << " rank " << r;
      }
    }
  }
}

// Sliced (seq1f1b, zb_h1 over 2 and 4 slices of the tiny GPT's sequence):
// the tuner prices the slices' rings and the sequences' key/value slots
// from the simulator's peaks; that is what the plan's walk over the
// rank's actions allocates (PlanMemory), and the step what the placed
// plan predicts.
// With one rank slowed (the adaptive plans' measure), the placement search
// finds what predicting every placement under the same slowdowns finds
// fastest, and moves layers off the slow rank.
TEST(Profile, ASlowRanksPlacementIsTheFastestPredictedUnderItsSlowdown) {
  for (const std::string schedule : {"1f1b", "zb_h1", "gpipe"}) {
    for (const std::vector<double>& slow : {std::vector<double>{1, 3, 1}, std::vector<double>{2, 1, 1}}) {
      const TrainConfig c = Tiny({"pipeline.ranks=3", "pipeline.schedule=" + schedule, "pipeline.partition=auto"});
      const Profile p = MadeUp(c, {4}, 1);
      const PlacementChoice healthy = ChoosePlacement(c, p);
      const PlacementChoice choice = ChoosePlacement(c, p, slow);
      const ModelDesc model = ModelOf(c);
      double best = std::numeric_limits<double>::infinity();
      for (int a = 1; a < 9; ++a) {
        for (int b = a + 1; b < 9; ++b) {
          best = std::min(best, PredictFromProfile(PlanRun(WithPlacement(c, model, {0, a, b, 9})), p, slow).sim.makespan);
        }
      }
      EXPECT_NEAR(choice.step_s, best, 1e-12 * best) << schedule;
      const int slow_rank = slow[1] > 1 ? 1 : 0;
      const auto layers_on = [&](const std::vector<int>& bounds) { return bounds[slow_rank + 1] - bounds[slow_rank]; };
      EXPECT_LE(layers_on(choice.bounds), layers_on(healthy.bounds)) << schedule;
      EXPECT_GT(choice.step_s, healthy.step_s);
    }
  }
}

TEST(Profile, SlicedPlacementsCostWhatThePlanAllocates) {
  for (const std::string schedule : {"seq1f1b", "zb_h1"}) {
    for (const std::string k : {"2", "4"}) {
      for (const std::string split : {"even", "compute"}) {
        const TrainConfig gpt = LoadTrainConfig(
            BATON_SOURCE_DIR "/tests/mpi/tiny_gpt.yaml",
            {"pipeline.ranks=2", "pipeline.layout=auto", "pipeline.schedule=" + schedule, "pipeline.seq_slices=" + k,
             "pipeline.seq_split=" + split});
        const Profile p = MadeUp(gpt, {2}, 1);
        const PlacementChoice choice = ChoosePlacement(gpt, p);
        const RunPlan placed = PlanRun(WithPlacement(gpt, ModelOf(gpt), choice.bounds));
        ASSERT_EQ(placed.slices, std::stoi(k));
        EXPECT_NEAR(PredictFromProfile(placed, p).sim.makespan, choice.step_s, 1e-12 * choice.step_s);
        const std::vector<RankMemory> mem = PlanMemory(placed);
        ASSERT_EQ(choice.peak_bytes.size(), mem.size());
        for (std::size_t r = 0; r < mem.size(); ++r) {
          EXPECT_GT(mem[r].sequences, 0u);
          EXPECT_DOUBLE_EQ(choice.peak_bytes[r], static_cast<double>(mem[r].total()))
              << schedule << " k " << k << " " << split << " rank " << r;
        }
      }
    }
  }
}

// The ZeRO axis of baton tune: over 4 replicas of one rank running an MLP
// of 8 linear layers in 4 groups (looped_bfs), every ZeRO stage's
// predicted memory is what the plan of that run allocates (PlanMemory: its
// shards and windows); and under a budget only ZeRO 3 fits, and the tuner
// picks it.
TEST(Profile, TuneChoosesTheZeroStageAndItsMemoryIsThePlans) {
  const std::vector<std::string> sets = {
      "pipeline.ranks=1", "data_parallel.size=4",
      "model.layers=[{type: linear, out: 48}, {type: linear, out: 48}, {type: linear, out: 48}, "
      "{type: linear, out: 48}, {type: linear, out: 48}, {type: linear, out: 48}, {type: linear, out: 48}, "
      "{type: linear, out: 4}]"};
  const TrainConfig c = Tiny(sets);
  const Profile p = MadeUp(c, {1}, 2);
  TuneRequest req;
  req.schedules = {"looped_bfs"};
  req.microbatches = {8};
  req.chunks = {4};
  req.policies = {Checkpointing::kNone};
  req.placement = false;
  req.memory_bytes = 1e12;
  const TuneReport all = TuneConfig(c, req, p);
  ASSERT_EQ(all.ranked.size(), 4u);
  std::vector<double> need(4, 0.0);
  for (const CandidateResult& r : all.ranked) {
    ASSERT_TRUE(r.feasible) << r.why_not;
    const int z = r.candidate.zero.number();
    need[static_cast<std::size_t>(z)] = r.max_peak_bytes;
    std::vector<std::string> run = sets;
    run.insert(run.end(), {"pipeline.schedule=looped_bfs", "pipeline.chunks=4", "pipeline.microbatches=8",
                           "pipeline.checkpointing=none", "data_parallel.zero=" + std::to_string(z)});
    const RunPlan plan = PlanRun(Tiny(run));
    const std::vector<RankMemory> mem = PlanMemory(plan);
    // The shards the tuner counts are the largest replica's (a float more at most, per stage).
    EXPECT_NEAR(r.max_peak_bytes, static_cast<double>(mem[0].total()), 4 * 4 * sizeof(float)) << "zero " << z;
    // One price: the order the tuner priced is the one the run executes.
    EXPECT_NEAR(r.step_time, PredictFromProfile(plan, p).sim.makespan, 1e-12 * r.step_time) << "zero " << z;
  }
  EXPECT_LT(need[3], need[2]);
  EXPECT_LT(need[2], need[1]);
  EXPECT_LT(need[1], need[0]);
  req.memory_bytes = (need[3] + need[2]) / 2;
  const TuneReport tight = TuneConfig(c, req, p);
  ASSERT_NE(tight.Best(), nullptr);
  EXPECT_EQ(tight.feasible, 1u);
  EXPECT_EQ(tight.Best()->candidate.zero.number(), 3);
  // The tied GPT: its embedding's and head's gradient windows held to the
  // step's end, as the plan holds them.
  const std::vector<std::string> gpt_sets = {"pipeline.ranks=1", "data_parallel.size=2", "pipeline.layout=\"E|t|t,L\""};
  const TrainConfig gpt = LoadTrainConfig(BATON_SOURCE_DIR "/tests/mpi/tiny_gpt.yaml", gpt_sets);
  TuneRequest greq = req;
  greq.memory_bytes = 1e12;
  greq.chunks = {3};
  greq.zero = {2, 3};
  for (const CandidateResult& r : TuneConfig(gpt, greq, MadeUp(gpt, {2}, 3)).ranked) {
    ASSERT_TRUE(r.feasible) << r.why_not;
    std::vector<std::string> run = gpt_sets;
    run.insert(run.end(), {"pipeline.schedule=looped_bfs", "pipeline.chunks=3", "pipeline.microbatches=8",
                           "pipeline.checkpointing=none", "data_parallel.zero=" + std::to_string(r.candidate.zero.number())});
    const RunPlan plan = PlanRun(LoadTrainConfig(BATON_SOURCE_DIR "/tests/mpi/tiny_gpt.yaml", run));
    const std::vector<RankMemory> mem = PlanMemory(plan);
    EXPECT_NEAR(r.max_peak_bytes, static_cast<double>(mem[0].total()), 3 * 4 * sizeof(float))
        << "gpt zero " << r.candidate.zero.number();
    EXPECT_NEAR(r.step_time, PredictFromProfile(plan, MadeUp(gpt, {2}, 3)).sim.makespan, 1e-12 * r.step_time)
        << "gpt zero " << r.candidate.zero.number();
  }
  req.zero = {4};
  ExpectRefused([&] { TuneConfig(c, req, p); }, "tune: --zero takes ZeRO stages 0 to 3, got 4");
  req.zero = {1};
  ExpectRefused([&] { TuneConfig(Tiny(), req, p); }, "the config has none (data_parallel.size 1)");
}

// One price with a pipeline: under ZeRO 2 and 3 every candidate's
// predicted step is the prediction for the run that config makes
// (PlanRun places the same gathers, PredictFromProfile prices them), for
// several schedules and profiles.
TEST(Profile, TheTunersShardedOrderIsTheOneTheRunExecutes) {
  const std::vector<std::string> sets = {"pipeline.ranks=2", "data_parallel.size=2"};
  const TrainConfig c = Tiny(sets);
  for (unsigned seed : {1u, 2u, 3u}) {
    const Profile p = MadeUp(c, {2, 4}, seed);
    TuneRequest req;
    req.schedules = {"1f1b", "interleaved_1f1b", "zb_h1", "gpipe"};
    req.microbatches = {4, 8};
    req.chunks = {1, 2};
    req.policies = {Checkpointing::kNone};
    req.placement = false;
    req.memory_bytes = 1e12;
    req.zero = {2, 3};
    std::size_t checked = 0;
    for (const CandidateResult& r : TuneConfig(c, req, p).ranked) {
      if (!r.feasible) continue;
      const Candidate& k = r.candidate;
      std::vector<std::string> run = sets;
      run.insert(run.end(), {"pipeline.schedule=" + k.schedule, "pipeline.chunks=" + std::to_string(k.chunks),
                             "pipeline.microbatches=" + std::to_string(k.microbatches),
                             "data_parallel.zero=" + std::to_string(k.zero.number())});
      const RunPlan plan = PlanRun(Tiny(run));
      EXPECT_NEAR(r.step_time, PredictFromProfile(plan, p).sim.makespan, 1e-12 * r.step_time)
          << k.schedule << " x" << k.chunks << " m" << k.microbatches << " zero " << k.zero.number() << " seed "
          << seed;
      ++checked;
    }
    EXPECT_GE(checked, 8u);
  }
}

TEST(Profile, APlacementBudgetNothingFitsNamesTheLeastAnyNeeds) {
  const TrainConfig c =
      Tiny({"pipeline.ranks=2", "pipeline.partition=auto", "pipeline.memory_bytes=1000"});
  const Profile p = MadeUp(c, {4}, 1);
  ExpectRefused([&] { ChoosePlacement(c, p); }, "no placement of 1f1b fits pipeline.memory_bytes");
  ExpectRefused([&] { ChoosePlacement(c, p); }, "the smallest any needs is");
  const TrainConfig gpt = LoadTrainConfig(BATON_SOURCE_DIR "/tests/mpi/tiny_gpt.yaml",
                                          {"pipeline.ranks=2", "pipeline.layout=auto"});
  const PlacementChoice g = ChoosePlacement(gpt, MadeUp(gpt, {2}, 1));
  EXPECT_EQ(g.layout.front(), 'E');
  EXPECT_EQ(g.layout.back(), 'L');
  EXPECT_EQ(g.layouts, 3u);  // after E, after each of 2 blocks
}

}  // namespace
}  // namespace baton
