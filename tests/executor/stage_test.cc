#include "stage.h"

#include <gtest/gtest.h>

#include <memory>

#include "baton/host.h"
#include "baton/config.h"
#include "baton/error.h"
#include "baton/plan.h"

namespace baton {
namespace {

TrainConfig Tiny(const std::vector<std::string>& sets = {}) {
  return LoadTrainConfig(BATON_SOURCE_DIR "/tests/mpi/tiny.yaml", sets);
}

std::vector<int> PartitionLayers(const TrainConfig& c, int stages) {
  return baton::PartitionLayers(c, DescribeModel(c.model.layers, c.model.input), stages);
}

// One stage of tiny.yaml on the host, planned as a run would plan it: the
// local stage `local` of rank `rank` under the settings `sets`.
struct PlannedStage {
  RunPlan run;
  RankPlan rank;
  std::unique_ptr<Stage> stage;
};
std::unique_ptr<PlannedStage> Plan(const std::vector<std::string>& sets, int rank = 0, int local = 0) {
  auto p = std::make_unique<PlannedStage>();
  p->run = PlanRun(Tiny(sets));
  p->rank = PlanRank(p->run, rank);
  p->stage = std::make_unique<Stage>(p->run.model, p->rank.local_stages.at(local), MakeHostStageDevice());
  return p;
}
std::size_t SlotFloats(const PlannedStage& p) { return p.stage->plan().slot_bytes / sizeof(float); }

std::string PartitionError(const std::vector<std::string>& sets, int stages) {
  try {
    PartitionLayers(Tiny(sets), stages);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(Partition, ExplicitCountsAreChecked) {
  EXPECT_EQ(PartitionLayers(Tiny({"pipeline.partition=[2, 3, 4]"}), 3), (std::vector<int>{0, 2, 5, 9}));
  EXPECT_NE(PartitionError({"pipeline.partition=[2, 3, 3]"}, 3).find("add up to 8 layers, but the model has 9"),
            std::string::npos);
  EXPECT_NE(PartitionError({"pipeline.partition=[4, 5]"}, 3).find("lists 2 stages, but the pipeline has 3"),
            std::string::npos);
  EXPECT_NE(PartitionError({}, 10).find("needs 10 stages"), std::string::npos);
  EXPECT_NE(PartitionError({}, 10).find("only 9 layers"), std::string::npos);
  try {
    Tiny({"pipeline.partition=[0, 9]"});
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("every stage needs at least one layer, got 0"), std::string::npos);
  }
}

TEST(Partition, BalancedMinimisesTheHeaviestStage) {
  // By parameters: linear(12->32) 416+1, residual 64+1056+1, linear(32->24) 792+1, layernorm 48+1,
  // linear(24->16) 400+1, linear(16->4) 68+1; relu/gelu weigh 1.
  const std::vector<int> b = PartitionLayers(Tiny(), 2);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b.front(), 0);
  EXPECT_EQ(b.back(), 9);
  EXPECT_EQ(b[1], 3);  // {linear, gelu, residual} = 1540 against the rest = 1714
  for (int stages = 1; stages <= 9; ++stages) {
    const std::vector<int> cut = PartitionLayers(Tiny(), stages);
    for (int s = 0; s < stages; ++s) EXPECT_LT(cut[s], cut[s + 1]) << "an empty stage";
  }
}

TEST(Stage, CheckpointingDecidesWhatASlotKeeps) {
  // One rank: one stage of all 9 layers, the last; 32 samples in 8
  // microbatches of 4 rows.
  const auto none = Plan({"pipeline.checkpointing=none"});
  const auto full = Plan({"pipeline.checkpointing=full"});
  const auto selective = Plan({"pipeline.checkpointing=selective", "pipeline.keep=[linear]"});
  // full: the input (12 features) and the last stage's dlogits (4) per row.
  EXPECT_EQ(SlotFloats(*full), 4u * (12 + 4));
  EXPECT_LT(SlotFloats(*full), SlotFloats(*selective));
  EXPECT_LT(SlotFloats(*selective), SlotFloats(*none));
  // selective keeps the outputs of the linears that are not the last op:
  // 32 (layer 0), 32 (inside the block), 24, 16.
  EXPECT_EQ(SlotFloats(*selective), 4u * (12 + 32 + 32 + 24 + 16 + 4));
  // A split backward (ZB-H1 runs I and W apart) also keeps each weighted
  // layer's output gradient.
  const auto split = Plan({"pipeline.checkpointing=selective", "pipeline.keep=[linear]", "pipeline.schedule=zb_h1"});
  ASSERT_TRUE(split->stage->plan().split_backward);
  EXPECT_EQ(SlotFloats(*split) - SlotFloats(*selective), 4u * (32 + 32 + 32 + 24 + 24 + 16 + 4));
}

TEST(Stage, ParameterNamesFollowNnSequential) {
  // Rank 1 of 3 holds layers 2 and 3.
  const auto planned = Plan({"pipeline.ranks=3", "pipeline.partition=[2, 2, 5]"}, 1);
  const Stage& st = *planned->stage;
  std::vector<std::string> names;
  for (const auto& p : st.named_params()) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"2.0.weight", "2.0.bias", "2.1.weight", "2.1.bias", "3.weight",
                                             "3.bias"}));
  EXPECT_EQ(st.named_params()[2].shape, (std::vector<std::int64_t>{32, 32}));
  EXPECT_EQ(st.named_params()[4].shape, (std::vector<std::int64_t>{24, 32}));
}

TEST(Stage, InitDoesNotDependOnThePartition) {
  const auto whole = Plan({});
  Stage& a = *whole->stage;
  a.Init(42);
  // Rank 1 of 2 holds layers 3..8.
  const auto part = Plan({"pipeline.ranks=2", "pipeline.partition=[3, 6]"}, 1);
  Stage& b = *part->stage;
  b.Init(42);
  // Layer 3's weight is the first parameter of b; find it in a.
  for (const auto& pb : b.named_params()) {
    for (const auto& pa : a.named_params()) {
      if (pa.name != pb.name) continue;
      ASSERT_EQ(pa.data.size(), pb.data.size());
      for (std::size_t k = 0; k < pa.data.size(); ++k) ASSERT_EQ(pa.data[k], pb.data[k]) << pa.name;
    }
  }
}

}  // namespace
}  // namespace baton
