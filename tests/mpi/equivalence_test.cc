// Pipeline-parallel training learns exactly what one process learns: for
// every generator and every checkpointing policy, on 2 and 4 ranks, the
// per-step losses and the final weights equal those of the same config on
// one rank (1f1b, no checkpointing) within 1e-5 relative.
#include <gtest/gtest.h>

#include <ostream>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "run_helpers.h"

namespace {

namespace fs = std::filesystem;
using baton_test::RunOutput;

// Runs the tiny config on `ranks` ranks with extra --set overrides.
RunOutput Train(const std::string& name, int ranks, std::vector<std::string> sets) {
  sets.insert(sets.begin(), "pipeline.ranks=" + std::to_string(ranks));
  return baton_test::TrainRun("equiv_" + name, "tests/mpi/tiny.yaml", ranks, sets);
}

const RunOutput& Reference() {
  static const RunOutput ref = Train("reference", 1, {"pipeline.schedule=1f1b", "pipeline.checkpointing=none"});
  return ref;
}

void ExpectSame(const RunOutput& got, const RunOutput& ref) {
  ASSERT_EQ(ref.losses.size(), 4u);
  ASSERT_EQ(ref.weights.size(), 14u);  // 5 linear + 2 layernorm, weight and bias each
  baton_test::ExpectSameRun(got, ref);
}

struct Case {
  std::string schedule;
  std::string checkpointing;
  int ranks;
};

// ctest lists a case by what it runs, not by its bytes.
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.schedule << ", checkpointing " << c.checkpointing << ", " << c.ranks << " ranks";
}

class Equivalence : public ::testing::TestWithParam<Case> {};

TEST_P(Equivalence, MatchesSingleProcess) {
  const Case& c = GetParam();
  const std::string name = c.schedule + "_" + c.checkpointing + "_" + std::to_string(c.ranks);
  std::vector<std::string> sets = {"pipeline.schedule=" + c.schedule, "pipeline.checkpointing=" + c.checkpointing};
  if (c.checkpointing == "selective") sets.push_back("pipeline.keep=[linear, gelu]");
  ExpectSame(Train(name, c.ranks, sets), Reference());
}

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  for (const char* s : {"gpipe", "1f1b", "interleaved_1f1b", "zb_h1", "zb_h2", "zbv", "dualpipev", "interleaved_zb",
                        "zb_auto", "v_min", "v_half", "v_zb"}) {
    for (const char* p : {"none", "full", "selective"}) {
      for (int ranks : {2, 4}) cases.push_back({s, p, ranks});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllSchedules, Equivalence, ::testing::ValuesIn(baton_test::Sampled(AllCases(), 5)),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.schedule + "_" + info.param.checkpointing + "_" +
                                  std::to_string(info.param.ranks) + "ranks";
                         });

// PyTorch's own DualPipeV order, as its _dump_csv writes it (OVERLAP_F_B
// units, CRLF), loaded from the file and run on 4 ranks; the overlapped
// units run as their F then their B.
TEST(EquivalenceFiles, PyTorchDualPipeVFileMatchesOneRank) {
  const std::vector<std::string> ten = {"pipeline.microbatches=10", "train.batch_size=40"};
  const RunOutput ref = Train("dualpipev_ref", 1, ten);
  std::vector<std::string> sets = ten;
  sets.push_back("pipeline.schedule=" BATON_SOURCE_DIR "/schedules/dualpipev_4x10_pytorch.csv");
  ExpectSame(Train("dualpipev_file", 4, sets), ref);
}

TEST(EquivalenceAdamW, FourRanksZbvMatchesOneRank) {
  const std::vector<std::string> adamw = {"train.optimizer={type: adamw, lr: 0.01, weight_decay: 0.1}"};
  const RunOutput ref = Train("adamw_ref", 1, adamw);
  std::vector<std::string> sets = adamw;
  sets.push_back("pipeline.schedule=zbv");
  ExpectSame(Train("adamw_zbv", 4, sets), ref);
}

TEST(InitFrom, TwoPlusTwoStepsEqualFour) {
  // One batch per epoch (32 samples) and plain SGD: continuing from saved
  // weights must reproduce an uninterrupted run, on 3 ranks, by tensor name.
  const std::vector<std::string> base = {"data.samples=32", "train.optimizer={type: sgd, lr: 0.1}"};
  std::vector<std::string> four = base;
  four.push_back("train.steps=4");
  const RunOutput whole = Train("init_whole", 1, four);
  std::vector<std::string> two = base;
  two.push_back("train.steps=2");
  const fs::path saved = fs::path(::testing::TempDir()) / ("baton_init_" + std::to_string(::getpid()) + ".safetensors");
  struct Remove {  // the test leaves nothing behind, on every path
    fs::path path;
    ~Remove() { fs::remove(path); }
  } remove{saved};
  two.push_back("log.weights=" + saved.string());
  Train("init_first", 1, two);
  std::vector<std::string> rest = base;
  rest.push_back("train.steps=2");
  rest.push_back("model.init.from=" + two.back().substr(std::string("log.weights=").size()));
  const RunOutput second = Train("init_second", 3, rest);
  ASSERT_EQ(second.weights.size(), whole.weights.size());
  for (std::size_t t = 0; t < whole.weights.size(); ++t) {
    for (std::size_t k = 0; k < whole.weights[t].data.size(); ++k) {
      ASSERT_NEAR(second.weights[t].data[k], whole.weights[t].data[k], 1e-5 * (1 + std::abs(whole.weights[t].data[k])))
          << whole.weights[t].name;
    }
  }
  ASSERT_EQ(second.losses.size(), 2u);
  EXPECT_NEAR(second.losses[1], whole.losses[3], 1e-5 * whole.losses[3]);
}

// log.trace on 4 ranks under 1F1B (one stage a rank), every 2nd of 4 steps:
// the file is trace-event JSON with every rank's 8 forwards and 8
// backwards a traced step, and each message between ranks one flow, from
// the stage that made it to its neighbour (3 links x 8 microbatches each
// way, 48 a step), never arriving before it left.
TEST(Trace, FourRanksEveryRanksActionsAndEachMessageAsAFlow) {
  const fs::path trace = fs::path(::testing::TempDir()) / ("baton_trace_" + std::to_string(::getpid()) + ".json");
  struct Remove {
    fs::path path;
    ~Remove() { fs::remove(path); }
  } remove{trace};
  Train("trace", 4, {"log.trace=" + trace.string(), "log.trace_every=2"});
  std::ifstream in(trace);
  const nlohmann::json t = nlohmann::json::parse(in);
  std::map<std::pair<int, int>, int> compute;  // (step, rank) -> F and B
  std::map<long long, nlohmann::json> from, to;
  for (const nlohmann::json& e : t.at("traceEvents")) {
    if (e.at("ph") == "M") continue;
    if (e.at("ph") == "X" && e.at("cat") == "compute") ++compute[{e["args"]["step"], e["pid"]}];
    if (e.at("ph") == "s") from[e.at("id")] = e;
    if (e.at("ph") == "f") to[e.at("id")] = e;
  }
  for (const int step : {2, 4}) {
    for (int rank = 0; rank < 4; ++rank) EXPECT_EQ((compute[{step, rank}]), 16) << step << " " << rank;
  }
  EXPECT_EQ(compute.size(), 8u);
  ASSERT_EQ(from.size(), 2u * 48);
  for (const auto& [id, s] : from) {
    ASSERT_TRUE(to.count(id)) << id;
    const nlohmann::json& f = to.at(id);
    const int stage = s["args"]["stage"];
    EXPECT_EQ(s.at("pid"), stage) << s.dump();  // stage s on rank s
    EXPECT_EQ(f.at("pid").get<int>(), stage + (s.at("name") == "activation" ? 1 : -1)) << f.dump();
    EXPECT_LE(s.at("ts").get<double>(), f.at("ts").get<double>()) << s.dump() << " " << f.dump();
  }
}

}  // namespace
