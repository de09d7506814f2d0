// BATON_FAULT's forms read and checked in-process: a slow rank's window
// (slow=FACTOR[:until=STEP]), a slow wire's (SRC>DST:STEP:delay=SECONDS
// [:until=STEP]) and their mistakes, each one ConfigError.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "baton/error.h"
#include "executor.h"
#include "fault.h"

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

// BATON_FAULT=`text` is refused when read: one ConfigError that says
// `says` and names the forms (`forms`, a part of that list).
void ExpectMisread(const std::string& text, const std::string& says, const std::string& forms) {
  ::setenv("BATON_FAULT", text.c_str(), 1);
  try {
    FaultFromEnvironment();
    ADD_FAILURE() << text << ": accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << text << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find(forms), std::string::npos) << e.what();
  }
  ::unsetenv("BATON_FAULT");
}

// Faults of actions on several ranks, one a rank: each rank injects its
// own, and a rank the job does not have is refused on every rank.
TEST(ActionFault, OneARankEachRankItsOwn) {
  const Fault f = Read("2:30:F:kill,0:60:F:wait");
  const Fault two = f.Own(2), zero = f.Own(0), one = f.Own(1);
  EXPECT_EQ(two.mode, Fault::kKill);
  EXPECT_EQ(two.rank, 2);
  EXPECT_EQ(two.step, 30);
  EXPECT_EQ(two.action, "F");
  EXPECT_EQ(zero.mode, Fault::kWait);
  EXPECT_EQ(zero.rank, 0);
  EXPECT_EQ(zero.step, 60);
  EXPECT_EQ(one.mode, Fault::kNone);
  EXPECT_NE(Refusal("0:2:F:kill,5:3:F:kill").find("rank 5 is not in this job (2 ranks: 0..1)"), std::string::npos);
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
      {"1:2:slow=2:until=2", "until=2 must come after the window's first step 2"},
      {"1:2:slow=2:till=5", "the field after slow=FACTOR is until=STEP"},
      {"1x:2:slow=2", "RANK must be a whole number, got '1x'"},
      {"1:2", "four fields needed"},
      {"1:2:slow=2,0:3:slow=3", "one slow rank at most"},
      {"1:2:F:stall,1:3:B:exit", "one fault of an action a rank at most (rank 1 has two)"},
      {"1:2:F:stall,0:3:B:exit,0:4:F:kill", "one fault of an action a rank at most (rank 0 has two)"},
      {"1:2:F:error", "mode error is for the action replan (a failed move the run survives)"},
      {"0>1:2:delay=0", "delay=SECONDS takes a number above 0, at most 10 (what each message is late by), got '0'"},
      {"0>1:2:delay=11", "got '11'"},
      {"0>1:2:delay=soon", "got 'soon'"},
      {"0>1:2:slow=2", "a link's fault is delay=SECONDS"},
      {"1>1:2:delay=0.01", "a link joins two ranks, not rank 1 to itself"},
      {"0>x:2:delay=0.01", "DST must be a whole number, got 'x'"},
      {"0>1:2:delay=0.01:until=1", "until=1 must come after the window's first step 2"},
      {"0>1:2:delay=0.01:for=3", "the field after delay=SECONDS is until=STEP"},
      {"0>1:2:delay=0.01,1>0:2:delay=0.01", "one slow link at most"},
  };
  for (const auto& [text, says] : cases) {
    ExpectMisread(text, says, "SRC>DST:STEP:delay=SECONDS[:until=STEP]; joined by commas");
  }
  EXPECT_NE(Refusal("1:9:slow=2").find("step 9 is past the run's last step 4: the fault would never fire"),
            std::string::npos);
  EXPECT_NE(Refusal("1:2:slow=2:until=9").find("until=9 is past the run's last step 4"), std::string::npos);
  EXPECT_NE(Refusal("2:2:slow=2").find("rank 2 is not in this job (2 ranks: 0..1)"), std::string::npos);
  EXPECT_NE(Refusal("0>2:2:delay=0.01").find("rank 2 is not in this job (2 ranks: 0..1)"), std::string::npos);
  EXPECT_NE(Refusal("0>1:9:delay=0.01").find("step 9 is past the run's last step 4"), std::string::npos);
}

// A fault in a recovery beside the action's (the loss it follows): read,
// checked, dropped by a run resumed after its step, and refused with any
// mode but stall, exit or kill, or twice.
TEST(RecoveryFault, BesideTheActionsFault) {
  const Fault f = Read("3:25:B:kill,0:25:regroup:kill");
  EXPECT_EQ(f.mode, Fault::kKill);
  EXPECT_EQ(f.rank, 3);
  EXPECT_EQ(f.action, "B");
  EXPECT_EQ(f.in_recovery.mode, Fault::kKill);
  EXPECT_EQ(f.in_recovery.rank, 0);
  EXPECT_EQ(f.in_recovery.step, 25);
  EXPECT_EQ(f.in_recovery.point, "regroup");
  EXPECT_EQ(Read("1:2:recovery:stall").in_recovery.point, "recovery");
  EXPECT_TRUE(Read("1:2:recovery:exit").any());
  // A run resumed after its step does not repeat it; one resumed before does.
  EXPECT_EQ(FaultForRun(Read("1:2:recovery:exit"), 0, 3).in_recovery.mode, Fault::kNone);
  EXPECT_EQ(FaultForRun(Read("1:2:recovery:exit"), 0, 2).in_recovery.mode, Fault::kExit);
  EXPECT_EQ(Refusal("1:3:regroup:kill"), "");
  EXPECT_NE(Refusal("2:3:regroup:kill").find("rank 2 is not in this job"), std::string::npos);
  EXPECT_NE(Refusal("1:9:regroup:kill").find("step 9 is not in this run (steps 1..4)"), std::string::npos);
  for (const auto& [text, says] : std::vector<std::pair<std::string, std::string>>{
           {"1:2:regroup:term",
            "a fault in a recovery (regroup) takes the mode stall, exit, kill or pause=SECONDS, not 'term'"},
           {"1:2:recovery:wait", "not 'wait'"},
           {"1:2:recovery:kill,0:2:regroup:kill", "one fault in a recovery at most"}}) {
    ExpectMisread(text, says, "RANK:STEP:regroup:MODE");
  }
}

// pause=SECONDS stops the process whole for that long, at an action or in
// a recovery; SECONDS above 0 and at most kMaxPauseSeconds.
TEST(PauseFault, AtAnActionOrInARecovery) {
  const Fault f = Read("1:5:W:pause=2.5,2:5:recovery:pause=3");
  EXPECT_EQ(f.mode, Fault::kPause);
  EXPECT_DOUBLE_EQ(f.pause_s, 2.5);
  EXPECT_EQ(f.in_recovery.mode, Fault::kPause);
  EXPECT_DOUBLE_EQ(f.in_recovery.pause_s, 3.0);
  EXPECT_DOUBLE_EQ(Read("1:5:F:kill,0:5:B:pause=4").Own(0).pause_s, 4.0);
  for (const auto& [text, says] : std::vector<std::pair<std::string, std::string>>{
           {"1:5:F:pause=0", "pause=SECONDS takes a number above 0, at most 600"},
           {"1:5:F:pause=601", "got '601'"},
           {"1:5:F:pause=x", "got 'x'"},
           {"1:5:recovery:pause=-1", "got '-1'"}}) {
    ExpectMisread(text, says, "pause=SECONDS");
  }
}

// A rank is a whole number from 0 to the largest int: a negative one or
// one past an int is refused, never cast to another rank.
TEST(ActionFault, ARankOutsideAnIntIsRefused) {
  for (const auto& [text, says] : std::vector<std::pair<std::string, std::string>>{
           {"-1:5:F:kill", "RANK is a rank, from 0 to 2147483647, got -1"},
           {"4294967297:5:F:kill", "RANK is a rank, from 0 to 2147483647, got 4294967297"},
           {"4294967296:5:slow=2", "got 4294967296"},
           {"4294967296>1:5:delay=0.1", "SRC is a rank, from 0 to 2147483647, got 4294967296"},
           {"0>-1:5:delay=0.1", "DST is a rank"}}) {
    ExpectMisread(text, says, "RANK:STEP:ACTION:MODE");
  }
}

TEST(SlowFault, AWireLateFromOneRankToAnother) {
  const Fault f = Read("0>1:3:delay=0.005:until=7,1:2:slow=2");
  EXPECT_EQ(f.link.from, 0);
  EXPECT_EQ(f.link.to, 1);
  EXPECT_DOUBLE_EQ(f.Delay(0, 1, 3), 0.005);
  EXPECT_DOUBLE_EQ(f.Delay(0, 1, 6), 0.005);
  EXPECT_DOUBLE_EQ(f.Delay(0, 1, 2), 0.0);
  EXPECT_DOUBLE_EQ(f.Delay(0, 1, 7), 0.0);
  EXPECT_DOUBLE_EQ(f.Delay(1, 0, 4), 0.0);  // one way only
  EXPECT_TRUE(f.Slows(1, 2));
  EXPECT_DOUBLE_EQ(Read("1>0:1:delay=2").Delay(1, 0, 1000000), 2.0);  // to the end
  EXPECT_DOUBLE_EQ(FaultForRun(f, 0, 5).Delay(0, 1, 5), 0.005);  // resumed inside the window
  EXPECT_EQ(FaultForRun(Read("0>1:3:delay=0.005:until=7"), 0, 7).link.from, -1);  // after it
  EXPECT_EQ(Refusal("0>1:3:delay=0.005:until=5"), "");
}

}  // namespace
}  // namespace baton
