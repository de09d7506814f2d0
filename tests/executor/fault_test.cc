// BATON_FAULT's forms read and checked in-process: a slow rank's window
// (slow=FACTOR[:until=STEP]) and its mistakes, each one ConfigError.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "baton/error.h"
#include "executor.h"

namespace baton {
namespace {

Fault Read(const std::string& text) {
  ::setenv("BATON_FAULT", text.c_str(), 1);
  Fault f = FaultFromEnvironment();
  ::unsetenv("BATON_FAULT");
  return f;
}

std::string Refusal(const std::string& text, std::int64_t first_step = 1, std::int64_t last_step = 4) {
  ::setenv("BATON_FAULT", text.c_str(), 1);
  std::string what;
  try {
    CheckFault(FaultFromEnvironment(), 2, 0, RankPlan{}, first_step, last_step, 0);
  } catch (const ConfigError& e) {
    what = e.what();
  }
  ::unsetenv("BATON_FAULT");
  return what;
}

TEST(SlowFault, AWindowOfStepsOnOneRank) {
  const Fault f = Read("1:3:slow=2.5:until=7");
  EXPECT_EQ(f.mode, Fault::kNone);
  EXPECT_EQ(f.slow.rank, 1);
  EXPECT_DOUBLE_EQ(f.slow.factor, 2.5);
  EXPECT_FALSE(f.Slows(1, 2));
  EXPECT_TRUE(f.Slows(1, 3));
  EXPECT_TRUE(f.Slows(1, 6));
  EXPECT_FALSE(f.Slows(1, 7));
  EXPECT_FALSE(f.Slows(0, 4));
  EXPECT_TRUE(Read("0:1:slow=2").Slows(0, 1000000));  // to the end
  // A resumed run inside the window is still slow; after it, not.
  EXPECT_TRUE(FaultForRun(f, 1, 5).Slows(1, 6));
  EXPECT_FALSE(FaultForRun(f, 1, 7).any());
  // With a fault of an action beside it, comma-joined.
  const Fault both = Read("1:3:slow=2,0:4:replan:stall");
  EXPECT_TRUE(both.Slows(1, 3));
  EXPECT_EQ(both.mode, Fault::kStall);
  EXPECT_EQ(both.rank, 0);
  EXPECT_EQ(both.action, "replan");
  EXPECT_EQ(Refusal("1:3:slow=2:until=7", 5, 10), "");
}

TEST(SlowFault, EachMistakeIsOneErrorSayingTheRule) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"1:2:slow=0.5", "slow=FACTOR takes a number from 1 to 100 (the times a compute action takes), got '0.5'"},
      {"1:2:slow=fast", "got 'fast'"},
      {"1:2:slow=101", "got '101'"},
      {"1:2:slow=2:until=2", "until=2 must come after the slowdown's first step 2"},
      {"1:2:slow=2:till=5", "the field after slow=FACTOR is until=STEP"},
      {"1x:2:slow=2", "RANK must be a whole number, got '1x'"},
      {"1:2", "four fields needed"},
      {"1:2:slow=2,0:3:slow=3", "one slow rank at most"},
      {"1:2:F:stall,0:3:B:exit", "one fault of an action at most"},
      {"1:2:F:error", "mode error is for the action replan (a failed move the run survives)"},
  };
  for (const auto& [text, says] : cases) {
    ::setenv("BATON_FAULT", text.c_str(), 1);
    try {
      FaultFromEnvironment();
      ADD_FAILURE() << text << ": accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << text << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find("RANK:STEP:slow=FACTOR[:until=STEP], the two joined by a comma"),
                std::string::npos)
          << e.what();
    }
    ::unsetenv("BATON_FAULT");
  }
  EXPECT_NE(Refusal("1:9:slow=2").find("step 9 is past the run's last step 4: the fault would never fire"),
            std::string::npos);
  EXPECT_NE(Refusal("1:2:slow=2:until=9").find("until=9 is past the run's last step 4"), std::string::npos);
  EXPECT_NE(Refusal("2:2:slow=2").find("rank 2 is not in this job (2 ranks: 0..1)"), std::string::npos);
}

}  // namespace
}  // namespace baton
