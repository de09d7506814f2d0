// Tests for ParseTrainConfig / LoadTrainConfig / DescribeTrainConfig: the
// shipped configs load with exactly their values; every kind of bad input is
// a ConfigError naming file:line:column (1-based), the key path and the rule;
// --set overrides replace values, list items, create mappings and replace
// whole flow maps, and their errors name the --set instead of a file
// position; the description `baton validate` prints parses back to the same
// settings.
#include <gtest/gtest.h>

#include <ostream>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "baton/config.h"
#include "baton/error.h"

namespace baton {
namespace {

namespace fs = std::filesystem;

std::string Source(const std::string& relative) { return std::string(BATON_SOURCE_DIR) + "/" + relative; }

// The ConfigError's message for `text` (parsed as if read from t.yaml) with
// `overrides`; fails the test if nothing or something else was thrown.
std::string ErrorOf(const std::string& text, const std::vector<std::string>& overrides = {}) {
  try {
    ParseTrainConfig(text, "t.yaml", overrides);
  } catch (const ConfigError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no ConfigError for:\n" << text;
  return "";
}

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// A small valid config on synthetic data: 4 features, 3 classes, 2 ranks.
constexpr const char* kValid = R"(model:
  layers:
    - {type: linear, out: 8}
    - {type: relu}
    - {type: linear, out: 3}
data:
  dataset: synthetic
  features: 4
  classes: 3
pipeline:
  ranks: 2
  microbatches: 4
train:
  batch_size: 16
  optimizer:
    type: adamw
    lr: 0.001
)";

// ---------------------------------------------------------------- files load

TEST(TrainConfigFiles, FashionMnist1f1bHasExactlyItsValues) {
  const TrainConfig c = LoadTrainConfig(Source("configs/fmnist_mlp_1f1b.yaml"));
  EXPECT_EQ(c.source, Source("configs/fmnist_mlp_1f1b.yaml"));
  ASSERT_EQ(c.model.layers.size(), 9u);
  EXPECT_EQ(c.model.input, 784);
  EXPECT_EQ(c.model.layers[0].type, "linear");
  EXPECT_EQ(c.model.layers[0].out, 256);
  EXPECT_TRUE(c.model.layers[0].bias);
  EXPECT_EQ(c.model.layers[1].type, "gelu");
  ASSERT_EQ(c.model.layers[2].type, "residual");
  ASSERT_EQ(c.model.layers[2].body.size(), 3u);
  EXPECT_EQ(c.model.layers[2].body[0].type, "layernorm");
  EXPECT_EQ(c.model.layers[2].body[0].eps, 1e-5);
  EXPECT_EQ(c.model.layers[2].body[1].type, "linear");
  EXPECT_EQ(c.model.layers[2].body[1].out, 256);
  EXPECT_EQ(c.model.layers[2].body[2].type, "gelu");
  EXPECT_EQ(c.model.layers[5].type, "layernorm");
  EXPECT_EQ(c.model.layers[8].type, "linear");
  EXPECT_EQ(c.model.layers[8].out, 10);
  EXPECT_EQ(c.model.init_seed, 0u);
  EXPECT_EQ(c.model.init_from, "");
  EXPECT_EQ(c.pipeline.schedule, "1f1b");
  EXPECT_EQ(c.pipeline.ranks, 4);
  EXPECT_EQ(c.pipeline.microbatches, 8);
  EXPECT_EQ(c.pipeline.chunks, 0);
  EXPECT_EQ(c.pipeline.partition, "balanced");
  EXPECT_EQ(c.pipeline.balance_by, "flops");
  EXPECT_EQ(c.pipeline.checkpointing, "none");
  EXPECT_TRUE(c.pipeline.keep.empty());
  EXPECT_EQ(c.pipeline.wait_timeout_s, 300.0);
  EXPECT_EQ(c.data.dataset, "fashion_mnist");
  EXPECT_EQ(c.data.path, "/usr/share/datasets/fashion-mnist");
  EXPECT_TRUE(c.data.shuffle);
  EXPECT_EQ(c.data.seed, 1u);
  EXPECT_EQ(c.data.features, 784);
  EXPECT_EQ(c.data.classes, 10);
  EXPECT_TRUE(c.data.evaluate);
  EXPECT_EQ(c.train.batch_size, 128);
  EXPECT_EQ(c.train.epochs, 7);
  EXPECT_EQ(c.train.steps, 0);
  EXPECT_EQ(c.train.optimizer.type, "adamw");
  EXPECT_EQ(c.train.optimizer.lr, 0.0005);
  EXPECT_EQ(c.train.optimizer.weight_decay, 0.01);
  EXPECT_EQ(c.train.optimizer.beta1, 0.9);
  EXPECT_EQ(c.train.optimizer.beta2, 0.999);
  EXPECT_EQ(c.train.optimizer.eps, 1e-8);
  EXPECT_EQ(c.checkpoint.dir, "");
  EXPECT_EQ(c.log.every_steps, 50);
  EXPECT_EQ(c.log.metrics, "out/fmnist_1f1b/metrics.jsonl");
  EXPECT_EQ(c.log.weights, "out/fmnist_1f1b/weights.safetensors");
  EXPECT_TRUE(c.log.progress);
}

TEST(TrainConfigFiles, FashionMnistZbH1) {
  const TrainConfig c = LoadTrainConfig(Source("configs/fmnist_mlp_zb_h1.yaml"));
  EXPECT_EQ(c.pipeline.schedule, "zb_h1");
  EXPECT_EQ(c.pipeline.ranks, 4);
  EXPECT_EQ(c.pipeline.microbatches, 8);
  EXPECT_EQ(c.model.layers.size(), 9u);
  EXPECT_EQ(c.train.batch_size, 128);
  EXPECT_EQ(c.log.weights, "out/fmnist_zb_h1/weights.safetensors");
}

TEST(TrainConfigFiles, FashionMnistInterleaved) {
  const TrainConfig c = LoadTrainConfig(Source("configs/fmnist_mlp_interleaved.yaml"));
  EXPECT_EQ(c.pipeline.schedule, "interleaved_1f1b");
  EXPECT_EQ(c.pipeline.chunks, 2);
  EXPECT_EQ(c.pipeline.ranks, 4);
  EXPECT_EQ(c.pipeline.checkpointing, "selective");
  EXPECT_EQ(c.pipeline.keep, (std::vector<LayerType>{LayerType::kLinear}));
  EXPECT_EQ(c.model.layers.size(), 9u);
  EXPECT_EQ(c.train.optimizer.type, "adamw");
}

TEST(TrainConfigFiles, SyntheticBench) {
  const TrainConfig c = LoadTrainConfig(Source("configs/synthetic_bench.yaml"));
  EXPECT_EQ(c.data.dataset, "synthetic");
  EXPECT_EQ(c.data.samples, 8192);
  EXPECT_EQ(c.data.features, 512);
  EXPECT_EQ(c.data.classes, 10);
  EXPECT_EQ(c.model.input, 512);
  ASSERT_EQ(c.model.layers.size(), 9u);
  EXPECT_EQ(c.model.layers[6].out, 512);
  EXPECT_EQ(c.model.layers[8].out, 10);
  EXPECT_EQ(c.pipeline.partition, "balanced");
  EXPECT_EQ(c.pipeline.balance_by, "flops");
  EXPECT_EQ(c.train.batch_size, 1024);
  EXPECT_EQ(c.train.steps, 40);
  EXPECT_EQ(c.train.optimizer.type, "sgd");
  EXPECT_EQ(c.train.optimizer.lr, 0.01);
  EXPECT_EQ(c.train.optimizer.momentum, 0.9);
  EXPECT_EQ(c.train.optimizer.weight_decay, 0.0);
  EXPECT_EQ(c.log.every_steps, 10);
  EXPECT_EQ(c.log.weights, "");  // "" = no weights file
}

TEST(TrainConfigFiles, TinyMpiConfig) {
  const TrainConfig c = LoadTrainConfig(Source("tests/mpi/tiny.yaml"));
  ASSERT_EQ(c.model.layers.size(), 9u);
  EXPECT_EQ(c.model.input, 12);
  EXPECT_EQ(c.model.init_seed, 7u);
  EXPECT_EQ(c.model.layers[2].body.size(), 3u);
  EXPECT_EQ(c.model.layers[8].out, 4);
  EXPECT_EQ(c.pipeline.ranks, 1);
  EXPECT_EQ(c.pipeline.microbatches, 8);
  EXPECT_EQ(c.data.samples, 256);
  EXPECT_EQ(c.data.features, 12);
  EXPECT_EQ(c.data.classes, 4);
  EXPECT_EQ(c.data.seed, 3u);
  EXPECT_EQ(c.train.batch_size, 32);
  EXPECT_EQ(c.train.steps, 4);
  EXPECT_EQ(c.train.optimizer.type, "sgd");
  EXPECT_EQ(c.train.optimizer.lr, 0.1);
  EXPECT_EQ(c.train.optimizer.momentum, 0.9);
  EXPECT_EQ(c.log.every_steps, 1);
  EXPECT_EQ(c.log.metrics, "metrics.jsonl");
  EXPECT_FALSE(c.log.progress);
}

TEST(TrainConfigFiles, ValidInlineConfigKeepsDefaults) {
  const TrainConfig c = ParseTrainConfig(kValid, "t.yaml");
  const TrainConfig d;
  EXPECT_EQ(c.source, "t.yaml");
  EXPECT_EQ(c.model.input, 4);
  EXPECT_EQ(c.pipeline.schedule, d.pipeline.schedule);
  EXPECT_EQ(c.pipeline.chunks, 0);
  EXPECT_EQ(c.data.samples, 4096);
  EXPECT_EQ(c.train.epochs, 1);
  EXPECT_EQ(c.train.optimizer.weight_decay, 0.01);  // adamw's default
  EXPECT_EQ(c.log.metrics, "out/metrics.jsonl");
  EXPECT_EQ(c.log.weights, "out/weights.safetensors");
  EXPECT_EQ(c.checkpoint.keep, 1);
}

TEST(TrainConfigFiles, ErrorInAFileNamesThePath) {
  const fs::path path = fs::path(::testing::TempDir()) / "baton_train_config_bad_ranks.yaml";
  {
    std::ofstream out(path);
    out << kValid << "log: {every_steps: -1}\n";
  }
  try {
    LoadTrainConfig(path.string());
    ADD_FAILURE() << "no ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(Contains(e.what(), path.string() + ":18:20: log.every_steps: must be >= 0")) << e.what();
  }
  fs::remove(path);
}

TEST(TrainConfigFiles, MissingFileIsAConfigError) {
  const std::string path = (fs::path(::testing::TempDir()) / "baton_no_such_train_config.yaml").string();
  try {
    LoadTrainConfig(path);
    ADD_FAILURE() << "no ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(Contains(e.what(), path)) << e.what();
    EXPECT_TRUE(Contains(e.what(), "no such config file")) << e.what();
  }
}

// ---------------------------------------------------------------- errors

TEST(TrainConfigErrors, UnknownTopLevelKeySuggestsTheNearest) {
  const std::string msg = ErrorOf(std::string(kValid) + "pipline:\n  ranks: 4\n");
  EXPECT_TRUE(Contains(msg, "t.yaml:18:1: unknown key 'pipline'; did you mean 'pipeline'?")) << msg;
  EXPECT_TRUE(Contains(msg, "allowed here: checkpoint, data, data_parallel, device, log, model, pipeline, precision, recovery, train")) << msg;
}

TEST(TrainConfigErrors, UnknownNestedKeyNamesTheKeyPath) {
  const std::string msg = ErrorOf(std::string(kValid) + "    learning_rate: 0.1\n");
  EXPECT_TRUE(Contains(msg, "t.yaml:18:5: unknown key 'train.optimizer.learning_rate'")) << msg;
  EXPECT_TRUE(Contains(msg, "allowed here: betas, eps, lr, momentum, type, weight_decay")) << msg;
}

TEST(TrainConfigErrors, DuplicateKey) {
  const std::string msg = ErrorOf(std::string(kValid) + "  batch_size: 32\n");
  EXPECT_TRUE(Contains(msg, "t.yaml:18:3: duplicate key 'train.batch_size': each key may appear once")) << msg;
}

TEST(TrainConfigErrors, DuplicateTopLevelSection) {
  const std::string msg = ErrorOf(std::string(kValid) + "data: {dataset: synthetic}\n");
  EXPECT_TRUE(Contains(msg, "t.yaml:18:1: duplicate key 'data'")) << msg;
}

TEST(TrainConfigErrors, WordWhereAnIntegerIsExpected) {
  const std::string msg = ErrorOf(R"(model:
  layers: [{type: linear, out: 3}]
data: {dataset: synthetic, features: 4, classes: 3}
pipeline:
  ranks: two
)");
  EXPECT_TRUE(Contains(msg, "t.yaml:5:10: pipeline.ranks: expected an integer, got 'two'")) << msg;
}

// An integer of more digits than any (a 64-bit one) is out of range, not
// "not an integer".
TEST(TrainConfigErrors, AnIntegerPastSixtyFourBitsIsOutOfRange) {
  const std::string msg = ErrorOf(R"(model:
  layers: [{type: linear, out: 3}]
data: {dataset: synthetic, features: 4, classes: 3}
train: {steps: 12345678901234567890}
)");
  EXPECT_TRUE(Contains(msg, "train.steps: '12345678901234567890' is out of range for an integer (at most "
                            "9223372036854775807)"))
      << msg;
}

// A GPT's hidden size whose MLP (4 x hidden) would pass an int is refused by its key.
TEST(TrainConfigErrors, AGptHiddenSizePastWhatItsLayersHoldIsRefusedByItsKey) {
  const std::string msg = ErrorOf(R"(model: {type: gpt, hidden: 1000000000, heads: 1}
data: {dataset: synthetic_tokens, seq_len: 8, vocab: 16}
)");
  EXPECT_TRUE(Contains(msg, "model.hidden: must be in [1, 536870911], got 1000000000")) << msg;
}

TEST(TrainConfigErrors, ZeroBatchSizeIsOutOfRange) {
  const std::string msg = ErrorOf(R"(model:
  layers: [{type: linear, out: 3}]
data: {dataset: synthetic, features: 4, classes: 3}
train:
  batch_size: 0
)");
  EXPECT_TRUE(Contains(msg, "t.yaml:5:15: train.batch_size: must be at least 1, got 0")) << msg;
}

TEST(TrainConfigErrors, MicrobatchesMustDivideTheBatch) {
  const std::string msg = ErrorOf(R"(model:
  layers: [{type: linear, out: 3}]
data: {dataset: synthetic, features: 4, classes: 3}
pipeline:
  microbatches: 3
train:
  batch_size: 16
)");
  EXPECT_TRUE(Contains(msg, "t.yaml:5:17: pipeline.microbatches: 3 microbatches do not divide train.batch_size 16"))
      << msg;
}

TEST(TrainConfigErrors, UnknownLayerType) {
  const std::string msg = ErrorOf(R"(model:
  layers:
    - {type: linear, out: 8}
    - {type: conv}
    - {type: linear, out: 3}
data: {dataset: synthetic, features: 4, classes: 3}
)");
  EXPECT_TRUE(Contains(msg,
                       "t.yaml:4:14: model.layers[1].type: 'conv' is not one of: linear, relu, gelu, "
                       "layernorm, residual"))
      << msg;
}

// A linear layer without `out` is told the rule, at the layer's position.
TEST(TrainConfigErrors, LinearWithoutOut) {
  const std::string msg = ErrorOf(R"(model:
  layers:
    - {type: linear}
    - {type: relu}
    - {type: linear, out: 3}
data: {dataset: synthetic, features: 4, classes: 3}
)");
  EXPECT_TRUE(Contains(msg, "t.yaml:3:")) << msg;
  EXPECT_TRUE(Contains(msg, "model.layers[0].out")) << msg;
  EXPECT_TRUE(Contains(msg, "a linear layer needs 'out'")) << msg;
  EXPECT_FALSE(Contains(msg, "command line")) << msg;
}

TEST(TrainConfigErrors, ResidualBodyMustKeepTheWidth) {
  const std::string msg = ErrorOf(R"(model:
  layers:
    - {type: linear, out: 8}
    - {type: residual, layers: [{type: linear, out: 5}]}
    - {type: linear, out: 3}
data: {dataset: synthetic, features: 4, classes: 3}
)");
  EXPECT_TRUE(Contains(msg,
                       "t.yaml:4:32: model.layers[1].layers: a residual block's body must keep the width: "
                       "8 features in, 5 out"))
      << msg;
}

TEST(TrainConfigErrors, LastLayerWidthMustEqualTheClasses) {
  const std::string msg = ErrorOf(R"(model:
  layers:
    - {type: linear, out: 8}
    - {type: relu}
data: {dataset: synthetic, features: 4, classes: 3}
)");
  EXPECT_TRUE(Contains(msg,
                       "t.yaml:3:5: model.layers: the last layer gives 8 outputs, but the dataset has 3 "
                       "classes"))
      << msg;
}

TEST(TrainConfigErrors, ModelInputMustEqualTheDatasetFeatures) {
  const std::string msg = ErrorOf(R"(model:
  input: 5
  layers: [{type: linear, out: 3}]
data: {dataset: synthetic, features: 4, classes: 3}
)");
  EXPECT_TRUE(Contains(msg, "t.yaml:2:10: model.input: the dataset has 4 features, but the model takes 5")) << msg;
}

TEST(TrainConfigErrors, EmptyLayerList) {
  const std::string msg = ErrorOf(R"(model:
  layers: []
data: {dataset: synthetic, features: 4, classes: 3}
)");
  EXPECT_TRUE(Contains(msg, "t.yaml:2:11: model.layers: must be a non-empty list of layers")) << msg;
}

TEST(TrainConfigErrors, SelectiveKeepWithAnUnknownType) {
  const std::string msg = ErrorOf(R"(model:
  layers: [{type: linear, out: 3}]
data: {dataset: synthetic, features: 4, classes: 3}
pipeline:
  checkpointing: selective
  keep: [linear, conv]
)");
  EXPECT_TRUE(Contains(msg, "t.yaml:6:9: pipeline.keep: 'conv' is not a layer type")) << msg;
  EXPECT_TRUE(Contains(msg, "attention")) << msg;  // every layer type is listed
}

TEST(TrainConfig, SelectiveWithoutAListKeepsTheLayersWithMatrixProducts) {
  const TrainConfig c = ParseTrainConfig(kValid, "t.yaml", {"pipeline.checkpointing=selective"});
  EXPECT_EQ(c.pipeline.keep, (std::vector<LayerType>{LayerType::kLinear, LayerType::kAttention}));
  const TrainConfig none = ParseTrainConfig(kValid, "t.yaml", {"pipeline.checkpointing=selective", "pipeline.keep=[]"});
  EXPECT_TRUE(none.pipeline.keep.empty());
}

TEST(TrainConfigErrors, KeepWithoutSelective) {
  const std::string msg = ErrorOf(R"(model:
  layers: [{type: linear, out: 3}]
data: {dataset: synthetic, features: 4, classes: 3}
pipeline:
  checkpointing: full
  keep: [linear]
)");
  EXPECT_TRUE(Contains(msg, "t.yaml:6:9: pipeline.keep: only applies with checkpointing: selective")) << msg;
}

TEST(TrainConfigErrors, UnknownCheckpointingPolicy) {
  const std::string msg = ErrorOf(R"(model:
  layers: [{type: linear, out: 3}]
data: {dataset: synthetic, features: 4, classes: 3}
pipeline:
  checkpointing: some
)");
  EXPECT_TRUE(Contains(msg, "t.yaml:5:18: pipeline.checkpointing: 'some' is not one of: none, full, selective")) << msg;
}

TEST(TrainConfigErrors, AdamWWithMomentum) {
  const std::string msg = ErrorOf(R"(model:
  layers: [{type: linear, out: 3}]
data: {dataset: synthetic, features: 4, classes: 3}
train:
  optimizer:
    type: adamw
    momentum: 0.9
)");
  EXPECT_TRUE(Contains(msg, "t.yaml:7:15: train.optimizer.momentum: is an sgd setting")) << msg;
}

TEST(TrainConfigErrors, SgdWithBetas) {
  const std::string msg = ErrorOf(R"(model:
  layers: [{type: linear, out: 3}]
data: {dataset: synthetic, features: 4, classes: 3}
train:
  optimizer:
    type: sgd
    betas: [0.9, 0.99]
)");
  EXPECT_TRUE(Contains(msg, "t.yaml:7:12: train.optimizer.betas: is an adamw setting")) << msg;
}

TEST(TrainConfigErrors, BetasOutOfRange) {
  const std::string msg = ErrorOf(R"(model:
  layers: [{type: linear, out: 3}]
data: {dataset: synthetic, features: 4, classes: 3}
train:
  optimizer:
    type: adamw
    betas: [0.9, 1.0]
)");
  EXPECT_TRUE(Contains(msg, "t.yaml:7:12: train.optimizer.betas: each beta must be in [0, 1), got [0.9, 1]")) << msg;
}

TEST(TrainConfigErrors, BetasNotAPair) {
  const std::string msg = ErrorOf(R"(model:
  layers: [{type: linear, out: 3}]
data: {dataset: synthetic, features: 4, classes: 3}
train:
  optimizer: {type: adamw, betas: [0.9]}
)");
  EXPECT_TRUE(Contains(msg, "t.yaml:5:35: train.optimizer.betas: expected two numbers [beta1, beta2]")) << msg;
}

TEST(TrainConfigErrors, FashionMnistWithFeatures) {
  const std::string msg = ErrorOf(R"(model:
  layers: [{type: linear, out: 10}]
data:
  dataset: fashion_mnist
  features: 784
)");
  EXPECT_TRUE(Contains(msg, "t.yaml:5:13: data.features: is set by the dataset for fashion_mnist")) << msg;
}

// ---- token datasets ----

constexpr const char* kFortunes = R"(model: {type: gpt, hidden: 16, heads: 2, blocks: 1}
data:
  dataset: fortunes
  seq_len: 64
)";

TEST(TrainConfigTokens, FortunesDefaults) {
  const TrainConfig c = ParseTrainConfig(kFortunes, "t.yaml");
  EXPECT_EQ(c.data.dataset, DatasetKind::kFortunes);
  EXPECT_TRUE(IsTokenDataset(c.data.dataset));
  EXPECT_EQ(c.data.path, "/usr/share/games/fortunes");
  EXPECT_EQ(c.data.seq_len, 64);
  EXPECT_EQ(c.data.vocab, 256);
  EXPECT_TRUE(c.data.validation);
  EXPECT_EQ(c.data.features, 64);  // the model's input width is checked against seq_len
  EXPECT_EQ(c.data.classes, 256);  // and its output against the vocabulary
  const TrainConfig d =
      ParseTrainConfig(kFortunes, "t.yaml", {"data.path=/tmp/f", "data.validation=false", "data.shuffle=true"});
  EXPECT_EQ(d.data.path, "/tmp/f");
  EXPECT_FALSE(d.data.validation);
  EXPECT_TRUE(d.data.shuffle);
}

TEST(TrainConfigTokens, SyntheticTokens) {
  const TrainConfig c = ParseTrainConfig(R"(model: {type: gpt, hidden: 8, heads: 2, blocks: 1}
data: {dataset: synthetic_tokens, samples: 100, seq_len: 8, vocab: 50, seed: 4}
)",
                                         "t.yaml");
  EXPECT_EQ(c.data.dataset, DatasetKind::kSyntheticTokens);
  EXPECT_EQ(c.data.samples, 100);
  EXPECT_EQ(c.data.seq_len, 8);
  EXPECT_EQ(c.data.vocab, 50);
  EXPECT_EQ(c.data.seed, 4u);
  EXPECT_EQ(c.data.features, 8);
  EXPECT_EQ(c.data.classes, 50);
}

// The files people bring: their path, their vocabulary (megatron: given;
// llm.c's: GPT-2's; jsonl: bytes), llm.c's end-of-text token, a
// validation file of the same kind; what another dataset reads refused.
TEST(TrainConfigTokens, TokenFilesNeedTheirPathAndVocabulary) {
  const std::string model = "model: {type: gpt, hidden: 8, heads: 2, blocks: 1}\n";
  const TrainConfig m = ParseTrainConfig(
      model + "data: {dataset: megatron, path: /d/corpus_text_document, seq_len: 16, vocab: 50257}\n", "t.yaml");
  EXPECT_EQ(m.data.dataset, DatasetKind::kMegatron);
  EXPECT_TRUE(IsTokenDataset(m.data.dataset));
  EXPECT_EQ(m.data.path, "/d/corpus_text_document");
  EXPECT_EQ(m.data.vocab, 50257);
  EXPECT_EQ(m.data.classes, 50257);
  EXPECT_EQ(m.data.validation_path, "");
  const TrainConfig l = ParseTrainConfig(
      model + "data: {dataset: llmc, path: train.bin, validation_path: val.bin, seq_len: 16}\n", "t.yaml");
  EXPECT_EQ(l.data.vocab, 50257);
  EXPECT_EQ(l.data.eot, 50256);
  EXPECT_EQ(l.data.validation_path, "val.bin");
  EXPECT_EQ(ParseTrainConfig(model + "data: {dataset: jsonl, path: d.jsonl, seq_len: 16}\n", "t.yaml").data.vocab,
            256);
  struct Case {
    std::string data, message;
  };
  for (const Case& k : std::vector<Case>{
           {"{dataset: megatron, seq_len: 16, vocab: 9}", "data.path: a megatron dataset needs data.path: the prefix"},
           {"{dataset: megatron, path: p, seq_len: 16}", "data.vocab: a megatron dataset needs data.vocab"},
           {"{dataset: llmc, seq_len: 16}", "data.path: a llmc dataset needs data.path: the file"},
           {"{dataset: llmc, path: p, seq_len: 16, eot: 70000}", "data.eot: is a uint16 token id"},
           {"{dataset: jsonl, path: p, seq_len: 16, vocab: 300}", "data.vocab: is 256 for jsonl"},
           {"{dataset: megatron, path: p, seq_len: 16, vocab: 9, eot: 3}", "data.eot: is llm.c's end-of-text token"},
           {"{dataset: llmc, path: p, seq_len: 16, samples: 5}", "data.samples: is set by the file and seq_len"},
           {"{dataset: llmc, path: p, seq_len: 16, validation: false}", "data.validation: is fortunes' split"},
           {"{dataset: fortunes, seq_len: 16, validation_path: v}", "data.validation_path: is for the datasets read"},
       }) {
    const std::string msg = ErrorOf(model + "data: " + k.data + "\n");
    EXPECT_TRUE(Contains(msg, k.message)) << k.data << " gave: " << msg;
  }
}

// data.packing: greedy packs a dataset's documents into samples of
// data.max_tokens positions, which is then the sequence length; it needs
// documents, the budget, and the CPU layers.
TEST(TrainConfigTokens, PackingTakesTheBudgetAsTheSequenceLength) {
  const std::string model = "model: {type: gpt, hidden: 8, heads: 2, blocks: 1}\n";
  const TrainConfig c =
      ParseTrainConfig(model + "data: {dataset: jsonl, path: d.jsonl, packing: greedy, max_tokens: 24}\n", "t.yaml");
  EXPECT_EQ(c.data.packing, Packing::kGreedy);
  EXPECT_EQ(c.data.seq_len, 24);
  EXPECT_EQ(c.data.long_documents, LongDocuments::kSplit);
  // auto sums in double with packing (where it is built: ZeRO 0 or 1).
  EXPECT_TRUE(WideGradients(c));
  EXPECT_FALSE(WideGradients(ParseTrainConfig(
      model + "data: {dataset: jsonl, path: d.jsonl, packing: greedy, max_tokens: 24}\n"
              "data_parallel: {size: 2, zero: 2}\npipeline: {ranks: 1}\n",
      "t.yaml")));
  EXPECT_FALSE(WideGradients(ParseTrainConfig(
      model + "data: {dataset: jsonl, path: d.jsonl, packing: greedy, max_tokens: 24}\ntrain: {grad_accum_dtype: fp32}\n",
      "t.yaml")));
  EXPECT_EQ(ParseTrainConfig(model + "data: {dataset: fortunes, packing: greedy, max_tokens: 8, long_documents: "
                                     "refuse}\n",
                             "t.yaml")
                .data.long_documents,
            LongDocuments::kRefuse);
  EXPECT_EQ(ParseTrainConfig(model + "data: {dataset: fortunes, seq_len: 8}\n", "t.yaml").data.packing,
            Packing::kNone);
  EXPECT_EQ(ParseTrainConfig(model + "data: {dataset: fortunes, packing: balanced, max_tokens: 8}\n", "t.yaml")
                .data.packing,
            Packing::kBalanced);
  // pad: the fixed-shape baseline, summed in double as the packings are.
  const TrainConfig pad = ParseTrainConfig(model + "data: {dataset: fortunes, packing: pad, max_tokens: 8}\n", "t.yaml");
  EXPECT_EQ(pad.data.packing, Packing::kPad);
  EXPECT_EQ(pad.data.seq_len, 8);
  EXPECT_TRUE(Contains(DescribeTrainConfig(pad), "packing: pad")) << DescribeTrainConfig(pad);
  EXPECT_TRUE(WideGradients(pad));
  EXPECT_FALSE(RealLengths(Packing::kPad));
  EXPECT_TRUE(RealLengths(Packing::kGreedy));
  // A profile prices balanced packing's arrangement, with plans that cannot change too.
  const TrainConfig priced = ParseTrainConfig(model + "data: {dataset: fortunes, packing: balanced, max_tokens: 8}\n"
                                                      "pipeline: {ranks: 2, adapt: off, profile: p.json}\n",
                                              "t.yaml");
  EXPECT_EQ(priced.pipeline.profile, "p.json");
  EXPECT_TRUE(Contains(DescribeTrainConfig(priced), "profile: p.json")) << DescribeTrainConfig(priced);
  EXPECT_TRUE(Contains(ErrorOf(model + "data: {dataset: fortunes, packing: greedy, max_tokens: 8}\n"
                                       "pipeline: {ranks: 2, adapt: off, profile: p.json}\n"),
                       "or balanced packing (data.packing: balanced)"));
  struct Case {
    std::string text, message;
  };
  for (const Case& k : std::vector<Case>{
           {"data: {dataset: jsonl, path: p, packing: greedy}", "data.max_tokens: packing needs data.max_tokens"},
           {"data: {dataset: jsonl, path: p, packing: greedy, max_tokens: 0}", "data.max_tokens: must be at least 1"},
           {"data: {dataset: jsonl, path: p, packing: greedy, max_tokens: 8, seq_len: 8}",
            "data.seq_len: is data.max_tokens where documents are packed"},
           {"data: {dataset: synthetic_tokens, packing: greedy, max_tokens: 8}",
            "data.packing: packs documents, and synthetic_tokens has none"},
           {"data: {dataset: jsonl, path: p, seq_len: 8, max_tokens: 8}", "data.max_tokens: is for packed documents"},
           {"data: {dataset: jsonl, path: p, packing: sometimes, max_tokens: 8}", "data.packing"},
           {"data: {dataset: synthetic, packing: greedy}", "data.packing: is for token datasets"},
           {"data: {dataset: jsonl, path: p, packing: greedy, max_tokens: 8}\ndevice: cuda\n"
            "train: {grad_accum_dtype: fp64}",
            "train.grad_accum_dtype: fp64 sums gradients on the CPU only"},
       }) {
    const std::string msg = ErrorOf(model + k.text + "\n");
    EXPECT_TRUE(Contains(msg, k.message)) << k.text << " gave: " << msg;
  }
  // On a GPU too, its gradients summed in floats there (double sums are the CPU's).
  const TrainConfig gpu =
      ParseTrainConfig(model + "data: {dataset: jsonl, path: p, packing: greedy, max_tokens: 8}\ndevice: cuda\n", "t.yaml");
  EXPECT_EQ(gpu.data.packing, Packing::kGreedy);
  EXPECT_FALSE(WideGradients(gpu));
}

// train.batch_tokens: a step's documents by tokens, with packing, within
// the batch's slots, and refused where a varying microbatch count is not
// built.
TEST(TrainConfigTokens, BatchTokensCountsThePackedStepsTokens) {
  const std::string model = "model: {type: gpt, hidden: 8, heads: 2, blocks: 1}\n";
  const std::string data = "data: {dataset: jsonl, path: d.jsonl, packing: greedy, max_tokens: 16}\n";
  const TrainConfig c = ParseTrainConfig(model + data + "train: {batch_size: 8, batch_tokens: 100}\n", "t.yaml");
  EXPECT_EQ(c.train.batch_tokens, 100);
  EXPECT_TRUE(Contains(DescribeTrainConfig(c), "batch_tokens: 100")) << DescribeTrainConfig(c);
  EXPECT_FALSE(Contains(DescribeTrainConfig(ParseTrainConfig(model + data, "t.yaml")), "batch_tokens"));
  struct Case {
    std::string text, message;
  };
  for (const Case& k : std::vector<Case>{
           {data + "train: {batch_size: 8, batch_tokens: 15}",
            "train.batch_tokens: must be at least data.max_tokens 16 (one full microbatch), got 15"},
           {data + "train: {batch_size: 8, batch_tokens: 129}",
            "train.batch_tokens: 129 tokens do not fit in train.batch_size 8 samples of data.max_tokens 16"},
           {"data: {dataset: jsonl, path: d.jsonl, seq_len: 16}\ntrain: {batch_size: 8, batch_tokens: 64}",
            "train.batch_tokens: counts the tokens of packed documents: set data.packing"},
           {"data: {dataset: jsonl, path: d.jsonl, packing: greedy, max_tokens: 16, shuffle: true}\n"
            "train: {batch_size: 8, batch_tokens: 64}",
            "train.batch_tokens: takes each step's documents in data order"},
           {data + "train: {batch_size: 8, batch_tokens: 64}\npipeline: {ranks: 2, adapt: full}\n"
                   "data_parallel: {size: 2}",
            "train.batch_tokens: is not built with pipeline.adapt: full"},
           {data + "train: {batch_size: 8, batch_tokens: 64}\ndata_parallel: {size: 2}\n"
                   "recovery: {on_lost_rank: shrink}",
            "train.batch_tokens: is not built with recovery.on_lost_rank: shrink"},
       }) {
    const std::string msg = ErrorOf(model + k.text + "\n");
    EXPECT_TRUE(Contains(msg, k.message)) << k.text << " gave: " << msg;
  }
}

TEST(TrainConfigTokens, SeqLenIsRequiredAndPositive) {
  std::string msg = ErrorOf(R"(model:
  layers: [{type: linear, out: 256}]
data:
  dataset: fortunes
)");
  EXPECT_TRUE(Contains(msg, "t.yaml:4:12: data.seq_len: a token dataset needs data.seq_len")) << msg;
  msg = ErrorOf(kFortunes, {"data.seq_len=0"});
  EXPECT_TRUE(Contains(msg, "data.seq_len: must be at least 1, got 0")) << msg;
  msg = ErrorOf(R"(model:
  layers: [{type: linear, out: 256}]
data: {dataset: synthetic_tokens}
)");
  EXPECT_TRUE(Contains(msg, "data.seq_len: a token dataset needs data.seq_len")) << msg;
}

TEST(TrainConfigTokens, KeysOfOtherDatasetsAreRefused) {
  struct Case {
    std::string set, message;
  };
  for (const Case& k : std::vector<Case>{
           {"data.vocab=300", "data.vocab: is 256 for fortunes: every byte is a token; data.dataset is fortunes"},
           {"data.samples=10", "data.samples: is set by the corpus and seq_len; data.dataset is fortunes"},
           {"data.features=64", "data.features: is set by seq_len and the vocabulary for a token dataset"},
           {"data.classes=256", "data.classes: is set by seq_len and the vocabulary for a token dataset"},
           {"data.evaluate=true", "data.evaluate: is a fashion_mnist setting"},
           {"data.seq_lenn=3", "unknown key 'data.seq_lenn'; did you mean 'seq_len'?"},
       }) {
    const std::string msg = ErrorOf(kFortunes, {k.set});
    EXPECT_TRUE(Contains(msg, k.message)) << k.set << " gave: " << msg;
  }
  std::string msg = ErrorOf(kValid, {"data.seq_len=8"});
  EXPECT_TRUE(Contains(msg, "data.seq_len: is for token datasets (fortunes, synthetic_tokens, megatron, llmc, "
                            "jsonl); data.dataset is synthetic"))
      << msg;
  msg = ErrorOf(kValid, {"data.validation=false"});
  EXPECT_TRUE(Contains(msg, "data.validation: is for fortunes")) << msg;
  msg = ErrorOf(R"(model:
  layers: [{type: linear, out: 256}]
data: {dataset: synthetic_tokens, seq_len: 4, path: /x}
)");
  EXPECT_TRUE(Contains(msg, "t.yaml:3:53: data.path: is for datasets read from files")) << msg;
  msg = ErrorOf(R"(model:
  layers: [{type: linear, out: 256}]
data: {dataset: synthetic_tokens, seq_len: 4, vocab: 1}
)");
  EXPECT_TRUE(Contains(msg, "data.vocab: must be at least 2, got 1")) << msg;
}

TEST(TrainConfigTokens, GptShapesFollowTheDataAndAreChecked) {
  const TrainConfig c = ParseTrainConfig(kFortunes, "t.yaml");
  EXPECT_TRUE(c.model.gpt);
  EXPECT_EQ(c.model.gpt_spec.vocab, 256);   // the data's vocabulary
  EXPECT_EQ(c.model.gpt_spec.seq_len, 64);  // and sequence, unless set
  EXPECT_EQ(c.model.seq, 64);
  EXPECT_TRUE(c.model.gpt_spec.tied);
  // embedding, position table, 1 block (2 residual layers), final layernorm, head
  EXPECT_EQ(c.model.layers.size(), 6u);
  std::string msg = ErrorOf(kFortunes, {"model.vocab=10"});
  EXPECT_TRUE(Contains(msg, "t.yaml:1:1: model.vocab: the dataset's token ids go up to 255, beyond a vocabulary of 10") ||
              Contains(msg, "model.vocab: the dataset's token ids go up to 255, beyond a vocabulary of 10"))
      << msg;
  msg = ErrorOf(kFortunes, {"model.seq_len=32"});
  EXPECT_TRUE(Contains(msg, "model.seq_len: the position table holds 32 positions, but data.seq_len is 64")) << msg;
  msg = ErrorOf(kFortunes, {"model.heads=3"});
  EXPECT_TRUE(Contains(msg, "model.heads: 3 heads do not divide hidden 16")) << msg;
  msg = ErrorOf(R"(model:
  layers: [{type: linear, out: 256}]
data: {dataset: fortunes, seq_len: 8}
)");
  EXPECT_TRUE(Contains(msg, "data.dataset fortunes gives token ids: use model: {type: gpt, ...}")) << msg;
  msg = ErrorOf(R"(model: {type: gpt}
data: {dataset: synthetic, features: 4, classes: 3}
)");
  EXPECT_TRUE(Contains(msg, "model.type: a gpt model reads token ids, but data.dataset is synthetic")) << msg;
}

TEST(TrainConfigTokens, DescribeRoundTrips) {
  for (const std::vector<std::string>& sets :
       {std::vector<std::string>{"data.validation=false"},
        std::vector<std::string>{"data.dataset=synthetic_tokens", "data.samples=64", "data.vocab=77"}}) {
    const TrainConfig c = ParseTrainConfig(kFortunes, "t.yaml", sets);
    const std::string text = DescribeTrainConfig(c);
    const TrainConfig back = ParseTrainConfig(text, "described.yaml");
    EXPECT_EQ(back.data.dataset, c.data.dataset);
    EXPECT_EQ(back.data.seq_len, c.data.seq_len);
    EXPECT_EQ(back.data.vocab, c.data.vocab);
    EXPECT_EQ(back.data.validation, c.data.validation);
    EXPECT_EQ(back.data.samples, c.data.samples);
    EXPECT_EQ(DescribeTrainConfig(back), text);
  }
}

// ---------------------------------------------------------------- pipeline.layout

// A GPT of 14 blocks on 4 ranks; the layout's value starts at line 6, column 11.
std::string GptWithLayout(const std::string& layout) {
  return R"(model: {type: gpt, hidden: 16, heads: 2, blocks: 14}
data: {dataset: synthetic_tokens, seq_len: 8}
pipeline:
  ranks: 4
  microbatches: 4
  layout: ")" +
         layout + R"("
train: {batch_size: 16}
)";
}

TEST(TrainConfigLayout, ParsesIntoOneEntryPerStage) {
  const TrainConfig c = ParseTrainConfig(GptWithLayout("E,t*3|t*4|t*4|t*3,L"), "t.yaml");
  EXPECT_EQ(c.pipeline.partition, Partition::kLayout);
  EXPECT_EQ(c.pipeline.partition, "layout");
  EXPECT_EQ(c.pipeline.layout.text, "E,t*3|t*4|t*4|t*3,L");
  EXPECT_EQ(c.pipeline.layout.where, "t.yaml:6:11");
  const std::vector<LayoutStage> want = {{true, 3, false}, {false, 4, false}, {false, 4, false}, {false, 3, true}};
  EXPECT_EQ(c.pipeline.layout.stages, want);
  // Whitespace around tokens, counts and bars; repeated symbols add up; *1.
  const TrainConfig d = ParseTrainConfig(GptWithLayout(" E , t * 3 |t,t,t*2| t*4 |\tt*2, t*1 , L "), "t.yaml");
  EXPECT_EQ(d.pipeline.layout.stages, want);
  // One stage holding everything.
  const TrainConfig one = ParseTrainConfig(GptWithLayout("E,t*14,L"), "t.yaml", {"pipeline.ranks=1"});
  EXPECT_EQ(one.pipeline.layout.stages, (std::vector<LayoutStage>{{true, 14, true}}));
  // Set on the command line, its errors say so.
  const TrainConfig set = ParseTrainConfig(GptWithLayout("E,t*14,L"), "t.yaml", {"pipeline.layout=E|t*14|L"});
  EXPECT_EQ(set.pipeline.layout.stages.size(), 3u);
  EXPECT_EQ(set.pipeline.layout.where, "t.yaml (--set pipeline.layout)");
  const std::string msg = ErrorOf(GptWithLayout("E,t*14,L"), {"pipeline.layout=E|t*14|x"});
  EXPECT_TRUE(Contains(msg, "t.yaml (--set pipeline.layout): pipeline.layout: stage 2, token 'x': unknown symbol"))
      << msg;
}

TEST(TrainConfigLayout, DescribeRoundTripsTheTextAsWritten) {
  for (const char* layout : {"E,t*3|t*4|t*4|t*3,L", " E , t * 3 |t,t,t*2| t*4 |t*2, t*1 , L "}) {
    const TrainConfig c = ParseTrainConfig(GptWithLayout(layout), "t.yaml");
    const std::string text = DescribeTrainConfig(c);
    EXPECT_TRUE(Contains(text, std::string("layout: \"") + layout + "\"")) << text;
    EXPECT_FALSE(Contains(text, "partition:")) << text;  // the layout is the partition
    TrainConfig back;
    try {
      back = ParseTrainConfig(text, "described.yaml");
    } catch (const ConfigError& e) {
      FAIL() << e.what() << "\n" << text;
    }
    EXPECT_EQ(back.pipeline.partition, Partition::kLayout);
    EXPECT_EQ(back.pipeline.layout.text, layout);
    EXPECT_EQ(back.pipeline.layout.stages, c.pipeline.layout.stages);
    EXPECT_EQ(DescribeTrainConfig(back), text);
  }
}

TEST(TrainConfigLayout, ContradictsAnExplicitPartition) {
  std::string text = GptWithLayout("E,t*7|t*7,L");
  text.replace(text.find("  ranks: 4"), 10, "  ranks: 2\n  partition: [16, 16]");
  const std::string msg = ErrorOf(text);
  EXPECT_TRUE(Contains(msg,
                       "t.yaml:7:11: pipeline.layout: contradicts pipeline.partition [16, 16] (t.yaml:5:14): "
                       "both choose each stage's layers; give one"))
      << msg;
  // The word balanced is a choice too.
  const std::string word = ErrorOf(GptWithLayout("E,t*7|t*7,L"), {"pipeline.partition=balanced"});
  EXPECT_TRUE(Contains(word,
                       "t.yaml:6:11: pipeline.layout: contradicts pipeline.partition balanced (t.yaml "
                       "(--set pipeline.partition))"))
      << word;
}

TEST(TrainConfigLayout, IsForGptModelsOnly) {
  const std::string msg = ErrorOf(std::string(kValid), {"pipeline.layout=E,t|L"});
  EXPECT_TRUE(Contains(msg,
                       "t.yaml (--set pipeline.layout): pipeline.layout: is for GPT models (model: {type: gpt, "
                       "...}); cut an MLP from model.layers with pipeline.partition"))
      << msg;
  std::string text = kValid;
  text.replace(text.find("  ranks: 2"), 10, "  ranks: 2\n  layout: E|L");
  EXPECT_TRUE(Contains(ErrorOf(text), "t.yaml:12:11: pipeline.layout: is for GPT models")) << ErrorOf(text);
}

// One broken rule per layout: one error naming the key's place, the stage,
// the token and the rule.
struct BadLayout {
  const char* layout;
  const char* message;  // after "t.yaml:6:11: pipeline.layout: "
};

void PrintTo(const BadLayout& b, std::ostream* os) { *os << "layout \"" << b.layout << "\""; }

class LayoutRules : public ::testing::TestWithParam<BadLayout> {};

TEST_P(LayoutRules, AreEachOneLocatedError) {
  const BadLayout& bad = GetParam();
  const std::string msg = ErrorOf(GptWithLayout(bad.layout));
  EXPECT_TRUE(Contains(msg, std::string("t.yaml:6:11: pipeline.layout: ") + bad.message)) << bad.layout << ": " << msg;
  EXPECT_TRUE(Contains(msg, std::string("(layout \"") + bad.layout + "\")")) << msg;
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, LayoutRules,
    ::testing::Values(
        BadLayout{"t*3|t*4|t*4|t*3,L", "stage 0, token 't*3': stage 0 must start with E (the embedding)"},
        BadLayout{"t,E,t*2|t*4|t*4|t*4,L", "stage 0, token 't': stage 0 must start with E (the embedding)"},
        BadLayout{"E,t*3|E,t*4|t*4|t*3,L", "stage 1, token 'E': E (the embedding) appears more than once"},
        BadLayout{"E*2,t*3|t*4|t*4|t*3,L", "stage 0, token 'E*2': E (the embedding) appears more than once"},
        BadLayout{"E,t*3|t*4|t*4|t*3", "stage 3, token 't*3': the last stage (stage 3) must end with L (the loss end)"},
        BadLayout{"E,t*3|t*4,L|t*4|t*3,L",
                  "stage 1, token 'L': L (the loss end) must come last in the last stage (stage 3)"},
        BadLayout{"E,t*3|t*4|t*4|L,t*3",
                  "stage 3, token 'L': L (the loss end) must come last in the last stage (stage 3)"},
        BadLayout{"E,t*3|t*4|t*4|t*3,L*2", "stage 3, token 'L*2': L (the loss end) appears more than once"},
        BadLayout{"E,t*3|t*4|t*4|t*4,L",
                  "stage 3, token 't*4': the layout's t's reach 15 here, but model.blocks is 14: every block exactly "
                  "once"},
        BadLayout{"E,t*3|t*4|t*4|t*2,L",
                  "the stages hold 13 t's (transformer blocks), but model.blocks is 14: every block exactly once"},
        BadLayout{"E,t*3||t*4|t*4,t*3,L", "stage 1, token '': the stage is empty: every stage holds at least one"},
        BadLayout{"E,t*3| |t*4|t*4,t*3,L", "stage 1, token '': the stage is empty"},
        BadLayout{"", "stage 0, token '': the stage is empty"},
        BadLayout{"E,,t*3|t*4|t*4|t*3,L", "stage 0, token '': an empty symbol (a stray ','?)"},
        BadLayout{"E,t*3|t*4|x*4|t*3,L",
                  "stage 2, token 'x*4': unknown symbol 'x': a stage lists E (the embedding), "
                  "t (a transformer block) and L (the loss end)"},
        BadLayout{"E,t*3|T*4|t*4|t*3,L", "stage 1, token 'T*4': unknown symbol 'T'"},
        BadLayout{"E,t*3|t4|t*4|t*3,L", "stage 1, token 't4': unknown symbol 't4'"},
        BadLayout{"E,t*3|t*0|t*4|t*3,L",
                  "stage 1, token 't*0': bad repetition count '0': *N repeats a symbol N "
                  "times, N a whole number >= 1"},
        BadLayout{"E,t*3|t*x|t*4|t*3,L", "stage 1, token 't*x': bad repetition count 'x'"},
        BadLayout{"E,t*3|t*|t*4|t*3,L", "stage 1, token 't*': bad repetition count ''"},
        BadLayout{"E,t*3|t*-4|t*4|t*3,L", "stage 1, token 't*-4': bad repetition count '-4'"},
        BadLayout{"E,t*3|t*2.5|t*4|t*3,L", "stage 1, token 't*2.5': bad repetition count '2.5'"},
        BadLayout{"E,t*3|t**4|t*4|t*3,L", "stage 1, token 't**4': bad repetition count '*4'"},
        BadLayout{"E,t*3|t*99999999999|t*4|t*3,L", "stage 1, token 't*99999999999': bad repetition count"},
        BadLayout{"E,t*3|t*2147483647|t*4|t*3,L",
                  "stage 1, token 't*2147483647': the layout's t's reach 2147483650 here, but model.blocks is 14"}));

TEST(TrainConfigErrors, UnknownDataset) {
  const std::string msg = ErrorOf(R"(model:
  layers: [{type: linear, out: 10}]
data: {dataset: mnist}
)");
  EXPECT_TRUE(Contains(msg, "t.yaml:3:17: data.dataset: 'mnist' is not one of: fashion_mnist, synthetic")) << msg;
}

TEST(TrainConfigErrors, SectionThatIsNotAMapping) {
  const std::string msg = ErrorOf(std::string(kValid) + "log: 3\n");
  EXPECT_TRUE(Contains(msg, "t.yaml:18:6:")) << msg;
  EXPECT_TRUE(Contains(msg, "log must be a mapping")) << msg;
}

TEST(TrainConfigErrors, InvalidYaml) {
  const std::string msg = ErrorOf("model:\n  layers: [{type: linear\n");
  EXPECT_TRUE(Contains(msg, "t.yaml:")) << msg;
  EXPECT_TRUE(Contains(msg, "not valid YAML")) << msg;
}

// ---------------------------------------------------------------- --set

TEST(TrainConfigOverrides, ReplaceAValue) {
  const TrainConfig c = ParseTrainConfig(kValid, "t.yaml", {"train.optimizer.lr=0.5"});
  EXPECT_EQ(c.train.optimizer.lr, 0.5);
  EXPECT_EQ(c.train.optimizer.type, "adamw");  // the rest of the mapping stays
}

TEST(TrainConfigOverrides, LaterSetWins) {
  const TrainConfig c = ParseTrainConfig(kValid, "t.yaml", {"train.batch_size=32", "train.batch_size=64"});
  EXPECT_EQ(c.train.batch_size, 64);
}

TEST(TrainConfigOverrides, ReplaceAListItemByIndex) {
  // The hidden width changes; the last linear absorbs it.
  const TrainConfig c = ParseTrainConfig(kValid, "t.yaml", {"model.layers.0.out=64"});
  ASSERT_EQ(c.model.layers.size(), 3u);
  EXPECT_EQ(c.model.layers[0].type, "linear");
  EXPECT_EQ(c.model.layers[0].out, 64);
  EXPECT_EQ(c.model.layers[2].out, 3);
}

TEST(TrainConfigOverrides, ReplaceAWholeListItem) {
  const TrainConfig c = ParseTrainConfig(kValid, "t.yaml", {"model.layers.1={type: gelu}"});
  EXPECT_EQ(c.model.layers[1].type, "gelu");
}

TEST(TrainConfigOverrides, ListItemInsideAResidualBody) {
  const TrainConfig c =
      ParseTrainConfig("", "t.yaml",
                       {"data={dataset: synthetic, features: 4, classes: 3}",
                        "model.layers=[{type: linear, out: 8}, {type: residual, layers: [{type: layernorm}]}, "
                        "{type: linear, out: 3}]",
                        "model.layers.1.layers.0.eps=0.5"});
  ASSERT_EQ(c.model.layers[1].body.size(), 1u);
  EXPECT_EQ(c.model.layers[1].body[0].eps, 0.5);
}

TEST(TrainConfigOverrides, CreatesAMissingMapping) {
  const TrainConfig c = ParseTrainConfig(
      kValid, "t.yaml", {"checkpoint.dir=x", "checkpoint.every_steps=5", "log.metrics=m/metrics.jsonl"});
  EXPECT_EQ(c.checkpoint.dir, "x");
  EXPECT_EQ(c.checkpoint.every_steps, 5);
  EXPECT_EQ(c.log.metrics, "m/metrics.jsonl");
}

TEST(TrainConfigOverrides, ReplacesAWholeFlowMap) {
  const TrainConfig c = ParseTrainConfig(kValid, "t.yaml", {"train.optimizer={type: sgd, lr: 0.2}"});
  const OptimizerSpec d;
  EXPECT_EQ(c.train.optimizer.type, "sgd");
  EXPECT_EQ(c.train.optimizer.lr, 0.2);
  EXPECT_EQ(c.train.optimizer.momentum, 0.0);
  EXPECT_EQ(c.train.optimizer.weight_decay, 0.0);  // sgd's default, not adamw's
  EXPECT_EQ(c.train.optimizer.beta1, d.beta1);
}

TEST(TrainConfigOverrides, FixesAnErrorInTheFile) {
  // Overrides apply before any check.
  std::string text = kValid;
  text.replace(text.find("batch_size: 16"), 14, "batch_size: 15");  // 4 microbatches do not divide 15
  EXPECT_TRUE(Contains(ErrorOf(text), "do not divide")) << text;
  const TrainConfig c = ParseTrainConfig(text, "t.yaml", {"train.batch_size=20"});
  EXPECT_EQ(c.train.batch_size, 20);
}

TEST(TrainConfigOverrides, WrongValueNamesTheSet) {
  const std::string msg = ErrorOf(kValid, {"train.batch_size=0"});
  EXPECT_TRUE(Contains(msg, "t.yaml (--set train.batch_size): train.batch_size: must be at least 1, got 0")) << msg;
  EXPECT_FALSE(Contains(msg, "t.yaml:")) << msg;
}

TEST(TrainConfigOverrides, WrongTypeNamesTheSet) {
  const std::string msg = ErrorOf(kValid, {"pipeline.ranks=two"});
  EXPECT_TRUE(Contains(msg, "(--set pipeline.ranks): pipeline.ranks: expected an integer, got 'two'")) << msg;
  EXPECT_FALSE(Contains(msg, "t.yaml:")) << msg;
}

TEST(TrainConfigOverrides, WrongListItemValueNamesTheSet) {
  const std::string msg = ErrorOf(kValid, {"model.layers.0.out=0"});
  EXPECT_TRUE(Contains(msg, "(--set model.layers[0].out): model.layers[0].out: must be at least 1, got 0")) << msg;
  EXPECT_FALSE(Contains(msg, "t.yaml:")) << msg;
}

TEST(TrainConfigOverrides, ErrorInsideAFlowMapNamesTheSet) {
  const std::string msg = ErrorOf(kValid, {"train.optimizer={type: sgd, lr: 0.2, betas: [0.9, 0.99]}"});
  EXPECT_TRUE(Contains(msg, "(--set train.optimizer): train.optimizer.betas: is an adamw setting")) << msg;
  EXPECT_FALSE(Contains(msg, "t.yaml:")) << msg;
}

TEST(TrainConfigOverrides, MicrobatchesSetOnTheCommandLine) {
  const std::string msg = ErrorOf(kValid, {"pipeline.microbatches=5"});
  EXPECT_TRUE(Contains(msg,
                       "(--set pipeline.microbatches): pipeline.microbatches: 5 microbatches do not divide "
                       "train.batch_size 16"))
      << msg;
}

TEST(TrainConfigOverrides, UnknownKeySetByPathIsNotGivenAFilePosition) {
  const std::string msg = ErrorOf(kValid, {"train.optimizer.learning_rate=0.1"});
  EXPECT_TRUE(Contains(msg, "unknown key 'train.optimizer.learning_rate'")) << msg;
  EXPECT_TRUE(Contains(msg, "--set") || Contains(msg, "command line")) << msg;
  EXPECT_FALSE(Contains(msg, "t.yaml:")) << msg;
}

// A key inside a --set flow map is blamed on the --set, not on a file position.
TEST(TrainConfigOverrides, UnknownKeyInsideAFlowMapNamesTheSet) {
  const std::string msg = ErrorOf(kValid, {"train.optimizer={type: sgd, learning_rate: 0.2}"});
  EXPECT_TRUE(Contains(msg, "unknown key 'train.optimizer.learning_rate'")) << msg;
  EXPECT_TRUE(Contains(msg, "--set train.optimizer")) << msg;
  EXPECT_FALSE(Contains(msg, "t.yaml:")) << msg;
}

// Likewise for a duplicate key inside a --set flow map.
TEST(TrainConfigOverrides, DuplicateKeyInsideAFlowMapNamesTheSet) {
  const std::string msg = ErrorOf(kValid, {"train.optimizer={type: sgd, type: adamw}"});
  EXPECT_TRUE(Contains(msg, "duplicate key 'train.optimizer.type'")) << msg;
  EXPECT_TRUE(Contains(msg, "--set train.optimizer")) << msg;
  EXPECT_FALSE(Contains(msg, "t.yaml:")) << msg;
}

TEST(TrainConfigOverrides, MissingEqualsSignIsAClearError) {
  const std::string msg = ErrorOf(kValid, {"train.optimizer.lr"});
  EXPECT_EQ(msg, "--set train.optimizer.lr: expected key.path=value");
  EXPECT_EQ(ErrorOf(kValid, {"=3"}), "--set =3: expected key.path=value");
}

TEST(TrainConfigOverrides, EmptyKeyInThePath) {
  const std::string msg = ErrorOf(kValid, {"train..lr=3"});
  EXPECT_TRUE(Contains(msg, "--set train..lr=3: empty key in the path")) << msg;
}

TEST(TrainConfigOverrides, IndexOutOfRangeIsAClearError) {
  const std::string msg = ErrorOf(kValid, {"model.layers.7.out=5"});
  EXPECT_EQ(msg, "--set model.layers.7.out=5: '7' is not an index of the list at that point (3 items)");
}

TEST(TrainConfigOverrides, NonNumericIndexIsAClearError) {
  const std::string msg = ErrorOf(kValid, {"model.layers.first.out=5"});
  EXPECT_TRUE(Contains(msg, "'first' is not an index of the list at that point (3 items)")) << msg;
}

TEST(TrainConfigOverrides, KeyInsideAScalarIsAClearError) {
  const std::string msg = ErrorOf(kValid, {"train.batch_size.value=5"});
  EXPECT_TRUE(Contains(msg,
                       "--set train.batch_size.value=5: cannot set key 'value' inside a value that is not a "
                       "mapping"))
      << msg;
}

TEST(TrainConfigOverrides, InvalidYamlValue) {
  const std::string msg = ErrorOf(kValid, {"train.optimizer={type: sgd"});
  EXPECT_TRUE(Contains(msg, "--set train.optimizer={type: sgd: the value is not valid YAML")) << msg;
}

// ---------------------------------------------------------------- describe

void ExpectSameLayers(const std::vector<LayerSpec>& a, const std::vector<LayerSpec>& b, const std::string& where) {
  ASSERT_EQ(a.size(), b.size()) << where;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const std::string at = where + "[" + std::to_string(i) + "]";
    EXPECT_EQ(a[i].type, b[i].type) << at;
    EXPECT_EQ(a[i].out, b[i].out) << at;
    EXPECT_EQ(a[i].bias, b[i].bias) << at;
    EXPECT_EQ(a[i].eps, b[i].eps) << at;
    ExpectSameLayers(a[i].body, b[i].body, at + ".layers");
  }
}

void ExpectSameSettings(const TrainConfig& a, const TrainConfig& b) {
  EXPECT_EQ(a.device, b.device);
  EXPECT_EQ(a.precision, b.precision);
  EXPECT_EQ(a.model.input, b.model.input);
  ExpectSameLayers(a.model.layers, b.model.layers, "model.layers");
  EXPECT_EQ(a.model.init_seed, b.model.init_seed);
  EXPECT_EQ(a.model.init_from, b.model.init_from);
  EXPECT_EQ(a.pipeline.schedule, b.pipeline.schedule);
  EXPECT_EQ(a.pipeline.ranks, b.pipeline.ranks);
  EXPECT_EQ(a.pipeline.microbatches, b.pipeline.microbatches);
  EXPECT_EQ(a.pipeline.chunks, b.pipeline.chunks);
  EXPECT_EQ(a.pipeline.partition, b.pipeline.partition);
  EXPECT_EQ(a.pipeline.partition_counts, b.pipeline.partition_counts);
  EXPECT_EQ(a.pipeline.layout.text, b.pipeline.layout.text);
  EXPECT_EQ(a.pipeline.balance_by, b.pipeline.balance_by);
  EXPECT_EQ(a.pipeline.checkpointing, b.pipeline.checkpointing);
  EXPECT_EQ(a.pipeline.keep, b.pipeline.keep);
  EXPECT_EQ(a.pipeline.wait_timeout_s, b.pipeline.wait_timeout_s);
  EXPECT_EQ(a.data.dataset, b.data.dataset);
  EXPECT_EQ(a.data.path, b.data.path);
  EXPECT_EQ(a.data.shuffle, b.data.shuffle);
  EXPECT_EQ(a.data.samples, b.data.samples);
  EXPECT_EQ(a.data.features, b.data.features);
  EXPECT_EQ(a.data.classes, b.data.classes);
  EXPECT_EQ(a.data.seed, b.data.seed);
  EXPECT_EQ(a.data.evaluate, b.data.evaluate);
  EXPECT_EQ(a.train.batch_size, b.train.batch_size);
  EXPECT_EQ(a.train.epochs, b.train.epochs);
  EXPECT_EQ(a.train.steps, b.train.steps);
  EXPECT_EQ(a.train.optimizer.type, b.train.optimizer.type);
  EXPECT_EQ(a.train.optimizer.lr, b.train.optimizer.lr);
  EXPECT_EQ(a.train.optimizer.momentum, b.train.optimizer.momentum);
  EXPECT_EQ(a.train.optimizer.weight_decay, b.train.optimizer.weight_decay);
  EXPECT_EQ(a.train.optimizer.beta1, b.train.optimizer.beta1);
  EXPECT_EQ(a.train.optimizer.beta2, b.train.optimizer.beta2);
  EXPECT_EQ(a.train.optimizer.eps, b.train.optimizer.eps);
  EXPECT_EQ(a.checkpoint.dir, b.checkpoint.dir);
  EXPECT_EQ(a.checkpoint.every_steps, b.checkpoint.every_steps);
  EXPECT_EQ(a.checkpoint.keep, b.checkpoint.keep);
  EXPECT_EQ(a.log.every_steps, b.log.every_steps);
  EXPECT_EQ(a.log.metrics, b.log.metrics);
  EXPECT_EQ(a.log.weights, b.log.weights);
  EXPECT_EQ(a.log.progress, b.log.progress);
}

class DescribeRoundTrip : public ::testing::TestWithParam<const char*> {};

TEST_P(DescribeRoundTrip, ParsesBackToTheSameSettings) {
  const TrainConfig c = LoadTrainConfig(Source(GetParam()));
  const std::string text = DescribeTrainConfig(c);
  TrainConfig back;
  try {
    back = ParseTrainConfig(text, "described.yaml");
  } catch (const ConfigError& e) {
    FAIL() << e.what() << "\n" << text;
  }
  ExpectSameSettings(back, c);
  EXPECT_EQ(DescribeTrainConfig(back), text);
}

INSTANTIATE_TEST_SUITE_P(Configs, DescribeRoundTrip,
                         ::testing::Values("configs/fmnist_mlp_1f1b.yaml", "configs/fmnist_mlp_zb_h1.yaml",
                                           "configs/fmnist_mlp_interleaved.yaml", "configs/synthetic_bench.yaml",
                                           "tests/mpi/tiny.yaml"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string name = fs::path(info.param).stem().string();
                           for (char& ch : name) {
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return name;
                         });

TEST(DescribeTrainConfig, RoundTripsOverridesAndEveryOptionalSetting) {
  // Settings the shipped files leave at their defaults: an explicit
  // partition, checkpoint settings, bias off, layernorm eps, init.from, sgd
  // with weight decay, odd numbers.
  const TrainConfig c = ParseTrainConfig(kValid, "t.yaml",
                                         {"model.layers.0={type: linear, out: 6, bias: false}",
                                          "model.layers.1={type: layernorm, eps: 0.001}",
                                          "model.init={seed: 123456789, from: init.safetensors}",
                                          "pipeline.partition=[1, 2]",
                                          "pipeline.wait_timeout_s=12.5",
                                          "pipeline.checkpointing=selective",
                                          "pipeline.keep=[linear, layernorm]",
                                          "data.samples=100",
                                          "data.shuffle=true",
                                          "data.seed=42",
                                          "data.evaluate=false",
                                          "train.steps=7",
                                          "train.epochs=3",
                                          "train.optimizer={type: sgd, lr: 0.0123, momentum: 0.5, weight_decay: 0.25}",
                                          "checkpoint={dir: ck, every_steps: 5, keep: 2}",
                                          "log.every_steps=0",
                                          "log.weights=''",
                                          "log.progress=false",
                                          "device=cuda",
                                          "precision=bf16"});
  EXPECT_EQ(c.pipeline.partition, "explicit");
  EXPECT_EQ(c.pipeline.partition_counts, (std::vector<int>{1, 2}));
  EXPECT_FALSE(c.model.layers[0].bias);
  EXPECT_EQ(c.log.weights, "");
  const std::string text = DescribeTrainConfig(c);
  TrainConfig back;
  try {
    back = ParseTrainConfig(text, "described.yaml");
  } catch (const ConfigError& e) {
    FAIL() << e.what() << "\n" << text;
  }
  ExpectSameSettings(back, c);
}

TEST(DescribeTrainConfig, AdamWRoundTrips) {
  const TrainConfig c =
      ParseTrainConfig(kValid, "t.yaml", {"train.optimizer={type: adamw, lr: 0.3, betas: [0.8, 0.95], eps: 1e-6}"});
  const TrainConfig back = ParseTrainConfig(DescribeTrainConfig(c), "described.yaml");
  ExpectSameSettings(back, c);
  EXPECT_EQ(back.train.optimizer.beta1, 0.8);
  EXPECT_EQ(back.train.optimizer.beta2, 0.95);
  EXPECT_EQ(back.train.optimizer.eps, 1e-6);
}

TEST(TrainConfigFuzzFindings, SelfReferringAliasIsAnErrorNotAStackOverflow) {
  try {
    ParseTrainConfig("model:\n  layers: &l [{type: residual, layers: *l}]\n", "alias.yaml");
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("nest deeper than 16 levels"), std::string::npos) << e.what();
  }
}

// ------------------------------------------------------- every key's range
// One bad value per key, set on the command line: each is refused with the
// --set named, the key path and the rule.
struct BadValue {
  const char* set;
  const char* message;
};

void PrintTo(const BadValue& b, std::ostream* os) { *os << "--set " << b.set; }

class EveryKeyIsChecked : public ::testing::TestWithParam<BadValue> {};

TEST_P(EveryKeyIsChecked, BadValueIsRefusedWithTheRule) {
  const BadValue& bad = GetParam();
  const std::string msg = ErrorOf(kValid, {bad.set});
  EXPECT_TRUE(Contains(msg, bad.message)) << bad.set << " gave: " << msg;
}

INSTANTIATE_TEST_SUITE_P(
    Keys, EveryKeyIsChecked,
    ::testing::Values(
        BadValue{"model.input=0", "(--set model.input): model.input: must be at least 1, got 0"},
        BadValue{"model.loss=mse", "model.loss: 'mse' is not one of: cross_entropy"},
        BadValue{"model.init.seed=x", "model.init.seed: expected an integer, got 'x'"},
        BadValue{"model.layers.0.out=0", "model.layers[0].out: must be at least 1, got 0"},
        BadValue{"model.layers.0.bias=yes", "model.layers[0].bias: expected true or false, got 'yes'"},
        BadValue{"model.layers.1.type=tanh", "model.layers[1].type: 'tanh' is not one of"},
        BadValue{"pipeline.ranks=0", "pipeline.ranks: must be at least 1, got 0"},
        BadValue{"pipeline.ranks=2.5", "pipeline.ranks: expected an integer, got '2.5'"},
        BadValue{"pipeline.microbatches=0", "pipeline.microbatches: must be at least 1, got 0"},
        BadValue{"pipeline.microbatches=3", "pipeline.microbatches"},
        BadValue{"pipeline.chunks=-1", "pipeline.chunks: must be at least 0, got -1"},
        BadValue{"pipeline.partition=even", "pipeline.partition: 'even' is not one of: balanced"},
        BadValue{"pipeline.balance_by=time", "pipeline.balance_by: 'time' is not one of: params, flops"},
        BadValue{"pipeline.checkpointing=some", "pipeline.checkpointing: 'some' is not one of: none, full, selective"},
        BadValue{"pipeline.wait_timeout_s=0", "pipeline.wait_timeout_s: must be in [0.001, 10000000], got 0"},
        BadValue{"pipeline.wait_timeout_s=nan", "pipeline.wait_timeout_s: expected a finite number, got 'nan'"},
        BadValue{"data.dataset=cifar", "data.dataset: 'cifar' is not one of: fashion_mnist, synthetic"},
        BadValue{"data.shuffle=maybe", "data.shuffle: expected true or false, got 'maybe'"},
        BadValue{"data.samples=0", "data.samples: must be at least 1"},
        BadValue{"data.features=0", "data.features: must be at least 1, got 0"},
        BadValue{"data.classes=1", "data.classes: must be at least 2, got 1"},
        BadValue{"data.evaluate=2", "data.evaluate: expected true or false, got '2'"},
        BadValue{"train.batch_size=0", "train.batch_size: must be at least 1, got 0"},
        BadValue{"train.epochs=0", "train.epochs: must be at least 1, got 0"},
        BadValue{"train.steps=-1", "train.steps: must be >= 0"},
        BadValue{"train.optimizer.type=lamb", "train.optimizer.type: 'lamb' is not one of: sgd, adamw"},
        BadValue{"train.optimizer.lr=0", "train.optimizer.lr: must be greater than 0, got 0"},
        BadValue{"train.optimizer.lr=inf", "train.optimizer.lr: expected a finite number, got 'inf'"},
        BadValue{"train.optimizer.eps=0", "train.optimizer.eps: must be in (0, 1], got 0"},
        BadValue{"train.optimizer.weight_decay=-1", "train.optimizer.weight_decay: must be at least 0, got -1"},
        BadValue{"train.optimizer.betas=[0.9, 1.0]", "train.optimizer.betas"},
        BadValue{"checkpoint.every_steps=-1", "checkpoint.every_steps: must be >= 0"},
        BadValue{"checkpoint.every_steps=5", "checkpoint.every_steps: needs checkpoint.dir"},
        BadValue{"checkpoint.dir=ck", "checkpoint.dir: needs checkpoint.every_steps > 0"},
        BadValue{"checkpoint.keep=0", "checkpoint.keep: must be at least 1, got 0"},
        BadValue{"log.every_steps=-1", "log.every_steps: must be >= 0"},
        BadValue{"log.progress=3", "log.progress: expected true or false, got '3'"},
        BadValue{"device=gpu", "device: 'gpu' is not one of: cpu, cuda"},
        BadValue{"precision=fp16", "precision: 'fp16' is not one of: fp32, bf16, tf32"},
        BadValue{"precision=bf16", "precision: bf16 needs device: cuda"},
        BadValue{"precision=tf32", "precision: tf32 needs device: cuda"},
        BadValue{"data_parallel.size=0", "data_parallel.size: must be at least 1, got 0"},
        BadValue{"data_parallel.size=3", "data_parallel.size: 3 replicas x 4 microbatches do not divide train.batch_size 16"},
        BadValue{"data_parallel.zero=4", "data_parallel.zero: must be in [0, 3], got 4"},
        BadValue{"data_parallel.bucket_cap_mb=0", "data_parallel.bucket_cap_mb: must be in"},
        BadValue{"data_parallel.sharded=true", "unknown key 'data_parallel.sharded'"},
        BadValue{"recovery.on_lost_rank=restart", "recovery.on_lost_rank: 'restart' is not one of: stop, shrink, replace"},
        BadValue{"recovery.on_lost_rank=shrink",
                 "recovery.on_lost_rank: shrink goes on without the replicas that lost a rank, and needs "
                 "data_parallel.size >= 2"}));

// The valid config with `set` is refused, saying `says`.
void refused(const std::vector<std::string>& set, const std::string& says) {
  try {
    ParseTrainConfig(kValid, "t.yaml", set);
    ADD_FAILURE() << "accepted: " << set.front();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
  }
}

// recovery.on_lost_rank: shrink needs replicas that each hold their stages'
// whole state, and a global batch that the replicas left share equally.
TEST(TrainConfigRecovery, ShrinkNeedsWholeReplicasAndEqualShares) {
  const TrainConfig c = ParseTrainConfig(kValid, "t.yaml", {"data_parallel={size: 2}", "recovery.on_lost_rank=shrink"});
  EXPECT_EQ(c.recovery.on_lost_rank, LostRankMode::kShrink);
  EXPECT_EQ(ParseTrainConfig(kValid, "t.yaml", {}).recovery.on_lost_rank, LostRankMode::kStop);
  refused({"data_parallel={size: 2, zero: 1}", "recovery.on_lost_rank=shrink"},
          "shrink needs every replica to hold its stages' whole state, and ZeRO stage 1 shards it");
  // 4 replicas x 4 microbatches: 3 replicas cannot share 16.
  refused({"data_parallel={size: 4}", "train.batch_size=32", "pipeline.microbatches=4", "recovery.on_lost_rank=shrink"},
          "and 3 cannot share them equally");
  EXPECT_NO_THROW(ParseTrainConfig(kValid, "t.yaml", {"data_parallel={size: 4}", "train.batch_size=48",
                                                       "pipeline.microbatches=3", "recovery.on_lost_rank=shrink"}));
}

// recovery.on_lost_rank: replace needs what shrink needs of the replicas
// (whole state, the CPU, no adaptive plans) but not equal shares, and a
// placement it can hand to the new ranks; a run with it does not adapt by
// default.
TEST(TrainConfigRecovery, ReplaceNeedsAWholeReplicaAndAGivenPlacement) {
  const TrainConfig c = ParseTrainConfig(kValid, "t.yaml", {"data_parallel={size: 4}", "train.batch_size=32",
                                                             "pipeline.microbatches=4", "recovery.on_lost_rank=replace"});
  EXPECT_EQ(c.recovery.on_lost_rank, LostRankMode::kReplace);
  EXPECT_EQ(EnumName(c.recovery.on_lost_rank), "replace");
  EXPECT_EQ(c.pipeline.adapt, AdaptMode::kOff);
  refused({"pipeline.ranks=1", "pipeline.schedule=gpipe", "recovery.on_lost_rank=replace"},
          "replace rebuilds a lost rank's state from another replica or, in a pure pipeline, from the next rank's "
          "snapshot of it, and a one-rank job has neither: use stop");
  // Under ZeRO 1-3 each replica's shards exist nowhere else: snapshots on
  // the next replica, every snapshot_every steps.
  for (const int zero : {1, 2, 3}) {
    const TrainConfig z = ParseTrainConfig(kValid, "t.yaml", {"data_parallel={size: 2, zero: " + std::to_string(zero) + "}",
                                                              "recovery={on_lost_rank: replace, snapshot_every: 4}"});
    EXPECT_EQ(z.recovery.snapshot_every, 4);
  }
  refused({"data_parallel={size: 2}", "pipeline.partition=auto", "recovery.on_lost_rank=replace"},
          "an automatic one (pipeline.partition: auto) is not passed to them yet");
  refused({"data_parallel={size: 2}", "pipeline.adapt=on", "recovery.on_lost_rank=replace"},
          "replace with pipeline.adapt: on is not built yet");
}

// recovery.silent_s: the silence that makes a rank lost, 1 s by default,
// 0 for none (only a closed connection), never under 5 heartbeats.
TEST(TrainConfigRecovery, TheSilenceThatMakesARankLostIsZeroOrAtLeastHalfASecond) {
  EXPECT_EQ(ParseTrainConfig(kValid, "t.yaml", {}).recovery.silent_s, 1.0);
  EXPECT_EQ(ParseTrainConfig(kValid, "t.yaml", {"recovery.silent_s=0"}).recovery.silent_s, 0.0);
  EXPECT_EQ(ParseTrainConfig(kValid, "t.yaml", {"recovery.silent_s=30"}).recovery.silent_s, 30.0);
  for (const char* bad : {"recovery.silent_s=0.2", "recovery.silent_s=-1"}) {
    refused({bad}, "recovery.silent_s: must be 0 (only a closed connection is a loss) or at least 0.5 s");
  }
}

// In a pure pipeline replace takes a lost rank's state from the next
// rank's snapshot, taken every recovery.snapshot_every steps (auto, 0, by
// default); the interval applies there only, and reads back as written.
TEST(TrainConfigRecovery, ReplaceInAPurePipelineSnapshotsOnTheNextRank) {
  const TrainConfig c = ParseTrainConfig(kValid, "t.yaml", {"recovery.on_lost_rank=replace"});
  EXPECT_EQ(c.recovery.on_lost_rank, LostRankMode::kReplace);
  EXPECT_EQ(c.data_parallel.size, 1);
  EXPECT_EQ(c.recovery.snapshot_every, 0);
  EXPECT_EQ(c.pipeline.adapt, AdaptMode::kOff);
  const TrainConfig every =
      ParseTrainConfig(kValid, "t.yaml", {"recovery={on_lost_rank: replace, snapshot_every: 7}"});
  EXPECT_EQ(every.recovery.snapshot_every, 7);
  EXPECT_EQ(ParseTrainConfig(DescribeTrainConfig(every), "d.yaml", {}).recovery.snapshot_every, 7);
  EXPECT_NE(DescribeTrainConfig(c).find("snapshot_every: auto"), std::string::npos) << DescribeTrainConfig(c);
  EXPECT_EQ(ParseTrainConfig(DescribeTrainConfig(c), "d.yaml", {}).recovery.snapshot_every, 0);
  EXPECT_EQ(ParseTrainConfig(kValid, "t.yaml", {"recovery={on_lost_rank: replace, snapshot_every: auto}"})
                .recovery.snapshot_every,
            0);
  for (const char* bad : {"0", "-2", "1.5", "often"}) {
    refused({std::string("recovery={on_lost_rank: replace, snapshot_every: ") + bad + "}"},
            "recovery.snapshot_every: must be auto or a whole number of steps >= 1");
  }
  refused({"recovery.snapshot_every=5"}, "recovery.snapshot_every: applies to recovery.on_lost_rank: replace in a "
                                         "pure pipeline (data_parallel.size 1)");
  refused({"data_parallel={size: 2}", "recovery={on_lost_rank: replace, snapshot_every: 5}"},
          "with replicas under ZeRO 0 it comes from another replica");
}

TEST(TrainConfigDataParallel, ReplicasRunOnTheGpuToo) {
  const TrainConfig c = ParseTrainConfig(kValid, "t.yaml", {"data_parallel={size: 2, zero: 1}", "device=cuda"});
  EXPECT_EQ(c.data_parallel.size, 2);
  EXPECT_EQ(c.data_parallel.zero.number(), 1);
  EXPECT_EQ(c.device, Device::kCuda);
}

TEST(TrainConfigDataParallel, ShardedStagesRunOnTheCpuAndAreRefusedOnTheGpu) {
  for (int zero : {2, 3}) {
    const std::string set = "data_parallel={size: 2, zero: " + std::to_string(zero) + "}";
    EXPECT_EQ(ParseTrainConfig(kValid, "t.yaml", {set}).data_parallel.zero.number(), zero);
    try {
      ParseTrainConfig(kValid, "t.yaml", {set, "device=cuda"});
      ADD_FAILURE() << "zero " << zero << " on cuda was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("data_parallel.zero: ZeRO stage " + std::to_string(zero) +
                                           " runs on the CPU only so far"),
                std::string::npos)
          << e.what();
    }
  }
}

TEST(TrainConfigDataParallel, RoundTrips) {
  const TrainConfig c = ParseTrainConfig(kValid, "t.yaml", {"data_parallel={size: 2, zero: 1, bucket_cap_mb: 4}"});
  EXPECT_EQ(c.data_parallel.size, 2);
  EXPECT_EQ(c.data_parallel.zero.number(), 1);
  EXPECT_DOUBLE_EQ(c.data_parallel.bucket_cap_mb, 4.0);
  const TrainConfig again = ParseTrainConfig(DescribeTrainConfig(c), "again.yaml");
  EXPECT_EQ(again.data_parallel.size, 2);
  EXPECT_EQ(again.data_parallel.zero.number(), 1);
  EXPECT_DOUBLE_EQ(again.data_parallel.bucket_cap_mb, 4.0);
}

TEST(TrainConfigSlices, SeqSlicesAreReadAndWhatCannotBeSlicedIsRefusedWhereItIsSet) {
  const std::string gpt = std::string(R"(model: {type: gpt, vocab: 32, seq_len: 8, hidden: 16, heads: 2, blocks: 2}
data: {dataset: synthetic_tokens, seq_len: 8, vocab: 32}
pipeline: {ranks: 2, microbatches: 2, schedule: seq1f1b, seq_slices: 4}
train: {batch_size: 4}
)");
  TrainConfig c = ParseTrainConfig(gpt, "g.yaml");
  EXPECT_EQ(c.pipeline.seq_slices, 4);
  EXPECT_EQ(c.pipeline.seq_split, SeqSplit::kEven);
  EXPECT_TRUE(Contains(DescribeTrainConfig(c), "seq_slices: 4"));
  c = ParseTrainConfig(gpt, "g.yaml", {"pipeline.seq_slices=3", "pipeline.seq_split=compute"});
  EXPECT_EQ(c.pipeline.seq_split, SeqSplit::kCompute);
  auto error = [&](const std::vector<std::string>& sets) {
    try {
      ParseTrainConfig(gpt, "g.yaml", sets);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    ADD_FAILURE() << "accepted";
    return std::string();
  };
  // The key's place in the file (or its --set), the value and the rule.
  std::string three = gpt;
  three.replace(three.find("seq_slices: 4"), 13, "seq_slices: 3");
  EXPECT_TRUE(Contains(ErrorOf(three), "t.yaml:3:"));
  EXPECT_TRUE(Contains(ErrorOf(three), "3 does not divide the sequence length 8"));
  EXPECT_TRUE(Contains(error({"pipeline.seq_slices=3"}), "(--set pipeline.seq_slices)"));
  EXPECT_TRUE(Contains(error({"pipeline.seq_slices=9", "pipeline.seq_split=compute"}),
                       "9 slices of a sequence of 8 tokens"));
  EXPECT_TRUE(Contains(error({"pipeline.schedule=1f1b"}), "1F1B does not run sequence slices"));
  EXPECT_TRUE(Contains(error({"pipeline.schedule=1f1b"}), "1F1B over slices is seq1f1b"));
  EXPECT_TRUE(Contains(error({"pipeline.seq_slices=1", "pipeline.seq_split=compute"}),
                       "seq_split: only applies with pipeline.seq_slices > 1"));
  EXPECT_TRUE(Contains(error({"pipeline.seq_split=halves"}), "'halves' is not one of: even, compute"));
  EXPECT_TRUE(Contains(error({"pipeline.seq_slices=0"}), "seq_slices"));
  EXPECT_TRUE(Contains(error({"device=cuda"}), "sequence slices run on the CPU layers only so far"));
  // An MLP has no sequence.
  EXPECT_TRUE(Contains(ErrorOf(kValid, {"pipeline.seq_slices=2"}),
                       "slices a GPT's sequences (model: {type: gpt, ...}); this model has none"));
}

}  // namespace
}  // namespace baton

namespace baton {
namespace {

// pipeline.adapt left unset: on where a plan can change between steps (two
// ranks or more, a generated schedule, the CPU, no shrinking recovery), off
// elsewhere, and never an error; set, it is what was asked.
TEST(TrainConfigAdapt, OnByDefaultWhereAPlanCanChangeAndOffElsewhere) {
  const TrainConfig on = ParseTrainConfig(kValid, "t.yaml", {});
  EXPECT_EQ(on.pipeline.adapt, AdaptMode::kOn);
  EXPECT_FALSE(on.pipeline.adapt_asked);
  EXPECT_EQ(ParseTrainConfig(kValid, "t.yaml", {"pipeline.ranks=1"}).pipeline.adapt, AdaptMode::kOff);
  EXPECT_EQ(ParseTrainConfig(kValid, "t.yaml", {"data_parallel.size=2", "recovery.on_lost_rank=shrink"}).pipeline.adapt,
            AdaptMode::kOff);
  const TrainConfig off = ParseTrainConfig(kValid, "t.yaml", {"pipeline.adapt=off"});
  EXPECT_EQ(off.pipeline.adapt, AdaptMode::kOff);
  EXPECT_TRUE(off.pipeline.adapt_asked);
  EXPECT_TRUE(Contains(DescribeTrainConfig(off), "adapt: off"));  // a described config reads back the same
  EXPECT_EQ(ParseTrainConfig(DescribeTrainConfig(off), "d.yaml", {}).pipeline.adapt, AdaptMode::kOff);
  EXPECT_TRUE(Contains(ErrorOf(kValid, {"pipeline.adapt=on", "data_parallel.size=2", "recovery.on_lost_rank=shrink"}),
                       "shrink with pipeline.adapt: on is not built yet"));
}

// pipeline.adapt: full (the microbatches re-split between replicas too)
// needs replicas, and is not built for ZeRO 2 and 3; it reads back the
// same; a replica's own microbatches shape its plan's batch, not its rows.
TEST(TrainConfigAdapt, FullNeedsReplicasAndZeroBelowTwo) {
  const TrainConfig full =
      ParseTrainConfig(kValid, "t.yaml", {"pipeline.adapt=full", "data_parallel={size: 2, zero: 1}"});
  EXPECT_EQ(full.pipeline.adapt, AdaptMode::kFull);
  EXPECT_TRUE(Contains(DescribeTrainConfig(full), "adapt: full"));
  EXPECT_EQ(ParseTrainConfig(DescribeTrainConfig(full), "d.yaml", {}).pipeline.adapt, AdaptMode::kFull);
  EXPECT_TRUE(Contains(ErrorOf(kValid, {"pipeline.adapt=full"}),
                       "pipeline.adapt: full also re-splits the microbatches between replicas, and needs "
                       "data_parallel.size >= 2: use on"));
  EXPECT_TRUE(Contains(ErrorOf(kValid, {"pipeline.adapt=full", "data_parallel={size: 2, zero: 2}"}),
                       "full with data_parallel.zero 2 is not built yet"));
  EXPECT_TRUE(Contains(ErrorOf(kValid, {"pipeline.adapt=full", "data_parallel.size=2", "recovery.on_lost_rank=shrink"}),
                       "shrink with pipeline.adapt: full is not built yet"));
  EXPECT_TRUE(Contains(ErrorOf(kValid, {"pipeline.adapt=fast"}), "pipeline.adapt: 'fast' is not one of: off, on, full"));
  // 2 replicas x 4 microbatches of a batch of 16: 2 rows each; replica 1
  // running 6 of the 8 reads rows 4.. (2 microbatches before it).
  TrainConfig split = ParseTrainConfig(kValid, "t.yaml", {"data_parallel.size=2"});
  ASSERT_EQ(split.pipeline.microbatches, 4);
  split.pipeline.replica_microbatches = {2, 6};
  EXPECT_EQ(ReplicaConfig(split, 1).pipeline.microbatches, 6);
  EXPECT_EQ(ReplicaConfig(split, 0).pipeline.microbatches, 2);
  EXPECT_EQ(MicrobatchesBefore(split, 1), 2);
  EXPECT_EQ(MicrobatchesBefore(ParseTrainConfig(kValid, "t.yaml", {"data_parallel.size=2"}), 1), 4);
}

// train.grad_accum_dtype: auto is fp64 where the replicas' split of the
// microbatches can change (adapt: full, shrink) and fp32 elsewhere; fp64
// is written in the resolved settings (and only then), read back the
// same, and refused where its doubles are not built (cuda, ZeRO 2 and 3).
TEST(TrainConfigGradAccum, AutoFollowsTheSplitAndFp64IsRefusedWhereNotBuilt) {
  const TrainConfig plain = ParseTrainConfig(kValid, "t.yaml", {"data_parallel.size=2"});
  EXPECT_EQ(plain.train.grad_accum, GradAccum::kAuto);
  EXPECT_FALSE(WideGradients(plain));
  EXPECT_FALSE(Contains(DescribeTrainConfig(plain), "grad_accum_dtype"));
  const TrainConfig full = ParseTrainConfig(kValid, "t.yaml", {"pipeline.adapt=full", "data_parallel.size=2"});
  EXPECT_TRUE(WideGradients(full));
  const TrainConfig shrink = ParseTrainConfig(kValid, "t.yaml", {"recovery.on_lost_rank=shrink", "data_parallel.size=2"});
  EXPECT_TRUE(WideGradients(shrink));
  EXPECT_FALSE(WideGradients(ParseTrainConfig(
      kValid, "t.yaml", {"recovery.on_lost_rank=shrink", "data_parallel.size=2", "train.grad_accum_dtype=fp32"})));
  const TrainConfig asked = ParseTrainConfig(kValid, "t.yaml", {"train.grad_accum_dtype=fp64"});
  EXPECT_TRUE(WideGradients(asked));
  EXPECT_TRUE(Contains(DescribeTrainConfig(asked), "grad_accum_dtype: fp64"));
  EXPECT_TRUE(WideGradients(ParseTrainConfig(DescribeTrainConfig(asked), "d.yaml", {})));
  EXPECT_TRUE(Contains(ErrorOf(kValid, {"train.grad_accum_dtype=fp16"}),
                       "train.grad_accum_dtype: 'fp16' is not one of: auto, fp32, fp64"));
  EXPECT_TRUE(Contains(ErrorOf(kValid, {"train.grad_accum_dtype=fp64", "device=cuda"}),
                       "grad_accum_dtype: fp64 sums gradients on the CPU only (device: cpu): use fp32"));
  EXPECT_TRUE(Contains(ErrorOf(kValid, {"train.grad_accum_dtype=fp64", "data_parallel={size: 2, zero: 2}"}),
                       "fp64 is not built for data_parallel.zero 2"));
}

// The automatic placement's keys: partition: auto for an MLP, layout: auto
// for a GPT, profile and memory_bytes only with them.
TEST(TrainConfigPlacement, AutoAndItsKeysAreReadAndMisuseIsRefused) {
  TrainConfig c = ParseTrainConfig(kValid, "t.yaml",
                                   {"pipeline.partition=auto", "pipeline.profile=p.json", "pipeline.memory_bytes=1e9"});
  EXPECT_EQ(c.pipeline.partition, Partition::kAuto);
  EXPECT_EQ(c.pipeline.profile, "p.json");
  EXPECT_EQ(c.pipeline.memory_bytes, 1e9);
  EXPECT_TRUE(Contains(DescribeTrainConfig(c), "partition: auto"));
  // A profile prices the adaptive plans too, which are on by default here
  // (two ranks, a generated schedule, the CPU); with them off, or where a
  // plan cannot change (one rank), it applies to nothing.
  EXPECT_EQ(ParseTrainConfig(kValid, "t.yaml", {"pipeline.profile=p.json"}).pipeline.adapt, AdaptMode::kOn);
  EXPECT_TRUE(Contains(ErrorOf(kValid, {"pipeline.profile=p.json", "pipeline.adapt=off"}),
                       "pipeline.profile: only applies with an automatic placement"));
  EXPECT_TRUE(Contains(ErrorOf(kValid, {"pipeline.profile=p.json", "pipeline.ranks=1"}),
                       "pipeline.profile: only applies with an automatic placement"));
  EXPECT_TRUE(Contains(ErrorOf(kValid, {"pipeline.memory_bytes=5"}),
                       "pipeline.memory_bytes: only applies with an automatic placement"));
  EXPECT_TRUE(Contains(ErrorOf(kValid, {"pipeline.partition=auto", "pipeline.memory_bytes=-1"}), "memory_bytes"));
  EXPECT_TRUE(Contains(ErrorOf(kValid, {"pipeline.layout=auto"}), "is for GPT models"));
  const std::string gpt = std::string(R"(model: {type: gpt, vocab: 32, seq_len: 8, hidden: 16, heads: 2, blocks: 2}
data: {dataset: synthetic_tokens, seq_len: 8, vocab: 32}
pipeline: {ranks: 2, microbatches: 2}
train: {batch_size: 4}
)");
  c = ParseTrainConfig(gpt, "g.yaml", {"pipeline.layout=auto"});
  EXPECT_EQ(c.pipeline.partition, Partition::kAuto);
  EXPECT_TRUE(Contains(ErrorOf(gpt, {"pipeline.partition=auto"}), "write pipeline.layout: auto"));
}

}  // namespace
}  // namespace baton

namespace baton {
namespace {

// train.lr_schedule: read whole, written back by DescribeTrainConfig, and
// every schedule that cannot be what was meant refused where it is written.
TEST(TrainConfigLrSchedule, ReadsItsShapeAndRefusesWhatCannotBeMeant) {
  const std::string base = std::string(kValid) + "  steps: 100\n";
  const TrainConfig c =
      ParseTrainConfig(base + "  lr_schedule: {type: cosine, warmup_steps: 10, min_lr: 1.0e-4, decay_steps: 80}\n",
                       "t.yaml");
  EXPECT_EQ(c.train.lr_schedule.type, LrDecay::kCosine);
  EXPECT_EQ(c.train.lr_schedule.warmup_steps, 10);
  EXPECT_EQ(c.train.lr_schedule.min_lr, 1.0e-4);
  EXPECT_EQ(c.train.lr_schedule.decay_steps, 80);
  EXPECT_TRUE(Contains(DescribeTrainConfig(c), "lr_schedule: {type: cosine, warmup_steps: 10, min_lr: 0.0001, "
                                               "decay_steps: 80}"))
      << DescribeTrainConfig(c);
  EXPECT_FALSE(Contains(DescribeTrainConfig(ParseTrainConfig(base, "t.yaml")), "lr_schedule"));
  EXPECT_TRUE(Contains(ErrorOf(base + "  lr_schedule: {type: cosine, warmup_steps: 100}\n"),
                       "train.lr_schedule.warmup_steps: 100 steps of warm-up are not shorter than the decay's 100 "
                       "(train.steps)"));
  EXPECT_TRUE(Contains(ErrorOf(base + "  lr_schedule: {type: linear, warmup_steps: 50, decay_steps: 40}\n"),
                       "not shorter than the decay's 40 (decay_steps)"));
  EXPECT_TRUE(Contains(ErrorOf(base + "  lr_schedule: {type: cosine, min_lr: 0.01}\n"),
                       "train.lr_schedule.min_lr: 0.01 is above the peak rate train.optimizer.lr 0.001"));
  EXPECT_TRUE(Contains(ErrorOf(base + "  lr_schedule: {type: constant, min_lr: 0.0001}\n"),
                       "train.lr_schedule.min_lr: only applies to a decay (type: linear or cosine)"));
  EXPECT_TRUE(Contains(ErrorOf(base + "  lr_schedule: {type: cosine, warmup_steps: -1}\n"),
                       "train.lr_schedule.warmup_steps: must be >= 0"));
  EXPECT_TRUE(Contains(ErrorOf(base + "  lr_schedule: {type: step}\n"), "train.lr_schedule.type"));
}

}  // namespace
}  // namespace baton

namespace baton {
namespace {

TEST(TrainConfigClip, ANegativeClipIsRefusedAndAClipRunsOnEitherDevice) {
  const std::string base = std::string(kValid);
  EXPECT_EQ(ParseTrainConfig(base + "  clip_grad_norm: 1.0\n", "t.yaml").train.clip_grad_norm, 1.0);
  EXPECT_TRUE(Contains(ErrorOf(base + "  clip_grad_norm: -1\n"), "train.clip_grad_norm"));
  EXPECT_EQ(ParseTrainConfig(base + "  clip_grad_norm: 1.0\ndevice: cuda\n", "t.yaml").train.clip_grad_norm, 1.0);
}

// log.trace and log.trace_every: read, written back, refused where they
// cannot be what was meant.
TEST(TrainConfigLog, ReadsTheTraceAndRefusesAStrideWithoutOne) {
  const TrainConfig c = ParseTrainConfig(std::string(kValid) + "log: {trace: out/t.json, trace_every: 50}\n", "t.yaml");
  EXPECT_EQ(c.log.trace, "out/t.json");
  EXPECT_EQ(c.log.trace_every, 50);
  EXPECT_TRUE(Contains(DescribeTrainConfig(c), "trace: out/t.json")) << DescribeTrainConfig(c);
  EXPECT_EQ(ParseTrainConfig(kValid, "t.yaml").log.trace_every, 100);
  EXPECT_TRUE(Contains(ErrorOf(std::string(kValid) + "log: {trace: t.json, trace_every: 0}\n"),
                       "log.trace_every: must be >= 1"));
  EXPECT_TRUE(Contains(ErrorOf(std::string(kValid) + "log: {trace_every: 10}\n"),
                       "log.trace_every: only applies with log.trace"));
}

// log.blame and log.blame_threshold: read, written back, refused where
// they cannot be what was meant.
TEST(TrainConfigLog, ReadsBlameAndRefusesAThresholdWithoutIt) {
  const TrainConfig c = ParseTrainConfig(std::string(kValid) + "log: {blame: true, blame_threshold: 0.2}\n", "t.yaml");
  EXPECT_TRUE(c.log.blame);
  EXPECT_DOUBLE_EQ(c.log.blame_threshold, 0.2);
  EXPECT_TRUE(Contains(DescribeTrainConfig(c), "blame: true")) << DescribeTrainConfig(c);
  EXPECT_EQ(ParseTrainConfig(DescribeTrainConfig(c), "again.yaml").log.blame_threshold, 0.2);
  const TrainConfig off = ParseTrainConfig(kValid, "t.yaml");
  EXPECT_FALSE(off.log.blame);
  EXPECT_DOUBLE_EQ(off.log.blame_threshold, 0.1);
  EXPECT_FALSE(Contains(DescribeTrainConfig(off), "blame")) << DescribeTrainConfig(off);
  EXPECT_TRUE(Contains(ErrorOf(std::string(kValid) + "log: {blame: true, blame_threshold: 0}\n"),
                       "log.blame_threshold: must be above 0"));
  EXPECT_TRUE(Contains(ErrorOf(std::string(kValid) + "log: {blame_threshold: 0.2}\n"),
                       "log.blame_threshold: only applies with log.blame: true"));
  EXPECT_TRUE(Contains(ErrorOf(std::string(kValid) + "log: {blame: true}\ndevice: cuda\n"),
                       "log.blame: names late steps on the CPU only so far"));
}

}  // namespace
}  // namespace baton
