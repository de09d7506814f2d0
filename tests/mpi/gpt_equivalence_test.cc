// A GPT (tests/mpi/tiny_gpt.yaml: token and position embeddings, two
// attention + MLP blocks, a final layernorm and an LM head, on synthetic
// tokens) learns exactly what one process learns: for every generator and
// checkpointing policy, on 2 and 4 ranks, with the head tied to the token
// embedding and untied, the per-step losses and the final weights equal the
// one-rank run's within 1e-5 relative. With a tied head, its copy on the
// last stage stays bit-identical to the embedding on the first. The same
// for stages cut unevenly by pipeline.layout.
#include <gtest/gtest.h>

#include <ostream>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "run_helpers.h"

namespace {

namespace fs = std::filesystem;
using baton_test::RunOutput;

RunOutput Train(const std::string& name, int ranks, std::vector<std::string> sets) {
  sets.insert(sets.begin(), "pipeline.ranks=" + std::to_string(ranks));
  return baton_test::TrainRun("gpt_" + name, "tests/mpi/tiny_gpt.yaml", ranks, sets);
}

const baton::NamedTensor* Find(const RunOutput& r, const std::string& name) {
  for (const auto& t : r.weights) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

void ExpectSame(const RunOutput& got, const RunOutput& ref, bool tied) {
  ASSERT_EQ(ref.losses.size(), 3u);
  // wte, wpe, per block ln_1 (2), attn (4), ln_2 (2), c_fc (2), c_proj (2), ln_f (2), lm_head.
  ASSERT_EQ(ref.weights.size(), 2u + 2 * 12 + 2 + 1);
  baton_test::ExpectSameRun(got, ref);
  const auto* wte = Find(got, "transformer.wte.weight");
  const auto* head = Find(got, "lm_head.weight");
  ASSERT_TRUE(wte != nullptr && head != nullptr);
  if (tied) {
    EXPECT_EQ(wte->data, head->data) << "the tied copies drifted apart";
  } else {
    EXPECT_NE(wte->data, head->data);
  }
}

const RunOutput& Reference(bool tied) {
  static const RunOutput ref_tied = Train("ref_tied", 1, {"model.tied=true"});
  static const RunOutput ref_untied = Train("ref_untied", 1, {"model.tied=false"});
  return tied ? ref_tied : ref_untied;
}

struct Case {
  std::string schedule, checkpointing;
  int ranks;
  bool tied;
};

// ctest lists a case by what it runs, not by its bytes.
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.schedule << ", checkpointing " << c.checkpointing << ", " << c.ranks << " ranks, "
      << (c.tied ? "tied" : "untied") << " head";
}

class GptEquivalence : public ::testing::TestWithParam<Case> {};

TEST_P(GptEquivalence, MatchesSingleProcess) {
  const Case& c = GetParam();
  const std::string name =
      c.schedule + "_" + c.checkpointing + "_" + std::to_string(c.ranks) + (c.tied ? "_tied" : "_untied");
  std::vector<std::string> sets = {"pipeline.schedule=" + c.schedule, "pipeline.checkpointing=" + c.checkpointing,
                                   std::string("model.tied=") + (c.tied ? "true" : "false")};
  // Keep only what attention computes: the MLP's products are recomputed
  // too (more than the default, which keeps linear outputs as well).
  if (c.checkpointing == "selective") sets.push_back("pipeline.keep=[attention]");
  ExpectSame(Train(name, c.ranks, sets), Reference(c.tied), c.tied);
}

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  for (const char* s : {"gpipe", "1f1b", "interleaved_1f1b", "zb_h1", "zb_h2", "zbv"}) {
    for (const char* p : {"none", "full", "selective"}) {
      for (int ranks : {2, 4}) {
        for (bool tied : {true, false}) cases.push_back({s, p, ranks, tied});
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllSchedules, GptEquivalence, ::testing::ValuesIn(baton_test::Sampled(AllCases(), 5)),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.schedule + "_" + info.param.checkpointing + "_" +
                                  std::to_string(info.param.ranks) + "ranks_" + (info.param.tied ? "tied" : "untied");
                         });

// pipeline.layout cuts the model unevenly (the embedding alone on rank 0,
// or the loss end alone on rank 1): still the one-rank run's numbers.
TEST(GptLayout, UnevenLayoutsMatchSingleProcess) {
  ExpectSame(Train("layout_e_alone", 2, {"pipeline.layout=E|t*2,L", "model.tied=true"}), Reference(true), true);
  ExpectSame(Train("layout_l_alone", 2, {"pipeline.layout=E,t*2|L", "pipeline.schedule=zb_h1", "model.tied=false"}),
             Reference(false), false);
}

}  // namespace
