// Packed documents (data.packing: greedy) learn exactly what one process
// learns on the same packing: a GPT on JSON Lines documents of random
// lengths (1 to 3x the budget: short ones packed several to a sample,
// long ones cut), for every generator on 2 and 4 ranks, with sequence
// slices, and over two replicas under ZeRO 1: the per-step losses and
// final weights equal the one-rank run's (a pure pipeline's bit for bit:
// each microbatch's sums are the one rank's; within 1e-5 relative where
// sums are regrouped). Every message arrives at the size both sides
// expect, or the run would not end. The default ctest runs every case on
// thread ranks; the mpirun build a sample.
#include <gtest/gtest.h>

#include <filesystem>
#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "run_helpers.h"
#include "support/random_documents.h"

namespace {

namespace fs = std::filesystem;
using baton_test::RunOutput;

// Documents of lengths 2..48 bytes (the budget is 16 positions), seeded:
// written once per test process.
const std::string& Documents() {
  static const std::string path = [] {
    const fs::path p = fs::path(::testing::TempDir()) / ("baton_packed_docs_" + std::to_string(::getpid()) + ".jsonl");
    baton_test::WriteRandomDocuments(p, 160, 2, 48, 5);
    return p.string();
  }();
  return path;
}

RunOutput Train(const std::string& name, int np, std::vector<std::string> sets) {
  const std::vector<std::string> packed = {
      "data={dataset: jsonl, path: " + Documents() + ", packing: greedy, max_tokens: 16}",
      "model.seq_len=16", "model.vocab=256", "train.steps=4", "train.batch_size=8",
      "train.optimizer={type: sgd, lr: 0.1, momentum: 0.9}"};
  sets.insert(sets.begin(), packed.begin(), packed.end());
  return baton_test::TrainRun("packed_" + name, "tests/mpi/tiny_gpt.yaml", np, sets);
}

const RunOutput& Reference() {
  static const RunOutput ref = Train("ref", 1, {"pipeline.ranks=1"});
  return ref;
}

struct Case {
  std::string schedule;
  int ranks;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.schedule << " on " << c.ranks << " ranks"; }

class PackedEquivalence : public ::testing::TestWithParam<Case> {};

TEST_P(PackedEquivalence, MatchesSingleProcessBitForBit) {
  const Case& c = GetParam();
  const RunOutput got = Train(c.schedule + "_" + std::to_string(c.ranks), c.ranks,
                              {"pipeline.ranks=" + std::to_string(c.ranks), "pipeline.schedule=" + c.schedule});
  baton_test::ExpectSameRun(got, Reference(), 0.0);
}

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  for (const char* s : {"gpipe", "1f1b", "interleaved_1f1b", "looped_bfs", "zb_h1", "zb_h2", "zbv", "interleaved_zb",
                        "dualpipev", "zb_auto", "v_half"}) {
    for (int ranks : {2, 4}) cases.push_back({s, ranks});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllSchedules, PackedEquivalence, ::testing::ValuesIn(baton_test::Sampled(AllCases(), 7)),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.schedule + "_" + std::to_string(info.param.ranks) + "ranks";
                         });

// Sequence slices of packed samples: a slice's tokens keep to their
// documents and take their positions in them (sums over keys split
// differently: within 1e-5).
TEST(PackedSlices, Seq1f1bMatchesSingleProcess) {
  baton_test::ExpectSameRun(
      Train("seq1f1b", 2, {"pipeline.ranks=2", "pipeline.schedule=seq1f1b", "pipeline.seq_slices=2"}), Reference());
}

// Two replicas of a 2-rank pipeline under ZeRO 1: each replica's share of
// a global batch normalised by the whole batch's real tokens; the sums in
// double (fp64) so that the replicas' regrouping adds nothing.
TEST(PackedReplicas, TwoByTwoUnderZeroOneMatchesSingleProcess) {
  static const RunOutput ref = Train("ref_fp64", 1, {"pipeline.ranks=1", "train.grad_accum_dtype=fp64"});
  baton_test::ExpectSameRun(Train("dp_zero1", 4, {"pipeline.ranks=2", "data_parallel.size=2", "data_parallel.zero=1",
                                                  "pipeline.microbatches=4", "train.grad_accum_dtype=fp64"}),
                            ref, 0.0);
}

// Random document lengths, one distribution a file: uniform from 2 tokens
// to the budget's, mostly single positions with a long tail, and
// log-normal lengths (median about an eighth of the budget) with a tail to
// three budgets (cut into pieces). Each microbatch goes at its own length,
// so the messages' sizes change every microbatch; every run must end with
// the one-rank run's bytes.
std::string RandomDocuments(const std::string& kind) {
  const fs::path p =
      fs::path(::testing::TempDir()) / ("baton_packed_" + kind + "_" + std::to_string(::getpid()) + ".jsonl");
  if (fs::exists(p)) return p.string();
  std::ofstream out(p);
  std::mt19937_64 rng(kind.size() * 31 + 7);
  std::uniform_int_distribution<int> uniform(2, 17), letter('a', 'z');
  std::lognormal_distribution<double> lognormal(std::log(3.0), 1.0);
  std::bernoulli_distribution tail(0.1);
  for (int d = 0; d < 1000; ++d) {
    int n = 0;
    if (kind == "uniform") n = uniform(rng);
    if (kind == "tail") n = tail(rng) ? 2 + static_cast<int>(rng() % 48) : 2;
    if (kind == "lognormal") n = std::clamp(static_cast<int>(std::lround(lognormal(rng))), 2, 49);
    std::string text(static_cast<std::size_t>(n), ' ');
    for (char& c : text) c = static_cast<char>(letter(rng));
    out << "{\"text\": \"" << text << "\"}\n";
  }
  return p.string();
}

struct RandomCase {
  std::string lengths, schedule;
  int ranks;
};

void PrintTo(const RandomCase& c, std::ostream* os) {
  *os << c.lengths << " lengths, " << c.schedule << " on " << c.ranks << " ranks";
}

class PackedRandomLengths : public ::testing::TestWithParam<RandomCase> {};

RunOutput TrainRandom(const RandomCase& c, int ranks, const std::string& schedule) {
  const std::vector<std::string> sets = {
      "data={dataset: jsonl, path: " + RandomDocuments(c.lengths) + ", packing: greedy, max_tokens: 16}",
      "model.seq_len=16", "model.vocab=256", "model.blocks=6", "train.steps=15", "train.batch_size=16",
      "pipeline.microbatches=16",
      "train.optimizer={type: sgd, lr: 0.1, momentum: 0.9}", "pipeline.ranks=" + std::to_string(ranks),
      "pipeline.schedule=" + schedule};
  return baton_test::TrainRun("packed_random_" + c.lengths + "_" + schedule + "_" + std::to_string(ranks),
                              "tests/mpi/tiny_gpt.yaml", ranks, sets);
}

TEST_P(PackedRandomLengths, EveryMessageArrivesAndTheRunIsTheOneRanks) {
  const RandomCase& c = GetParam();
  static std::map<std::string, RunOutput> references;
  if (!references.count(c.lengths)) references[c.lengths] = TrainRandom(c, 1, "1f1b");
  const RunOutput got = TrainRandom(c, c.ranks, c.schedule);
  ASSERT_EQ(got.losses.size(), 15u);
  baton_test::ExpectSameRun(got, references[c.lengths], 0.0);
}

// 3 distributions x (11 generators on 2 and 4 ranks, and on 8): 99 runs
// of 15 steps, 1,485 steps on thread ranks.
std::vector<RandomCase> RandomCases() {
  std::vector<RandomCase> cases;
  for (const char* lengths : {"uniform", "tail", "lognormal"}) {
    for (const char* s : {"gpipe", "1f1b", "interleaved_1f1b", "looped_bfs", "zb_h1", "zb_h2", "zbv",
                          "interleaved_zb", "dualpipev", "zb_auto", "v_half"}) {
      for (int ranks : {2, 4, 8}) cases.push_back({lengths, s, ranks});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(EveryGenerator, PackedRandomLengths,
                         ::testing::ValuesIn(baton_test::Sampled(RandomCases(), 19)),
                         [](const ::testing::TestParamInfo<RandomCase>& info) {
                           return info.param.lengths + "_" + info.param.schedule + "_" +
                                  std::to_string(info.param.ranks) + "ranks";
                         });

// Sequence slices at real lengths: 4 slices of 4 positions over documents
// of uniform random lengths, a sample a microbatch, so that many a
// sequence ends before its last slices (those run nothing, the one it ends
// in runs up to its length, its keys' gradients starting there): seq1f1b
// on 2 ranks and GPipe's sliced form on 4 learn what one unsliced rank
// learns, within 1e-5 (sums over keys split differently).
TEST(PackedSlices, SlicesRunUpToTheirSequencesLengthAndLearnWhatOneRankLearns) {
  const RandomCase c{"uniform", "1f1b", 1};
  static const RunOutput ref = TrainRandom(c, 1, "1f1b");
  for (const auto& [ranks, schedule] : std::vector<std::pair<int, std::string>>{{2, "seq1f1b"}, {4, "gpipe"}}) {
    const std::vector<std::string> sets = {
        "data={dataset: jsonl, path: " + RandomDocuments(c.lengths) + ", packing: greedy, max_tokens: 16}",
        "model.seq_len=16", "model.vocab=256", "model.blocks=6", "train.steps=15", "train.batch_size=16",
        "pipeline.microbatches=16", "train.optimizer={type: sgd, lr: 0.1, momentum: 0.9}",
        "pipeline.ranks=" + std::to_string(ranks), "pipeline.schedule=" + schedule, "pipeline.seq_slices=4"};
    const RunOutput got = baton_test::TrainRun("packed_short_slices_" + std::to_string(ranks), "tests/mpi/tiny_gpt.yaml",
                                               ranks, sets);
    ASSERT_EQ(got.losses.size(), 15u);
    baton_test::ExpectSameRun(got, ref);
  }
}

// balanced packs each batch's documents (greedy's) again: the same
// gradients in exact arithmetic, so under SGD the two runs end within 1e-5
// relative after 20 steps (only the sums inside a microbatch's products
// and across microbatches move; summed in double across them). And it
// learns on P ranks what it learns on one.
TEST(PackedBalanced, TrainsWhatGreedyTrainsAndOnPRanksWhatOneRankTrains) {
  const std::vector<std::string> common = {"train.steps=20", "train.grad_accum_dtype=fp64"};
  auto with = [&](std::vector<std::string> sets, const std::string& packing) {
    sets.insert(sets.end(), common.begin(), common.end());
    sets.push_back("data.packing=" + packing);
    return sets;
  };
  const RunOutput greedy = Train("balanced_vs_greedy_g", 1, with({"pipeline.ranks=1"}, "greedy"));
  const RunOutput balanced = Train("balanced_vs_greedy_b", 1, with({"pipeline.ranks=1"}, "balanced"));
  baton_test::ExpectSameRun(balanced, greedy, 1e-5);
  baton_test::ExpectSameRun(
      Train("balanced_zbv", 2, with({"pipeline.ranks=2", "pipeline.schedule=zbv"}, "balanced")), balanced, 0.0);
}

// pad (one document a sample, every position of the budget computed: the
// fixed-shape baseline) learns on P ranks what it learns on one, bit for
// bit: its microbatches are one shape, their padding ignored by the loss.
TEST(PackedPadded, OnPRanksWhatOneRankTrains) {
  const RunOutput one = Train("pad_ref", 1, {"pipeline.ranks=1", "data.packing=pad"});
  ASSERT_EQ(one.losses.size(), 4u);
  baton_test::ExpectSameRun(Train("pad_1f1b", 2, {"pipeline.ranks=2", "data.packing=pad"}), one, 0.0);
  baton_test::ExpectSameRun(
      Train("pad_zbv", 2, {"pipeline.ranks=2", "pipeline.schedule=zbv", "data.packing=pad"}), one, 0.0);
}

// train.batch_tokens: each step's documents by tokens (at most 80 of the
// 8 x 16 positions), its microbatches as many as they fill, the empty ones
// never run (nor their messages sent): on P ranks the bytes of one rank on
// the same steps, the count changing from step to step; microbatches of
// two samples, the last one partly filled; balanced within 1e-5 of greedy;
// and two replicas under ZeRO 1, each its share of the step's samples.
RunOutput TrainByTokens(const std::string& name, int np, std::vector<std::string> sets) {
  sets.insert(sets.begin(), {"train.batch_tokens=80", "train.steps=8", "pipeline.microbatches=8",
                             "train.grad_accum_dtype=fp64"});
  return Train("tokens_" + name, np, sets);
}

TEST(PackedByTokens, TheMicrobatchCountChangesAndPRanksTrainWhatOneRankTrains) {
  const RunOutput one = TrainByTokens("ref", 1, {"pipeline.ranks=1"});
  ASSERT_EQ(one.losses.size(), 8u);
  ASSERT_EQ(one.microbatches.size(), 8u);
  ASSERT_EQ(one.tokens.size(), 8u);
  for (std::size_t k = 0; k < one.tokens.size(); ++k) {
    EXPECT_LE(one.tokens[k], 80) << "step " << k + 1;
    EXPECT_GE(one.microbatches[k], std::ceil(one.tokens[k] / 16)) << "step " << k + 1;
    EXPECT_LE(one.microbatches[k], 8) << "step " << k + 1;
  }
  EXPECT_LT(*std::min_element(one.microbatches.begin(), one.microbatches.end()), 8);
  EXPECT_NE(*std::min_element(one.microbatches.begin(), one.microbatches.end()),
            *std::max_element(one.microbatches.begin(), one.microbatches.end()));
  for (const char* schedule : {"1f1b", "zbv", "interleaved_1f1b", "dualpipev"}) {
    const RunOutput got = TrainByTokens(std::string("p2_") + schedule, 2,
                                        {"pipeline.ranks=2", std::string("pipeline.schedule=") + schedule});
    baton_test::ExpectSameRun(got, one, 0.0);
    EXPECT_EQ(got.microbatches, one.microbatches) << schedule;
  }
  baton_test::ExpectSameRun(TrainByTokens("gpipe4", 4, {"pipeline.ranks=4", "pipeline.schedule=gpipe"}), one, 0.0);
  // Sequence slices: each slice up to its sequence's length, the empty
  // sequences' not at all (sums over keys split differently: 1e-5).
  const RunOutput sliced = TrainByTokens("seq1f1b", 2, {"pipeline.ranks=2", "pipeline.schedule=seq1f1b",
                                                        "pipeline.seq_slices=2"});
  baton_test::ExpectSameRun(sliced, one, 1e-5);
  EXPECT_EQ(sliced.microbatches, one.microbatches);
  // Two samples a microbatch: a step's last one may hold one.
  const RunOutput rows2 = TrainByTokens("rows2_ref", 1, {"pipeline.ranks=1", "pipeline.microbatches=4"});
  baton_test::ExpectSameRun(TrainByTokens("rows2", 2, {"pipeline.ranks=2", "pipeline.microbatches=4"}), rows2, 0.0);
  baton_test::ExpectSameRun(rows2, one, 1e-5);
  baton_test::ExpectSameRun(TrainByTokens("balanced", 1, {"pipeline.ranks=1", "data.packing=balanced"}), one, 1e-5);
  baton_test::ExpectSameRun(TrainByTokens("dp_zero1", 4, {"pipeline.ranks=2", "data_parallel.size=2",
                                                          "data_parallel.zero=1", "pipeline.microbatches=4"}),
                            one, 1e-6);
}

// A packed run's checkpoint resumes to the same bytes: the packing is the
// documents' and the budget's, so the loader seeks to the same samples;
// balanced arranges the batch it seeks to as the uninterrupted run
// arranged it.
TEST(PackedResume, ACheckpointResumesToTheUninterruptedRunsBytes) {
  for (const std::string packing : {"greedy", "balanced"}) {
    SCOPED_TRACE(packing);
    const fs::path ck =
        fs::path(::testing::TempDir()) / ("baton_packed_ck_" + packing + "_" + std::to_string(::getpid()));
    fs::remove_all(ck);
    const std::vector<std::string> sets = {"pipeline.ranks=2", "data.packing=" + packing,
                                           "checkpoint.dir=" + ck.string(), "checkpoint.every_steps=2",
                                           "checkpoint.keep=10"};
    const RunOutput whole = Train("ck_whole_" + packing, 2, sets);
    ASSERT_TRUE(fs::exists(ck / "step-00000002" / "manifest.json"));
    fs::remove_all(ck / "step-00000004");
    std::vector<std::string> again = sets;
    again.push_back("checkpoint.resume=auto");
    std::string log;
    const RunOutput resumed = baton_test::TrainRun("packed_ck_resumed_" + packing, "tests/mpi/tiny_gpt.yaml", 2, [&] {
      std::vector<std::string> all = {"data={dataset: jsonl, path: " + Documents() + ", packing: greedy, max_tokens: 16}",
                                      "model.seq_len=16", "model.vocab=256", "train.steps=4", "train.batch_size=8",
                                      "train.optimizer={type: sgd, lr: 0.1, momentum: 0.9}"};
      all.insert(all.end(), again.begin(), again.end());
      return all;
    }(), &log);
#ifndef BATON_RANKS_AS_THREADS
    EXPECT_NE(log.find("resumed after step 2"), std::string::npos) << log;
#endif
    // It trained steps 3 and 4 only, to the same losses.
    ASSERT_EQ(resumed.losses.size(), 2u);
    ASSERT_EQ(whole.losses.size(), 4u);
    EXPECT_EQ(resumed.losses[0], whole.losses[2]);
    EXPECT_EQ(resumed.losses[1], whole.losses[3]);
    ASSERT_EQ(resumed.weights.size(), whole.weights.size());
    for (std::size_t t = 0; t < whole.weights.size(); ++t) {
      EXPECT_EQ(resumed.weights[t].data, whole.weights[t].data) << whole.weights[t].name;
    }
    fs::remove_all(ck);
  }
}

}  // namespace
