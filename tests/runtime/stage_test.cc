#include "stage.h"

#include <gtest/gtest.h>

#include "baton/config.h"
#include "baton/error.h"

namespace baton {
namespace {

TrainConfig Tiny(const std::vector<std::string>& sets = {}) {
  return LoadTrainConfig(BATON_SOURCE_DIR "/tests/mpi/tiny.yaml", sets);
}

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
  const TrainConfig c = Tiny();
  StageOptions o;
  o.first_layer = 0;
  o.last_layer = 9;
  o.rows = 4;
  o.is_last = true;
  o.checkpointing = Checkpointing::kNone;
  const Stage none(c.model.layers, c.model.input, o);
  o.checkpointing = Checkpointing::kFull;
  const Stage full(c.model.layers, c.model.input, o);
  o.checkpointing = Checkpointing::kSelective;
  o.keep = {"linear"};
  const Stage selective(c.model.layers, c.model.input, o);
  // full: the input (12 features) and the last stage's dlogits (4) per row.
  EXPECT_EQ(full.slot_floats(), 4u * (12 + 4));
  EXPECT_LT(full.slot_floats(), selective.slot_floats());
  EXPECT_LT(selective.slot_floats(), none.slot_floats());
  // selective keeps the outputs of the linears that are not the last op:
  // 32 (layer 0), 32 (inside the block), 24, 16.
  EXPECT_EQ(selective.slot_floats(), 4u * (12 + 32 + 32 + 24 + 16 + 4));
  // A split backward also keeps each weighted layer's output gradient.
  o.split_backward = true;
  const Stage split(c.model.layers, c.model.input, o);
  EXPECT_EQ(split.slot_floats() - selective.slot_floats(), 4u * (32 + 32 + 32 + 24 + 24 + 16 + 4));
}

TEST(Stage, ParameterNamesFollowNnSequential) {
  const TrainConfig c = Tiny();
  StageOptions o;
  o.first_layer = 2;
  o.last_layer = 4;
  o.rows = 1;
  const Stage st(c.model.layers, c.model.input, o);
  std::vector<std::string> names;
  for (const auto& p : st.named_params()) names.push_back(p.name);
  EXPECT_EQ(names, (std::vector<std::string>{"2.0.weight", "2.0.bias", "2.1.weight", "2.1.bias", "3.weight",
                                             "3.bias"}));
  EXPECT_EQ(st.named_params()[2].shape, (std::vector<std::int64_t>{32, 32}));
  EXPECT_EQ(st.named_params()[4].shape, (std::vector<std::int64_t>{24, 32}));
}

TEST(Stage, InitDoesNotDependOnThePartition) {
  const TrainConfig c = Tiny();
  StageOptions whole;
  whole.first_layer = 0;
  whole.last_layer = 9;
  whole.rows = 1;
  Stage a(c.model.layers, c.model.input, whole);
  a.Init(42);
  StageOptions part = whole;
  part.first_layer = 3;
  Stage b(c.model.layers, c.model.input, part);
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
