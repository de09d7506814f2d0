// Recovery from a lost rank end to end on ranks as threads (RunThreadJob):
// the launch's own code on every rank — the watch over real sockets, the
// survivors' agreement, their new world (thread transports regrouped as
// MPI's), Recovery's kept state — with BATON_FAULT's kill, pause and
// regroup faults acting on one rank's thread. Each run is checked against
// an uninterrupted run of the same config: its exit record, every rank's
// exit code, every step once in the metrics with one recovery row, and the
// final weights' bytes. Seconds, not minutes: no mpirun.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "baton/env.h"
#include "baton/signals.h"
#include "support/job.h"
#include "support/test_folder.h"
#include "thread_job.h"

namespace baton {
namespace {

namespace fs = std::filesystem;

class RecoveryThreads : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = baton_test::FreshTestFolder("baton_recovery_threads"); }
  void TearDown() override { fs::remove_all(dir_); }

  // The tiny MLP as `layout` (P x D), 30 steps, its outputs dir_/out.*,
  // under `mode`, with BATON_FAULT=`fault` (none: "").
  ThreadJobEnd Run(const std::string& out, int p, int d, const std::string& mode, const std::string& fault,
                   std::vector<std::string> sets = {}) {
    const std::vector<std::string> base = {"pipeline.ranks=" + std::to_string(p),
                                           "data_parallel.size=" + std::to_string(d),
                                           "train.steps=30",
                                           "recovery.on_lost_rank=" + mode,
                                           "pipeline.adapt=off",
                                           "pipeline.wait_timeout_s=60",
                                           "log.metrics=" + (dir_ / (out + ".jsonl")).string(),
                                           "log.weights=" + (dir_ / (out + ".safetensors")).string()};
    sets.insert(sets.begin(), base.begin(), base.end());
    FakeMachine machine;
    if (!fault.empty()) machine.variables["BATON_FAULT"] = fault;
    const auto env = MakeFakeEnv(machine);
    TrainOptions options;
    options.env = env.get();
    return RunThreadJob(BATON_SOURCE_DIR "/tests/mpi/tiny.yaml", sets, options);
  }

  // The metrics file's step rows (checked to be 1, 2, ... once each, to
  // `last`) and its event rows.
  std::vector<nlohmann::json> Events(const std::string& out, std::int64_t last = 30) {
    std::vector<nlohmann::json> events;
    std::int64_t step = 0;
    std::ifstream in(dir_ / (out + ".jsonl"));
    for (std::string line; std::getline(in, line);) {
      const auto row = nlohmann::json::parse(line);
      if (row.contains("event")) {
        events.push_back(row);
        continue;
      }
      EXPECT_EQ(row["step"].get<std::int64_t>(), step + 1) << out;
      step = row["step"];
    }
    EXPECT_EQ(step, last) << out;
    return events;
  }
  std::string Bytes(const std::string& out) { return baton_test::ReadAll(dir_ / (out + ".safetensors")); }

  fs::path dir_;
};

// 3 replicas of a one-rank pipeline: 18 microbatches, shared by 3, 2 or 1.
std::vector<std::string> Three() { return {"pipeline.microbatches=6", "train.batch_size=36"}; }

std::vector<int> Codes(const ThreadJobEnd& end) {
  std::vector<int> codes;
  for (const ThreadJobRank& r : end.ranks) {
    codes.push_back(r.code);
    if (!r.error.empty()) std::fprintf(stderr, "rank %d (world %d): %s\n", static_cast<int>(codes.size()) - 1, r.place, r.error.c_str());
  }
  return codes;
}

// A run without a fault ends as the launch ends it: rank 0's record, every
// rank 0.
TEST_F(RecoveryThreads, ARunThatLosesNoRankEndsWithOneRecord) {
  const ThreadJobEnd end = Run("ref", 2, 2, "shrink", "");
  EXPECT_EQ(Codes(end), std::vector<int>({0, 0, 0, 0}));
  EXPECT_EQ(end.records, 1);
  EXPECT_EQ(end.record_code, 0);
  EXPECT_EQ(end.record, "finished: 30 steps");
  EXPECT_TRUE(Events("ref").empty());
}

// A recovered row's parts of the recovery: the agreement (rank 0's, or
// the survivors' told to a new rank 0) and the regroup (the slowest
// survivor's), each measured, none longer than the whole.
void ExpectTimedParts(const nlohmann::json& row) {
  const double agreed = row.at("agreed_s").get<double>(), regroup = row.at("regroup_s").get<double>();
  EXPECT_GT(agreed, 0.0) << row.dump();
  EXPECT_GT(regroup, 0.0) << row.dump();
  EXPECT_LE(agreed, row.at("seconds").get<double>()) << row.dump();
  EXPECT_LE(regroup, row.at("seconds").get<double>()) << row.dump();
}

// shrink: the replica that lost a rank leaves (its other rank exits 0),
// the other goes on from the step every survivor kept, to the
// uninterrupted run's bytes (the sums in double); rank 0 lost too: the
// new rank 0 takes the metrics file and leaves the record.
TEST_F(RecoveryThreads, ShrinkGoesOnWithoutTheReplicaThatLostARank) {
  const ThreadJobEnd ref = Run("ref", 2, 2, "shrink", "");
  ASSERT_EQ(Codes(ref), std::vector<int>({0, 0, 0, 0}));
  for (const auto& [victim, action] : std::vector<std::pair<int, std::string>>{{3, "B"}, {0, "F"}}) {
    SCOPED_TRACE(victim);
    const std::string out = "lost" + std::to_string(victim);
    const ThreadJobEnd end = Run(out, 2, 2, "shrink", std::to_string(victim) + ":12:" + action + ":kill");
    std::vector<int> codes = {0, 0, 0, 0};
    codes[static_cast<std::size_t>(victim)] = 137;
    EXPECT_EQ(Codes(end), codes);
    EXPECT_EQ(end.records, 1);
    EXPECT_EQ(end.record_code, 0);
    EXPECT_EQ(end.record, "finished: 30 steps, going on after 1 loss of ranks");
    const auto events = Events(out);
    ASSERT_EQ(events.size(), 1u);
    EXPECT_EQ(events[0]["event"], "recovered");
    EXPECT_EQ(events[0]["mode"], "shrink");
    EXPECT_EQ(events[0]["lost"], nlohmann::json::array({victim}));
    EXPECT_EQ(events[0]["replicas"], 1);
    EXPECT_EQ(events[0]["resumed_after"], 11);
    EXPECT_EQ(events[0]["step"], 12);
    ExpectTimedParts(events[0]);
    EXPECT_TRUE(Bytes(out) == Bytes("ref")) << "weights differ";
  }
}

// replace with replicas: a new rank (a thread told the survivors' payload)
// takes the lost one's place and its state from the whole replica, the
// interrupted step redone; rank 0 lost: the new rank 0 goes on with the
// metrics file and leaves the record.
TEST_F(RecoveryThreads, ReplaceStartsANewRankAndEndsWithTheUninterruptedRunsBytes) {
  const ThreadJobEnd ref = Run("ref", 2, 2, "replace", "");
  ASSERT_EQ(Codes(ref), std::vector<int>({0, 0, 0, 0}));
  for (const auto& [victim, action] : std::vector<std::pair<int, std::string>>{{3, "B"}, {0, "F"}}) {
    SCOPED_TRACE(victim);
    const std::string out = "replaced" + std::to_string(victim);
    const ThreadJobEnd end = Run(out, 2, 2, "replace", std::to_string(victim) + ":12:" + action + ":kill");
    std::vector<int> codes = {0, 0, 0, 0, 0};
    codes[static_cast<std::size_t>(victim)] = 137;
    EXPECT_EQ(Codes(end), codes);
    ASSERT_EQ(end.ranks.size(), 5u);
    EXPECT_TRUE(end.ranks[4].joined);
    EXPECT_EQ(end.ranks[4].place, victim);
    EXPECT_EQ(end.records, 1);
    EXPECT_EQ(end.record, "finished: 30 steps, going on after 1 loss of ranks");
    const auto events = Events(out);
    ASSERT_EQ(events.size(), 1u);
    EXPECT_EQ(events[0]["mode"], "replace");
    EXPECT_EQ(events[0]["replicas"], 2);
    EXPECT_EQ(events[0]["resumed_after"], 11);
    ExpectTimedParts(events[0]);  // rank 0 lost: the new rank 0 is told them
    EXPECT_TRUE(Bytes(out) == Bytes("ref")) << "weights differ";
  }
}

// replace in a pure pipeline: the lost rank's state from the snapshot the
// next rank holds (every 5 steps), every survivor its own of that step,
// the steps since replayed; a second loss later, of the new rank's
// neighbour, is replaced from the world that holds the first new rank.
TEST_F(RecoveryThreads, ReplaceInAPurePipelineTakesTheNextRanksSnapshotAndReplays) {
  const std::vector<std::string> every5 = {"recovery.snapshot_every=5"};
  const ThreadJobEnd ref = Run("ref", 4, 1, "stop", "");
  ASSERT_EQ(Codes(ref), std::vector<int>({0, 0, 0, 0}));
  const ThreadJobEnd end = Run("pure", 4, 1, "replace", "2:13:F:kill", every5);
  EXPECT_EQ(Codes(end), std::vector<int>({0, 0, 137, 0, 0}));
  const auto events = Events("pure");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["resumed_after"], 10);
  EXPECT_EQ(events[0]["replayed"], 2);
  EXPECT_EQ(events[0]["step"], 13);
  EXPECT_TRUE(Bytes("pure") == Bytes("ref")) << "weights differ";
  // Two losses, the second of the first new rank's holder.
  const ThreadJobEnd twice = Run("twice", 4, 1, "replace", "1:8:F:kill,2:22:B:kill", every5);
  EXPECT_EQ(Codes(twice), std::vector<int>({0, 137, 137, 0, 0, 0}));
  EXPECT_EQ(twice.record, "finished: 30 steps, going on after 2 losses of ranks");
  const auto both = Events("twice");
  ASSERT_EQ(both.size(), 2u);
  EXPECT_EQ(both[0]["lost"], nlohmann::json::array({1}));
  EXPECT_EQ(both[1]["lost"], nlohmann::json::array({2}));
  EXPECT_TRUE(Bytes("twice") == Bytes("ref")) << "weights differ";
}

// stop with replicas and a checkpoint folder: the survivors write the
// last step every one keeps as a checkpoint and stop (75), which resumes
// to the uninterrupted run's bytes.
TEST_F(RecoveryThreads, StopWritesTheKeptStepAsACheckpointThatResumesToTheSameBytes) {
  const std::string ck = "checkpoint.dir=" + (dir_ / "ck").string();
  const std::vector<std::string> every = {ck, "checkpoint.every_steps=100"};
  const ThreadJobEnd ref = Run("ref", 2, 2, "stop", "", every);
  ASSERT_EQ(Codes(ref), std::vector<int>({0, 0, 0, 0}));
  fs::remove_all(dir_ / "ck");
  const ThreadJobEnd end = Run("stopped", 2, 2, "stop", "1:16:F:kill", every);
  EXPECT_EQ(Codes(end), std::vector<int>({kExitStopped, 137, kExitStopped, 0}));
  EXPECT_EQ(end.records, 1);
  EXPECT_EQ(end.record_code, kExitStopped);
  EXPECT_EQ(end.record,
            "stopped after a lost rank (recovery.on_lost_rank: stop) with the checkpoint of step 15: run it again to "
            "resume");
  ASSERT_TRUE(fs::exists(dir_ / "ck/step-00000015/manifest.json"));
  const auto events = Events("stopped", 15);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["event"], "lost_rank");
  EXPECT_EQ(events[0]["checkpoint_step"], 15);
  std::vector<std::string> resume = every;
  resume.push_back("checkpoint.resume=auto");
  const ThreadJobEnd again = Run("stopped", 2, 2, "stop", "", resume);
  EXPECT_EQ(Codes(again), std::vector<int>({0, 0, 0, 0}));
  EXPECT_TRUE(Bytes("stopped") == Bytes("ref")) << "weights differ";
}

// A rank paused past the silence that calls it lost (here 3 s, in a
// forward) is agreed lost, told so when it wakes, and ends there having
// written nothing (RankExcluded, exit 6); the others go on without it to
// the uninterrupted run's bytes, and the one record is the survivors'.
// Rank 0 paused under replace: the new rank 0 takes over the metrics file
// and the checkpoint folder the paused one still holds.
TEST_F(RecoveryThreads, APausedRankIsExcludedAndWritesNothing) {
  const std::string ck = "checkpoint.dir=" + (dir_ / "ck").string();
  const std::vector<std::string> every = {ck, "checkpoint.every_steps=10", "checkpoint.keep=5"};
  const ThreadJobEnd ref = Run("ref", 2, 2, "shrink", "", every);
  ASSERT_EQ(Codes(ref), std::vector<int>({0, 0, 0, 0}));
  fs::remove_all(dir_ / "ck");
  const ThreadJobEnd shrunk = Run("paused3", 2, 2, "shrink", "3:12:F:pause=3", every);
  EXPECT_EQ(Codes(shrunk), std::vector<int>({0, 0, 0, kExitExcluded}));
  EXPECT_NE(shrunk.ranks[3].error.find("excluded from the job in epoch 1"), std::string::npos)
      << shrunk.ranks[3].error;
  EXPECT_EQ(shrunk.records, 1);
  EXPECT_EQ(shrunk.record, "finished: 30 steps, going on after 1 loss of ranks");
  EXPECT_EQ(Events("paused3").size(), 1u);
  EXPECT_TRUE(Bytes("paused3") == Bytes("ref")) << "weights differ";

  fs::remove_all(dir_ / "ck");
  ASSERT_EQ(Codes(Run("ref_replace", 2, 2, "replace", "", every)), std::vector<int>({0, 0, 0, 0}));
  fs::remove_all(dir_ / "ck");
  const ThreadJobEnd replaced = Run("paused0", 2, 2, "replace", "0:12:F:pause=3", every);
  EXPECT_EQ(Codes(replaced), std::vector<int>({kExitExcluded, 0, 0, 0, 0}));
  EXPECT_EQ(replaced.records, 1);
  const auto events = Events("paused0");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["lost"], nlohmann::json::array({0}));
  EXPECT_TRUE(Bytes("paused0") == Bytes("ref_replace")) << "weights differ";
  // The checkpoints after the loss are the new rank 0's, complete.
  for (const char* step : {"step-00000020", "step-00000030"}) {
    EXPECT_TRUE(fs::exists(dir_ / "ck" / step / "manifest.json")) << step;
  }
}

// A second loss while the survivors make their new world (a rank killed
// in the regroup, after the agreement): the job ends at once, one record
// naming both losses, every survivor 4, no hang.
TEST_F(RecoveryThreads, ALossWhileTheSurvivorsRegroupEndsTheJob) {
  const ThreadJobEnd end = Run("regroup", 1, 3, "shrink", "0:10:F:kill,1:10:regroup:kill", Three());
  EXPECT_EQ(Codes(end), std::vector<int>({137, 137, kExitLostRank}));
  EXPECT_EQ(end.records, 1);
  EXPECT_EQ(end.record_code, kExitLostRank);
  EXPECT_NE(end.record.find("lost rank 1"), std::string::npos) << end.record;
  EXPECT_NE(end.record.find("while the survivors of the loss of rank 0 made their new world"), std::string::npos)
      << end.record;
}

// A second loss as the recovery starts (before the survivors agree): the
// agreement takes both in, and the one replica left goes on.
TEST_F(RecoveryThreads, ALossAsTheRecoveryStartsIsAgreedOnWithTheFirst) {
  const ThreadJobEnd ref = Run("ref", 1, 3, "shrink", "", Three());
  ASSERT_EQ(Codes(ref), std::vector<int>({0, 0, 0}));
  const ThreadJobEnd end = Run("two", 1, 3, "shrink", "0:10:F:kill,1:10:recovery:kill", Three());
  EXPECT_EQ(Codes(end), std::vector<int>({137, 137, 0}));
  const auto events = Events("two");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["lost"], nlohmann::json::array({0, 1}));
  EXPECT_EQ(events[0]["replicas"], 1);
  EXPECT_TRUE(Bytes("two") == Bytes("ref")) << "weights differ";
}

// A rank paused for 2 s (twice the silence that calls a rank lost) at one
// point of a run: in a forward, a backward, a weight gradient, a
// checkpoint write, or the survivors' agreement on another loss; rank 0
// and others; under stop, shrink and replace. Every case ends with the
// paused rank told it is out (RankExcluded, exit 6) having written
// nothing, one exit record with the mode's code, every other rank's code
// as the mode says, every step in the metrics once, and (going on) the
// uninterrupted run's bytes.
struct Pause {
  const char* name;
  const char* mode;
  int p, d;
  const char* fault;
  std::vector<int> codes;     // every rank's, launched then new
  int record;                 // the exit record's code
  std::int64_t last;          // the metrics' last step
  std::vector<std::string> sets;
};

void PrintTo(const Pause& c, std::ostream* os) { *os << c.name; }

class PausedRank : public RecoveryThreads, public ::testing::WithParamInterface<Pause> {};

TEST_P(PausedRank, IsFencedAndTheJobEndsAsItsModeSays) {
  const Pause& c = GetParam();
  std::vector<std::string> sets = c.sets;
  sets.push_back("checkpoint.dir=" + (dir_ / "ck").string());
  sets.push_back("checkpoint.every_steps=10");
  sets.push_back("checkpoint.keep=5");
  const bool goes_on = std::string(c.mode) != "stop";
  if (goes_on) {
    ASSERT_EQ(Codes(Run("ref", c.p, c.d, c.mode, "", sets)).size(), static_cast<std::size_t>(c.p * c.d));
    fs::remove_all(dir_ / "ck");
  }
  const ThreadJobEnd end = Run("paused", c.p, c.d, c.mode, c.fault, sets);
  EXPECT_EQ(Codes(end), c.codes);
  int excluded = 0;
  for (const ThreadJobRank& r : end.ranks) {
    if (r.code != kExitExcluded) continue;
    ++excluded;
    EXPECT_NE(r.error.find("excluded from the job in epoch 1"), std::string::npos) << r.error;
  }
  EXPECT_EQ(excluded, 1);
  EXPECT_EQ(end.records, 1);
  EXPECT_EQ(end.record_code, c.record) << end.record;
  const auto events = Events("paused", c.last);
  EXPECT_EQ(events.size(), 1u);
  if (goes_on) {
    EXPECT_TRUE(Bytes("paused") == Bytes("ref")) << "weights differ";
  }
}

INSTANTIATE_TEST_SUITE_P(
    AtEveryPoint, PausedRank,
    ::testing::Values(
        Pause{"StopRank1InABackward", "stop", 2, 2, "1:12:B:pause=2", {kExitStopped, kExitExcluded, kExitStopped, 0},
              kExitStopped, 11, {}},
        Pause{"StopRank0InACheckpoint", "stop", 2, 2, "0:20:checkpoint:pause=2",
              {kExitExcluded, kExitStopped, 0, kExitStopped}, kExitStopped, 19, {}},  // step 20 not yet kept
        Pause{"ShrinkRank2InAForward", "shrink", 2, 2, "2:15:F:pause=2", {0, 0, kExitExcluded, 0}, 0, 30, {}},
        Pause{"ShrinkRank0InACheckpoint", "shrink", 2, 2, "0:20:checkpoint:pause=2", {kExitExcluded, 0, 0, 0}, 0, 30,
              {}},
        Pause{"ReplaceRank1InAWeightGradient", "replace", 2, 2, "1:14:W:pause=2", {0, kExitExcluded, 0, 0, 0}, 0, 30,
              {"pipeline.schedule=zb_h1"}},
        Pause{"ReplaceRank3OfAPurePipelineInABackward", "replace", 4, 1, "3:13:B:pause=2",
              {0, 0, 0, kExitExcluded, 0}, 0, 30, {"recovery.snapshot_every=5"}},
        Pause{"ShrinkRank1InTheAgreementOnAnotherLoss", "shrink", 1, 3, "2:10:F:kill,1:10:recovery:pause=2",
              {0, kExitExcluded, 137}, 0, 30, {"pipeline.microbatches=6", "train.batch_size=36"}}),
    [](const ::testing::TestParamInfo<Pause>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace baton
