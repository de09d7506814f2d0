// How a process was launched, from the launcher's environment alone
// (DetectLaunch, LaunchProblem), on a fake environment: mpirun, srun with
// and without PMIx, inside an allocation or not, and a single process.
#include <gtest/gtest.h>

#include "baton/comm.h"
#include "baton/env.h"

namespace baton {
namespace {

Launch Detect(std::map<std::string, std::string> variables) {
  FakeMachine m;
  m.variables = std::move(variables);
  return DetectLaunch(*MakeFakeEnv(m));
}

TEST(DetectLaunch, ReadsTheLauncherFromItsEnvironment) {
  const Launch single = Detect({});
  EXPECT_EQ(single.kind, Launch::kSingle);
  EXPECT_EQ(single.tasks, 1);
  EXPECT_EQ(LaunchProblem(single), "");

  const Launch mpirun = Detect({{"OMPI_COMM_WORLD_SIZE", "4"}, {"SLURM_JOB_ID", "12"}});
  EXPECT_EQ(mpirun.kind, Launch::kMpirun);
  EXPECT_EQ(mpirun.tasks, 4);
  EXPECT_TRUE(mpirun.in_allocation);
  EXPECT_EQ(LaunchName(mpirun), "mpirun inside a Slurm allocation");

  const Launch srun = Detect({{"SLURM_STEP_ID", "0"}, {"SLURM_STEP_NUM_TASKS", "8"}, {"PMIX_RANK", "3"}});
  EXPECT_EQ(srun.kind, Launch::kSrun);
  EXPECT_EQ(srun.tasks, 8);
  EXPECT_EQ(LaunchProblem(srun), "");
}

// What a lost rank does under each launcher, as baton doctor says it.
TEST(DetectLaunch, SaysWhatALostRankDoesUnderItsLauncher) {
  const Launch plain = Detect({{"OMPI_COMM_WORLD_SIZE", "4"}});
  EXPECT_FALSE(plain.keeps_survivors);
  EXPECT_NE(LostRankHandling(plain).find("mpirun ends every rank"), std::string::npos) << LostRankHandling(plain);
  const Launch keeps = Detect({{"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_MCA_orte_enable_recovery", "1"}});
  EXPECT_TRUE(keeps.keeps_survivors);
  EXPECT_NE(LostRankHandling(keeps).find("a lost rank is seen within 1 s; with recovery.on_lost_rank: shrink"),
            std::string::npos);
  EXPECT_NE(LostRankHandling(keeps).find("so set BATON_EXIT_FILE for the job's"), std::string::npos);
  const Launch recorded =
      Detect({{"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_MCA_orte_enable_recovery", "1"}, {"BATON_EXIT_FILE", "/x/exit"}});
  EXPECT_TRUE(recorded.exit_record);
  EXPECT_NE(LostRankHandling(recorded).find("and the job's is left in BATON_EXIT_FILE"), std::string::npos);
  const Launch srun = Detect({{"SLURM_STEP_ID", "0"}, {"SLURM_STEP_NUM_TASKS", "8"}, {"PMIX_RANK", "3"}});
  EXPECT_FALSE(srun.keeps_survivors);
  EXPECT_NE(LostRankHandling(srun).find("needs mpirun inside the allocation"), std::string::npos);
  EXPECT_EQ(LostRankHandling(Detect({})), "one process: no rank to lose");
}

TEST(DetectLaunch, SrunWithoutPmixIsNamedWithItsFix) {
  const Launch pmi2 = Detect({{"SLURM_STEP_ID", "0"}, {"SLURM_NTASKS", "2"}, {"PMI_RANK", "1"}});
  EXPECT_EQ(pmi2.kind, Launch::kSrunWithoutPmix);
  EXPECT_EQ(pmi2.plugin, "pmi2");
  EXPECT_NE(LaunchProblem(pmi2).find("srun started 2 tasks with --mpi=pmi2"), std::string::npos) << LaunchProblem(pmi2);
  EXPECT_NE(LaunchProblem(pmi2).find("srun --mpi=pmix"), std::string::npos);
  const Launch none = Detect({{"SLURM_STEP_ID", "0"}, {"SLURM_STEP_NUM_TASKS", "2"}, {"SLURM_MPI_TYPE", "none"}});
  EXPECT_NE(LaunchProblem(none).find("without PMI"), std::string::npos) << LaunchProblem(none);
  // One task: nothing to refuse.
  EXPECT_EQ(LaunchProblem(Detect({{"SLURM_STEP_ID", "0"}, {"SLURM_STEP_NUM_TASKS", "1"}})), "");
}

}  // namespace
}  // namespace baton
