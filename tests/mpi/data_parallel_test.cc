// Data parallelism x pipeline parallelism: P x D ranks as D replicas of a
// P-rank pipeline learn exactly what one process learns on the same global
// batch: per-step losses and final weights equal the one-rank run within
// 1e-5 relative, for 2 x 2, 1 x 4, 4 x 1 (and 2 x 4), 1F1B, ZB-H1 and ZB-V,
// SGD with momentum and AdamW, the optimizer state whole or sharded (ZeRO
// stage 1), with buckets small enough that every stage has several; and
// with the gradients (ZeRO 2) and the parameters (ZeRO 3) sharded too, for
// 2 x 2, 1 x 4 and 2 x 4, 1F1B, ZB-H1, interleaved 1F1B and ZB-V. The
// GPT's tied head sums its copies' gradients across the pipeline and across
// the replicas. Each replica evaluates its own share of the validation
// set, and together they report the one-rank run's loss.
#include <gtest/gtest.h>

#include <ostream>

#include <filesystem>
#include <string>
#include <vector>

#include "run_helpers.h"

namespace {

using baton_test::ExpectSameRun;
using baton_test::RunOutput;
using baton_test::TrainRun;

constexpr const char* kTiny = "tests/mpi/tiny.yaml";
constexpr const char* kTinyGpt = "tests/mpi/tiny_gpt.yaml";
const std::string kAdamW = "train.optimizer={type: adamw, lr: 0.01, weight_decay: 0.1}";
// 0.001 MiB = 262 floats a bucket: several buckets per stage of the tiny models.
const std::string kSmallBuckets = "data_parallel.bucket_cap_mb=0.001";

const RunOutput& Reference(const std::string& optimizer) {
  static const RunOutput sgd = TrainRun("dp_ref_sgd", kTiny, 1, {});
  static const RunOutput adamw = TrainRun("dp_ref_adamw", kTiny, 1, {kAdamW});
  return optimizer == "adamw" ? adamw : sgd;
}

struct Case {
  int pipeline, replicas;
  std::string schedule, optimizer;
  int zero;
};

// ctest lists a case by what it runs, not by its bytes.
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.replicas << " replicas of a " << c.pipeline << "-rank " << c.schedule << " pipeline, " << c.optimizer
      << (c.zero ? ", ZeRO " + std::to_string(c.zero) : "");
}

class DataParallel : public ::testing::TestWithParam<Case> {};

TEST_P(DataParallel, MatchesOneProcessOnTheGlobalBatch) {
  const Case& c = GetParam();
  std::vector<std::string> sets = {"pipeline.ranks=" + std::to_string(c.pipeline),
                                   "pipeline.schedule=" + c.schedule,
                                   "data_parallel.size=" + std::to_string(c.replicas),
                                   "data_parallel.zero=" + std::to_string(c.zero), kSmallBuckets};
  if (c.optimizer == "adamw") sets.push_back(kAdamW);
  const std::string name = std::to_string(c.pipeline) + "x" + std::to_string(c.replicas) + "_" + c.schedule + "_" +
                           c.optimizer + "_zero" + std::to_string(c.zero);
  ExpectSameRun(TrainRun(name, kTiny, c.pipeline * c.replicas, sets), Reference(c.optimizer));
}

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  for (auto [p, d] : {std::pair{2, 2}, std::pair{1, 4}, std::pair{4, 1}}) {
    for (const char* s : {"1f1b", "zb_h1", "zbv"}) {
      for (const char* o : {"sgd", "adamw"}) {
        for (int zero : {0, 1}) {
          if (d == 1 && zero == 1) continue;  // one replica: nothing to shard
          cases.push_back({p, d, s, o, zero});
        }
      }
    }
  }
  // Eight ranks: two-rank pipelines, four replicas.
  cases.push_back({2, 4, "1f1b", "adamw", 1});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Layouts, DataParallel, ::testing::ValuesIn(baton_test::Sampled(AllCases(), 3)),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           const Case& c = info.param;
                           return std::to_string(c.pipeline) + "x" + std::to_string(c.replicas) + "_" + c.schedule +
                                  "_" + c.optimizer + "_zero" + std::to_string(c.zero);
                         });

// ZeRO 2 and 3: the actions placed by baton in each schedule (one rank
// interleaving 2 chunks: groups of layers gathered in turn).
std::vector<Case> ShardedCases() {
  std::vector<Case> cases;
  int n = 0;
  for (auto [p, d] : {std::pair{2, 2}, std::pair{1, 4}, std::pair{2, 4}}) {
    for (const char* s : {"1f1b", "zb_h1", "interleaved_1f1b", "zbv"}) {
      for (int zero : {2, 3}) cases.push_back({p, d, s, n++ % 2 ? "adamw" : "sgd", zero});
    }
  }
  // Sharded data parallel without a pipeline over groups of layers: each
  // chunk gathered for its forwards and again for its backwards.
  cases.push_back({1, 4, "looped_bfs", "adamw", 3});
  cases.push_back({1, 2, "looped_bfs", "sgd", 2});
  return cases;
}

class ShardedDataParallel : public ::testing::TestWithParam<Case> {};

TEST_P(ShardedDataParallel, MatchesOneProcessOnTheGlobalBatch) {
  const Case& c = GetParam();
  std::vector<std::string> sets = {"pipeline.ranks=" + std::to_string(c.pipeline),
                                   "pipeline.schedule=" + c.schedule,
                                   "data_parallel.size=" + std::to_string(c.replicas),
                                   "data_parallel.zero=" + std::to_string(c.zero)};
  if (c.schedule == "interleaved_1f1b") sets.push_back("pipeline.chunks=2");
  if (c.schedule == "looped_bfs") sets.push_back("pipeline.chunks=4");
  if (c.optimizer == "adamw") sets.push_back(kAdamW);
  const std::string name = "sharded_" + std::to_string(c.pipeline) + "x" + std::to_string(c.replicas) + "_" +
                           c.schedule + "_" + c.optimizer + "_zero" + std::to_string(c.zero);
  ExpectSameRun(TrainRun(name, kTiny, c.pipeline * c.replicas, sets), Reference(c.optimizer));
}

INSTANTIATE_TEST_SUITE_P(Layouts, ShardedDataParallel, ::testing::ValuesIn(baton_test::Sampled(ShardedCases(), 3)),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           const Case& c = info.param;
                           return std::to_string(c.pipeline) + "x" + std::to_string(c.replicas) + "_" + c.schedule +
                                  "_" + c.optimizer + "_zero" + std::to_string(c.zero);
                         });

TEST(DataParallelGpt, TiedHeadAcrossRanksAndReplicas) {
  // The head on rank 1, the embedding on rank 0, in both replicas. SGD
  // with momentum: replicas change the order of the gradients' sums, and
  // AdamW divides gradients near zero by their own size (the key part of
  // c_attn.bias has an exact gradient of zero, in floats rounding noise
  // that depends on that order), so its weights land 1.2e-5 apart after 3
  // steps even with eps 1e-5; the MLP cases above run AdamW.
  const std::string sgd = "train.optimizer={type: sgd, lr: 0.1, momentum: 0.9}";
  const RunOutput ref = TrainRun("dp_gpt_ref", kTinyGpt, 1, {sgd});
  for (int zero : {0, 1, 2, 3}) {
    SCOPED_TRACE("zero " + std::to_string(zero));
    const RunOutput got =
        TrainRun("dp_gpt_" + std::to_string(zero), kTinyGpt, 4,
                 {"pipeline.ranks=2", "pipeline.schedule=zb_h1", "data_parallel.size=2",
                  "data_parallel.zero=" + std::to_string(zero), kSmallBuckets, sgd});
    ExpectSameRun(got, ref);
  }
}

TEST(DataParallelEvaluation, ReplicasShareTheValidationSet) {
  // The tiny GPT on fortunes' byte windows: replica r of D evaluates
  // windows [r N / D, (r + 1) N / D); the shares' sums make the one-rank
  // validation loss (only the grouping of the sum differs).
  if (!std::filesystem::exists("/usr/share/games/fortunes")) {
    GTEST_SKIP() << "/usr/share/games/fortunes not present: install the Debian package fortunes";
  }
  const std::vector<std::string> common = {"data={dataset: fortunes, seq_len: 8}", "model.vocab=256",
                                           "train.steps=2", "pipeline.microbatches=4",
                                           "train.optimizer={type: sgd, lr: 0.1}"};
  const RunOutput ref = TrainRun("dp_eval_ref", kTinyGpt, 1, common);
  ASSERT_EQ(ref.evaluation.size(), 1u);
  ASSERT_EQ(ref.evaluated.size(), 1u);
  EXPECT_GT(ref.evaluated[0], 1000);
  for (auto [p, d] : {std::pair{2, 2}, std::pair{1, 4}}) {
    SCOPED_TRACE(std::to_string(p) + " x " + std::to_string(d));
    std::vector<std::string> sets = common;
    sets.push_back("pipeline.ranks=" + std::to_string(p));
    sets.push_back("data_parallel.size=" + std::to_string(d));
    const RunOutput got = TrainRun("dp_eval_" + std::to_string(p) + "x" + std::to_string(d), kTinyGpt, p * d, sets);
    ASSERT_EQ(got.evaluation.size(), 1u);
    ASSERT_EQ(got.evaluated.size(), 1u);
    EXPECT_EQ(got.evaluated[0], ref.evaluated[0]) << "every token once";
    EXPECT_NEAR(got.evaluation[0], ref.evaluation[0], 1e-6 * ref.evaluation[0]);
    ExpectSameRun(got, ref);
  }
}

}  // namespace
