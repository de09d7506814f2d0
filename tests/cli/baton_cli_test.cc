// End-to-end tests of the `baton` command: runs the built binary in a fresh
// working folder and checks exit codes, standard output (JSON parsed), error
// lines and the files written (or, on failure, not written).
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <tuple>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include "baton/schedule.h"
#include "support/test_folder.h"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct RunResult {
  int exit_code = -1;
  std::string out;  // standard output
  std::string err;  // standard error
};

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::size_t CountLines(const std::string& text) { return std::count(text.begin(), text.end(), '\n'); }

// Every entry of `dir`, by file name.
std::set<std::string> Listing(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.insert(entry.path().filename().string());
  return names;
}

class BatonCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(BATON_BINARY)) << BATON_BINARY << " is missing: build the baton target";
    // Two runs of the suite at once (a build's and a sanitizer build's)
    // must not share a folder: the process id is in its name.
    dir_ = baton_test::FreshTestFolder("baton_cli");
    fs::create_directories(dir_ / "work");
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  // The folder the command runs in; its output files land here.
  fs::path Work() const { return dir_ / "work"; }

  // Runs `baton ARGS` (ARGS already shell-quoted where needed) in Work(),
  // standard output and error captured into files outside it.
  RunResult Run(const std::string& args) {
    const fs::path out = dir_ / "stdout.txt", err = dir_ / "stderr.txt";
    const std::string command = "cd '" + Work().string() + "' && '" + std::string(BATON_BINARY) + "' " + args +
                                " >'" + out.string() + "' 2>'" + err.string() + "'";
    const int status = std::system(command.c_str());
    RunResult r;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = ReadFile(out);
    r.err = ReadFile(err);
    return r;
  }

  // Writes a file into Work() and returns its name.
  std::string WriteWork(const std::string& name, const std::string& text) {
    std::ofstream(Work() / name, std::ios::binary) << text;
    return name;
  }

  // The run failed the way setup errors must: exit code 2, nothing on
  // standard output, one "baton: error:" line that contains `rule`.
  void ExpectOneLineError(const RunResult& r, const std::string& rule) {
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(r.err.rfind("baton: error: ", 0), 0u) << r.err;
    EXPECT_EQ(CountLines(r.err), 1u) << r.err;
    EXPECT_NE(r.err.find(rule), std::string::npos) << "expected \"" << rule << "\" in:\n" << r.err;
  }

  fs::path dir_;
};

// The summary object of one simulated schedule: exactly these keys, and per
// rank the documented ones (peak_memory_bytes only when M_B bytes are given).
void ExpectSummaryShape(const json& j) {
  ASSERT_TRUE(j.is_object()) << j.dump();
  std::set<std::string> keys;
  for (const auto& [key, value] : j.items()) keys.insert(key);
  EXPECT_EQ(keys, (std::set<std::string>{"schedule", "ranks", "microbatches", "slices", "chunks", "makespan",
                                         "bubble_rate", "span_bubble_rate", "ranks_detail"}));
  ASSERT_TRUE(j["ranks_detail"].is_array());
  ASSERT_EQ(j["ranks_detail"].size(), j["ranks"].get<std::size_t>());
  const std::set<std::string> required = {"rank", "start", "end", "busy", "span", "peak_memory", "peak_in_flight"};
  const std::set<std::string> optional = {"stages", "peak_memory_bytes"};
  for (const json& rank : j["ranks_detail"]) {
    std::set<std::string> rank_keys;
    for (const auto& [key, value] : rank.items()) rank_keys.insert(key);
    for (const std::string& key : required) EXPECT_TRUE(rank_keys.count(key)) << "missing " << key;
    for (const std::string& key : rank_keys) {
      EXPECT_TRUE(required.count(key) || optional.count(key)) << "unexpected key " << key;
    }
    ASSERT_TRUE(rank["peak_in_flight"].is_array());
    // One count per stage of the rank.
    EXPECT_EQ(rank["peak_in_flight"].size(), j["chunks"].get<std::size_t>());
    if (rank.contains("stages")) {
      EXPECT_EQ(rank["stages"].size(), rank["peak_in_flight"].size());
    }
  }
}

TEST_F(BatonCliTest, SimulateJsonFor1F1BMatchesTheClosedForm) {
  const RunResult r = Run("simulate --schedule 1f1b --ranks 4 --microbatches 8 --json -");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  const json j = json::parse(r.out);  // standard output carries the JSON alone
  ExpectSummaryShape(j);
  EXPECT_EQ(j["schedule"], "1f1b");
  EXPECT_EQ(j["ranks"], 4);
  EXPECT_EQ(j["microbatches"], 8);
  EXPECT_EQ(j["chunks"], 1);
  // F = I = W = 1: (m + p - 1) slots of F + B = 3 time units.
  EXPECT_DOUBLE_EQ(j["makespan"].get<double>(), 33.0);
  // (p - 1) / (m + p - 1) = 3 / 11.
  EXPECT_NEAR(j["bubble_rate"].get<double>(), 3.0 / 11.0, 1e-12);
  EXPECT_NEAR(j["span_bubble_rate"].get<double>(), 3.0 / 11.0, 1e-12);
  for (int rank = 0; rank < 4; ++rank) {
    const json& d = j["ranks_detail"][rank];
    EXPECT_EQ(d["rank"], rank);
    EXPECT_DOUBLE_EQ(d["busy"].get<double>(), 24.0);
    EXPECT_DOUBLE_EQ(d["start"].get<double>(), rank);
    EXPECT_DOUBLE_EQ(d["end"].get<double>(), 33.0 - 2 * rank);
    EXPECT_EQ(d["peak_in_flight"], json::array({std::min(4 - rank, 8)}));
    EXPECT_DOUBLE_EQ(d["peak_memory"].get<double>(), 4 - rank);
  }
}

TEST_F(BatonCliTest, PeakInFlightIsCappedByTheMicrobatches) {
  const RunResult r = Run("simulate -s 1f1b -p 4 -m 3 --json -");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  ExpectSummaryShape(j);
  EXPECT_DOUBLE_EQ(j["makespan"].get<double>(), 18.0);
  EXPECT_NEAR(j["bubble_rate"].get<double>(), 3.0 / 6.0, 1e-12);
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(j["ranks_detail"][rank]["peak_in_flight"], json::array({std::min(4 - rank, 3)})) << "rank " << rank;
  }
}

TEST_F(BatonCliTest, MemoryBytesAddPeakMemoryBytes) {
  const RunResult r = Run("simulate -p 2 -m 4 --memory-bytes 1000 --json -");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  ExpectSummaryShape(j);
  EXPECT_DOUBLE_EQ(j["ranks_detail"][0]["peak_memory_bytes"].get<double>(), 2000.0);
  EXPECT_DOUBLE_EQ(j["ranks_detail"][1]["peak_memory_bytes"].get<double>(), 1000.0);
}

TEST_F(BatonCliTest, CoresSharedByTheRanks) {
  // One core for four ranks: the work back to back, 4 x 8 x (F + I + W) = 96.
  const RunResult one = Run("simulate -s 1f1b -p 4 -m 8 --cores 1 --json -");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_DOUBLE_EQ(json::parse(one.out)["makespan"].get<double>(), 96.0);
  // From a file, overridden by the flag; two cores: between 96 / 2 and 33 x 2.
  WriteWork("run.yaml", "schedule: 1f1b\nranks: 4\nmicrobatches: 8\ncores: 1\n");
  const RunResult two = Run("simulate run.yaml --cores 2 --json -");
  ASSERT_EQ(two.exit_code, 0) << two.err;
  const double makespan = json::parse(two.out)["makespan"].get<double>();
  EXPECT_GE(makespan, 48.0);
  EXPECT_LE(makespan, 66.0);
  const RunResult file = Run("simulate run.yaml");
  ASSERT_EQ(file.exit_code, 0) << file.err;
  EXPECT_NE(file.out.find("ranks share 1 cores"), std::string::npos) << file.out;
  EXPECT_NE(file.out.find("makespan 96"), std::string::npos) << file.out;
  const RunResult bad = Run("simulate --cores -1");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--cores must be a number >= 0"), std::string::npos) << bad.err;
}

// Sharded data parallel: --zero 3 places the gathers, frees and
// reduce-scatters. 1F1B on 2 ranks, 2 microbatches, F = 1 and B = 2:
// (m + p - 1)(F + B) = 9 without; rank 0's first gather (1) cannot hide
// (its first forward starts the step) and its last reduce-scatter (0.5)
// follows its last backward: 10.5. Rank 1's gather hides. From a config's
// `sharding` section too; a ZeRO stage out of range is one clear error.
TEST_F(BatonCliTest, ShardingActionsArePlacedAndPriced) {
  const RunResult r = Run("simulate -s 1f1b -p 2 -m 2 --cost 1,1,1 --zero 3 --gather-time 1 "
                          "--reduce-scatter-time 0.5 --json -");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_DOUBLE_EQ(json::parse(r.out)["makespan"].get<double>(), 10.5);
  WriteWork("zero.yaml",
            "schedule: 1f1b\nranks: 2\nmicrobatches: 2\ncosts: {forward: 1, backward_input: 1, backward_weight: 1}\n"
            "sharding: {zero: 3, gather_time: 1, reduce_scatter_time: 0.5}\n");
  const RunResult file = Run("simulate zero.yaml");
  ASSERT_EQ(file.exit_code, 0) << file.err;
  EXPECT_NE(file.out.find("sharding: ZeRO-3, its actions placed"), std::string::npos) << file.out;
  EXPECT_NE(file.out.find("makespan 10.5"), std::string::npos) << file.out;
  // ZeRO-2: the reduce-scatters alone, 0.5 after each rank's last backward.
  const RunResult two = Run("simulate -s 1f1b -p 2 -m 2 --cost 1,1,1 --zero 2 --reduce-scatter-time 0.5 --json -");
  ASSERT_EQ(two.exit_code, 0) << two.err;
  EXPECT_DOUBLE_EQ(json::parse(two.out)["makespan"].get<double>(), 9.5);
  const RunResult bad = Run("simulate --zero 4");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--zero must be 0, 1, 2 or 3, got 4"), std::string::npos) << bad.err;
}

// `baton schedule export --zero 3` writes the actions in PyTorch's text
// form: each stage gathered once (a gather takes 1 and, at unit costs, a
// chunk's F 0.5, so the second chunk's first use at 1 leaves both gathers
// at the list's start), freed after its last use and summed after its
// last backward; the file reads back and checks.
TEST_F(BatonCliTest, ScheduleExportPlacesShardingActionsInPytorchsForm) {
  const RunResult r = Run("schedule export interleaved_1f1b -p 2 -m 4 -v 2 --zero 3 --gather-time 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out,
            "0UNSHARD,2UNSHARD,0F0,0F1,2F0,2F1,0F2,2B0,0F3,2B1,2F2,0B0,2F3,0B1,2B2,2B3,2RESHARD,2REDUCE_GRAD,0B2,0B3,"
            "0RESHARD,0REDUCE_GRAD\n"
            "1UNSHARD,3UNSHARD,1F0,1F1,3F0,3B0,3F1,3B1,1F2,1B0,1F3,1B1,3F2,3B2,3F3,3B3,3RESHARD,3REDUCE_GRAD,1B2,1B3,"
            "1RESHARD,1REDUCE_GRAD\n");
  WriteWork("zero3.csv", r.out);
  const RunResult check = Run("schedule check zero3.csv");
  EXPECT_EQ(check.exit_code, 0) << check.err;
  // Placing them again on a file that has them is refused.
  const RunResult again = Run("schedule show zero3.csv --zero 3");
  EXPECT_EQ(again.exit_code, 2);
  EXPECT_NE(again.err.find("holds sharding actions of its own (0UNSHARD)"), std::string::npos) << again.err;
}

// A schedule file's own sharding actions are checked: a stage used while
// resharded is refused naming the rank and the position.
TEST_F(BatonCliTest, AFilesShardingActionsAreChecked) {
  WriteWork("sharded.csv", "0UNSHARD,0F0,0RESHARD,0B0\n");
  const RunResult r = Run("simulate -s sharded.csv");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("rank 0, position 3 (0B0): 0B0 uses stage 0 while its parameters are a shard"),
            std::string::npos)
      << r.err;
}

// Sliced, the kept keys and values count apart from the slices: on the
// last rank seq1f1b (k = 2) holds, once its first sequence runs backward,
// that sequence's first slice, its keys and values and their gradients,
// and the next sequence's first slice and keys and values:
// 2 x (1 - x) / 2 + 3 x = 1 + 2x M_B. Without the share, the slices'
// (p - r + k - 1) / k.
TEST_F(BatonCliTest, KeyValueShareCountsTheSequencesApartFromTheSlices) {
  const RunResult plain = Run("simulate -s seq1f1b -p 4 -m 8 --seq-slices 2 --json -");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const json p = json::parse(plain.out);
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_DOUBLE_EQ(p["ranks_detail"][rank]["peak_memory"].get<double>(), (4 - rank + 1) / 2.0) << "rank " << rank;
  }
  const RunResult kv = Run("simulate -s seq1f1b -p 4 -m 8 --seq-slices 2 --kv-memory-share 0.2 --json -");
  ASSERT_EQ(kv.exit_code, 0) << kv.err;
  const json k = json::parse(kv.out);
  EXPECT_NEAR(k["ranks_detail"][3]["peak_memory"].get<double>(), 1.0 + 2 * 0.2, 1e-12);
  EXPECT_DOUBLE_EQ(k["makespan"].get<double>(), p["makespan"].get<double>());  // memory only
  WriteWork("run.yaml", "schedule: seq1f1b\nranks: 4\nmicrobatches: 8\nseq_slices: 2\nkv_memory_share: 0.2\n");
  const RunResult file = Run("simulate run.yaml --json -");
  ASSERT_EQ(file.exit_code, 0) << file.err;
  EXPECT_EQ(json::parse(file.out)["ranks_detail"], k["ranks_detail"]);
  const RunResult text = Run("simulate run.yaml");
  EXPECT_NE(text.out.find("keys and values 0.2 M_B a sequence"), std::string::npos) << text.out;
  ExpectOneLineError(Run("simulate -s seq1f1b --seq-slices 2 --kv-memory-share 1"),
                     "--kv-memory-share must be in [0, 1)");
  WriteWork("bad.yaml", "schedule: seq1f1b\nseq_slices: 2\nkv_memory_share: -0.5\n");
  const RunResult bad = Run("simulate bad.yaml");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("kv_memory_share"), std::string::npos) << bad.err;
}

TEST_F(BatonCliTest, CompareGivesAnArrayInTheGivenOrder) {
  const RunResult r = Run("simulate --compare gpipe,1f1b,zb_h1 --json -");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  ASSERT_TRUE(j.is_array());
  ASSERT_EQ(j.size(), 3u);
  const std::vector<std::string> names = {"gpipe", "1f1b", "zb_h1"};
  for (std::size_t i = 0; i < 3; ++i) {
    ExpectSummaryShape(j[i]);
    EXPECT_EQ(j[i]["schedule"], names[i]);
    EXPECT_EQ(j[i]["ranks"], 4);
    EXPECT_EQ(j[i]["microbatches"], 8);
  }
  EXPECT_DOUBLE_EQ(j[0]["makespan"].get<double>(), 33.0);
  EXPECT_DOUBLE_EQ(j[1]["makespan"].get<double>(), 33.0);
  // ZB-H1 fills part of the bubble with W: never slower than 1F1B.
  EXPECT_LT(j[2]["makespan"].get<double>(), 33.0);
  // GPipe keeps every microbatch in flight on every rank.
  for (int rank = 0; rank < 4; ++rank) EXPECT_EQ(j[0]["ranks_detail"][rank]["peak_in_flight"], json::array({8}));
}

TEST_F(BatonCliTest, CompareWithOneSvgPathIsRefused) {
  const RunResult r = Run("simulate --compare gpipe,1f1b,zb_h1 --svg out.svg");
  ExpectOneLineError(r, "{schedule}");
  EXPECT_NE(r.err.find("out.svg"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(Work() / "out.svg"));
  EXPECT_TRUE(Listing(Work()).empty());
}

TEST_F(BatonCliTest, CompareWithSchedulePlaceholderWritesOneFileEach) {
  const RunResult r = Run("simulate --compare gpipe,1f1b --svg 'pics/{schedule}.svg' --json -");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Listing(Work() / "pics"), (std::set<std::string>{"gpipe.svg", "1f1b.svg"}));
}

TEST_F(BatonCliTest, SvgAndTraceFilesAreWritten) {
  const RunResult r = Run("simulate --svg x.svg --trace x.json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("makespan 33"), std::string::npos) << r.out;
  const std::string svg = ReadFile(Work() / "x.svg");
  const bool starts_svg = svg.rfind("<svg", 0) == 0;
  const bool prolog_then_svg = svg.rfind("<?xml", 0) == 0 && svg.find("<svg") != std::string::npos;
  EXPECT_TRUE(starts_svg || prolog_then_svg) << svg.substr(0, 200);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);

  const json trace = json::parse(ReadFile(Work() / "x.json"));
  ASSERT_TRUE(trace.contains("traceEvents"));
  ASSERT_TRUE(trace["traceEvents"].is_array());
  // 4 ranks x 8 microbatches x (F, B) complete events.
  int complete = 0;
  for (const json& e : trace["traceEvents"]) complete += e.value("ph", "") == "X";
  EXPECT_EQ(complete, 64);
  // No temporary files left beside the outputs.
  EXPECT_EQ(Listing(Work()), (std::set<std::string>{"x.svg", "x.json"}));
}

TEST_F(BatonCliTest, FlagsOverrideTheConfigFile) {
  WriteWork("run.yaml", "schedule: gpipe\nranks: 2\nmicrobatches: 4\n");
  const RunResult file_only = Run("simulate run.yaml --json -");
  ASSERT_EQ(file_only.exit_code, 0) << file_only.err;
  const json a = json::parse(file_only.out);
  EXPECT_EQ(a["schedule"], "gpipe");
  EXPECT_EQ(a["ranks"], 2);
  EXPECT_EQ(a["microbatches"], 4);

  const RunResult overridden = Run("simulate run.yaml --ranks 4 --json -");
  ASSERT_EQ(overridden.exit_code, 0) << overridden.err;
  const json b = json::parse(overridden.out);
  EXPECT_EQ(b["ranks"], 4);
  EXPECT_EQ(b["ranks_detail"].size(), 4u);
  // What the flags leave alone still comes from the file.
  EXPECT_EQ(b["schedule"], "gpipe");
  EXPECT_EQ(b["microbatches"], 4);
}

TEST_F(BatonCliTest, ConfigOutputPathIsUsed) {
  WriteWork("run.yaml", "ranks: 2\nmicrobatches: 2\noutput: {json: out/result.json}\n");
  const RunResult r = Run("simulate run.yaml");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(ReadFile(Work() / "out" / "result.json"));
  EXPECT_EQ(j["ranks"], 2);
  EXPECT_DOUBLE_EQ(j["makespan"].get<double>(), 9.0);
}

TEST_F(BatonCliTest, UnknownScheduleName) {
  const RunResult r = Run("simulate -s 1f1c --json out.json");
  ExpectOneLineError(r, "\"1f1c\" is neither a generator");
  EXPECT_NE(r.err.find("gpipe, 1f1b, seq1f1b, interleaved_1f1b, looped_bfs, zb_h1, zb_h2, zbv"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(Work() / "out.json"));
}

TEST_F(BatonCliTest, InterleavedNeedsAtLeastAsManyMicrobatchesAsRanks) {
  const RunResult r = Run("simulate -s interleaved_1f1b -p 4 -m 3 --json out.json");
  ExpectOneLineError(r, "at least the number of ranks (4)");
  EXPECT_NE(r.err.find("got 3"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(Work() / "out.json"));
}

TEST_F(BatonCliTest, InterleavedRunsMicrobatchesNotAMultipleOfRanks) {
  const RunResult r = Run("simulate -s interleaved_1f1b -p 4 -m 6 --json -");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["microbatches"], 6);
}

TEST_F(BatonCliTest, CostTakesAnOptionalOverlapTerm) {
  // DualPipeV with F = I = W = 2 and F&B 5 per rank, so 1, 1, 1 and 2.5 per
  // chunk: the largest idle is DeepSeek's (PP/2 - 1)(F&B + B - 3W) =
  // 3 x (2.5 + 2 - 3).
  const RunResult r = Run("simulate -s dualpipev -p 4 -m 10 --cost 2,2,2,5 --json -");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  double largest_idle = 0;
  for (const auto& rank : j["ranks_detail"]) {
    largest_idle = std::max(largest_idle, j["makespan"].get<double>() - rank["busy"].get<double>());
  }
  EXPECT_NEAR(largest_idle, 3 * 1.5, 1e-9);
  const RunResult text = Run("simulate -s dualpipev -p 4 -m 10 --cost 2,2,2,5");
  EXPECT_NE(text.out.find("F&B 5"), std::string::npos) << text.out;
}

TEST_F(BatonCliTest, MemoryLimitReachesTheGenerators) {
  // zb_auto: ZB-2p's limit removes the bubble inside each rank's span that
  // ZB-1p's leaves (the paper's measure; the makespan is the same 27).
  const RunResult one = Run("simulate -s zb_auto -p 4 -m 8 --memory-limit 4 --json -");
  const RunResult two = Run("simulate -s zb_auto -p 4 -m 8 --memory-limit 8 --json -");
  ASSERT_EQ(one.exit_code, 0) << one.err;
  ASSERT_EQ(two.exit_code, 0) << two.err;
  const json zb_1p = json::parse(one.out), zb_2p = json::parse(two.out);
  EXPECT_NEAR(zb_1p["span_bubble_rate"].get<double>(), 3.0 / 27, 1e-12);
  EXPECT_NEAR(zb_2p["span_bubble_rate"].get<double>(), 0.0, 1e-12);
  for (const auto& rank : zb_1p["ranks_detail"]) EXPECT_LE(rank["peak_memory"].get<double>(), 4.0);
  ExpectOneLineError(Run("simulate -s zb_auto --memory-limit 0.5"), "at least 1 M_B");
  ExpectOneLineError(Run("simulate -s zb_auto --memory-limit -1"), "--memory-limit must be >= 0");
  ExpectOneLineError(Run("schedule show interleaved_1f1b -p 4 -m 8 --memory-limit 1"), "at least 2.5 M_B");
}

TEST_F(BatonCliTest, ZbvNeedsTwoChunks) {
  const RunResult r = Run("simulate -s zbv --chunks 3 --json out.json");
  ExpectOneLineError(r, "chunks must be 2");
  EXPECT_NE(r.err.find("got 3"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(Work() / "out.json"));
}

TEST_F(BatonCliTest, ZbH1NeedsAtLeastAsManyMicrobatchesAsRanks) {
  const RunResult r = Run("simulate -s zb_h1 -p 4 -m 2 --json out.json");
  ExpectOneLineError(r, "at least as many microbatches as ranks (4)");
  EXPECT_NE(r.err.find("got 2"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(Work() / "out.json"));
}

TEST_F(BatonCliTest, CostNeedsThreeNumbers) {
  const RunResult r = Run("simulate --cost 1,2 --json out.json");
  ExpectOneLineError(r, "--cost");
  // The rule: three numbers (F, I, W), and what was given.
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(three numbers F,I,W|3 required)"))) << r.err;
  EXPECT_NE(r.err.find("optionally a fourth, F&B"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("2"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(Work() / "out.json"));
}

TEST_F(BatonCliTest, UnknownConfigKeyNamesFileLineColumn) {
  WriteWork("bad.yaml", "ranks: 2\nmicrobatchs: 4\n");
  const RunResult r = Run("simulate bad.yaml --json out.json");
  ExpectOneLineError(r, "bad.yaml:2:1: unknown key 'microbatchs'; did you mean 'microbatches'?");
  EXPECT_FALSE(fs::exists(Work() / "out.json"));
  EXPECT_EQ(Listing(Work()), (std::set<std::string>{"bad.yaml"}));
}

TEST_F(BatonCliTest, ErrorInOneComparedScheduleWritesNothing) {
  // zb_h1 needs m >= p; gpipe alone would succeed, but no partial output.
  const RunResult r = Run("simulate --compare gpipe,zb_h1 -p 4 -m 2 --svg '{schedule}.svg' --json out.json");
  ExpectOneLineError(r, "zb_h1");
  EXPECT_TRUE(Listing(Work()).empty());
}

TEST_F(BatonCliTest, ScheduleShowPrintsTheGrid) {
  const RunResult r = Run("schedule show 1f1b -p 2 -m 3");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* part : {"rank 0", "rank 1", "0F0", "1B2", "step 5:"}) {
    EXPECT_NE(r.out.find(part), std::string::npos) << part << " not in:\n" << r.out;
  }
  EXPECT_EQ(r.out.find("SEND"), std::string::npos) << r.out;
}

TEST_F(BatonCliTest, ScheduleShowLoweredHasSendAndRecv) {
  const RunResult r = Run("schedule show 1f1b -p 2 -m 3 --lowered");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* part : {"0SEND_F0", "1RECV_F0", "1SEND_B2", "0RECV_B2", "compute_comms"}) {
    EXPECT_NE(r.out.find(part), std::string::npos) << part << " not in:\n" << r.out;
  }
}

TEST_F(BatonCliTest, ExportedLoweredScheduleChecksOk) {
  const RunResult exported = Run("schedule export zb_h1 -p 4 -m 8 --form compute_comms -o f.csv");
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  const std::string csv = ReadFile(Work() / "f.csv");
  EXPECT_EQ(CountLines(csv), 4u);  // one row per rank
  EXPECT_EQ(csv.rfind("0F0,0SEND_F0,", 0), 0u) << csv;

  const RunResult checked = Run("schedule check f.csv");
  EXPECT_EQ(checked.exit_code, 0) << checked.err;
  EXPECT_NE(checked.out.find("f.csv: 4 ranks, 4 stages (1 per rank), 8 microbatches"), std::string::npos)
      << checked.out;
  EXPECT_NE(checked.out.find("compute_comms form"), std::string::npos) << checked.out;
  EXPECT_NE(checked.out.find("ok:"), std::string::npos) << checked.out;
}

struct BadCell {
  std::string file;   // CSV text
  std::string cell;   // the cell quoted in the message
  std::string where;  // row/rank and column
  std::string rule;
};

TEST_F(BatonCliTest, CheckQuotesAMalformedCell) {
  const std::vector<BadCell> cases = {
      {"0F0,0F1,0B0,0B1\n1F0,1B0,1F-1,1B1\n", "\"1F-1\"", "row 2 (rank 1), column 3", "sign"},
      {"0F0,0X3\n", "\"0X3\"", "row 1 (rank 0), column 2", "unknown kind \"X\""},
      {"0F0,0F1,0B0,0B1\n1F0,1B0,2F0abc,1B1\n", "\"2F0abc\"", "row 2 (rank 1), column 3",
       "trailing characters \"abc\""},
  };
  for (const BadCell& c : cases) {
    SCOPED_TRACE(c.cell);
    WriteWork("bad.csv", c.file);
    const RunResult r = Run("schedule check bad.csv");
    ExpectOneLineError(r, "bad.csv: " + c.where + ": cannot read action " + c.cell);
    EXPECT_NE(r.err.find(c.rule), std::string::npos) << r.err;
  }
}

TEST_F(BatonCliTest, CheckFindsADeadlockAndMarksTheCell) {
  // Rank 1 runs microbatch 1 first, rank 0 microbatch 0 to the end first:
  // each waits for the other.
  WriteWork("deadlock.csv", "0F0,0B0,0F1,0B1\n1F1,1B1,1F0,1B0\n");
  const RunResult r = Run("schedule check deadlock.csv");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err.rfind("baton: error: deadlock.csv: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("deadlock"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rank 0, position 1 (0B0)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rank 1, position 0 (1F1)"), std::string::npos) << r.err;
  // The grid, with one stuck cell shown as >cell<.
  EXPECT_NE(r.err.find("rank 0"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rank 1"), std::string::npos) << r.err;
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(>(0B0|1F1)<)"))) << r.err;
  // Only the one "baton: error:" report.
  EXPECT_EQ(r.err.find("baton: error:", 1), std::string::npos) << r.err;
}

TEST_F(BatonCliTest, PytorchStyleFileSimulates) {
  const std::string path = std::string(BATON_SOURCE_DIR) + "/schedules/gpipe_2x4_pytorch.csv";
  const RunResult r = Run("simulate -s '" + path + "' --json -");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  ExpectSummaryShape(j);
  EXPECT_EQ(j["ranks"], 2);
  EXPECT_EQ(j["microbatches"], 4);
  // GPipe: (m + p - 1) x 3 and (p - 1) / (m + p - 1).
  EXPECT_DOUBLE_EQ(j["makespan"].get<double>(), 15.0);
  EXPECT_NEAR(j["bubble_rate"].get<double>(), 1.0 / 5.0, 1e-12);
}

TEST_F(BatonCliTest, HelpExitsZero) {
  const RunResult r = Run("--help");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("simulate"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("schedule"), std::string::npos) << r.out;
}

TEST_F(BatonCliTest, NoSubcommandExitsTwo) {
  const RunResult r = Run("");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("subcommand"), std::string::npos) << r.err;
}

TEST_F(BatonCliTest, ZeroRanksOrMicrobatchesIsRefused) {
  ExpectOneLineError(Run("simulate --ranks 0 --json out.json"), "--ranks and --microbatches must be at least 1, got 0");
  ExpectOneLineError(Run("simulate -m 0"), "must be at least 1, got 0");
  EXPECT_FALSE(fs::exists(Work() / "out.json"));
}

TEST_F(BatonCliTest, ScheduleNameIsExpandedInEveryOutputPath) {
  const RunResult r = Run("simulate -s gpipe -p 2 -m 2 --json 'o/{schedule}.json' --svg 'o/{schedule}.svg'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Listing(Work() / "o"), (std::set<std::string>{"gpipe.json", "gpipe.svg"}));
  const RunResult c = Run("simulate --compare gpipe,1f1b -p 2 -m 2 --json 'c/{schedule}.json'");
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_EQ(Listing(Work() / "c"), (std::set<std::string>{"gpipe.json", "1f1b.json"}));
  EXPECT_EQ(json::parse(ReadFile(Work() / "c" / "1f1b.json"))["schedule"], "1f1b");
}

TEST_F(BatonCliTest, MissingConfigFileIsOneBatonError) {
  ExpectOneLineError(Run("simulate nope.yaml"), "nope.yaml: no such config file");
}

// baton validate prints the resolved config with the layout as written, and
// per stage its layers, forward matrix-product FLOPs per microbatch and
// parameter bytes. tests/mpi/tiny_gpt.yaml: vocabulary 32, 8 tokens, width
// 16, 2 blocks, tied head, 2 samples per microbatch (16 token rows).
TEST_F(BatonCliTest, ValidatePrintsTheLayoutsStagesWithFlopsAndParameterBytes) {
  const RunResult r = Run("validate '" BATON_SOURCE_DIR
                          "/tests/mpi/tiny_gpt.yaml' --set pipeline.ranks=2 --set 'pipeline.layout=E|t*2,L'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("  layout: \"E|t*2,L\"\n"), std::string::npos) << r.out;
  // Stage 0: wte and wpe, (32 + 8) x 16 floats, no matrix products.
  EXPECT_NE(r.out.find("#   stage 0 on rank 0: layers 0..1, "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(", forward 0 FLOPs (matrix products) per microbatch, 2560 parameter bytes\n"), std::string::npos)
      << r.out;
  // Stage 1: per token row 2 x (attention 2 (4 x 16^2) + 2 x 8 x 16, MLP 2 x 2 x 16 x 64) + the head 2 x 16 x 32
  // = 13824 FLOPs, x 16 rows; per block 3280 parameters, ln_f 32, the head's copy of wte 512.
  EXPECT_NE(r.out.find("#   stage 1 on rank 1: layers 2..7, "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(", forward 221184 FLOPs (matrix products) per microbatch, 28416 parameter bytes\n"),
            std::string::npos)
      << r.out;
  // A layout of another stage count is one error naming the --set.
  ExpectOneLineError(Run("validate '" BATON_SOURCE_DIR
                         "/tests/mpi/tiny_gpt.yaml' --set pipeline.ranks=2 --set 'pipeline.layout=E|t*2|L'"),
                     "tiny_gpt.yaml (--set pipeline.layout): pipeline.layout: lists 3 stages, but the pipeline has 2 "
                     "(2 ranks x 1 chunks, schedule 1f1b)");
  ExpectOneLineError(Run("validate '" BATON_SOURCE_DIR
                         "/tests/mpi/tiny_gpt.yaml' --set pipeline.ranks=2 --set 'pipeline.layout=E|t*3,L'"),
                     "pipeline.layout: stage 1, token 't*3': the layout's t's reach 3 here, but model.blocks is 2");
}

}  // namespace

namespace baton {
namespace {

// baton tune: the ranking's winner fits the budget and its overlay parses
// as config keys; a budget nothing fits names the smallest need; costs from
// another config are refused naming the difference.
TEST(BatonTune, RanksCandidatesAndWritesTheWinnersOverlay) {
  const std::string dir = ::testing::TempDir() + "/baton_tune_" + std::to_string(::getpid());
  const std::string overlay = dir + "/overlay.yaml";
  const std::string base = std::string("'") + BATON_BINARY + "' tune '" BATON_SOURCE_DIR "/tests/mpi/tiny.yaml' --set pipeline.ranks=2 ";
  const std::string out_file = dir + "/out.txt";
  std::filesystem::create_directories(dir);
  auto run = [&](const std::string& args) {
    const int status = std::system((base + args + " > '" + out_file + "' 2>&1").c_str());
    std::ifstream in(out_file);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return std::make_pair(WIFEXITED(status) ? WEXITSTATUS(status) : -1, text);
  };
  auto [code, text] = run("--memory-bytes 1e9 --overlay '" + overlay + "'");
  ASSERT_EQ(code, 0) << text;
  EXPECT_NE(text.find("   1  "), std::string::npos) << text;
  EXPECT_NE(text.find("fit"), std::string::npos) << text;
  const YAML::Node o = YAML::LoadFile(overlay);
  const std::string schedule = o["pipeline"]["schedule"].as<std::string>();
  EXPECT_NE(std::find(GeneratorNames().begin(), GeneratorNames().end(), schedule), GeneratorNames().end()) << schedule;
  EXPECT_EQ(32 % o["pipeline"]["microbatches"].as<int>(), 0);
  // The overlay's settings make a config that validates.
  std::string validate = std::string("'") + BATON_BINARY + "' validate '" BATON_SOURCE_DIR +
                         "/tests/mpi/tiny.yaml' --set pipeline.ranks=2";
  for (const char* key : {"schedule", "microbatches", "chunks", "checkpointing"}) {
    validate += std::string(" --set pipeline.") + key + "=" + o["pipeline"][key].as<std::string>();
  }
  if (o["pipeline"]["keep"]) validate += " --set 'pipeline.keep=[linear]'";
  EXPECT_EQ(std::system((validate + " > /dev/null 2>&1").c_str()), 0) << validate;
  std::tie(code, text) = run("--memory-bytes 1e9 --schedules 1f1b,zb_h1 --microbatches 2,4,8 --policies none,full --top 100");
  ASSERT_EQ(code, 0) << text;
  EXPECT_NE(text.find("searched 12 candidates"), std::string::npos) << text;  // 2 x 3 x 2
  std::tie(code, text) = run("--memory-bytes 10");
  ASSERT_EQ(code, 0) << text;
  EXPECT_NE(text.find("nothing fits"), std::string::npos) << text;
  EXPECT_NE(text.find("the smallest any candidate needs is"), std::string::npos) << text;
  std::tie(code, text) = run("--memory-bytes 1e9 --policies some");
  EXPECT_EQ(code, 2) << text;
  EXPECT_NE(text.find("'some' is not one of none, full, selective"), std::string::npos) << text;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace baton

namespace baton {
namespace {

// baton profile writes a profile that tune and validate take; one of
// another model, or an empty file, is refused with one clear error.
TEST(BatonProfile, ProfilesAConfigForTuneAndValidateAndRefusesAForeignOne) {
  const std::string dir = ::testing::TempDir() + "/baton_profile_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const std::string profile = dir + "/profile.json", out_file = dir + "/out.txt";
  const std::string tiny = "'" BATON_SOURCE_DIR "/tests/mpi/tiny.yaml' --set pipeline.ranks=2 ";
  auto run = [&](const std::string& args) {
    const int status = std::system(("'" + std::string(BATON_BINARY) + "' " + args + " > '" + out_file + "' 2>&1").c_str());
    std::ifstream in(out_file);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return std::make_pair(WIFEXITED(status) ? WEXITSTATUS(status) : -1, text);
  };
  auto [code, text] = run("profile " + tiny + "--rows 4,8 --repetitions 3 --out '" + profile + "'");
  ASSERT_EQ(code, 0) << text;
  EXPECT_NE(text.find("8 rows a microbatch"), std::string::npos) << text;
  const nlohmann::json j = nlohmann::json::parse(std::ifstream(profile));
  EXPECT_EQ(j["rows"].size(), 2u);
  EXPECT_EQ(j["layers"].size(), 9u);
  // The optimizer's step, per layer: something where the layer has
  // parameters (linear, the residual block, layernorm), nothing where not.
  EXPECT_EQ(j["optimizer"], "sgd");
  ASSERT_EQ(j["update_s"].size(), 9u);
  ASSERT_EQ(j["clip_s"].size(), 9u);
  for (const int t : {0, 2, 3, 5, 6, 8}) {
    EXPECT_GT(j["update_s"][t].get<double>(), 0.0) << t;
    EXPECT_GT(j["clip_s"][t].get<double>(), 0.0) << t;
  }
  for (const int t : {1, 4, 7}) EXPECT_EQ(j["update_s"][t].get<double>(), 0.0) << t;
  EXPECT_NE(text.find("the optimizer's step (sgd) over every layer: "), std::string::npos) << text;

  std::tie(code, text) = run("tune " + tiny + "--memory-bytes 1e9 --top 3 --profile '" + profile + "'");
  ASSERT_EQ(code, 0) << text;
  EXPECT_NE(text.find("costs from the profile " + profile), std::string::npos) << text;
  EXPECT_NE(text.find("placements:"), std::string::npos) << text;
  EXPECT_NE(text.find("  partition: ["), std::string::npos) << text;  // the overlay places the stages

  std::tie(code, text) = run("validate " + tiny + "--set pipeline.partition=auto --profile '" + profile + "'");
  ASSERT_EQ(code, 0) << text;
  EXPECT_NE(text.find("placement (auto): ["), std::string::npos) << text;
  EXPECT_NE(text.find("predicted from " + profile + ": step "), std::string::npos) << text;
  std::tie(code, text) = run("simulate " + tiny + "--set pipeline.schedule=zb_h1 --profile '" + profile + "'");
  ASSERT_EQ(code, 0) << text;
  EXPECT_NE(text.find("zb_h1: 2 ranks, 8 microbatches of 4 samples, 2 stages"), std::string::npos) << text;
  EXPECT_NE(text.find("costs from the profile " + profile), std::string::npos) << text;
  EXPECT_NE(text.find("model state MiB (ZeRO 0)"), std::string::npos) << text;
  EXPECT_NE(text.find("the optimizer's step: the step ends "), std::string::npos) << text;
  EXPECT_EQ(text.find("the clip's norm"), std::string::npos) << text;
  std::tie(code, text) = run("simulate " + tiny + "--set pipeline.schedule=zb_h1 --set train.clip_grad_norm=1 "
                             "--profile '" + profile + "'");
  ASSERT_EQ(code, 0) << text;
  EXPECT_NE(text.find("the clip's norm (train.clip_grad_norm) held a rank "), std::string::npos) << text;
  std::tie(code, text) = run("validate " + tiny + "--set pipeline.partition=auto");
  ASSERT_EQ(code, 0) << text;
  EXPECT_NE(text.find("searched when the run starts"), std::string::npos) << text;

  // Another model: refused, naming the first difference.
  std::tie(code, text) =
      run("tune " + tiny + "--set model.layers.6.out=20 --memory-bytes 1e9 --profile '" + profile + "'");
  EXPECT_EQ(code, 2) << text;
  EXPECT_NE(text.find("the profile does not match this run: layer 6 is \"linear 24->16\" in the profile, \"linear "
                      "24->20\" in the model"),
            std::string::npos)
      << text;
  // An empty file.
  std::ofstream(dir + "/empty.json").close();
  std::tie(code, text) = run("validate " + tiny + "--profile '" + dir + "/empty.json'");
  EXPECT_EQ(code, 2) << text;
  EXPECT_NE(text.find("empty.json: not a baton profile"), std::string::npos) << text;
  // An automatic placement under a budget nothing fits names the least any placement needs.
  std::tie(code, text) = run("validate " + tiny +
                             "--set pipeline.partition=auto --set pipeline.memory_bytes=1000 --profile '" + profile + "'");
  EXPECT_EQ(code, 2) << text;
  EXPECT_NE(text.find("no placement of 1f1b fits pipeline.memory_bytes"), std::string::npos) << text;
  EXPECT_NE(text.find("the smallest any needs is"), std::string::npos) << text;
  std::filesystem::remove_all(dir);
}

}  // namespace
// baton data stats: a dataset's documents, tokens and lengths; the
// histogram's bars and each budget's cut documents are the lengths'
// counts; --svg draws it; a malformed file is one error, exit 2.
TEST_F(BatonCliTest, DataStatsCountsTheDocumentsLengths) {
  // Lengths 1, 3, 3, 9 and 20 bytes.
  WriteWork("d.jsonl", "{\"text\": \"a\"}\n{\"text\": \"abc\"}\n{\"text\": \"xyz\"}\n"
                       "{\"text\": \"123456789\"}\n{\"text\": \"aaaaaaaaaaaaaaaaaaaa\"}\n");
  const RunResult r = Run("data stats d.jsonl --dataset jsonl --svg h.svg");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("jsonl:d.jsonl: 5 documents, 36 tokens (1 byte a token)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("shortest 1, median 3, mean 7.2, p90 20, p99 20, longest 20"), std::string::npos) << r.out;
  for (const char* row : {"[0, 2)          1", "[2, 4)          2", "[4, 8)          0", "[8, 16)          1",
                          "[16, 32)          1", "4 tokens: 2 documents (40.00%)", "16 tokens: 1 document (20.00%)",
                          "32 tokens: 0 documents (0.00%)"}) {
    EXPECT_NE(r.out.find(row), std::string::npos) << row << " in:\n" << r.out;
  }
  const std::string svg = ReadFile(Work() / "h.svg");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  std::size_t bars = 0;
  for (std::size_t at = svg.find("<rect "); at != std::string::npos; at = svg.find("<rect ", at + 1)) ++bars;
  EXPECT_EQ(bars, 5u);  // a bar a bin, 0-1 to 16-31
  WriteWork("bad.jsonl", "{\"text\": 3}\n");
  ExpectOneLineError(Run("data stats bad.jsonl --dataset jsonl"), "bad.jsonl: byte 0: line 1 is not an object");
}

}  // namespace baton

namespace baton {

// baton simulate prices a packed run's steps by their microbatches'
// lengths, from a profile that measured attention's cost per document;
// a lengths file prices one step; a malformed one is one error, exit 2.
TEST_F(BatonCliTest, SimulatePricesAPackedRunsStepsByTheirLengths) {
  std::string docs;
  for (int i = 0; i < 200; ++i) docs += "{\"text\": \"" + std::string(1 + (i * 7) % 23, 'a' + i % 26) + "\"}\n";
  WriteWork("d.jsonl", docs);
  const std::string config = std::string("'") + BATON_SOURCE_DIR +
                             "/tests/mpi/tiny_gpt.yaml' --set pipeline.ranks=2 --set model.vocab=256 --set model.seq_len=16 "
                             "--set 'data={dataset: jsonl, path: d.jsonl, packing: greedy, max_tokens: 16}' ";
  RunResult r = Run("profile " + config + "--repetitions 2 --out p.json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(ReadFile(Work() / "p.json"))["document_tokens"], 2);
  r = Run("simulate " + config + "--profile p.json --steps 3 --json s.json --svg s.svg");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("1f1b: 2 ranks x 1 replicas, 8 microbatches of 2 samples of data.max_tokens 16 (packing: greedy)"),
            std::string::npos)
      << r.out;
  const json s = json::parse(ReadFile(Work() / "s.json"));
  ASSERT_EQ(s["steps"].size(), 3u);
  for (const json& step : s["steps"]) {
    EXPECT_GT(step["predicted_s"].get<double>(), 0.0);
    EXPECT_LE(step["predicted_s"].get<double>(), s["whole_step_s"].get<double>() * (1 + 1e-12));
    EXPECT_EQ(step["lengths"].size(), 8u);
  }
  EXPECT_EQ(ReadFile(Work() / "s.svg").rfind("<svg", 0), 0u);
  // Sliced: each sequence's share on top of its slices' (balanced arranges the sequences).
  r = Run("simulate " + config + "--set pipeline.schedule=seq1f1b --set pipeline.seq_slices=2 "
          "--set 'data={dataset: jsonl, path: d.jsonl, packing: balanced, max_tokens: 16}' --profile p.json --steps 2 "
          "--json sliced.json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(json::parse(ReadFile(Work() / "sliced.json"))["steps"][0]["lengths"].size(), 8u);
  // A sliced config's own profile: its layers at whole sequences, as the
  // unsliced config's (its stages once ran whole samples through a slice's
  // buffers).
  r = Run("profile " + config + "--set pipeline.schedule=seq1f1b --set pipeline.seq_slices=2 --repetitions 2 --out ps.json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json whole = json::parse(ReadFile(Work() / "p.json")), sliced = json::parse(ReadFile(Work() / "ps.json"));
  ASSERT_EQ(sliced["rows"].size(), whole["rows"].size());
  EXPECT_EQ(sliced["rows"][0]["layers"].size(), whole["rows"][0]["layers"].size());
  // Every sample one document of the whole budget: the unpacked step.
  std::string full;
  for (int j = 0; j < 8; ++j) full += "16; 16\n";
  WriteWork("full.txt", "# two samples a microbatch\n" + full);
  r = Run("simulate " + config + "--profile p.json --lengths full.txt --json f.json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json f = json::parse(ReadFile(Work() / "f.json"));
  EXPECT_NEAR(f["steps"][0]["predicted_s"].get<double>(), f["whole_step_s"].get<double>(),
              1e-12 * f["whole_step_s"].get<double>());
  EXPECT_EQ(f["steps"][0]["tokens"], 256);
  // Equal microbatches are their own even step; the even step is the
  // documents', whichever way they are packed.
  EXPECT_NEAR(f["steps"][0]["even_s"].get<double>(), f["steps"][0]["predicted_s"].get<double>(),
              1e-12 * f["whole_step_s"].get<double>());
  const std::string tail = "4; 4\n4; 4\n4; 4\n4; 4\n4; 4\n4; 4\n";
  WriteWork("one.txt", "12 4; 4\n4; 4\n" + tail);
  WriteWork("two.txt", "12; 4\n4 4; 4\n" + tail);
  ASSERT_EQ(Run("simulate " + config + "--profile p.json --lengths one.txt --json one.json").exit_code, 0);
  ASSERT_EQ(Run("simulate " + config + "--profile p.json --lengths two.txt --json two.json").exit_code, 0);
  const json one = json::parse(ReadFile(Work() / "one.json"))["steps"][0];
  const json two = json::parse(ReadFile(Work() / "two.json"))["steps"][0];
  EXPECT_NE(one["predicted_s"], two["predicted_s"]);
  EXPECT_NEAR(one["even_s"].get<double>(), two["even_s"].get<double>(), 1e-12 * one["even_s"].get<double>());
  EXPECT_LT(one["even_s"].get<double>(), one["predicted_s"].get<double>());
  // --cores: the step on another machine; 2 ranks sharing 1 core take
  // longer than 2 ranks with a core each (their 1F1B overlaps).
  r = Run("simulate " + config + "--profile p.json --lengths full.txt --cores 0 --json c0.json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("priced for a core per rank"), std::string::npos) << r.out;
  ASSERT_EQ(Run("simulate " + config + "--profile p.json --lengths full.txt --cores 1 --json c1.json").exit_code, 0);
  EXPECT_GT(json::parse(ReadFile(Work() / "c1.json"))["steps"][0]["predicted_s"].get<double>(),
            json::parse(ReadFile(Work() / "c0.json"))["steps"][0]["predicted_s"].get<double>());
  ExpectOneLineError(Run("simulate " + config + "--profile p.json --lengths full.txt --cores 1.5"),
                     "simulate --profile --cores 1.5: a whole number of CPUs >= 0");
  WriteWork("short.txt", "16\n");
  ExpectOneLineError(Run("simulate " + config + "--profile p.json --lengths short.txt"),
                     "short.txt: 1 microbatches, but a step of this config has 8");
  WriteWork("long.txt", "8 9\n");
  ExpectOneLineError(Run("simulate " + config + "--profile p.json --lengths long.txt"),
                     "long.txt:1: a sample of 17+ tokens: a sample holds at most data.max_tokens = 16");
  WriteWork("word.txt", "# a comment\n3 x\n");
  ExpectOneLineError(Run("simulate " + config + "--profile p.json --lengths word.txt"),
                     "word.txt:2: 'x': a document's length is a whole number of tokens >= 1");
  WriteWork("rows.txt", "1; 1; 1\n");
  ExpectOneLineError(Run("simulate " + config + "--profile p.json --lengths rows.txt"),
                     "rows.txt:1: 3 samples: a microbatch holds at most 2");
  EXPECT_FALSE(fs::exists(Work() / "x.json"));
}

// baton tune with packed documents: each token budget (the batch's
// positions held) and packing tuned and priced by the run's first steps.
// pad's real tokens a step are its first documents' (one a sample), worked
// out here from the file; greedy at a budget trains at least pad's tokens
// in at most pad's time (no sample holds fewer, none runs longer); the
// winner's overlay names its budget, packing and batch.
TEST_F(BatonCliTest, TuneSearchesTheTokenBudgetAndThePacking) {
  std::string docs;
  std::vector<int> positions;  // each document's, in order
  for (int i = 0; i < 200; ++i) {
    const int bytes = 1 + (i * 7) % 23;
    docs += "{\"text\": \"" + std::string(static_cast<std::size_t>(bytes), static_cast<char>('a' + i % 26)) + "\"}\n";
    positions.push_back(bytes - 1);
  }
  WriteWork("d.jsonl", docs);
  auto config = [](int budget, int batch) {
    return std::string("'") + BATON_SOURCE_DIR +
           "/tests/mpi/tiny_gpt.yaml' --set pipeline.ranks=2 --set model.vocab=256 --set model.seq_len=16 "
           "--set 'data={dataset: jsonl, path: d.jsonl, shuffle: false, packing: greedy, max_tokens: " +
           std::to_string(budget) + "}' --set train.batch_size=" + std::to_string(batch) + " ";
  };
  ASSERT_EQ(Run("profile " + config(16, 16) + "--repetitions 2 --out p16.json").exit_code, 0);
  ASSERT_EQ(Run("profile " + config(8, 32) + "--repetitions 2 --out p8.json").exit_code, 0);
  const std::string tune = "tune " + config(16, 16) + "--memory-bytes 1e9 --schedules 1f1b,zb_h1 --policies none ";
  RunResult r = Run(tune + "--budgets 8,16,12 --packings greedy,pad --profile 'p{max_tokens}.json' --steps 2 "
                    "--overlay o.yaml");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("max_tokens 8: the profile p8.json"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("12    21  greedy    no: the batch's 256 positions"), std::string::npos) << r.out;
  // rank, budget, batch, packing, schedule, m, v, policy, zero, step ms, tokens, tokens/s
  const std::regex row(R"(^\s*\d+\s+(\d+)\s+(\d+)\s+(greedy|pad)\s+\S+\s+\d+\s+\d+\s+\S+\s+\d+\s+([\d.]+)\s+(\d+)\s+(\d+))");
  std::map<std::pair<int, std::string>, std::array<double, 3>> points;  // step ms, tokens, tokens/s
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, row)) continue;
    EXPECT_EQ(std::stoi(m[1]) * std::stoi(m[2]), 256) << line;
    points[{std::stoi(m[1]), m[3]}] = {std::stod(m[4]), std::stod(m[5]), std::stod(m[6])};
  }
  ASSERT_EQ(points.size(), 4u) << r.out;
  for (int budget : {8, 16}) {
    // pad: the first 2 x 256 / budget pieces, a step's tokens their mean.
    const int samples = 256 / budget;
    double tokens = 0;
    int pieces = 0;
    for (int n : positions) {
      for (int begin = 0; begin < n && pieces < 2 * samples; begin += budget, ++pieces) tokens += std::min(budget, n - begin);
    }
    const auto pad = points[{budget, "pad"}], greedy = points[{budget, "greedy"}];
    EXPECT_NEAR(pad[1], tokens / 2, 0.5) << budget;
    EXPECT_GE(greedy[1], pad[1]) << budget;
    EXPECT_LE(greedy[0], pad[0] * (1 + 1e-9)) << budget;
    EXPECT_GT(greedy[2], pad[2]) << budget;
  }
  const YAML::Node o = YAML::LoadFile((Work() / "o.yaml").string());
  const int budget = o["data"]["max_tokens"].as<int>();
  EXPECT_EQ(budget * o["train"]["batch_size"].as<int>(), 256);
  EXPECT_EQ(o["data"]["packing"].as<std::string>(), "greedy");
  const double best = std::max(points[{8, "greedy"}][2], points[{16, "greedy"}][2]);
  const std::pair<int, std::string> winner{budget, "greedy"};
  EXPECT_EQ(points[winner][2], best);
  ExpectOneLineError(Run(tune + "--packings none"), "tune --packings: none cuts fixed windows, not documents");
  ExpectOneLineError(Run("tune '" BATON_SOURCE_DIR "/tests/mpi/tiny_gpt.yaml' --memory-bytes 1e9 --budgets 8"),
                     "tune --budgets/--packings: the config packs no documents (data.packing: none)");
}

}  // namespace baton

namespace baton {

namespace {

// The SVG's elements that open with `head` (e.g. "<polyline class=\"loss steps\" data-run=\"0\""), each
// as a map of its attributes.
std::vector<std::map<std::string, std::string>> Elements(const std::string& svg, const std::string& head) {
  std::vector<std::map<std::string, std::string>> out;
  const std::regex attr("([a-z0-9-]+)=\"([^\"]*)\"");
  for (std::size_t at = svg.find(head); at != std::string::npos; at = svg.find(head, at + 1)) {
    const std::string tag = svg.substr(at, svg.find('>', at) - at);
    std::map<std::string, std::string> m;
    for (auto it = std::sregex_iterator(tag.begin(), tag.end(), attr); it != std::sregex_iterator(); ++it) {
      m[(*it)[1]] = (*it)[2];
    }
    out.push_back(m);
  }
  return out;
}

std::vector<std::pair<double, double>> Points(const std::string& points) {
  std::vector<std::pair<double, double>> out;
  std::istringstream in(points);
  for (std::string xy; in >> xy;) {
    const std::size_t comma = xy.find(',');
    out.push_back({std::stod(xy.substr(0, comma)), std::stod(xy.substr(comma + 1))});
  }
  return out;
}

}  // namespace

// baton plot draws a metrics file as baton train writes it: each panel's
// lines are its values mapped linearly onto the panel (x from the first to
// the last step over 720 px from x = 78, y from the panel's bottom), a step
// whose loss was not finite breaks the loss line and is marked skipped, a
// step time far above the rest is drawn at the panel's top and marked,
// events are lines at their steps (an event of no step at the last step
// before it); --compare adds a run in its own colour. Bad files: one
// error each, and no picture.
TEST_F(BatonCliTest, PlotDrawsARunsMetricsAtTheirStepsWithItsEvents) {
  std::string a, b;
  for (int step = 2; step <= 20; step += 2) {
    const double loss = 5 - 0.1 * step, time = step == 2 ? 1.0 : 0.1 + 0.001 * step;
    if (step == 10) {
      a += "{\"step\": 10, \"epoch\": 1, \"loss\": null, \"accuracy\": 0, \"samples_per_s\": 300, \"step_time_s\": 0.11, "
           "\"lr\": 0.001, \"grad_norm\": null, \"nonfinite\": true, \"skipped\": true}\n";
    } else {
      a += fmt::format("{{\"step\": {}, \"epoch\": 1, \"loss\": {}, \"accuracy\": 0.1, \"samples_per_s\": {}, "
                       "\"step_time_s\": {}, \"lr\": {}, \"grad_norm\": {}}}\n",
                       step, loss, 32 / time, time, 1e-4 * step, 2.0 / step);
    }
    if (step == 12) a += "{\"event\": \"replan\", \"step\": 12, \"factors\": [1.0, 2.0]}\n";
    if (step == 16) a.insert(a.size() - 2, ", \"resumed_after\": 14");  // a resume from step 14's checkpoint
    if (step == 6) a += "{\"event\": \"late\", \"step\": 5, \"late\": {\"what\": \"rank\", \"rank\": 1, \"by_s\": 0.02}}\n";
    b += fmt::format("{{\"step\": {}, \"epoch\": 1, \"loss\": {}, \"samples_per_s\": 250, \"step_time_s\": 0.128, "
                     "\"lr\": 0.001, \"grad_norm\": 0}}\n",
                     step, loss + 0.5);
  }
  a += "{\"event\": \"lost_rank\", \"lost\": [1]}\n";
  a += "{\"step\": 20, \"epoch\": 1, \"validation_loss\": 2.75, \"validation_perplexity\": 15.6}\n";
  WriteWork("a.jsonl", a);
  WriteWork("b.jsonl", b);
  const RunResult r = Run("plot a.jsonl --compare b.jsonl --svg p.svg");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  const std::string svg = ReadFile(Work() / "p.svg");
  ASSERT_EQ(svg.rfind("<svg", 0), 0u);
  const auto x_of = [](double step) { return 78 + (step - 2) / 18 * 720; };
  // Each panel's lines against its range; "above" marks a value over its top.
  std::map<std::string, std::map<std::string, std::string>> panels;
  for (const auto& g : Elements(svg, "<g class=\"panel ")) panels[g.at("class").substr(6)] = g;
  ASSERT_EQ(panels.size(), 5u) << "loss, step time, rate, lr (moves in a) and grad norm (> 0 in a)";
  auto check = [&](const std::string& panel, int run, const std::vector<std::vector<std::pair<double, double>>>& want) {
    const auto& g = panels.at(panel);
    const double lo = std::stod(g.at("data-lo")), hi = std::stod(g.at("data-hi"));
    const double top = std::stod(g.at("data-top")), height = std::stod(g.at("data-height"));
    const auto lines = Elements(svg, "<polyline class=\"" + panel + " steps\" data-run=\"" + std::to_string(run) + "\"");
    ASSERT_EQ(lines.size(), want.size()) << panel << " run " << run;
    for (std::size_t k = 0; k < want.size(); ++k) {
      const auto got = Points(lines[k].at("points"));
      ASSERT_EQ(got.size(), want[k].size()) << panel << " run " << run << " line " << k;
      for (std::size_t i = 0; i < got.size(); ++i) {
        const auto [step, v] = want[k][i];
        EXPECT_NEAR(got[i].first, x_of(step), 0.006) << panel << " step " << step;
        EXPECT_NEAR(got[i].second, top + height - (std::min(v, hi) - lo) / (hi - lo) * height, 0.006)
            << panel << " step " << step;
      }
    }
  };
  std::vector<std::pair<double, double>> before, after, times_a, loss_b;
  for (int step = 2; step <= 20; step += 2) {
    if (step < 10) before.push_back({step, 5 - 0.1 * step});
    if (step > 10) after.push_back({step, 5 - 0.1 * step});
    times_a.push_back({step, step == 2 ? 1.0 : step == 10 ? 0.11 : 0.1 + 0.001 * step});
    loss_b.push_back({step, 5.5 - 0.1 * step});
  }
  check("loss", 0, {before, after});  // broken at the skipped step 10
  check("loss", 1, {loss_b});
  check("step_time", 0, {times_a});
  EXPECT_DOUBLE_EQ(std::stod(panels["loss"].at("data-lo")), 2.75);  // the validation loss
  EXPECT_DOUBLE_EQ(std::stod(panels["loss"].at("data-hi")), 5.3);   // b's first
  EXPECT_DOUBLE_EQ(std::stod(panels["step_time"].at("data-lo")), 0.0);
  // The median of both runs' 20 step times is 0.128 (b's ten), the top 3 times it: a's 1.0 above.
  EXPECT_DOUBLE_EQ(std::stod(panels["step_time"].at("data-hi")), 3 * 0.128);
  EXPECT_EQ(Elements(svg, "<path class=\"above\" data-run=\"0\"").size(), 1u);
  // Events at their steps, through every panel; the stepless lost rank at step 20 (the last before it).
  const auto replans = Elements(svg, "<line class=\"event replan\"");
  ASSERT_EQ(replans.size(), 5u);
  for (const auto& e : replans) {
    EXPECT_EQ(e.at("data-step"), "12");
    EXPECT_NEAR(std::stod(e.at("x1")), x_of(12), 0.006);
  }
  const auto late = Elements(svg, "<line class=\"event late\"");  // log.blame's late step
  ASSERT_EQ(late.size(), 5u);
  EXPECT_EQ(late[0].at("data-step"), "5");
  EXPECT_NEAR(std::stod(late[0].at("x1")), x_of(5), 0.006);
  const auto resumed = Elements(svg, "<line class=\"event resumed\"");
  ASSERT_EQ(resumed.size(), 5u);
  EXPECT_EQ(resumed[0].at("data-step"), "14");
  const auto lost = Elements(svg, "<line class=\"event lost_rank\"");
  ASSERT_EQ(lost.size(), 5u);
  EXPECT_NEAR(std::stod(lost[0].at("x1")), x_of(20), 0.006);
  const auto skipped = Elements(svg, "<text class=\"skipped\"");
  ASSERT_EQ(skipped.size(), 1u);
  EXPECT_EQ(skipped[0].at("data-step"), "10");
  EXPECT_EQ(Elements(svg, "<circle class=\"validation\"").size(), 1u);
  EXPECT_NE(svg.find(">samples/s<"), std::string::npos) << "no run packs: samples, not tokens";

  // Bad files: one error each, and no picture.
  ExpectOneLineError(Run("plot missing.jsonl --svg q.svg"), "missing.jsonl: no such metrics file");
  fs::create_directory(Work() / "folder");
  ExpectOneLineError(Run("plot folder --svg q.svg"), "folder: is a folder, not a metrics file");
  WriteWork("bad.jsonl", "{\"step\": 1, \"loss\": 2}\n{\"step\": 2, \"loss\n");
  ExpectOneLineError(Run("plot bad.jsonl --svg q.svg"), "bad.jsonl:2: not JSON");
  WriteWork("array.jsonl", "[1, 2]\n");
  ExpectOneLineError(Run("plot array.jsonl --svg q.svg"), "array.jsonl:1: not a JSON object");
  WriteWork("nostep.jsonl", "{\"loss\": 2}\n");
  ExpectOneLineError(Run("plot nostep.jsonl --svg q.svg"), "nostep.jsonl:1: a loss without a numeric \"step\"");
  WriteWork("events.jsonl", "{\"event\": \"replan\", \"step\": 3}\n");
  ExpectOneLineError(Run("plot events.jsonl --svg q.svg"), "events.jsonl: no step rows");
  ExpectOneLineError(Run("plot a.jsonl --compare b.jsonl --svg b.jsonl"), "--svg (b.jsonl) is the same file as --compare (b.jsonl)");
  EXPECT_FALSE(fs::exists(Work() / "q.svg"));
  EXPECT_EQ(ReadFile(Work() / "b.jsonl"), b);
}

}  // namespace baton
