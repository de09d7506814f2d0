// How a job is launched, under the real launcher: `baton doctor` reports
// every rank's host, cores and node rank (MPI_Comm_split_type) against
// what mpirun says, as text and JSON; and a Slurm step without PMIx (the
// environment srun gives its tasks with --mpi=none or pmi2) is refused
// before MPI starts, naming the fix, with exit 2.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "support/job.h"

namespace {

namespace fs = std::filesystem;

class Launch : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) / ("baton_launch_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  baton_test::JobResult Run(const std::string& command) {
    return baton_test::RunJob("cd '" + dir_.string() + "' && " + command + " > log.txt 2>&1", dir_ / "log.txt");
  }
  fs::path dir_;
};

TEST_F(Launch, DoctorSaysWhatEveryRankSees) {
  const auto r = Run("timeout 60 '" BATON_MPIEXEC "' -np 4 '" BATON_BINARY "' doctor --json doctor.json");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("launcher   mpirun"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("4 ranks on 1 host(s)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("lost rank  mpirun ends every rank"), std::string::npos) << r.output;
  const nlohmann::json j = nlohmann::json::parse(baton_test::ReadAll(dir_ / "doctor.json"));
  EXPECT_EQ(j["world_size"], 4);
  EXPECT_EQ(j["launcher_tasks"], 4);
  EXPECT_EQ(j["hosts"], 1);
  EXPECT_NE(j["mpi"].get<std::string>().find("Open MPI"), std::string::npos);
  ASSERT_EQ(j["ranks"].size(), 4u);
  std::set<int> node_ranks;
  std::set<long long> pids;
  for (std::size_t k = 0; k < 4; ++k) {
    const nlohmann::json& rank = j["ranks"][k];
    EXPECT_EQ(rank["rank"], static_cast<int>(k));
    EXPECT_EQ(rank["node_size"], 4);  // one host: every rank shares the node
    node_ranks.insert(rank["node_rank"].get<int>());
    pids.insert(rank["pid"].get<long long>());
    EXPECT_FALSE(rank["cores"].get<std::string>().empty());
  }
  EXPECT_EQ(node_ranks, (std::set<int>{0, 1, 2, 3}));
  EXPECT_EQ(pids.size(), 4u);
  // The CUDA backend either loads or says why not.
  EXPECT_TRUE(j["cuda"]["loads"].get<bool>() || !j["cuda"]["why"].get<std::string>().empty());
}

TEST_F(Launch, ASlurmStepWithoutPmixIsRefusedNamingTheFix) {
  for (const std::string pmi : {"", "PMI_RANK=0 "}) {
    const auto r = Run("env SLURM_JOB_ID=7 SLURM_STEP_ID=0 SLURM_STEP_NUM_TASKS=2 SLURM_PROCID=0 " + pmi +
                       "timeout 20 '" BATON_BINARY "' train '" BATON_SOURCE_DIR "/tests/mpi/tiny.yaml'");
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find(pmi.empty() ? "srun started 2 tasks without PMI" : "srun started 2 tasks with --mpi=pmi2"),
              std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("Launch with `srun --mpi=pmix ...`, or set MpiDefault=pmix in slurm.conf"),
              std::string::npos)
        << r.output;
    EXPECT_EQ(baton_test::Count(r.output, "baton: error:"), 1u) << r.output;
  }
  // Task 1 of the same step says nothing: the first task speaks for the step.
  const auto quiet = Run("env SLURM_JOB_ID=7 SLURM_STEP_ID=0 SLURM_STEP_NUM_TASKS=2 SLURM_PROCID=1 timeout 20 '"
                         BATON_BINARY "' doctor");
  EXPECT_EQ(quiet.code, 2);
  EXPECT_EQ(quiet.output, "");
}

}  // namespace
