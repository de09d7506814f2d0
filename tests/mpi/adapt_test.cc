// Adaptive plans under mpirun (pipeline.adapt: on): rank 1 of a GPT with
// eight blocks slowed 4x for a window of steps (BATON_FAULT slow=). The
// run moves blocks off it within a few steps of the onset, moves them back
// after it recovers, writes each move as a "replan" row, and ends with the
// healthy run's weights, byte for byte.
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>

#include "baton/data.h"
#include <vector>

namespace {

namespace fs = std::filesystem;

class AdaptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) / ("baton_adapt_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  int Train(const std::string& env, const std::string& args, int np = 2) {
    const std::string cmd =
        "cd '" + dir_.string() + "' && " + env + " timeout 120 '" BATON_MPIEXEC "' -np " + std::to_string(np) + " '" BATON_BINARY
        "' train '" BATON_SOURCE_DIR "/tests/mpi/tiny_gpt.yaml' --set pipeline.ranks=2 --set model.blocks=8"
        " --set model.hidden=64 --set model.seq_len=32 --set data.seq_len=32 --set train.batch_size=32"
        " --set train.steps=60 " + args + " > log.txt 2>&1";
    const int status = std::system(cmd.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  std::string Read(const std::string& name) {
    std::ifstream in(dir_ / name, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  // The metrics rows of one event ("replan", "replan_failed").
  std::vector<nlohmann::json> Events(const std::string& name, const std::string& event) {
    std::vector<nlohmann::json> out;
    std::ifstream in(dir_ / name);
    for (std::string line; std::getline(in, line);) {
      const nlohmann::json row = nlohmann::json::parse(line);
      if (row.value("event", "") == event) out.push_back(row);
    }
    return out;
  }
  std::vector<nlohmann::json> Replans(const std::string& name) { return Events(name, "replan"); }
  // The first re-plan `is` picks out (null: none), and the step of the
  // last move before it (0: none).
  static std::pair<const nlohmann::json*, int> FirstWhere(const std::vector<nlohmann::json>& replans,
                                                          const std::function<bool(const nlohmann::json&)>& is) {
    int earlier = 0;
    for (const nlohmann::json& r : replans) {
      if (is(r)) return {&r, earlier};
      earlier = r["step"].get<int>();
    }
    return {nullptr, earlier};
  }
  // The last step a change is seen at: `by` (a few steps after its onset:
  // a window's median or shortest time), or, where another change (a busy
  // machine's) moved the plan at step `earlier`, the first step the
  // planner decides again: a moved plan is measured afresh, settle (2) and
  // a full window (5) of steps later (AdaptSettings).
  static int SeenBy(int by, int earlier) { return std::max(by, earlier + 2 + 5); }

  fs::path dir_;
};

TEST_F(AdaptTest, ASlowRanksLayersMoveAwayAndBackAndTheWeightsAreTheHealthyRuns) {
  ASSERT_EQ(Train("", "--set log.metrics=healthy.jsonl --set log.weights=healthy.safetensors"), 0) << Read("log.txt");
  ASSERT_EQ(Train("BATON_FAULT=1:12:slow=4:until=40",
                  "--set pipeline.adapt=on --set log.metrics=adapt.jsonl --set log.weights=adapt.safetensors"),
            0)
      << Read("log.txt");
  const std::string log = Read("log.txt");
  EXPECT_NE(log.find("baton: adaptive plans on: each rank's speed measured against a profile measured at start-up"),
            std::string::npos)
      << log;
  const std::vector<nlohmann::json> replans = Replans("adapt.jsonl");
  ASSERT_GE(replans.size(), 2u) << log;
  // Away: seen within three steps of the onset (a window's median), a
  // placement with fewer blocks on rank 1, predicted faster. (On a machine
  // busy with other work a receiver kept from its core can look like a
  // slower wire first: the change the slow rank brings is the first whose
  // factors show it.)
  const auto [slowed, earlier] =
      FirstWhere(replans, [](const nlohmann::json& r) { return r["factors"][1].get<double>() > 2.0; });
  ASSERT_NE(slowed, nullptr) << log;
  const nlohmann::json& away = *slowed;
  EXPECT_GE(away["step"].get<int>(), 12) << away.dump();
  EXPECT_LE(away["step"].get<int>(), SeenBy(16, earlier)) << away.dump() << "\n" << log;
  if (slowed == &replans.front()) {
    EXPECT_EQ(away["layout_before"], "E,t*4|t*4,L");
    EXPECT_EQ(away["schedule_before"], "1f1b");
  }
  EXPECT_LT(away["predicted_step_after_s"].get<double>(), away["predicted_step_before_s"].get<double>());
  EXPECT_GT(away["bytes_moved"].get<double>(), 0.0);
  EXPECT_NE(log.find("baton: re-planned after step " + std::to_string(away["step"].get<int>())), std::string::npos);
  // Back once it recovers (from step 40): the plan the healthy factors
  // price best (the schedule may be another of the loop family). The
  // first move back may come while the window still holds a slow step or
  // two (a factor of 1.5 read two steps after the recovery): back is a
  // factor under the slow one's threshold above.
  bool back = false;
  for (const nlohmann::json& r : replans) {
    back = back || (r["step"].get<int>() >= 40 && r["factors"][1].get<double>() < 2.0);
  }
  EXPECT_TRUE(back) << log;
  // Every placement trains the same floats.
  EXPECT_FALSE(Read("healthy.safetensors").empty());
  EXPECT_EQ(Read("adapt.safetensors"), Read("healthy.safetensors"));
}

// A late wire (BATON_FAULT's 0>1:STEP:delay=): measured from the run's own
// message times within a few steps of the onset, named in the replan row,
// and a plan predicted to hide it taken; the weights are the healthy run's.
TEST_F(AdaptTest, ALateWireIsMeasuredAndThePlanChangesAroundIt) {
  ASSERT_EQ(Train("", "--set log.metrics=healthy.jsonl --set log.weights=healthy.safetensors"), 0) << Read("log.txt");
  ASSERT_EQ(Train("BATON_FAULT='0>1:12:delay=0.02:until=40'",
                  "--set pipeline.adapt=on --set log.metrics=wire.jsonl --set log.weights=wire.safetensors"),
            0)
      << Read("log.txt");
  const std::string log = Read("log.txt");
  // The first change the wire brings (on a machine busy with other work a
  // receiver kept from its core can look like a slower wire before it).
  const std::vector<nlohmann::json> replans = Replans("wire.jsonl");
  const auto [wire, earlier] = FirstWhere(replans, [](const nlohmann::json& r) {
    const nlohmann::json& late = r["link_delays_s"];
    return late.contains("0>1") && late["0>1"].get<double>() > 0.015;
  });
  ASSERT_NE(wire, nullptr) << log;
  const nlohmann::json& first = *wire;
  EXPECT_GE(first["step"].get<int>(), 12) << first.dump();
  EXPECT_LE(first["step"].get<int>(), SeenBy(16, earlier)) << first.dump() << "\n" << log;
  EXPECT_LT(first["link_delays_s"].value("1>0", 0.0), 0.005) << first.dump();  // one way
  EXPECT_LT(first["predicted_step_after_s"].get<double>(), first["predicted_step_before_s"].get<double>());
  EXPECT_NE(log.find("link 0>1 +"), std::string::npos) << log;
  EXPECT_EQ(Read("wire.safetensors"), Read("healthy.safetensors"));
}

// A checkpoint written after a re-plan holds the moved placement's shards;
// a run resumed from it (its own config's placement, adapting or not) reads
// its tensors by name and ends with the healthy run's weights.
TEST_F(AdaptTest, ACheckpointWrittenAfterAReplanResumesToTheSameWeights) {
  ASSERT_EQ(Train("", "--set log.metrics=healthy.jsonl --set log.weights=healthy.safetensors"), 0) << Read("log.txt");
  const std::string ck = " --set checkpoint.dir=ck --set checkpoint.every_steps=10 --set checkpoint.keep=10";
  // The slowdown after the first window (steps 3-7), which calibrates the
  // healthy speeds (WithReplicasUnderZero... says why).
  ASSERT_EQ(Train("BATON_FAULT=1:9:slow=4", "--set pipeline.adapt=on --set log.metrics=adapt.jsonl "
                                            "--set log.weights=adapt.safetensors" + ck),
            0)
      << Read("log.txt");
  const std::vector<nlohmann::json> replans = Replans("adapt.jsonl");
  ASSERT_FALSE(replans.empty()) << Read("log.txt");
  ASSERT_LT(replans.front()["step"].get<int>(), 30) << replans.front().dump();
  ASSERT_TRUE(fs::exists(dir_ / "ck/step-00000030/manifest.json"));
  EXPECT_NE(Read("ck/step-00000030/manifest.json").find(R"("partition")"), std::string::npos);
  for (const std::string adapt : {"off", "on"}) {
    ASSERT_EQ(Train("", "--set pipeline.adapt=" + adapt + " --set log.metrics=resumed.jsonl --set log.weights=resumed.safetensors" +
                            ck + " --resume ck/step-00000030"),
              0)
        << Read("log.txt");
    EXPECT_NE(Read("log.txt").find("resumed after step 30"), std::string::npos) << Read("log.txt");
    EXPECT_EQ(Read("resumed.safetensors"), Read("healthy.safetensors")) << "adapt " << adapt;
  }
}

// A rank that stalls during a move (BATON_FAULT's replan, beside the slow
// rank that brings the move): the other rank's wait ends at the deadline
// naming what it waited for, the job ends non-zero, and the last
// checkpoint, written before the move, resumes to the healthy run's
// weights: nothing is lost.
TEST_F(AdaptTest, AStallDuringAMoveEndsAtTheDeadlineAndLosesNothing) {
  ASSERT_EQ(Train("", "--set log.metrics=healthy.jsonl --set log.weights=healthy.safetensors"), 0) << Read("log.txt");
  // Every checkpoint kept: the one of step 5 is before any move (the
  // stall comes with the first at or after step 9), whichever steps follow.
  const std::string ck = " --set checkpoint.dir=ck --set checkpoint.every_steps=5 --set checkpoint.keep=10";
  const auto start = std::chrono::steady_clock::now();
  EXPECT_NE(Train("BATON_FAULT=1:9:slow=4,0:9:replan:stall",
                  "--set pipeline.adapt=on --set pipeline.wait_timeout_s=3 --set log.metrics=stalled.jsonl "
                  "--set log.weights=stalled.safetensors" + ck),
            0);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string log = Read("log.txt");
  EXPECT_NE(log.find("rank 0: injected fault (BATON_FAULT): stalling at step 9, replan"), std::string::npos) << log;
  EXPECT_NE(log.find("rank 1: timed out waiting for every rank building the new plan"), std::string::npos) << log;
  EXPECT_LT(seconds, 60.0);
  EXPECT_FALSE(fs::exists(dir_ / "stalled.safetensors"));
  ASSERT_TRUE(fs::exists(dir_ / "ck/step-00000005/manifest.json")) << log;
  ASSERT_EQ(Train("", "--set log.metrics=resumed.jsonl --set log.weights=resumed.safetensors" + ck +
                          " --resume ck/step-00000005"),
            0)
      << Read("log.txt");
  EXPECT_EQ(Read("resumed.safetensors"), Read("healthy.safetensors"));
}

// With two replicas of the 2-rank pipeline (4 ranks) under ZeRO 1 and 3
// (1F1B) and ZeRO 2 (ZB-V, the V family):
// rank 1 of the second replica slowed holds both replicas at the gradients'
// sum, so every pipeline moves blocks off its rank 1, each replica keeping
// its shard of the optimizer state (and under ZeRO 3 of the parameters) of
// its new stages; the weights are the healthy run's. The plans adapt by
// default here, and price from a profile measured at the slowdown.
TEST_F(AdaptTest, WithReplicasUnderZeroEveryPipelineMovesAndTheWeightsAreTheHealthyRuns) {
  for (const auto& [zero, schedule] : std::vector<std::pair<int, std::string>>{{1, "1f1b"}, {2, "zbv"}, {3, "1f1b"}}) {
    SCOPED_TRACE("ZeRO " + std::to_string(zero) + ", " + schedule);
    const std::string dp = " --set data_parallel.size=2 --set data_parallel.zero=" + std::to_string(zero) +
                           " --set train.steps=30 --set pipeline.schedule=" + schedule;
    ASSERT_EQ(Train("", "--set log.metrics=healthy.jsonl --set log.weights=healthy.safetensors" + dp, 4), 0)
        << Read("log.txt");
    // World rank 3 is pipeline rank 1 of replica 1. Adapting by default
    // (pipeline.adapt not set): the profile is measured at the slowdown.
    // It starts after the first window (steps 3-7), which calibrates each
    // rank's healthy speed by its median: a slowdown in two of its steps
    // and one noisy step of a busy machine in the other three would have
    // made the slow speed the calibration, and nothing would ever move.
    ASSERT_EQ(Train("BATON_FAULT=3:9:slow=4", "--set log.metrics=adapt.jsonl --set log.weights=adapt.safetensors" + dp, 4),
              0)
        << Read("log.txt");
    const std::string log = Read("log.txt");
    EXPECT_EQ(log.find("adaptive plans on"), std::string::npos) << log;
    EXPECT_NE(log.find("; measured a profile to price the plans in "), std::string::npos) << log;
    const std::vector<nlohmann::json> replans = Replans("adapt.jsonl");
    const auto [slowed, earlier] =
        FirstWhere(replans, [](const nlohmann::json& r) { return r["factors"][1].get<double>() > 2.0; });
    ASSERT_NE(slowed, nullptr) << log;
    const nlohmann::json& away = *slowed;
    EXPECT_LT(away["factors"][0].get<double>(), 1.5) << away.dump();
    EXPECT_LE(away["step"].get<int>(), SeenBy(13, earlier)) << away.dump() << "\n" << log;
    EXPECT_GT(away["bytes_moved"].get<double>(), 0.0);
    EXPECT_FALSE(Read("healthy.safetensors").empty());
    EXPECT_EQ(Read("adapt.safetensors"), Read("healthy.safetensors")) << "ZeRO " << zero;
  }
}

// pipeline.adapt: full with two replicas of a one-rank pipeline (no
// placement to change), as one stage (1F1B) and as two (looped BFS with 2
// chunks, both on the rank): replica 1 slowed 3x from step 9 to 27 (after
// the first window, steps 3-7, calibrated the healthy speeds: a slowdown
// inside it is part of the calibration), the replicas' shares of the
// global batch's 8 microbatches move off it (4/4 to 6/2) within 3 steps
// and back to 4/4 within 3 steps of its recovery;
// the rows say each replica's factor and share. Under AdamW the final
// weights are the bytes of the run that never adapted: full sums the
// gradients in double (train.grad_accum_dtype: auto), so the sums do not
// depend on the split; the run without it sets fp64 to match.
TEST_F(AdaptTest, FullReSplitsTheMicrobatchesOffASlowReplicaAndBack) {
  for (const auto& [name, schedule] : std::vector<std::pair<std::string, std::string>>{
           {"one", ""}, {"two", " --set pipeline.schedule=looped_bfs --set pipeline.chunks=2"}}) {
    const std::string dp = " --set pipeline.ranks=1 --set data_parallel.size=2 --set pipeline.microbatches=4"
                           " --set train.steps=40 --set 'train.optimizer={type: adamw, lr: 0.01}'" + schedule;
    ASSERT_EQ(Train("", "--set pipeline.adapt=off --set log.metrics=still.jsonl --set log.weights=still.safetensors"
                        " --set train.grad_accum_dtype=fp64" + dp),
              0)
        << Read("log.txt");
    const std::string ck = " --set checkpoint.dir=ck_" + name + " --set checkpoint.every_steps=10 --set checkpoint.keep=10";
    ASSERT_EQ(Train("BATON_FAULT=1:9:slow=3:until=28",
                    "--set pipeline.adapt=full --set log.metrics=full.jsonl --set log.weights=full.safetensors" + dp + ck),
              0)
        << Read("log.txt");
    const std::string log = Read("log.txt");
    const std::vector<nlohmann::json> replans = Replans("full.jsonl");
    ASSERT_GE(replans.size(), 2u) << name << log;
    const auto [slowed, earlier] =
        FirstWhere(replans, [](const nlohmann::json& r) { return r["world_factors"][1].get<double>() > 2.0; });
    ASSERT_NE(slowed, nullptr) << log;
    const nlohmann::json& away = *slowed;
    EXPECT_LE(away["step"].get<int>(), SeenBy(11, earlier)) << away.dump() << "\n" << log;
    EXPECT_LT(away["world_factors"][0].get<double>(), 1.5) << away.dump();
    if (slowed == &replans.front()) {
      EXPECT_EQ(away["microbatches_before"], nlohmann::json::array({4, 4})) << away.dump();
    }
    EXPECT_GT(away["microbatches"][0].get<int>(), 4) << away.dump();
    EXPECT_EQ(away["microbatches"][0].get<int>() + away["microbatches"][1].get<int>(), 8) << away.dump();
    EXPECT_EQ(away["chunks"].get<int>(), schedule.empty() ? 1 : 2) << away.dump();
    EXPECT_LT(away["predicted_step_after_s"].get<double>(), away["predicted_step_before_s"].get<double>());
    EXPECT_NE(log.find("microbatches a replica 4/4 -> "), std::string::npos) << log;
    // Back: the first move once it recovered (a busy machine's noise may
    // move the shares again later; the weights below say none loses a bit).
    const auto [recovered, before_back] =
        FirstWhere(replans, [](const nlohmann::json& r) { return r["step"].get<int>() >= 28; });
    ASSERT_NE(recovered, nullptr) << log;
    const nlohmann::json& back = *recovered;
    EXPECT_LE(back["step"].get<int>(), SeenBy(31, before_back)) << back.dump() << "\n" << log;
    // Back towards the even split, to within one microbatch: with four
    // processes on fewer cores a healthy rank's measured speed moves by a
    // quarter (the replica with fewer microbatches gets more of the cores).
    const int back_first = back["microbatches"][0].get<int>();
    EXPECT_EQ(back_first + back["microbatches"][1].get<int>(), 8) << back.dump();
    EXPECT_LE(std::abs(back_first - 4), 1) << back.dump();
    EXPECT_LT(std::abs(back_first - 4), std::abs(away["microbatches"][0].get<int>() - 4)) << back.dump();
    EXPECT_FALSE(Read("still.safetensors").empty());
    EXPECT_EQ(Read("full.safetensors"), Read("still.safetensors")) << name;
    // The checkpoint of step 20, written while the shares were 6/2, resumes
    // (the run's microbatches are the even ones) and goes on from step 21.
    fs::remove_all(dir_ / ("ck_" + name) / "step-00000030");
    fs::remove_all(dir_ / ("ck_" + name) / "step-00000040");
    ASSERT_EQ(Train("", "--set pipeline.adapt=full --set log.metrics=resumed.jsonl --set log.weights=resumed.safetensors"
                        " --resume auto" + dp + ck),
              0)
        << Read("log.txt");
    EXPECT_NE(Read("log.txt").find("resumed after step 20"), std::string::npos) << Read("log.txt");
  }
}

// A move that a rank cannot build (BATON_FAULT's replan:error, as a rank
// out of memory would): every rank goes back to the plan it had with the
// state it kept, says so, and the run ends with the healthy run's weights.
// That move is not made later; another may be, where the speeds change
// again (on a machine busy with other work rank 0's may).
TEST_F(AdaptTest, AMoveARankCannotBuildLeavesTheOldPlanRunning) {
  ASSERT_EQ(Train("", "--set log.metrics=healthy.jsonl --set log.weights=healthy.safetensors"), 0) << Read("log.txt");
  ASSERT_EQ(Train("BATON_FAULT=1:9:slow=4,1:9:replan:error",
                  "--set pipeline.adapt=on --set log.metrics=failed.jsonl --set log.weights=failed.safetensors"),
            0)
      << Read("log.txt");
  const std::string log = Read("log.txt");
  EXPECT_NE(log.find("baton: rank 1: warning: the move after step "), std::string::npos) << log;
  EXPECT_NE(log.find("failed: BATON_FAULT: rank 1 failed to build the new plan after step"), std::string::npos)
      << log;
  EXPECT_NE(log.find("every rank went back to 1f1b layout E,t*4|t*4,L and the run goes on (that plan is not tried "
                     "again)"),
            std::string::npos)
      << log;
  const std::vector<nlohmann::json> failed = Events("failed.jsonl", "replan_failed");
  ASSERT_EQ(failed.size(), 1u) << log;
  EXPECT_EQ(failed[0]["layout"], "1f1b layout E,t*4|t*4,L");
  const std::string to = failed[0]["to"].get<std::string>();
  EXPECT_NE(to.find(" layout "), std::string::npos) << to;
  EXPECT_NE(to, failed[0]["layout"]) << to;
  EXPECT_NE(log.find("the move after step " + std::to_string(failed[0]["step"].get<int>()) + " to " + to + " failed"),
            std::string::npos)
      << log;
  for (const nlohmann::json& r : Replans("failed.jsonl")) {
    EXPECT_GT(r["step"].get<int>(), failed[0]["step"].get<int>()) << r.dump();
    const int chunks = r["chunks"].get<int>();
    const std::string plan = r["schedule"].get<std::string>() +
                             (chunks > 1 ? " (" + std::to_string(chunks) + " chunks)" : "") + " layout " +
                             r["layout_after"].get<std::string>();
    EXPECT_NE(plan, to) << r.dump();
  }
  EXPECT_EQ(Read("failed.safetensors"), Read("healthy.safetensors"));
}

TEST_F(AdaptTest, AdaptOnIsRefusedWhereItCannotMoveAPlacement) {
  EXPECT_EQ(Train("", "--set pipeline.adapt=sometimes"), 2);
  EXPECT_NE(Read("log.txt").find("adapt"), std::string::npos) << Read("log.txt");
  EXPECT_EQ(Train("", "--set pipeline.adapt=on --set data_parallel.size=2 --set recovery.on_lost_rank=shrink", 4), 2);
  EXPECT_NE(Read("log.txt").find("shrink with pipeline.adapt: on is not built yet"), std::string::npos)
      << Read("log.txt");
}

// log.blame under mpirun, the plan held (pipeline.adapt: off): rank 1
// slowed 2x for steps 20-39, then the wire from rank 0 to rank 1 late by
// 5 ms a message for steps 20-39 (about five of this model's actions). The
// culprit is named in the affected steps (a step late by its own compute
// or messages, whatever the machine's speed: the judge compares each
// rank's CPU time and each link's shortest message with the run's own
// first steps), a "late" row each, a summary line, and an instant on the
// culprit's track in the trace.
TEST_F(AdaptTest, BlameNamesTheSlowRankAndTheLateWire) {
  const std::string common = " --set pipeline.adapt=off --set log.blame=true --set log.every_steps=10";
  ASSERT_EQ(Train("BATON_FAULT=1:20:slow=2:until=40",
                  common + " --set log.metrics=slow.jsonl --set log.trace=slow.json --set log.trace_every=10"),
            0)
      << Read("log.txt");
  ASSERT_EQ(Train("BATON_FAULT='0>1:20:delay=0.005:until=40'", common + " --set log.metrics=wire.jsonl"), 0)
      << Read("log.txt");
  const auto culprits = [&](const std::string& file, const std::string& want) {
    int named = 0, wrong = 0, healthy_named = 0;
    for (const nlohmann::json& row : Events(file, "late")) {
      const int step = row["step"].get<int>();
      const nlohmann::json& late = row["late"];
      EXPECT_GT(late["by_s"].get<double>(), 0) << row.dump();
      std::ostringstream who;
      who << late["what"].get<std::string>();
      if (late["what"] == "rank") who << ' ' << late["rank"].get<int>();
      if (late["what"] == "link") who << ' ' << late["from"].get<int>() << '>' << late["to"].get<int>();
      if (step >= 20 && step < 40) {
        (who.str() == want ? named : wrong) += 1;
      } else {
        ++healthy_named;
      }
    }
    EXPECT_GE(named, 10) << file << ": of 20 affected steps (20 on a quiet machine; a loaded one hides some)";
    EXPECT_EQ(wrong, 0) << file;
    // Healthy steps are not bounded here: a shared machine slows a rank's
    // CPU for stretches of steps on its own (a neighbour on the core's
    // other thread), and a late step then names that rank, rightly, though
    // no fault was injected (up to 12 of 33 seen under a CI run). The rate
    // on a quiet machine is bench/blame.sh's.
    ::testing::Test::RecordProperty(file + "_healthy_named", healthy_named);
  };
  culprits("slow.jsonl", "rank 1");
  culprits("wire.jsonl", "link 0>1");
  // The trace: the slow steps' late instants on rank 1's track.
  const nlohmann::json trace = nlohmann::json::parse(Read("slow.json"));
  int instants = 0;
  for (const nlohmann::json& e : trace["traceEvents"]) {
    if (e.value("cat", "") != "late") continue;
    const int step = e["args"]["step"].get<int>();
    if (step < 20 || step >= 40) continue;
    EXPECT_EQ(e["pid"], 1) << e.dump();
    EXPECT_EQ(e["name"], "late: rank 1") << e.dump();
    ++instants;
  }
  EXPECT_GE(instants, 10);
}

}  // namespace
