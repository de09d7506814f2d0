// The model description as the one owner of parameter names and layouts:
// every parameter's name, shape and floats come from ModelDesc::Params; a
// tied head names its table; attention's layout agrees with its op's
// parameters and saved state; each device's layer scratch.
#include <gtest/gtest.h>

#include "baton/model.h"

namespace baton {
namespace {

ModelDesc Gpt(bool tied) {
  GptSpec g;
  g.vocab = 32;
  g.seq_len = 8;
  g.hidden = 16;
  g.heads = 2;
  g.blocks = 2;
  g.tied = tied;
  return DescribeModel(GptLayers(g), 1, g.seq_len);
}

TEST(ModelParams, NamesShapesAndOffsetsTileTheModel) {
  const ModelDesc m = Gpt(true);
  const std::vector<NamedParam> all = m.Params();
  ASSERT_FALSE(all.empty());
  EXPECT_EQ(all.front().name, "transformer.wte.weight");
  EXPECT_EQ(all.front().shape, (std::vector<std::int64_t>{32, 16}));
  EXPECT_EQ(all.back().name, "lm_head.weight");
  // One after the other, no gaps: the offsets tile [0, num_params).
  std::size_t at = 0;
  for (const NamedParam& p : all) {
    EXPECT_EQ(p.offset, at) << p.name;
    std::size_t elements = 1;
    for (std::int64_t d : p.shape) elements *= static_cast<std::size_t>(d);
    EXPECT_EQ(p.size, elements) << p.name;
    at += p.size;
  }
  EXPECT_EQ(at, m.num_params);
  // A range of top-level layers is the matching slice.
  const std::vector<NamedParam> block = m.Params(2, 4);
  EXPECT_EQ(block.front().name, "transformer.h.0.ln_1.weight");
  EXPECT_EQ(block.back().name, "transformer.h.0.mlp.c_proj.bias");
}

TEST(ModelParams, ATiedHeadNamesItsTable) {
  const auto tied = Gpt(true).TiedParams();
  ASSERT_TRUE(tied.has_value());
  EXPECT_EQ(tied->first, "lm_head.weight");
  EXPECT_EQ(tied->second, "transformer.wte.weight");
  EXPECT_FALSE(Gpt(false).TiedParams().has_value());
}

TEST(AttentionLayout, AgreesWithTheOpsParametersAndSavedState) {
  const ModelDesc m = Gpt(false);
  int found = 0;
  for (const OpDesc& op : m.ops) {
    if (op.type != LayerType::kAttention) continue;
    ++found;
    const AttentionLayout at(op);
    ASSERT_EQ(op.params.size(), 4u);
    EXPECT_EQ(op.params[0].offset, at.w_qkv());
    EXPECT_EQ(op.params[1].offset, at.b_qkv());
    EXPECT_EQ(op.params[2].offset, at.w_proj());
    EXPECT_EQ(op.params[3].offset, at.b_proj());
    EXPECT_EQ(op.num_params, at.params());
    // C = 16, H = 2, T = 8: qkv 3C, lse H, output C per row.
    EXPECT_EQ(op.saved_per_row, 3u * 16 + 2 + 16);
    EXPECT_EQ(op.stash_per_row, 3u * 16);
    EXPECT_EQ(at.saved_lse(4), 4u * 8 * 3 * 16);
    EXPECT_EQ(at.saved_ctx(4), 4u * 8 * 3 * 16 + 4 * 2 * 8);
    EXPECT_EQ(at.saved_ctx(4) + 4u * 8 * 16, 4u * 8 * op.saved_per_row);
  }
  EXPECT_EQ(found, 2);
}

TEST(LayerScratch, EachDeviceCountsWhatItsLayersAllocate) {
  const ModelDesc m = Gpt(false);
  for (const OpDesc& op : m.ops) {
    const std::size_t cpu = ScratchBytes(op, 32, Device::kCpu), gpu = ScratchBytes(op, 32, Device::kCuda);
    switch (op.type) {
      case LayerType::kAttention:  // T = 8, H = 2, C = 16, 32 token rows
        EXPECT_EQ(cpu, (2u * 8 * 8 + 32 * 16) * 4);
        EXPECT_EQ(gpu, (2u * 2 * 8 * 8 + 32 * 16) * 4);
        break;
      case LayerType::kLinear:  // BF16 copies of x, dy and the weight
        EXPECT_EQ(cpu, 0u);
        EXPECT_EQ(gpu, (32u * op.in + 32u * op.out + std::size_t(op.in) * op.out) * 2);
        break;
      case LayerType::kLayerNorm:  // mean and 1/std per row
        EXPECT_EQ(cpu, 0u);
        EXPECT_EQ(gpu, 2u * 32 * 4);
        break;
      default:
        EXPECT_EQ(cpu, 0u);
        EXPECT_EQ(gpu, 0u);
    }
  }
}

}  // namespace
}  // namespace baton

namespace baton {
namespace {

// train.lr_schedule's rates against their closed forms (nanoGPT's and
// Megatron-LM's shapes): a linear warm-up from 0, then the decay to
// min_lr at decay_steps (the run's last step where 0), then flat.
TEST(LearningRate, WarmUpThenDecayToMinLrThenFlat) {
  const double lr = 1.0e-3, min = 1.0e-4;
  const LrSchedule cosine{LrDecay::kCosine, 10, min, 110};
  EXPECT_DOUBLE_EQ(LearningRateAt(cosine, lr, 1, 200), lr / 10);
  EXPECT_DOUBLE_EQ(LearningRateAt(cosine, lr, 10, 200), lr);
  EXPECT_DOUBLE_EQ(LearningRateAt(cosine, lr, 60, 200), min + 0.5 * (lr - min));  // half way: cos(pi/2) = 0
  EXPECT_DOUBLE_EQ(LearningRateAt(cosine, lr, 110, 200), min);
  EXPECT_DOUBLE_EQ(LearningRateAt(cosine, lr, 150, 200), min);
  const LrSchedule linear{LrDecay::kLinear, 0, min, 0};  // decays over the whole run of 100
  EXPECT_DOUBLE_EQ(LearningRateAt(linear, lr, 25, 100), lr - 0.25 * (lr - min));
  EXPECT_DOUBLE_EQ(LearningRateAt(linear, lr, 100, 100), min);
  const LrSchedule constant{LrDecay::kConstant, 4, 0.0, 0};
  EXPECT_DOUBLE_EQ(LearningRateAt(constant, lr, 2, 100), lr / 2);
  EXPECT_DOUBLE_EQ(LearningRateAt(constant, lr, 5, 100), lr);
  EXPECT_DOUBLE_EQ(LearningRateAt(LrSchedule{}, lr, 1, 100), lr);
}

}  // namespace
}  // namespace baton
