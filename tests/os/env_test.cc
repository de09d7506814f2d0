// The OS room's Env: the process's own reads the real environment and
// machine; the fake answers with what a test set, and nothing else.
#include "baton/env.h"

#include <gtest/gtest.h>

#include <cstdlib>

namespace baton {
namespace {

TEST(Env, TheProcessEnvReadsTheEnvironmentAndTheMachine) {
  ::setenv("BATON_ENV_TEST_VARIABLE", "x=1", 1);
  const Env& env = Env::Default();
  EXPECT_EQ(env.Variable("BATON_ENV_TEST_VARIABLE"), "x=1");
  ::unsetenv("BATON_ENV_TEST_VARIABLE");
  EXPECT_FALSE(env.Variable("BATON_ENV_TEST_VARIABLE").has_value());
  EXPECT_FALSE(env.HostName().empty());
  EXPECT_NE(env.AllowedCores(), "?");
  EXPECT_NE(env.ReadSystemFile("/proc/meminfo").find("MemTotal:"), std::string::npos);
  EXPECT_EQ(env.ReadSystemFile("/nonexistent/baton-env-test"), "");
}

TEST(Env, TheFakeAnswersWithWhatTheTestSetAndNothingElse) {
  FakeMachine m;
  m.variables = {{"OMPI_COMM_WORLD_SIZE", "4"}, {"EMPTY", ""}};
  m.files = {{"/proc/meminfo", "MemAvailable: 1024 kB\n"}};
  m.host = "n7";
  m.cores = "0-3";
  const std::unique_ptr<Env> env = MakeFakeEnv(m);
  EXPECT_EQ(env->Variable("OMPI_COMM_WORLD_SIZE"), "4");
  EXPECT_EQ(env->Variable("EMPTY"), "");  // set, and empty: not unset
  EXPECT_FALSE(env->Variable("PATH").has_value());
  EXPECT_EQ(env->ReadSystemFile("/proc/meminfo"), "MemAvailable: 1024 kB\n");
  EXPECT_EQ(env->ReadSystemFile("/proc/self/cgroup"), "");
  EXPECT_EQ(env->HostName(), "n7");
  EXPECT_EQ(env->AllowedCores(), "0-3");
}

}  // namespace
}  // namespace baton
