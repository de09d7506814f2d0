// The model description: layer shapes, parameter layout and names, FLOPs,
// and PyTorch's default initialisation. Eigen-free.
#include <fmt/format.h>

#include <array>
#include <cmath>

#include "baton/error.h"
#include "baton/model.h"

namespace baton {
namespace {

constexpr std::array<LayerType, 8> kLayerTypes = {
    LayerType::kLinear,   LayerType::kRelu,      LayerType::kGelu,  LayerType::kLayerNorm, LayerType::kResidual,
    LayerType::kEmbedding, LayerType::kPositionEmbedding, LayerType::kAttention};
constexpr std::array<OptimizerType, 2> kOptimizerTypes = {OptimizerType::kSgd, OptimizerType::kAdamW};

void Flatten(const std::vector<LayerSpec>& specs, int top, const std::string& prefix, std::vector<int> path,
             ModelDesc& m) {
  for (std::size_t k = 0; k < specs.size(); ++k) {
    const LayerSpec& spec = specs[k];
    const bool top_level = path.empty();
    // nn.Sequential names: "{i}." at the top, "{i}.{k}." inside a block.
    const std::string name = !spec.name.empty() ? spec.name
                             : top_level        ? fmt::format("{}.", top + static_cast<int>(k))
                                                : fmt::format("{}{}.", prefix, k);
    const int t = top_level ? top + static_cast<int>(k) : top;
    std::vector<int> here = path;
    here.push_back(top_level ? t : static_cast<int>(k));
    const int in = m.width.back();
    if (top_level) m.top_begin.push_back(static_cast<int>(m.ops.size()));
    if (spec.type == LayerType::kResidual) {
      const int block_in = static_cast<int>(m.width.size()) - 1;
      m.block_input[static_cast<std::size_t>(block_in)] = 1;
      Flatten(spec.body, t, name, here, m);
      if (m.width.back() != in) {
        throw ConfigError(fmt::format(
            "layer {}: a residual block's body must keep the width: {} features in, {} out", name, in, m.width.back()));
      }
      OpDesc add;
      add.type = LayerType::kResidual;
      add.in = add.out = in;
      add.skip = block_in;
      add.top = t;
      add.name = name;
      add.seed_path = here;
      add.param_offset = m.num_params;
      add.flops_per_row = in;
      m.ops.push_back(std::move(add));
    } else {
      OpDesc op = DescribeLayer(spec, in, m.seq);
      if (op.type == LayerType::kEmbedding && !m.ops.empty()) {
        throw ConfigError(fmt::format("layer {}: an embedding takes token ids, so it must be the model's first layer",
                                      name));
      }
      op.top = t;
      op.name = name;
      op.seed_path = std::move(here);
      op.param_offset = m.num_params;
      m.num_params += op.num_params;
      m.ops.push_back(std::move(op));
    }
    m.width.push_back(m.ops.back().out);
    m.block_input.push_back(0);
  }
}

}  // namespace

std::string_view EnumName(LayerType type) {
  switch (type) {
    case LayerType::kEmbedding:
      return "embedding";
    case LayerType::kPositionEmbedding:
      return "position_embedding";
    case LayerType::kAttention:
      return "attention";
    case LayerType::kLinear:
      return "linear";
    case LayerType::kRelu:
      return "relu";
    case LayerType::kGelu:
      return "gelu";
    case LayerType::kLayerNorm:
      return "layernorm";
    case LayerType::kResidual:
      return "residual";
  }
  return "?";
}
std::span<const LayerType> EnumValues(LayerType) { return kLayerTypes; }

std::string_view EnumName(OptimizerType type) { return type == OptimizerType::kSgd ? "sgd" : "adamw"; }
std::span<const OptimizerType> EnumValues(OptimizerType) { return kOptimizerTypes; }

OpDesc DescribeLayer(const LayerSpec& spec, int in, int seq) {
  if (spec.type == LayerType::kResidual) {
    throw ConfigError(
        "layer type 'residual' is not a single layer: the stage builds a residual block from its body plus a skip "
        "addition, so it cannot be described on its own");
  }
  if (in < 1) throw ConfigError(fmt::format("{} layer: input features must be >= 1, got {}", EnumName(spec.type), in));
  OpDesc op;
  op.type = spec.type;
  op.in = op.out = in;
  op.seq = seq;
  switch (spec.type) {
    case LayerType::kLinear: {
      if (spec.out < 1) {
        throw ConfigError(fmt::format("linear layer: out (output features) must be >= 1, got {}", spec.out));
      }
      op.out = spec.out;
      op.bias = spec.bias;
      op.conv1d = spec.conv1d;
      op.tied_to = spec.tied ? 0 : -1;  // the embedding, which must come first
      const std::size_t w = static_cast<std::size_t>(op.out) * static_cast<std::size_t>(in);
      op.params.push_back({"weight", spec.conv1d ? std::vector<int>{in, op.out} : std::vector<int>{op.out, in}, 0, w});
      if (spec.bias) op.params.push_back({"bias", {op.out}, w, static_cast<std::size_t>(op.out)});
      op.flops_per_row = static_cast<double>(in) * op.out;
      op.gemm_flops_per_row = 2.0 * in * op.out;
      break;
    }
    case LayerType::kEmbedding: {
      if (spec.vocab < 1 || spec.out < 1) {
        throw ConfigError(fmt::format("embedding layer: vocab and out must be >= 1, got {} and {}", spec.vocab,
                                      spec.out));
      }
      op.in = 1;  // one token id per row
      op.out = spec.out;
      op.vocab = spec.vocab;
      op.params.push_back({"weight", {spec.vocab, spec.out},
                           0, static_cast<std::size_t>(spec.vocab) * static_cast<std::size_t>(spec.out)});
      op.flops_per_row = spec.out;  // a lookup
      break;
    }
    case LayerType::kPositionEmbedding: {
      if (spec.positions < seq) {
        throw ConfigError(fmt::format("position_embedding layer: its table has {} positions, but sequences have {} "
                                      "tokens",
                                      spec.positions, seq));
      }
      op.params.push_back({"weight", {spec.positions, in},
                           0, static_cast<std::size_t>(spec.positions) * static_cast<std::size_t>(in)});
      op.flops_per_row = in;
      break;
    }
    case LayerType::kAttention: {
      if (spec.heads < 1 || in % spec.heads != 0) {
        throw ConfigError(fmt::format("attention layer: {} heads must divide the width {} (head size = width / "
                                      "heads)",
                                      spec.heads, in));
      }
      op.heads = spec.heads;
      const auto c = static_cast<std::size_t>(in);
      const AttentionLayout at(op);
      op.params = {{"c_attn.weight", {in, 3 * in}, at.w_qkv(), 3 * c * c},
                   {"c_attn.bias", {3 * in}, at.b_qkv(), 3 * c},
                   {"c_proj.weight", {in, in}, at.w_proj(), c * c},
                   {"c_proj.bias", {in}, at.b_proj(), c}};
      op.saved_per_row = at.saved_per_row();  // qkv, log-sum-exp per head, heads' output
      op.stash_per_row = at.stash_per_row();  // the qkv gradient
      // Per token: the projections, and scores and weighted values against
      // the sequence (quadratic in it over the whole sample).
      op.flops_per_row = 4.0 * in * in + 2.0 * seq * in;
      op.gemm_flops_per_row = 2.0 * (4.0 * in * in) + 2.0 * seq * in;  // causal: half of (QK^T, PV)
      break;
    }
    case LayerType::kLayerNorm: {
      if (!(spec.eps > 0.0) || !std::isfinite(spec.eps)) {
        throw ConfigError(fmt::format("layernorm layer: eps must be a finite number > 0, got {}", spec.eps));
      }
      op.eps = spec.eps;
      const auto n = static_cast<std::size_t>(in);
      op.params = {{"weight", {in}, 0, n}, {"bias", {in}, n, n}};
      op.flops_per_row = 5.0 * in;
      break;
    }
    case LayerType::kRelu:
    case LayerType::kGelu:
    case LayerType::kResidual:
      op.flops_per_row = in;
      break;
  }
  for (const ParamInfo& p : op.params) op.num_params = std::max(op.num_params, p.offset + p.size);
  return op;
}

std::size_t ScratchBytes(const OpDesc& op, int max_rows, Device device) {
  const auto rows = static_cast<std::size_t>(max_rows);
  const auto in = static_cast<std::size_t>(op.in), out = static_cast<std::size_t>(op.out);
  const bool gpu = device == Device::kCuda;
  constexpr std::size_t kF32 = 4, kBf16 = 2;
  switch (op.type) {
    case LayerType::kAttention: {
      const auto seq = static_cast<std::size_t>(op.seq);
      const std::size_t heads = gpu ? static_cast<std::size_t>(op.heads) : 1;
      return (2 * heads * seq * seq + rows * in) * kF32;
    }
    case LayerType::kLinear:
      return gpu ? (rows * in + rows * out + in * out) * kBf16 : 0;
    case LayerType::kLayerNorm:
      return gpu ? 2 * rows * kF32 : 0;
    default:
      return 0;
  }
}

ModelDesc DescribeModel(const std::vector<LayerSpec>& layers, int input, int seq) {
  ModelDesc m;
  m.seq = seq;
  m.tokens = !layers.empty() && layers.front().type == LayerType::kEmbedding;
  m.input = m.tokens ? 1 : input;
  m.width.push_back(m.input);
  m.block_input.push_back(0);
  Flatten(layers, 0, "", {}, m);
  m.top_begin.push_back(static_cast<int>(m.ops.size()));
  // A tied head shares the embedding's table: the same shape, kept equal.
  for (OpDesc& op : m.ops) {
    if (op.tied_to < 0) continue;
    const OpDesc& e = m.ops.front();
    if (e.type != LayerType::kEmbedding || e.vocab != op.out || e.out != op.in || op.bias || op.conv1d) {
      throw ConfigError(fmt::format(
          "layer {}: a tied head needs the model to start with an embedding of the head's shape (vocab {} x {} "
          "features) and has no bias",
          op.name, op.out, op.in));
    }
  }
  return m;
}

std::size_t ModelDesc::NumParams(int first_layer, int last_layer) const {
  const auto [a, b] = OpRange(first_layer, last_layer);
  std::size_t n = 0;
  for (int i = a; i < b; ++i) n += ops[static_cast<std::size_t>(i)].num_params;
  return n;
}

double ModelDesc::GemmFlopsPerRow(int first_layer, int last_layer) const {
  const auto [a, b] = OpRange(first_layer, last_layer);
  double f = 0;
  for (int i = a; i < b; ++i) f += ops[static_cast<std::size_t>(i)].gemm_flops_per_row;
  return f;
}

double ModelDesc::BalanceWeight(int t, bool by_flops) const {
  const auto [a, b] = OpRange(t, t + 1);
  double w = 0;
  for (int i = a; i < b; ++i) {
    const OpDesc& op = ops[static_cast<std::size_t>(i)];
    w += by_flops ? op.flops_per_row : op.balance_params();
  }
  return w;
}

std::vector<NamedParam> ModelDesc::Params(int first_layer, int last_layer) const {
  const auto [a, b] = OpRange(first_layer, last_layer);
  std::vector<NamedParam> out;
  for (int i = a; i < b; ++i) {
    const OpDesc& op = ops[static_cast<std::size_t>(i)];
    for (const ParamInfo& p : op.params) {
      out.push_back({op.name + p.name, std::vector<std::int64_t>(p.shape.begin(), p.shape.end()),
                     op.param_offset + p.offset, p.size});
    }
  }
  return out;
}

std::optional<std::pair<std::string, std::string>> ModelDesc::TiedParams() const {
  for (const OpDesc& op : ops) {
    if (op.tied_to < 0) continue;
    const OpDesc& table = ops[static_cast<std::size_t>(op.tied_to)];
    return std::make_pair(op.name + op.params.front().name, table.name + table.params.front().name);
  }
  return std::nullopt;
}

std::vector<std::pair<int, int>> ModelDesc::LinearShapes() const {
  std::vector<std::pair<int, int>> shapes;
  for (const OpDesc& op : ops) {
    if (op.type == LayerType::kLinear) shapes.push_back({op.in, op.out});
  }
  return shapes;
}

double ProbeFlops(const std::vector<std::pair<int, int>>& shapes, int rows) {
  double flops = 0;
  for (const auto& [in, out] : shapes) flops += 3 * 2.0 * rows * in * out;
  return flops;
}

void InitParams(const OpDesc& op, std::span<float> params, std::mt19937_64& rng) {
  switch (op.type) {
    case LayerType::kEmbedding:
    case LayerType::kPositionEmbedding: {
      // GPT-2's: normal(0, 0.02).
      std::normal_distribution<float> normal(0.0f, 0.02f);
      for (float& p : params) p = normal(rng);
      break;
    }
    case LayerType::kAttention: {
      // Both projections normal(0, 0.02), biases 0, as GPT-2 initialises them.
      std::normal_distribution<float> normal(0.0f, 0.02f);
      const auto c = static_cast<std::size_t>(op.in);
      for (std::size_t i = 0; i < params.size(); ++i) {
        const bool bias = (i >= 3 * c * c && i < 3 * c * c + 3 * c) || i >= 4 * c * c + 3 * c;
        params[i] = bias ? 0.0f : normal(rng);
      }
      break;
    }
    case LayerType::kLinear: {
      // kaiming_uniform_(a=sqrt(5)) on the weight reduces to U(-1/sqrt(in), 1/sqrt(in)),
      // the same bound PyTorch uses for the bias. Weight row-major first, then bias.
      const float bound = static_cast<float>(1.0 / std::sqrt(static_cast<double>(op.in)));
      std::uniform_real_distribution<float> uniform(-bound, bound);
      for (float& p : params) p = uniform(rng);
      break;
    }
    case LayerType::kLayerNorm: {
      const auto n = static_cast<std::size_t>(op.in);
      std::fill_n(params.begin(), n, 1.0f);
      std::fill_n(params.begin() + static_cast<std::ptrdiff_t>(n), n, 0.0f);
      break;
    }
    default:
      break;
  }
}

void InitParams(const OpDesc& op, std::span<float> params, std::uint64_t seed) {
  std::vector<std::uint32_t> words = {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)};
  for (int p : op.seed_path) words.push_back(static_cast<std::uint32_t>(p));
  std::seed_seq seq(words.begin(), words.end());
  std::mt19937_64 rng(seq);
  InitParams(op, params, rng);
}

std::vector<LayerSpec> GptLayers(const GptSpec& g) {
  auto named = [](LayerSpec s, std::string name) {
    s.name = std::move(name);
    return s;
  };
  std::vector<LayerSpec> out;
  LayerSpec wte;
  wte.type = LayerType::kEmbedding;
  wte.vocab = g.vocab;
  wte.out = g.hidden;
  out.push_back(named(wte, "transformer.wte."));
  LayerSpec wpe;
  wpe.type = LayerType::kPositionEmbedding;
  wpe.positions = g.seq_len;
  out.push_back(named(wpe, "transformer.wpe."));
  LayerSpec ln;
  ln.type = LayerType::kLayerNorm;
  ln.eps = g.eps;
  for (int b = 0; b < g.blocks; ++b) {
    const std::string h = fmt::format("transformer.h.{}.", b);
    LayerSpec attn;
    attn.type = LayerType::kAttention;
    attn.heads = g.heads;
    LayerSpec first;  // x + attn(ln_1(x))
    first.type = LayerType::kResidual;
    first.name = h + "attn_block.";
    first.body = {named(ln, h + "ln_1."), named(attn, h + "attn.")};
    out.push_back(first);
    LayerSpec fc, proj, gelu;
    fc.type = proj.type = LayerType::kLinear;
    fc.out = 4 * g.hidden;
    proj.out = g.hidden;
    fc.conv1d = proj.conv1d = true;
    gelu.type = LayerType::kGelu;
    LayerSpec second;  // x + mlp(ln_2(x))
    second.type = LayerType::kResidual;
    second.name = h + "mlp_block.";
    second.body = {named(ln, h + "ln_2."), named(fc, h + "mlp.c_fc."), named(gelu, h + "mlp.act."),
                   named(proj, h + "mlp.c_proj.")};
    out.push_back(second);
  }
  out.push_back(named(ln, "transformer.ln_f."));
  LayerSpec head;
  head.type = LayerType::kLinear;
  head.out = g.vocab;
  head.bias = false;
  head.tied = g.tied;
  out.push_back(named(head, "lm_head."));
  return out;
}

}  // namespace baton
