// Failures under mpirun, injected with BATON_FAULT: a stalled rank, a rank
// that exits or is killed mid-step, and one killed while writing a
// checkpoint. The job must end non-zero, quickly, saying why, and the last
// complete checkpoint must still resume.
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>

namespace {

namespace fs = std::filesystem;

class FaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) / ("baton_fault_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs the tiny config on a 2-rank pipeline (np ranks: with
  // data_parallel.size np / 2 in `args`) with BATON_FAULT=fault (if any).
  int Train(const std::string& fault, const std::string& args, int np = 2) {
    const std::string env = fault.empty() ? "" : "BATON_FAULT='" + fault + "' ";
    const std::string cmd = "cd '" + dir_.string() + "' && " + env + "timeout 120 '" BATON_MPIEXEC "' -np " +
                            std::to_string(np) + " '" + BATON_BINARY + "' train '" BATON_SOURCE_DIR
                            "/tests/mpi/tiny.yaml' --set pipeline.ranks=2 --set pipeline.schedule=1f1b"
                            " --set log.metrics=out/metrics.jsonl " +
                            args + " > log.txt 2>&1";
    const auto start = std::chrono::steady_clock::now();
    const int status = std::system(cmd.c_str());
    seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }
  std::string Read(const std::string& name) {
    std::ifstream in(dir_ / name, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }

  fs::path dir_;
  double seconds_ = 0;
};

TEST_F(FaultTest, StalledRankEndsTheJobWithinTheDeadlineNamingThePeer) {
  // Rank 0's wire to rank 1 slow too (1 ms): the flight record says so.
  const int code = Train("1:2:F:stall,0>1:1:delay=0.001", "--set pipeline.wait_timeout_s=3 --set train.steps=4");
  EXPECT_NE(code, 0);
  EXPECT_NE(code, 124) << "mpirun was still running at the test's own time limit";
  EXPECT_LT(seconds_, 3 + 12) << Read("log.txt");
  const std::string log = Read("log.txt");
  EXPECT_NE(log.find("baton: rank 0: timed out waiting for RECV_B of stage 0 microbatch"), std::string::npos) << log;
  // The wait as measured: at least the limit, and not much more on a
  // loaded host (the wait polls; the message rounds to 0.1 s).
  std::smatch waited;
  ASSERT_TRUE(std::regex_search(log, waited, std::regex(R"(from rank 1: waited ([0-9.]+) s, limit 3\.0 s)"))) << log;
  EXPECT_GE(std::stod(waited[1].str()), 3.0) << log;
  EXPECT_LT(std::stod(waited[1].str()), 3.0 + 2.0) << log;
  // The flight record: rank 0's last actions, the one it was waiting in still running.
  const auto record = nlohmann::json::parse(Read("out/flight-rank-0.json"));
  EXPECT_EQ(record["rank"], 0);
  EXPECT_EQ(record["step"], 2);
  ASSERT_EQ(record["injected"].size(), 1u) << record.dump();
  EXPECT_EQ(record["injected"][0], "delay=0.001 s to rank 1");
  ASSERT_FALSE(record["actions"].empty());
  EXPECT_EQ(record["actions"].back()["state"], "running");
  EXPECT_EQ(record["actions"].back()["action"].get<std::string>().substr(0, 2), "0B");
}

TEST_F(FaultTest, RankThatExitsMidStepEndsTheJob) {
  const int code = Train("1:2:B:exit", "--set train.steps=4");
  EXPECT_NE(code, 0);
  EXPECT_NE(code, 124);
  EXPECT_LT(seconds_, 30);
  EXPECT_NE(Read("log.txt").find("injected fault (BATON_FAULT): exiting at step 2, B"), std::string::npos);
}

TEST_F(FaultTest, RankKilledMidStepEndsTheJob) {
  const int code = Train("0:3:F:kill", "--set train.steps=6");
  EXPECT_NE(code, 0);
  EXPECT_NE(code, 124);
  EXPECT_LT(seconds_, 30);
}

TEST_F(FaultTest, RankKilledWhileCheckpointingLeavesThePreviousCheckpointToResume) {
  const std::string ckpt =
      "--set checkpoint.dir=ck --set checkpoint.every_steps=2 --set checkpoint.keep=3 --set data.shuffle=true"
      " --set data.samples=128 ";
  ASSERT_EQ(Train("", ckpt + "--set train.steps=6 --set log.weights=whole.safetensors --set checkpoint.dir=ck0"), 0)
      << Read("log.txt");
  // Rank 1 dies after writing its step-4 shard, before the manifest exists.
  EXPECT_NE(Train("1:4:checkpoint:kill", ckpt + "--set train.steps=6"), 0);
  EXPECT_TRUE(fs::exists(dir_ / "ck/step-00000002/manifest.json"));
  EXPECT_FALSE(fs::exists(dir_ / "ck/step-00000004/manifest.json"));
  ASSERT_EQ(Train("", ckpt + "--set train.steps=6 --set log.weights=resumed.safetensors --resume"), 0)
      << Read("log.txt");
  EXPECT_NE(Read("log.txt").find("resumed after step 2"), std::string::npos) << Read("log.txt");
  EXPECT_EQ(Read("resumed.safetensors"), Read("whole.safetensors"));
}

// Two replicas of a 2-rank pipeline (world rank = pipeline rank x 2 +
// replica): world rank 2, the first replica's pipeline rank 1, dies after
// writing its step-4 shard; the step-2 checkpoint stays and resumes.
TEST_F(FaultTest, DataParallelWriterKilledWhileCheckpointingLeavesThePreviousCheckpoint) {
  const std::string dp =
      "--set data_parallel.size=2 --set data_parallel.zero=1 --set checkpoint.dir=ck --set checkpoint.every_steps=2"
      " --set checkpoint.keep=3 --set data.shuffle=true --set data.samples=128 ";
  ASSERT_EQ(Train("", dp + "--set train.steps=6 --set log.weights=whole.safetensors --set checkpoint.dir=ck0", 4), 0)
      << Read("log.txt");
  EXPECT_NE(Train("2:4:checkpoint:kill", dp + "--set train.steps=6", 4), 0);
  EXPECT_TRUE(fs::exists(dir_ / "ck/step-00000002/manifest.json"));
  EXPECT_FALSE(fs::exists(dir_ / "ck/step-00000004/manifest.json"));
  ASSERT_EQ(Train("", dp + "--set train.steps=6 --set log.weights=resumed.safetensors --resume", 4), 0)
      << Read("log.txt");
  EXPECT_NE(Read("log.txt").find("resumed after step 2"), std::string::npos) << Read("log.txt");
  EXPECT_EQ(Read("resumed.safetensors"), Read("whole.safetensors"));
}

// A replica that stalls in its backward (two replicas of a one-rank
// pipeline): the other waits for it in the gradient sum, hits the
// deadline, says what it waited for and with whom, leaves its flight
// record, and the job ends non-zero.
TEST_F(FaultTest, StalledReplicaEndsTheJobAtTheGradientSumsDeadline) {
  EXPECT_NE(Train("1:2:B:stall",
                  "--set pipeline.ranks=1 --set data_parallel.size=2 --set pipeline.wait_timeout_s=3 "
                  "--set train.steps=4"),
            0);
  EXPECT_LT(seconds_, 3 + 12) << Read("log.txt");
  const std::string log = Read("log.txt");
  EXPECT_NE(log.find("rank 0: timed out waiting for the gradient sum of stage 0 with its replicas (ranks 0, 1)"),
            std::string::npos)
      << log;
  EXPECT_TRUE(fs::exists(dir_ / "out/flight-rank-0.json")) << log;
}

// ZeRO 3 over two replicas of a one-rank pipeline: a replica that stalls
// before its step's gather leaves the other waiting in that all-gather,
// which ends the job at the deadline naming the stage and the replicas.
TEST_F(FaultTest, StalledGatherEndsTheJobAtTheDeadlineNamingTheStage) {
  EXPECT_NE(Train("1:2:UNSHARD:stall",
                  "--set pipeline.ranks=1 --set data_parallel.size=2 --set data_parallel.zero=3 "
                  "--set pipeline.wait_timeout_s=3 --set train.steps=4"),
            0);
  EXPECT_LT(seconds_, 3 + 12) << Read("log.txt");
  const std::string log = Read("log.txt");
  EXPECT_NE(log.find("rank 0: timed out waiting for UNSHARD's all-gather of stage 0 with its replicas (ranks 0, 1)"),
            std::string::npos)
      << log;
  EXPECT_TRUE(fs::exists(dir_ / "out/flight-rank-0.json")) << log;
}

TEST_F(FaultTest, MalformedFaultSettingIsAnError) {
  EXPECT_EQ(Train("1:2:X:stall", "--set train.steps=2"), 2);
  EXPECT_NE(Read("log.txt").find("BATON_FAULT=\"1:2:X:stall\": unknown action 'X'"), std::string::npos)
      << Read("log.txt");
  // A slow rank's form: its mistakes are tested in-process (executor/fault_test); one here.
  EXPECT_EQ(Train("1:2:slow=2:until=9", "--set train.steps=4"), 2);
  EXPECT_NE(Read("log.txt").find("until=9 is past the run's last step 4"), std::string::npos) << Read("log.txt");
}

// A slow rank computes the same floats, only later: its run's weights are
// the healthy run's, byte for byte (how much slower it ran is the adaptive
// plans' measure, tested there).
TEST_F(FaultTest, ASlowRankTrainsTheSameWeights) {
  ASSERT_EQ(Train("", "--set train.steps=6 --set log.weights=healthy.safetensors"), 0) << Read("log.txt");
  ASSERT_EQ(Train("1:2:slow=3:until=5", "--set train.steps=6 --set log.weights=slow.safetensors"), 0)
      << Read("log.txt");
  EXPECT_EQ(Read("slow.safetensors"), Read("healthy.safetensors"));
  EXPECT_FALSE(Read("slow.safetensors").empty());
}

}  // namespace
