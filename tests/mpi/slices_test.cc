// Sequence slices (Seq1F1B) learn exactly what one process learns on whole
// sequences: tests/mpi/tiny_gpt.yaml with pipeline.seq_slices k = 2 and 4,
// on 2 and 4 ranks, tied and untied, with seq1f1b and every other schedule
// that runs slices, in its own order (zb_h1, zb_h2, interleaved_1f1b, zbv)
// or by expansion (the rest): the per-step losses and final weights equal
// the one-rank run's without slices within 1e-5 relative (the sums over
// keys are split differently, so not bit for bit). Also the checkpointing
// policies, the compute split's uneven slices, and evaluation over slices.
// With SGD, as for data parallelism's regrouped sums: AdamW turns the float
// rounding of gradients that are mathematically zero (the key part of
// c_attn.bias: softmax ignores a constant added to every score) into
// updates of any size, so no tolerance could tell right from wrong there.
#include <gtest/gtest.h>

#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "baton/schedule.h"
#include "run_helpers.h"

namespace {

using baton_test::RunOutput;

constexpr const char* kTinyGpt = "tests/mpi/tiny_gpt.yaml";

RunOutput Train(const std::string& name, int ranks, std::vector<std::string> sets) {
  sets.insert(sets.begin(), "pipeline.ranks=" + std::to_string(ranks));
  sets.insert(sets.begin(), "train.optimizer={type: sgd, lr: 0.1, momentum: 0.9}");
  return baton_test::TrainRun("slices_" + name, kTinyGpt, ranks, sets);
}

const RunOutput& Reference(bool tied) {
  static const RunOutput ref_tied = Train("ref_tied", 1, {"model.tied=true"});
  static const RunOutput ref_untied = Train("ref_untied", 1, {"model.tied=false"});
  return tied ? ref_tied : ref_untied;
}

struct Case {
  std::string schedule;
  int slices, ranks;
  bool tied;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.schedule << ", " << c.slices << " slices, " << c.ranks << " ranks, " << (c.tied ? "tied" : "untied");
}

class SlicedGpt : public ::testing::TestWithParam<Case> {};

TEST_P(SlicedGpt, MatchesSingleProcessOnWholeSequences) {
  const Case& c = GetParam();
  const std::string name = c.schedule + "_" + std::to_string(c.slices) + "_" + std::to_string(c.ranks) +
                           (c.tied ? "_tied" : "_untied");
  const RunOutput got = Train(name, c.ranks,
                              {"pipeline.schedule=" + c.schedule, "pipeline.seq_slices=" + std::to_string(c.slices),
                               std::string("model.tied=") + (c.tied ? "true" : "false")});
  baton_test::ExpectSameRun(got, Reference(c.tied));
}

// Every generator that runs slices (all but 1f1b, whose sliced form is
// seq1f1b), in the registry's order.
std::vector<std::string> SlicedSchedules() {
  std::vector<std::string> out;
  for (const baton::GeneratorEntry& g : baton::Generators()) {
    if (g.traits.slices) out.emplace_back(g.name);
  }
  return out;
}

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  for (const std::string& s : SlicedSchedules()) {
    for (int k : {2, 4}) {
      for (int ranks : {2, 4}) {
        for (bool tied : {true, false}) cases.push_back({s, k, ranks, tied});
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(SlicedSchedules, SlicedGpt, ::testing::ValuesIn(baton_test::Sampled(AllCases(), 7)),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.schedule + "_" + std::to_string(info.param.slices) + "slices_" +
                                  std::to_string(info.param.ranks) + "ranks_" +
                                  (info.param.tied ? "tied" : "untied");
                         });

// Recomputation inside the backward of a slice (its attention reads the
// sequence's keys again), with I and W apart, and the compute split's
// uneven cuts (8 tokens in 3 slices).
TEST(SlicedGptPolicies, CheckpointingAndTheComputeSplitMatchSingleProcess) {
  baton_test::ExpectSameRun(Train("full_zb_h1", 2, {"pipeline.schedule=zb_h1", "pipeline.seq_slices=4",
                                                    "pipeline.checkpointing=full", "model.tied=true"}),
                            Reference(true));
  baton_test::ExpectSameRun(Train("selective_seq1f1b", 4, {"pipeline.schedule=seq1f1b", "pipeline.seq_slices=2",
                                                           "pipeline.checkpointing=selective",
                                                           "pipeline.keep=[attention]", "model.tied=false"}),
                            Reference(false));
  baton_test::ExpectSameRun(Train("compute_split", 2, {"pipeline.schedule=seq1f1b", "pipeline.seq_slices=3",
                                                       "pipeline.seq_split=compute", "model.tied=true"}),
                            Reference(true));
}

// Evaluation runs the slices' forwards too: the validation loss of the
// tiny GPT on fortunes' byte windows, sliced on 2 ranks, is the one-rank
// run's over the same tokens.
TEST(SlicedGptEvaluation, TheValidationLossIsTheWholeSequences) {
  if (!std::filesystem::exists("/usr/share/games/fortunes")) {
    GTEST_SKIP() << "/usr/share/games/fortunes not present: install the Debian package fortunes";
  }
  const std::vector<std::string> common = {"data={dataset: fortunes, seq_len: 8}", "model.vocab=256", "train.steps=2",
                                           "pipeline.microbatches=4", "train.optimizer={type: sgd, lr: 0.1}"};
  const RunOutput ref = Train("eval_ref", 1, common);
  ASSERT_EQ(ref.evaluation.size(), 1u);
  std::vector<std::string> sets = common;
  sets.insert(sets.end(), {"pipeline.schedule=seq1f1b", "pipeline.seq_slices=4"});
  const RunOutput got = Train("eval_sliced", 2, sets);
  ASSERT_EQ(got.evaluation.size(), 1u);
  EXPECT_EQ(got.evaluated, ref.evaluated) << "every token once";
  EXPECT_NEAR(got.evaluation[0], ref.evaluation[0], 1e-5 * ref.evaluation[0]);
  baton_test::ExpectSameRun(got, ref);
}

}  // namespace
