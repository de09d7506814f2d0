// A lost rank inside the job, under mpirun with the settings that keep the
// survivors (orte_enable_recovery): with recovery.on_lost_rank: shrink, a
// run of 2 replicas of a 2-rank pipeline goes on with the replica that lost
// no rank, the same global batch, from the state every survivor kept in
// memory; the metrics file goes on without a gap or a duplicate step and
// records the recovery; the steps before the loss are the uninterrupted
// run's bit for bit, and its final weights are, bit for bit, those of the
// uninterrupted run's checkpoint of the last step before the loss resumed
// by one replica (not the uninterrupted run's own: one replica sums the
// global batch in other groups); and its checkpoints resume under the
// original config.
#include <fmt/format.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "baton/data.h"
#include "support/job.h"
#include "support/test_folder.h"

namespace {

namespace fs = std::filesystem;
using baton_test::Count;
using Job = baton_test::JobResult;

class Recovery : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = baton_test::FreshTestFolder("baton_recovery"); }
  void TearDown() override { fs::remove_all(dir_); }

  // 2 replicas of the tiny MLP's 2-rank pipeline, 60 steps, shrink on, under
  // mpirun with the recovery settings; `env` before it (BATON_FAULT=...).
  // `np`: another job size (with `extra` setting the layout to match).
  Job Train(const std::string& env, const std::string& out, const std::string& extra = "", int np = 4) {
    last_ = "cd '" + dir_.string() + "' && " + env + " timeout 120 '" BATON_MPIEXEC
            "' --mca orte_enable_recovery 1 --mca orte_abort_on_non_zero_status 0 -np " + std::to_string(np) +
            " '" BATON_BINARY
            "' train '" BATON_SOURCE_DIR "/tests/mpi/tiny.yaml' --set pipeline.ranks=2 --set data_parallel.size=2 "
            "--set train.steps=60 --set log.every_steps=1 --set recovery.on_lost_rank=shrink --set log.metrics=" +
            out + ".jsonl --set log.weights=" + out + ".safetensors " + extra + " > log.txt 2>&1";
    return baton_test::RunJob(last_, dir_ / "log.txt");
  }
  std::vector<nlohmann::json> Rows(const std::string& out) {
    std::vector<nlohmann::json> rows;
    std::ifstream in(dir_ / (out + ".jsonl"));
    for (std::string line; std::getline(in, line);) rows.push_back(nlohmann::json::parse(line));
    return rows;
  }
  // The metrics file `out`.jsonl: its step rows checked to be steps 1, 2,
  // ... in order, once each; the last step and the event rows.
  struct Run {
    std::int64_t last = 0;
    std::vector<nlohmann::json> events;
  };
  Run StepsAndEvents(const std::string& out) {
    Run run;
    for (const auto& row : Rows(out)) {
      if (row.contains("event")) {
        run.events.push_back(row);
        continue;
      }
      EXPECT_EQ(row["step"].get<std::int64_t>(), run.last + 1);
      run.last = row["step"];
    }
    return run;
  }
  // The largest difference between two weights files' floats.
  double MaxDifference(const std::string& a, const std::string& b) {
    const auto x = baton::ReadSafetensors((dir_ / a).string()), y = baton::ReadSafetensors((dir_ / b).string());
    EXPECT_EQ(x.size(), y.size());
    double most = 0;
    for (std::size_t t = 0; t < x.size() && t < y.size(); ++t) {
      EXPECT_EQ(x[t].name, y[t].name);
      for (std::size_t i = 0; i < x[t].data.size(); ++i) most = std::max(most, std::fabs(double(x[t].data[i]) - y[t].data[i]));
    }
    return most;
  }

  // Job `j`'s checkpoint of step `step` (in ck, every 10 steps to 60),
  // the later ones removed, resumed with `extra` (--resume auto): it says
  // so, and ends with ref.safetensors' bytes.
  void ExpectResumedFrom(int step, const Job& j, const std::string& out, const std::string& extra) {
    ASSERT_TRUE(fs::exists(dir_ / fmt::format("ck/step-{:08d}/manifest.json", step))) << j.output;
    for (int later = step + 10; later <= 60; later += 10) fs::remove_all(dir_ / fmt::format("ck/step-{:08d}", later));
    const Job again = Train("", out + "_resumed", extra + " --resume auto");
    ASSERT_EQ(again.code, 0) << again.output;
    EXPECT_NE(again.output.find("resumed after step " + std::to_string(step)), std::string::npos) << again.output;
    EXPECT_EQ(baton_test::ReadAll(dir_ / (out + "_resumed.safetensors")), baton_test::ReadAll(dir_ / "ref.safetensors"));
  }

  fs::path dir_;
  std::string last_;
};

// Rank 0 (first stage, replica 0), rank 1 (first stage, replica 1) and
// rank 3 (last stage, replica 1), each SIGKILLed at step 25, during a
// forward or a backward.
TEST_F(Recovery, ShrinkGoesOnWithoutTheReplicaThatLostARank) {
  const Job ref = Train("", "ref", "--set checkpoint.dir=ck --set checkpoint.every_steps=24 --set checkpoint.keep=3");
  ASSERT_EQ(ref.code, 0) << ref.output;
  const auto healthy = Rows("ref");
  ASSERT_EQ(healthy.size(), 60u);
  // The independent reference of a run that goes on after step 24 with one
  // replica: the uninterrupted run's checkpoint of step 24, resumed by one
  // replica of 16 microbatches (the global batch's), through the checkpoint
  // path and a job of 2 ranks that never lost one.
  fs::remove_all(dir_ / "ck/step-00000048");
  last_ = "cd '" + dir_.string() + "' && timeout 120 '" BATON_MPIEXEC "' -np 2 '" BATON_BINARY "' train '"
          BATON_SOURCE_DIR "/tests/mpi/tiny.yaml' --set pipeline.ranks=2 --set pipeline.microbatches=16 "
          "--set train.steps=60 --set checkpoint.dir=ck --set checkpoint.every_steps=24 --set checkpoint.keep=3 --set 'log.metrics=\"\"' "
          "--set log.weights=resumed.safetensors --set train.grad_accum_dtype=fp64 --resume auto > log.txt 2>&1";
  const Job resumed = baton_test::RunJob(last_, dir_ / "log.txt");
  ASSERT_EQ(resumed.code, 0) << resumed.output;
  ASSERT_NE(resumed.output.find("resumed after step 24"), std::string::npos) << resumed.output;
  for (const auto& [victim, action] : std::vector<std::pair<int, std::string>>{{0, "F"}, {1, "B"}, {3, "B"}}) {
    SCOPED_TRACE("rank " + std::to_string(victim) + " killed in " + action);
    const std::string out = "lost" + std::to_string(victim);
    const Job j = Train("BATON_FAULT=" + std::to_string(victim) + ":25:" + action + ":kill", out);
    ASSERT_EQ(j.code, 0) << last_ << "\n" << j.output;
    EXPECT_EQ(Count(j.output, "baton: lost rank " + std::to_string(victim) + " ("), 1u) << j.output;
    EXPECT_NE(j.output.find("went on with 1 of 2 replicas (recovery.on_lost_rank: shrink) from step 25"),
              std::string::npos)
        << j.output;
    // Every step once, in order, and one row for the recovery.
    std::vector<std::int64_t> steps;
    int recovered = 0;
    for (const auto& row : Rows(out)) {
      if (row.contains("event")) {
        EXPECT_EQ(row["event"], "recovered");
        EXPECT_EQ(row["lost"], nlohmann::json::array({victim}));
        EXPECT_EQ(row["mode"], "shrink");
        EXPECT_EQ(row["replicas"], 1);
        EXPECT_EQ(row["step"], 25);
        EXPECT_EQ(row["resumed_after"], 24);
        EXPECT_LT(row["seconds"].get<double>(), 30.0);  // measured here: well under a second
        ++recovered;
        continue;
      }
      steps.push_back(row["step"].get<std::int64_t>());
      // Before the loss, the uninterrupted run's losses, bit for bit.
      if (steps.back() < 25) {
        EXPECT_EQ(row["loss"], healthy[steps.size() - 1]["loss"]) << "step " << steps.back();
      }
    }
    EXPECT_EQ(recovered, 1);
    ASSERT_EQ(steps.size(), 60u);
    for (std::size_t i = 0; i < steps.size(); ++i) EXPECT_EQ(steps[i], static_cast<std::int64_t>(i + 1));
    // Bit for bit the reference: the state kept in memory is the step's,
    // and the replica left trains the global batch as one replica does.
    EXPECT_EQ(baton_test::ReadAll(dir_ / (out + ".safetensors")), baton_test::ReadAll(dir_ / "resumed.safetensors"));
    // And the uninterrupted run's: shrink sums the gradients in double
    // (train.grad_accum_dtype: auto), so one replica's sum of the global
    // batch's microbatches is two replicas' (in float they differ, below).
    EXPECT_EQ(baton_test::ReadAll(dir_ / (out + ".safetensors")), baton_test::ReadAll(dir_ / "ref.safetensors"));
  }
  // In float the one replica left groups the sums otherwise: the last bits differ.
  const std::string fp32 = "--set train.grad_accum_dtype=fp32";
  ASSERT_EQ(Train("", "ref32", fp32).code, 0);
  const Job j = Train("BATON_FAULT=3:25:B:kill", "lost32", fp32);
  ASSERT_EQ(j.code, 0) << j.output;
  EXPECT_GT(MaxDifference("ref32.safetensors", "lost32.safetensors"), 0.0);
}

// The checkpoints of a run that went on without a replica resume under the
// run's own config (2 replicas again: the microbatches of the global batch
// are the same).
TEST_F(Recovery, ACheckpointAfterARecoveryResumesUnderTheRunsConfig) {
  const std::string checkpoints = "--set checkpoint.dir=ck --set checkpoint.every_steps=10 --set checkpoint.keep=10";
  const Job j = Train("BATON_FAULT=3:25:B:kill", "shrunk", checkpoints);
  ASSERT_EQ(j.code, 0) << j.output;
  fs::remove_all(dir_ / "ck/step-00000060");
  fs::remove_all(dir_ / "ck/step-00000050");
  const Job again = Train("", "shrunk", checkpoints + " --resume auto");
  ASSERT_EQ(again.code, 0) << again.output;
  EXPECT_NE(again.output.find("resumed after step 40"), std::string::npos) << again.output;
  const Run run = StepsAndEvents("shrunk");
  EXPECT_EQ(run.last, 60);
  EXPECT_EQ(run.events.size(), 1u);
}

// With recovery.on_lost_rank: stop, a lost rank ends the job at once,
// naming it, with a non-zero exit from mpirun.
TEST_F(Recovery, WithoutShrinkALostRankEndsTheJob) {
  const Job j = Train("BATON_FAULT=1:25:F:kill", "stop", "--set recovery.on_lost_rank=stop");
  EXPECT_NE(j.code, 0) << j.output;
  EXPECT_NE(j.code, 124) << j.output;
  EXPECT_EQ(Count(j.output, "baton: error: lost rank 1 ("), 1u) << j.output;
}

// With recovery.on_lost_rank: stop and a checkpoint folder, the survivors
// of a run with replicas write the last step boundary they all keep as a
// checkpoint before they stop (nothing is lost), say so, and end non-zero;
// --resume auto then continues from it to the uninterrupted run's bytes.
TEST_F(Recovery, StopWritesTheLastStepAsACheckpointAndTheRunResumesToTheSameBytes) {
  // Under stop, as the runs below (shrink would sum the gradients in double).
  const Job ref = Train("", "ref", "--set recovery.on_lost_rank=stop");
  ASSERT_EQ(ref.code, 0) << ref.output;
  const std::string stop = "--set recovery.on_lost_rank=stop --set checkpoint.dir=ck --set checkpoint.every_steps=50";
  const Job j = Train("BATON_FAULT=3:25:B:kill", "stopped", stop);
  EXPECT_NE(j.code, 0) << j.output;
  EXPECT_NE(j.code, 124) << j.output;
  EXPECT_EQ(Count(j.output, "baton: error: lost rank 3 ("), 1u) << j.output;
  EXPECT_NE(j.output.find("stopped (recovery.on_lost_rank: stop) with the checkpoint of step 24 in ck/step-00000024"),
            std::string::npos)
      << j.output;
  ASSERT_TRUE(fs::exists(dir_ / "ck/step-00000024/manifest.json")) << j.output;
  EXPECT_FALSE(fs::exists(dir_ / "stopped.safetensors"));
  int lost_rows = 0;
  for (const auto& row : Rows("stopped")) {
    if (!row.contains("event")) continue;
    EXPECT_EQ(row["event"], "lost_rank");
    EXPECT_EQ(row["mode"], "stop");
    EXPECT_EQ(row["lost"], nlohmann::json::array({3}));
    EXPECT_EQ(row["checkpoint_step"], 24);
    ++lost_rows;
  }
  EXPECT_EQ(lost_rows, 1);
  const Job again = Train("", "stopped", stop + " --resume auto");
  ASSERT_EQ(again.code, 0) << again.output;
  EXPECT_NE(again.output.find("resumed after step 24"), std::string::npos) << again.output;
  EXPECT_EQ(StepsAndEvents("stopped").last, 60);
  EXPECT_EQ(baton_test::ReadAll(dir_ / "stopped.safetensors"), baton_test::ReadAll(dir_ / "ref.safetensors"));
}

// A second loss in the recovery, as the rank joins it (before the
// survivors agree): the agreement takes both in, and with 3 replicas of a
// one-rank pipeline the one replica left goes on, to the run's end.
TEST_F(Recovery, ALossAsTheRecoveryStartsIsAgreedOnWithTheFirst) {
  const std::string three =
      "--set pipeline.ranks=1 --set data_parallel.size=3 --set pipeline.microbatches=6 --set train.batch_size=36";
  const Job j = Train("BATON_FAULT=2:25:F:kill,1:25:recovery:kill", "twice", three, 3);
  ASSERT_EQ(j.code, 0) << j.output;
  EXPECT_NE(j.output.find("in the recovery (recovery)"), std::string::npos) << j.output;
  const Run run = StepsAndEvents("twice");
  for (const auto& row : run.events) {
    EXPECT_EQ(row["event"], "recovered");
    EXPECT_EQ(row["lost"], nlohmann::json::array({1, 2}));
    EXPECT_EQ(row["replicas"], 1);
  }
  EXPECT_EQ(run.events.size(), 1u);
  EXPECT_EQ(run.last, 60);
}

// A second loss once the survivors have agreed, while they make their new
// world (whose MPI calls would wait for it for good): the job ends at once
// with one message naming both losses, mpirun non-zero, no hang, and the
// checkpoints written before kept for --resume auto.
TEST_F(Recovery, ALossWhileTheSurvivorsRegroupEndsTheJobWithOneMessage) {
  const std::string ck = "--set checkpoint.dir=ck --set checkpoint.every_steps=10";
  const Job j = Train("BATON_FAULT=3:25:B:kill,0:25:regroup:kill", "regroup", ck);
  EXPECT_NE(j.code, 0) << j.output;
  EXPECT_NE(j.code, 124) << j.output;
  EXPECT_EQ(Count(j.output, "baton: error: lost rank 0 ("), 1u) << j.output;
  EXPECT_NE(j.output.find("while the survivors of the loss of rank 3 made their new world"), std::string::npos)
      << j.output;
  EXPECT_TRUE(fs::exists(dir_ / "ck/step-00000020/manifest.json")) << j.output;
  const Job again = Train("", "regroup", ck + " --resume auto");
  ASSERT_EQ(again.code, 0) << again.output;
  EXPECT_NE(again.output.find("resumed after step 20"), std::string::npos) << again.output;
}

// recovery.on_lost_rank: replace: a new process takes the lost rank's
// place (MPI_Comm_spawn, merged into the world in its rank), its stages'
// state from the whole replica, the interrupted step redone: the run ends
// with the uninterrupted run's bytes, its metrics file has every step once
// and one "recovered" row; rank 0 lost too (the new rank 0 goes on with the
// metrics file and writes the checkpoints' manifests), and a checkpoint it
// wrote resumes to the same bytes.
TEST_F(Recovery, ReplaceStartsANewRankAndEndsWithTheUninterruptedRunsBytes) {
  const std::string replace = "--set recovery.on_lost_rank=replace";
  const Job ref = Train("", "ref", replace);
  ASSERT_EQ(ref.code, 0) << ref.output;
  struct Victim {
    int rank;
    const char* action;
  };
  for (const Victim v : {Victim{3, "B"}, Victim{0, "F"}}) {
    SCOPED_TRACE(v.rank);
    const std::string out = "replaced" + std::to_string(v.rank);
    fs::remove_all(dir_ / "ck");
    const std::string ck = " --set checkpoint.dir=ck --set checkpoint.every_steps=10 --set checkpoint.keep=10";
    const Job j = Train("BATON_FAULT=" + std::to_string(v.rank) + ":25:" + v.action + ":kill", out, replace + ck);
    ASSERT_EQ(j.code, 0) << j.output;
    EXPECT_EQ(Count(j.output, "started 1 new rank in its place (recovery.on_lost_rank: replace)"), 1u) << j.output;
    const Run run = StepsAndEvents(out);
    for (const auto& row : run.events) {
      EXPECT_EQ(row["event"], "recovered");
      EXPECT_EQ(row["mode"], "replace");
      EXPECT_EQ(row["lost"], nlohmann::json::array({v.rank}));
      EXPECT_EQ(row["replicas"], 2);
      EXPECT_EQ(row["resumed_after"], 24);
    }
    EXPECT_EQ(run.events.size(), 1u);
    EXPECT_EQ(run.last, 60);
    EXPECT_EQ(baton_test::ReadAll(dir_ / (out + ".safetensors")), baton_test::ReadAll(dir_ / "ref.safetensors"));
    // The checkpoint of step 40, written with the new rank, resumes to the same bytes.
    ExpectResumedFrom(40, j, out, replace + ck);
  }
}

// A new rank that cannot join (here: only shared memory allowed, which a
// spawned process cannot use to reach the others) ends the job with one
// message and a non-zero exit from mpirun, which would otherwise exit 0.
TEST_F(Recovery, AReplacementThatCannotStartEndsTheJobNonZeroWithOneMessage) {
  const Job j = Train("BATON_FAULT=3:25:B:kill OMPI_MCA_btl=vader,self", "unreachable",
                      "--set recovery.on_lost_rank=replace");
  EXPECT_NE(j.code, 0) << j.output;
  EXPECT_NE(j.code, 124) << j.output;
  EXPECT_EQ(Count(j.output, "baton: error: the survivors of the loss of rank 3 could not start a new rank in its "
                            "place (recovery.on_lost_rank: replace)"),
            1u)
      << j.output;
}

// recovery.on_lost_rank: replace in a pure pipeline (4 ranks, one
// replica): each rank's state is copied to the next rank every 5 steps; a
// lost rank's new process takes the snapshot the next rank holds (rank 3's
// is on rank 0), every survivor its own of the same step, and the steps
// since are replayed: the run ends with the bytes of an uninterrupted run
// without snapshots, its metrics file has every step once and one
// "recovered" row saying the snapshot's step and the steps replayed; a
// checkpoint written after the recovery resumes to the same bytes.
TEST_F(Recovery, ReplaceInAPurePipelineTakesTheNextRanksSnapshotAndReplaysToTheSameBytes) {
  const std::string pure = "--set pipeline.ranks=4 --set data_parallel.size=1 --set pipeline.adapt=off";
  const Job ref = Train("", "ref", pure + " --set recovery.on_lost_rank=stop");
  ASSERT_EQ(ref.code, 0) << ref.output;
  struct Victim {
    int rank, step;
    const char* action;
    int snapshot;  // the step of the snapshot taken up
  };
  for (const Victim v : {Victim{2, 27, "F", 25}, Victim{3, 33, "B", 30}, Victim{0, 41, "F", 40}}) {
    SCOPED_TRACE(v.rank);
    const std::string out = "pure" + std::to_string(v.rank);
    fs::remove_all(dir_ / "ck");
    const std::string ck = " --set checkpoint.dir=ck --set checkpoint.every_steps=10 --set checkpoint.keep=10";
    const std::string replace = pure + " --set recovery.on_lost_rank=replace --set recovery.snapshot_every=5";
    const Job j = Train("BATON_FAULT=" + std::to_string(v.rank) + ":" + std::to_string(v.step) + ":" + v.action +
                            ":kill",
                        out, replace + ck);
    ASSERT_EQ(j.code, 0) << j.output;
    EXPECT_EQ(Count(j.output, "baton: snapshots of each rank's state on the next rank every 5 steps (as set;"), 1u)
        << j.output;
    EXPECT_EQ(Count(j.output, "started 1 new rank in its place (recovery.on_lost_rank: replace), its state from the "
                              "snapshot of step " + std::to_string(v.snapshot) + " on rank " +
                                  std::to_string((v.rank + 1) % 4)),
              1u)
        << j.output;
    const Run run = StepsAndEvents(out);
    for (const auto& row : run.events) {
      EXPECT_EQ(row["event"], "recovered");
      EXPECT_EQ(row["mode"], "replace");
      EXPECT_EQ(row["lost"], nlohmann::json::array({v.rank}));
      EXPECT_EQ(row["replicas"], 1);
      EXPECT_EQ(row["resumed_after"], v.snapshot);
      EXPECT_EQ(row["replayed"], v.step - 1 - v.snapshot);
      EXPECT_EQ(row["step"], v.step);
    }
    EXPECT_EQ(run.events.size(), 1u);
    EXPECT_EQ(run.last, 60);
    EXPECT_EQ(baton_test::ReadAll(dir_ / (out + ".safetensors")), baton_test::ReadAll(dir_ / "ref.safetensors"));
    if (v.rank != 0) continue;
    // The checkpoint of step 50, written with the new rank 0, resumes to the same bytes.
    ExpectResumedFrom(50, j, out, replace + ck);
  }
}

// A second loss later in the job is recovered as the first: the survivors
// make their world from the world now (which holds the first new process),
// so a job goes on through any number of replaces. Replicas (rank 3 lost at
// step 20, rank 1 at step 40) and a pure pipeline from snapshots (rank 1 at
// step 22, then rank 2 at step 43, which holds the new rank 1's snapshot,
// then the new rank 1 itself is not lost again: each new process takes no
// fault). Each ends with the uninterrupted run's bytes, one "recovered" row
// per loss, every step once.
TEST_F(Recovery, ASecondLossLaterInTheJobIsReplacedToo) {
  struct Case {
    std::string name, sets, replace, faults;
    std::vector<int> lost;
  };
  const std::string pure = "--set pipeline.ranks=4 --set data_parallel.size=1 --set pipeline.adapt=off";
  for (const Case& c : {Case{"replicas", "", "", "3:20:B:kill,1:40:F:kill", {3, 1}},
                        Case{"pure", pure, " --set recovery.snapshot_every=5", "1:22:F:kill,2:43:B:kill", {1, 2}}}) {
    SCOPED_TRACE(c.name);
    const Job ref = Train("", c.name + "_ref", c.sets + " --set recovery.on_lost_rank=stop");
    ASSERT_EQ(ref.code, 0) << ref.output;
    const Job j =
        Train("BATON_FAULT=" + c.faults, c.name, c.sets + " --set recovery.on_lost_rank=replace" + c.replace);
    ASSERT_EQ(j.code, 0) << j.output;
    EXPECT_EQ(Count(j.output, "new rank in its place (recovery.on_lost_rank: replace)"), 2u) << j.output;
    const Run run = StepsAndEvents(c.name);
    ASSERT_EQ(run.events.size(), 2u) << j.output;
    for (std::size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(run.events[i]["event"], "recovered");
      EXPECT_EQ(run.events[i]["mode"], "replace");
      EXPECT_EQ(run.events[i]["lost"], nlohmann::json::array({c.lost[i]}));
    }
    EXPECT_EQ(run.last, 60);
    EXPECT_EQ(baton_test::ReadAll(dir_ / (c.name + ".safetensors")),
              baton_test::ReadAll(dir_ / (c.name + "_ref.safetensors")));
  }
}

// Two ranks of a pure pipeline that are not neighbours lost (rank 2 as the
// survivors of rank 0's loss agree): each one's snapshot is on a survivor,
// so two new processes take their places and the run ends with the
// uninterrupted run's bytes.
TEST_F(Recovery, TwoRanksThatAreNotNeighboursAreBothReplacedInAPurePipeline) {
  const std::string pure = "--set pipeline.ranks=4 --set data_parallel.size=1 --set pipeline.adapt=off";
  const Job ref = Train("", "ref", pure + " --set recovery.on_lost_rank=stop");
  ASSERT_EQ(ref.code, 0) << ref.output;
  const Job j = Train("BATON_FAULT=0:33:F:kill,2:33:recovery:kill", "both",
                      pure + " --set recovery.on_lost_rank=replace --set recovery.snapshot_every=5");
  ASSERT_EQ(j.code, 0) << j.output;
  EXPECT_EQ(Count(j.output, "started 2 new ranks in their place (recovery.on_lost_rank: replace), their state from "
                            "the snapshots of step 30 on ranks 1, 3"),
            1u)
      << j.output;
  const Run run = StepsAndEvents("both");
  ASSERT_EQ(run.events.size(), 1u);
  EXPECT_EQ(run.events[0]["lost"], nlohmann::json::array({0, 2}));
  EXPECT_EQ(run.events[0]["replayed"], 2);
  EXPECT_EQ(run.last, 60);
  EXPECT_EQ(baton_test::ReadAll(dir_ / "both.safetensors"), baton_test::ReadAll(dir_ / "ref.safetensors"));
}

// replace with replicas under ZeRO 1, 2 and 3 (2 x 2): each replica's
// shards exist nowhere else, so every 5 steps each rank's own state (its
// parameters and its shard) is copied to the same pipeline rank of the
// next replica; a lost rank's new process takes it from there, every
// survivor its own of the same step, and the steps since are replayed:
// the run ends with the bytes of the uninterrupted run under the same
// ZeRO stage. The rank is killed in a forward (ZeRO 1), in its
// REDUCE_GRAD's reduce-scatter (ZeRO 2) and in its UNSHARD's all-gather
// (ZeRO 3).
TEST_F(Recovery, ReplaceUnderZeroTakesTheShardsFromTheNextReplicasSnapshot) {
  for (const auto& [zero, action] : {std::pair{1, "F"}, std::pair{2, "REDUCE_GRAD"}, std::pair{3, "UNSHARD"}}) {
    SCOPED_TRACE(zero);
    const std::string z = " --set data_parallel.zero=" + std::to_string(zero) + " --set pipeline.adapt=off";
    const std::string ref = "zero_ref" + std::to_string(zero), out = "zero" + std::to_string(zero);
    const Job healthy = Train("", ref, z + " --set recovery.on_lost_rank=stop");
    ASSERT_EQ(healthy.code, 0) << healthy.output;
    const Job j = Train("BATON_FAULT=2:27:" + std::string(action) + ":kill", out,
                        z + " --set recovery.on_lost_rank=replace --set recovery.snapshot_every=5");
    ASSERT_EQ(j.code, 0) << j.output;
    // World rank 2 is pipeline rank 1 of replica 0; its holder is replica 1's, world rank 3.
    EXPECT_EQ(Count(j.output, "its state from the snapshot of step 25 on rank 3, and went on from step 26 (replaying "
                              "1 step done before the loss)"),
              1u)
        << j.output;
    const Run run = StepsAndEvents(out);
    ASSERT_EQ(run.events.size(), 1u);
    EXPECT_EQ(run.events[0]["resumed_after"], 25);
    EXPECT_EQ(run.last, 60);
    EXPECT_EQ(baton_test::ReadAll(dir_ / (out + ".safetensors")), baton_test::ReadAll(dir_ / (ref + ".safetensors")));
  }
}

// Two neighbours of a pure pipeline lost (rank 2 as the survivors of rank
// 1's loss agree): rank 1's snapshot was on rank 2, so the job ends with one
// message saying so and mpirun non-zero, keeping the checkpoints.
TEST_F(Recovery, TwoNeighboursLostInAPurePipelineEndTheJobWithOneMessage) {
  const std::string pure = "--set pipeline.ranks=4 --set data_parallel.size=1 --set recovery.on_lost_rank=replace "
                           "--set checkpoint.dir=ck --set checkpoint.every_steps=10";
  const Job j = Train("BATON_FAULT=1:25:F:kill,2:25:recovery:kill", "neighbours", pure);
  EXPECT_NE(j.code, 0) << j.output;
  EXPECT_NE(j.code, 124) << j.output;
  EXPECT_EQ(Count(j.output, "baton: error: lost ranks 1, 2 ("), 1u) << j.output;
  EXPECT_NE(j.output.find("rank 1's snapshot was on rank 2, lost too"), std::string::npos) << j.output;
  EXPECT_TRUE(fs::exists(dir_ / "ck/step-00000020/manifest.json")) << j.output;
}

// An error one rank finds in setup (here rank 3's BATON_FAULT names an
// action its schedule does not run) ends the job with that one message and
// a non-zero exit from mpirun, which under the recovery settings would
// exit 0 when its ranks exit 2.
TEST_F(Recovery, ARanksOwnSetupErrorEndsTheJobNonZero) {
  const Job j = Train("BATON_FAULT=3:25:B:kill", "error",
                      "--set pipeline.ranks=4 --set data_parallel.size=1 --set pipeline.schedule=zb_h1 "
                      "--set recovery.on_lost_rank=replace");
  EXPECT_NE(j.code, 0) << j.output;
  EXPECT_NE(j.code, 124) << j.output;
  EXPECT_EQ(Count(j.output, "baton: error: rank 3: BATON_FAULT='3:25:B:kill': rank 3 runs no B action"), 1u)
      << j.output;
}

// A failure once the job has gone on after a loss is said, not lost in
// MPI_Finalize: here the metrics file is a FIFO whose reader ends with the
// lost rank 0's writer (rank 1, the new rank 0, pauses 0.5 s in the
// regroup, under the 1 s that calls a rank lost, so that the reader is
// gone by then), and the new rank 0 cannot open it again. One line names
// it and the loss, the exit record holds it (2), mpirun ends non-zero, and
// nothing crashes or waits for a deadline.
TEST_F(Recovery, AFailureAfterTheJobWentOnIsSaidOnceWithAnExitRecord) {
  ASSERT_EQ(std::system(("mkfifo '" + (dir_ / "rows").string() + "'").c_str()), 0);
  const Job j = Train("(cat rows > rows.txt &) && BATON_EXIT_FILE=failed.exit BATON_FAULT=0:25:F:kill,1:25:regroup:pause=0.5",
                      "failed", "--set log.metrics=rows");
  // A reader still waiting (the job never opened the FIFO) is let go.
  if (const int fd = ::open((dir_ / "rows").c_str(), O_WRONLY | O_NONBLOCK); fd >= 0) ::close(fd);
  EXPECT_NE(j.code, 0) << j.output;
  EXPECT_NE(j.code, 124) << j.output;
  const std::string said = "after the job went on without rank 0 (epoch 1): rows: cannot write the metrics file: a "
                           "FIFO that nobody reads";
  EXPECT_EQ(Count(j.output, "baton: error: " + said), 1u) << j.output;
  EXPECT_EQ(Count(j.output, "baton: error"), 1u) << j.output;
  for (const char* crash : {"Segmentation", "MPI_ERR", "signal 11", "timed out"}) {
    EXPECT_EQ(j.output.find(crash), std::string::npos) << j.output;
  }
  std::ifstream in(dir_ / "failed.exit");
  std::string code, why;
  std::getline(in, code);
  std::getline(in, why);
  EXPECT_EQ(code, "2");
  EXPECT_EQ(why, "failed " + said + " (start its reader first)");
}

// SIGTERM or SIGKILL to mpirun itself (a scheduler's stop sent to the
// launcher; baton.sbatch's TERM trap sends exactly that SIGTERM): the
// ranks stop at the step boundary with a checkpoint (mpirun passes SIGTERM
// on; killed, it leaves its ranks SIGTERM as their parent dies), and the
// lowest leaves exit record 75 before MPI_Finalize, so the job is requeued
// and resumes. Every rank ends by itself.
TEST_F(Recovery, ASignalToMpirunItselfLeavesTheExitRecordOfTheStop) {
  for (const std::string sig : {"TERM", "KILL"}) {
    SCOPED_TRACE(sig);
    const std::string name = "sig" + sig;
    const std::string metrics = (dir_ / (name + ".jsonl")).string();
    // The ranks' own command lines (not the shell's, which holds them quoted).
    const std::string ranks = "^" BATON_BINARY " train .*" + name + ".jsonl";
    last_ = "cd '" + dir_.string() + "' && (BATON_EXIT_FILE=" + name +
            ".exit BATON_FAULT=0:30:F:wait timeout 120 '" BATON_MPIEXEC
            "' --mca orte_enable_recovery 1 --mca orte_abort_on_non_zero_status 0 -np 4 '" BATON_BINARY "' train '"
            BATON_SOURCE_DIR "/tests/mpi/tiny.yaml' --set pipeline.ranks=2 --set data_parallel.size=2 "
            "--set train.steps=60 --set checkpoint.dir=ck" + sig + " --set checkpoint.every_steps=1000 "
            "--set log.metrics='" + metrics + "' > log.txt 2>&1 & pid=$!; for i in $(seq 1200); do "
            "grep -q 'waiting for a stop signal' log.txt 2> /dev/null && break; sleep 0.1; done; pkill -" + sig +
            " -P $pid; wait $pid; for i in $(seq 1200); do pgrep -f '" + ranks + "' > /dev/null || break; sleep 0.1; "
            "done)";
    const Job j = baton_test::RunJob(last_, dir_ / "log.txt");
    std::ifstream in(dir_ / (name + ".exit"));
    std::string code, why;
    std::getline(in, code);
    std::getline(in, why);
    EXPECT_EQ(code, "75") << j.output;
    EXPECT_EQ(why, "stopped on SIGTERM after step 30 with a checkpoint: run it again to resume") << j.output;
    EXPECT_TRUE(fs::exists(dir_ / ("ck" + sig) / "step-00000030/manifest.json")) << j.output;
    EXPECT_NE(std::system(("pgrep -f '" + ranks + "' > /dev/null").c_str()), 0) << "a rank was left running";
  }
}

// Under the recovery settings mpirun's own exit code says little (0 for a
// stop to run again, 0 or 1 for a failure): with BATON_EXIT_FILE the job's
// lowest rank leaves its exit code and why. A run that finished after rank
// 0 was replaced (the new rank 0 leaves it), a run stopped by SIGUSR1 sent
// to mpirun (75, to run again), and a config error (2, the message).
TEST_F(Recovery, TheExitRecordSaysWhatMpirunCannot) {
  auto record = [&](const std::string& name) {
    std::ifstream in(dir_ / name);
    std::string code, why;
    std::getline(in, code);
    std::getline(in, why);
    return std::pair<std::string, std::string>{code, why};
  };
  const Job replaced = Train("BATON_EXIT_FILE=replaced.exit BATON_FAULT=0:25:F:kill", "replaced",
                             "--set recovery.on_lost_rank=replace");
  ASSERT_EQ(replaced.code, 0) << replaced.output;
  EXPECT_EQ(record("replaced.exit"), (std::pair<std::string, std::string>{"0", "finished: 60 steps, going on after 1 loss of ranks"}));
  // Rank 0 waits at step 30 until a stop signal reaches it: mpirun (the
  // child of timeout), sent SIGUSR1, passes it on to every rank.
  const std::string stop_cmd =
      "cd '" + dir_.string() + "' && (BATON_EXIT_FILE=stopped.exit BATON_FAULT=0:30:F:wait timeout 120 '" BATON_MPIEXEC
      "' --mca orte_enable_recovery 1 --mca orte_abort_on_non_zero_status 0 -np 4 '" BATON_BINARY "' train '"
      BATON_SOURCE_DIR "/tests/mpi/tiny.yaml' --set pipeline.ranks=2 --set data_parallel.size=2 --set train.steps=60 "
      "--set checkpoint.dir=ck --set checkpoint.every_steps=1000 --set log.metrics=stopped.jsonl > log.txt 2>&1 &"
      " pid=$!; for i in $(seq 1200); do grep -q 'waiting for a stop signal' log.txt 2> /dev/null && break; sleep 0.1;"
      " done; pkill -USR1 -P $pid; wait $pid)";
  const Job stopped = baton_test::RunJob(stop_cmd, dir_ / "log.txt");
  EXPECT_NE(stopped.output.find("stopped by SIGUSR1 after step 30"), std::string::npos) << stopped.output;
  EXPECT_EQ(record("stopped.exit"),
            (std::pair<std::string, std::string>{"75", "stopped on SIGUSR1 after step 30 with a checkpoint: run it again to resume"}));
  const Job bad = Train("BATON_EXIT_FILE=bad.exit", "bad", "--set train.steps=-1");
  EXPECT_NE(bad.code, 0) << bad.output;
  EXPECT_EQ(record("bad.exit").first, "2");
  EXPECT_NE(record("bad.exit").second.find("failed: "), std::string::npos);
  EXPECT_NE(record("bad.exit").second.find("train.steps: must be >= 0"), std::string::npos) << record("bad.exit").second;
}

// A rank paused past the 1 s of silence that calls a rank lost (SIGSTOP,
// SIGCONT from a child after the pause: BATON_FAULT's pause=SECONDS) is
// excluded, not waited for: the survivors agree it is lost, start epoch 1
// without it and tell it so; it wakes (mpirun, told to end, sends it
// SIGCONT, or its pause ends), says one line naming the epoch and exits,
// writing nothing. Under shrink and replace the run ends with the
// uninterrupted run's bytes, every step once and one "recovered" row
// (replace of rank 0: the new rank 0 takes over the checkpoint folder's
// lock and the metrics file the paused rank still held); under stop the
// survivors write the checkpoint of the last finished step (exit 75). A
// pause in the survivors' agreement itself (rank 1 as the loss of rank 3
// is being agreed) excludes it too. The job ends within seconds of its
// exit record though a paused rank would sleep 30 s more.
TEST_F(Recovery, APausedRankIsExcludedWritesNothingAndTheJobEndsWithoutIt) {
  const std::string ck = " --set checkpoint.dir=ck --set checkpoint.every_steps=10 --set checkpoint.keep=10";
  ASSERT_EQ(Train("", "ref_shrink").code, 0);
  ASSERT_EQ(Train("", "ref_replace", "--set recovery.on_lost_rank=replace").code, 0);
  struct Case {
    const char* mode;
    std::string fault;
    int victim;
    std::vector<int> lost;
    const char* code;
  };
  const std::vector<Case> cases = {
      {"shrink", "3:25:B:pause=30", 3, {3}, "0"},
      {"replace", "0:25:F:pause=3", 0, {0}, "0"},
      {"stop", "1:25:B:pause=3", 1, {1}, "75"},
      {"shrink", "3:25:B:kill,1:25:recovery:pause=3", 1, {1, 3}, "0"},
      {"shrink", "0:30:checkpoint:pause=3", 0, {0}, "0"},
  };
  int n = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.mode) + " " + c.fault);
    const std::string out = fmt::format("paused{}", n++);
    fs::remove_all(dir_ / "ck");
    const auto start = fs::file_time_type::clock::now();
    const Job j = Train("BATON_EXIT_FILE=" + out + ".exit BATON_FAULT=" + c.fault, out,
                        fmt::format("--set recovery.on_lost_rank={}", c.mode) + ck);
    const auto end = fs::file_time_type::clock::now();
    EXPECT_NE(j.code, 124) << j.output;
    std::ifstream record(dir_ / (out + ".exit"));
    std::string code;
    std::getline(record, code);
    EXPECT_EQ(code, c.code) << j.output;
    // The job's end within seconds of its exit record, not after the pause.
    const auto written = fs::last_write_time(dir_ / (out + ".exit"));
    EXPECT_LT(std::chrono::duration<double>(end - written).count(), 10.0) << j.output;
    EXPECT_LT(std::chrono::duration<double>(end - start).count(), 28.0) << "the job waited for the paused rank";
    EXPECT_EQ(Count(j.output, fmt::format("baton: rank {} (pid ", c.victim)), 1u) << j.output;
    EXPECT_EQ(Count(j.output, "excluded from the job in epoch 1: the other ranks agreed it was lost while it was "
                              "paused or stalled, and went on without it; it stops here and writes nothing (exit 6)"),
              1u)
        << j.output;
    for (const auto& e : fs::directory_iterator(dir_)) {
      EXPECT_EQ(e.path().filename().string().rfind("flight-rank", 0), std::string::npos) << e.path();
    }
    if (std::string(c.mode) == "stop") {
      EXPECT_TRUE(fs::exists(dir_ / "ck/step-00000024/manifest.json")) << j.output;
      continue;
    }
    const Run run = StepsAndEvents(out);
    EXPECT_EQ(run.last, 60);
    ASSERT_EQ(run.events.size(), 1u);
    EXPECT_EQ(run.events[0]["lost"], nlohmann::json(c.lost));
    EXPECT_EQ(baton_test::ReadAll(dir_ / (out + ".safetensors")),
              baton_test::ReadAll(dir_ / (std::string("ref_") + c.mode + ".safetensors")));
    if (c.victim == 0) {
      EXPECT_EQ(Count(j.output, "took over the metrics file from a rank the job excluded"), 1u) << j.output;
      EXPECT_EQ(Count(j.output, "took over the checkpoint folder's lock from a rank the job excluded"), 1u)
          << j.output;
    }
  }
}

}  // namespace
