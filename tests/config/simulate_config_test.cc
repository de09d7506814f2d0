// Tests for LoadSimulateConfig: exact values from a full file, defaults for
// absent keys, and for every kind of bad input a ConfigError that names
// file:line:column (1-based), the key path and the rule.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "baton/config.h"
#include "baton/error.h"
#include "support/test_folder.h"

namespace baton {
namespace {

namespace fs = std::filesystem;

// A fresh folder per test, so tests run in parallel (ctest -j) never share a file.
class SimulateConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Two runs of the suite at once (a build's and a sanitizer build's)
    // must not share a folder: the process id is in its name.
    dir_ = baton_test::FreshTestFolder("baton_simulate_config");
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes `text` to dir_/name and returns the path.
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream out(path, std::ios::binary);
    out << text;
    return path;
  }

  // Loads `text` from a file called `name`; returns the ConfigError's message,
  // or fails the test if nothing (or something else) was thrown.
  std::string ErrorOf(const std::string& name, const std::string& text) {
    const std::string path = Write(name, text);
    try {
      LoadSimulateConfig(path);
    } catch (const ConfigError& e) {
      return e.what();
    }
    ADD_FAILURE() << "no ConfigError for:\n" << text;
    return "";
  }

  fs::path dir_;
};

TEST_F(SimulateConfigTest, FullFileGivesExactlyItsValues) {
  const std::string path = Write("full.yaml", R"(# every key set
schedule: zb_h1
ranks: 6
microbatches: 12
chunks: 1
costs: {forward: 1.5, backward_input: 2.25, backward_weight: 0.75, forward_backward: 3.5}
stage_costs:
  - {forward: 1, backward_input: 2, backward_weight: 3, forward_backward: 4.5}
  - forward: 4
    backward_input: 5
    backward_weight: 6
comm: {latency: 0.125, bandwidth: 1000, message_bytes: 4096}
memory: {weight_ratio: 0.25, microbatch_bytes: 1048576}
cores: 2.5
compare: [gpipe, 1f1b, zbv]
output:
  json: out/{schedule}.json
  trace: out/trace.json
  svg: out/{schedule}.svg
)");
  const SimulateConfig c = LoadSimulateConfig(path);
  EXPECT_EQ(c.schedule, "zb_h1");
  EXPECT_EQ(c.ranks, 6);
  EXPECT_EQ(c.microbatches, 12);
  EXPECT_EQ(c.chunks, 1);
  EXPECT_EQ(c.options.compute.uniform.forward, 1.5);
  EXPECT_EQ(c.options.compute.uniform.backward_input, 2.25);
  EXPECT_EQ(c.options.compute.uniform.backward_weight, 0.75);
  ASSERT_EQ(c.options.compute.stages.size(), 2u);
  EXPECT_EQ(c.options.compute.stages[0].forward, 1.0);
  EXPECT_EQ(c.options.compute.stages[0].backward_input, 2.0);
  EXPECT_EQ(c.options.compute.stages[0].backward_weight, 3.0);
  EXPECT_EQ(c.options.compute.uniform.forward_backward, 3.5);
  EXPECT_EQ(c.options.compute.stages[0].forward_backward, 4.5);
  EXPECT_FALSE(c.options.compute.stages[1].forward_backward.has_value());  // F + B
  EXPECT_EQ(c.options.compute.stages[1].forward, 4.0);
  EXPECT_EQ(c.options.compute.stages[1].backward_input, 5.0);
  EXPECT_EQ(c.options.compute.stages[1].backward_weight, 6.0);
  EXPECT_EQ(c.options.messages.latency, 0.125);
  EXPECT_EQ(c.options.messages.bandwidth, 1000.0);
  EXPECT_EQ(c.options.messages.bytes, 4096.0);
  EXPECT_EQ(c.options.memory.weight_ratio, 0.25);
  EXPECT_EQ(c.options.memory.microbatch_bytes, 1048576.0);
  EXPECT_EQ(c.cores, 2.5);
  EXPECT_EQ(c.compare, (std::vector<std::string>{"gpipe", "1f1b", "zbv"}));
  EXPECT_EQ(c.json_path, "out/{schedule}.json");
  EXPECT_EQ(c.trace_path, "out/trace.json");
  EXPECT_EQ(c.svg_path, "out/{schedule}.svg");
}

TEST_F(SimulateConfigTest, AbsentKeysKeepTheDefaults) {
  const SimulateConfig c = LoadSimulateConfig(Write("ranks_only.yaml", "ranks: 2\n"));
  const SimulateConfig d;
  EXPECT_EQ(c.ranks, 2);
  EXPECT_EQ(c.schedule, "1f1b");
  EXPECT_EQ(c.microbatches, 8);
  EXPECT_EQ(c.chunks, 0);
  EXPECT_EQ(c.options.compute.uniform.forward, 1.0);
  EXPECT_EQ(c.options.compute.uniform.backward_input, 1.0);
  EXPECT_EQ(c.options.compute.uniform.backward_weight, 1.0);
  EXPECT_TRUE(c.options.compute.stages.empty());
  EXPECT_EQ(c.options.messages.latency, 0.0);
  EXPECT_EQ(c.options.messages.bandwidth, 0.0);
  EXPECT_EQ(c.options.messages.bytes, 0.0);
  EXPECT_EQ(c.options.memory.weight_ratio, 0.5);
  EXPECT_EQ(c.options.memory.microbatch_bytes, 0.0);
  EXPECT_TRUE(c.compare.empty());
  EXPECT_EQ(c.json_path, "");
  EXPECT_EQ(c.trace_path, "");
  EXPECT_EQ(c.svg_path, "");
  EXPECT_EQ(c.microbatches, d.microbatches);
}

TEST_F(SimulateConfigTest, PartialNestedMappingKeepsOtherDefaults) {
  const SimulateConfig c = LoadSimulateConfig(Write("partial.yaml", "costs:\n  forward: 2\nmemory: {}\n"));
  EXPECT_EQ(c.options.compute.uniform.forward, 2.0);
  EXPECT_EQ(c.options.compute.uniform.backward_input, 1.0);
  EXPECT_EQ(c.options.compute.uniform.backward_weight, 1.0);
  EXPECT_EQ(c.options.memory.weight_ratio, 0.5);
}

TEST_F(SimulateConfigTest, EmptyFileGivesAllDefaults) {
  const SimulateConfig c = LoadSimulateConfig(Write("empty.yaml", "# nothing set\n"));
  EXPECT_EQ(c.schedule, "1f1b");
  EXPECT_EQ(c.ranks, 4);
  EXPECT_EQ(c.microbatches, 8);
}

TEST_F(SimulateConfigTest, UnknownKeySuggestsTheNearestKnownOne) {
  const std::string msg = ErrorOf("typo.yaml", "ranks: 4\nmicrobatchs: 8\n");
  EXPECT_NE(msg.find("typo.yaml:2:1:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unknown key 'microbatchs'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("did you mean 'microbatches'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("allowed here:"), std::string::npos) << msg;
}

TEST_F(SimulateConfigTest, UnknownNestedKeyNamesTheKeyPath) {
  const std::string msg = ErrorOf("nested.yaml", "ranks: 4\ncosts:\n  forward: 1\n  fwd: 2\n");
  EXPECT_NE(msg.find("nested.yaml:4:3:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unknown key 'costs.fwd'"), std::string::npos) << msg;
  // What is allowed in that mapping is listed.
  EXPECT_NE(msg.find("backward_input, backward_weight, forward"), std::string::npos) << msg;
}

TEST_F(SimulateConfigTest, UnknownKeyInAListItemNamesItsIndex) {
  const std::string msg =
      ErrorOf("stages.yaml", "stage_costs:\n  - {forward: 1}\n  - {forward: 1, backward_wieght: 2}\n");
  EXPECT_NE(msg.find("stages.yaml:3:18:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unknown key 'stage_costs[1].backward_wieght'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("did you mean 'backward_weight'"), std::string::npos) << msg;
}

TEST_F(SimulateConfigTest, DuplicateKeyIsAnError) {
  const std::string msg = ErrorOf("dup.yaml", "ranks: 2\nmicrobatches: 4\nranks: 3\n");
  EXPECT_NE(msg.find("dup.yaml:3:1:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("duplicate key 'ranks'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("each key may appear once"), std::string::npos) << msg;
}

TEST_F(SimulateConfigTest, DuplicateNestedKeyNamesTheKeyPath) {
  const std::string msg = ErrorOf("dup_nested.yaml", "comm:\n  latency: 1\n  latency: 2\n");
  EXPECT_NE(msg.find("dup_nested.yaml:3:3:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("duplicate key 'comm.latency'"), std::string::npos) << msg;
}

TEST_F(SimulateConfigTest, WordWhereAnIntegerIsExpected) {
  const std::string msg = ErrorOf("word.yaml", "schedule: gpipe\nranks: four\n");
  EXPECT_NE(msg.find("word.yaml:2:8: ranks: expected an integer, got 'four'"), std::string::npos) << msg;
}

TEST_F(SimulateConfigTest, FractionWhereAnIntegerIsExpected) {
  const std::string msg = ErrorOf("fraction.yaml", "ranks: 1.5\n");
  EXPECT_NE(msg.find("fraction.yaml:1:8: ranks: expected an integer, got '1.5'"), std::string::npos) << msg;
}

TEST_F(SimulateConfigTest, ScalarWhereAListIsExpected) {
  const std::string msg = ErrorOf("compare.yaml", "compare: 3\n");
  EXPECT_NE(msg.find("compare.yaml:1:10: compare: expected a list of strings, got a scalar"), std::string::npos)
      << msg;
}

TEST_F(SimulateConfigTest, OverlapCostIsOptionalAndChecked) {
  const std::string msg = ErrorOf("fb.yaml", "costs:\n  forward_backward: -1\n");
  EXPECT_NE(msg.find("fb.yaml:2:21: costs.forward_backward"), std::string::npos) << msg;
  EXPECT_NE(msg.find("-1"), std::string::npos) << msg;
}

TEST_F(SimulateConfigTest, WordWhereANumberIsExpected) {
  const std::string msg = ErrorOf("cost_word.yaml", "costs:\n  forward: fast\n");
  EXPECT_NE(msg.find("cost_word.yaml:2:12: costs.forward: expected a finite number, got 'fast'"),
            std::string::npos)
      << msg;
}

TEST_F(SimulateConfigTest, ScalarWhereAMappingIsExpected) {
  const std::string msg = ErrorOf("costs_scalar.yaml", "costs: 3\n");
  EXPECT_NE(msg.find("costs_scalar.yaml:1:8:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("costs must be a mapping"), std::string::npos) << msg;
}

TEST_F(SimulateConfigTest, ZeroRanksIsOutOfRange) {
  const std::string msg = ErrorOf("zero.yaml", "ranks: 0\n");
  EXPECT_NE(msg.find("zero.yaml:1:8: ranks: must be at least 1, got 0"), std::string::npos) << msg;
}

TEST_F(SimulateConfigTest, IntegerBeyondIntIsOutOfRange) {
  const std::string msg = ErrorOf("huge.yaml", "microbatches: 3000000000\n");
  EXPECT_NE(msg.find("huge.yaml:1:15: microbatches: 3000000000 is out of range"), std::string::npos) << msg;
}

TEST_F(SimulateConfigTest, WeightRatioAboveOneIsOutOfRange) {
  const std::string msg = ErrorOf("ratio.yaml", "memory:\n  weight_ratio: 1.5\n");
  EXPECT_NE(msg.find("ratio.yaml:2:17: memory.weight_ratio: must be in [0, 1], got 1.5"), std::string::npos)
      << msg;
}

TEST_F(SimulateConfigTest, NegativeLatencyIsOutOfRange) {
  const std::string msg = ErrorOf("latency.yaml", "ranks: 2\ncomm: {latency: -0.5}\n");
  EXPECT_NE(msg.find("latency.yaml:2:17: comm.latency: must be at least 0, got -0.5"), std::string::npos) << msg;
}

TEST_F(SimulateConfigTest, InvalidYamlSyntaxNamesTheLine) {
  const std::string msg = ErrorOf("syntax.yaml", "ranks: 2\nmicrobatches: [4, 8\nchunks: 1\n");
  EXPECT_NE(msg.find("syntax.yaml:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not valid YAML"), std::string::npos) << msg;
}

TEST_F(SimulateConfigTest, BadIndentationIsInvalidYaml) {
  const std::string msg = ErrorOf("indent.yaml", "ranks: 2\n  microbatches: 3\n");
  EXPECT_NE(msg.find("indent.yaml:2:15: not valid YAML"), std::string::npos) << msg;
}

TEST_F(SimulateConfigTest, TopLevelListIsNotAMapping) {
  const std::string msg = ErrorOf("list.yaml", "- ranks: 2\n");
  EXPECT_NE(msg.find("list.yaml:1:1:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("must be a mapping"), std::string::npos) << msg;
}

TEST_F(SimulateConfigTest, MissingFileIsAConfigError) {
  const std::string path = (dir_ / "absent.yaml").string();
  try {
    LoadSimulateConfig(path);
    FAIL() << "no ConfigError for a missing file";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), path + ": no such config file");
  }
}

}  // namespace
}  // namespace baton
