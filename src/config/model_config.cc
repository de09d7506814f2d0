// The training config's model section (sections.h ReadModel): a GPT's
// shape, or a list of layers checked width by width.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <string>
#include <vector>

#include "baton/config.h"
#include "baton/error.h"
#include "sections.h"
#include "yaml_reader.h"

namespace baton {

namespace {

// Reads a layer list; `width` is the number of features entering it and
// comes back as the number leaving it.
// Limits that keep a config's layer tree finite and small: YAML aliases can
// make a list contain itself, or double at every level.
constexpr int kMaxNesting = 16;
constexpr int kMaxLayers = 100000;

std::vector<LayerSpec> ReadLayers(YamlMap& parent, std::string_view key, int& width, int depth, int* count) {
  YAML::Node list = parent.Node(key);
  if (!list.IsDefined() || list.IsNull() || !list.IsSequence() || list.size() == 0) {
    parent.Fail(list, key, "must be a non-empty list of layers, e.g. [{type: linear, out: 128}, {type: relu}]");
  }
  if (depth > kMaxNesting) {
    parent.Fail(
        list, key,
        fmt::format("residual blocks nest deeper than {} levels (a YAML alias that refers to itself?)", kMaxNesting));
  }
  std::vector<LayerSpec> out;
  for (YamlMap& item : parent.MapList(key)) {
    if (++*count > kMaxLayers) {
      parent.Fail(list, key,
                  fmt::format("the model has more than {} layers (YAML aliases repeating a list?)", kMaxLayers));
    }
    LayerSpec spec;
    spec.type = Choice<LayerType>(item, "type", std::nullopt);
    if (spec.type == LayerType::kLinear) {
      if (!item.Has("out")) item.Fail(item.Node("type"), "out", "a linear layer needs 'out' (output features)");
      spec.out = item.GetInt("out", 0, 1, kMaxInt);
      spec.bias = item.Get("bias", true);
      width = spec.out;
    } else if (spec.type == LayerType::kLayerNorm) {
      spec.eps = item.GetNumber("eps", 1e-5, std::numeric_limits<double>::min(), 1.0);
    } else if (spec.type == LayerType::kResidual) {
      const int in = width;
      spec.body = ReadLayers(item, "layers", width, depth + 1, count);
      if (width != in) {
        item.Fail(item.Node("layers"), "layers",
                  fmt::format("a residual block's body must keep the width: {} features in, {} out", in, width));
      }
    }
    item.Finish();
    out.push_back(std::move(spec));
  }
  return out;
}

// model: {type: gpt, vocab, seq_len, hidden, heads, blocks, tied}
void ReadGpt(YamlMap& model, TrainConfig& c) {
  OneOf(model, "type", "gpt", {"gpt"});
  GptSpec& g = c.model.gpt_spec;
  c.model.gpt = true;
  if (!IsTokenDataset(c.data.dataset)) {
    model.Fail(model.Node("type"), "type",
               fmt::format("a gpt model reads token ids, but data.dataset is {} (use a token dataset: fortunes, "
                           "synthetic_tokens, megatron, llmc or jsonl)",
                           EnumName(c.data.dataset)));
  }
  g.vocab = model.GetInt("vocab", c.data.vocab, 1, kMaxInt);
  if (g.vocab < c.data.vocab) {
    model.Fail(model.Node("vocab"), "vocab",
               fmt::format("the dataset's token ids go up to {}, beyond a vocabulary of {}", c.data.vocab - 1,
                           g.vocab));
  }
  g.seq_len = model.GetInt("seq_len", c.data.seq_len, 1, kMaxInt);
  if (g.seq_len < c.data.seq_len) {
    model.Fail(model.Node("seq_len"), "seq_len",
               fmt::format("the position table holds {} positions, but data.seq_len is {}", g.seq_len,
                           c.data.seq_len));
  }
  // The MLP's first layer is 4 x hidden wide: counts past an int are refused here, by their key.
  g.hidden = model.GetInt("hidden", g.hidden, 1, kMaxInt / 4);
  g.heads = model.GetInt("heads", g.heads, 1, kMaxInt);
  if (g.hidden % g.heads != 0) {
    model.Fail(model.Node("heads"), "heads",
               fmt::format("{} heads do not divide hidden {} (each head takes hidden / heads features)", g.heads,
                           g.hidden));
  }
  g.blocks = model.GetInt("blocks", g.blocks, 1, kMaxInt);
  g.tied = model.Get("tied", g.tied);
  g.eps = model.GetNumber("eps", g.eps, std::numeric_limits<double>::min(), 1.0);
  if (model.Has("layers") || model.Has("input")) {
    model.Fail(model.Has("layers") ? model.Node("layers") : model.Node("input"),
               model.Has("layers") ? "layers" : "input", "is set by type: gpt");
  }
  c.model.layers = GptLayers(g);
  c.model.seq = c.data.seq_len;
  c.model.input = 1;
}

// model: {layers: [...]}: an MLP from the dataset's features to its classes.
void ReadLayerList(YamlMap& model, TrainConfig& c) {
  if (IsTokenDataset(c.data.dataset)) {
    model.Fail(model.Node("layers"), "layers",
               fmt::format("data.dataset {} gives token ids: use model: {{type: gpt, ...}}", EnumName(c.data.dataset)));
  }
  c.model.input = model.GetInt("input", c.data.features, 1, kMaxInt);
  if (c.model.input != c.data.features) {
    model.Fail(model.Node("input"), "input",
               fmt::format("the dataset has {} features, but the model takes {}", c.data.features, c.model.input));
  }
  int width = c.model.input;
  int layer_count = 0;
  c.model.layers = ReadLayers(model, "layers", width, 0, &layer_count);
  if (width != c.data.classes) {
    model.Fail(model.Node("layers"), "layers",
               fmt::format("the last layer gives {} outputs, but the dataset has {} classes (cross_entropy needs "
                           "one logit per class)",
                           width, c.data.classes));
  }
}

}  // namespace

void ReadModel(YamlMap& top, TrainConfig& c) {
  YamlMap model = top.Map("model");
  if (model.Has("type")) {
    ReadGpt(model, c);
  } else {
    ReadLayerList(model, c);
  }
  OneOf(model, "loss", "cross_entropy", {"cross_entropy"});
  YamlMap init = model.Map("init");
  c.model.init_seed = static_cast<std::uint64_t>(init.Get<long long>("seed", 0));
  c.model.init_from = init.Get<std::string>("from", "");
  init.Finish();
  model.Finish();
}

}  // namespace baton
