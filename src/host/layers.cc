// The layers: linear, relu, gelu (tanh form), layernorm. Each keeps no state
// between calls: backward gets the layer's input x and the output gradient dy
// and recomputes what it needs (layernorm's mean and 1/std), so a stage only
// has to keep every microbatch's input alive between F and I/W.
//
// Forward, BackwardInput and BackwardWeight write into the caller's views and
// allocate nothing: products go through OpenBLAS (gemm.h), elementwise work
// through Eigen array expressions, reductions row by row into stack scalars.
#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdlib>
#include <numbers>

#include <fmt/format.h>

#include "baton/error.h"
#include "gemm.h"
#include "attention.h"
#include "layers.h"

namespace baton {
namespace {

using host_detail::AddProduct;
using host_detail::Product;
using RowVectorMap = Eigen::Map<Eigen::RowVectorXf>;
using ConstRowVectorMap = Eigen::Map<const Eigen::RowVectorXf>;

// Shapes every layer checks in debug builds (the stage sizes the views).
void AssertShapes([[maybe_unused]] const Layer& l, [[maybe_unused]] ConstMatMap x,
                  [[maybe_unused]] Eigen::Index out_rows, [[maybe_unused]] Eigen::Index out_cols) {
  assert(x.cols() == l.in_features());
  assert(out_rows == x.rows() && out_cols == l.out_features());
}

// ---- linear: y = x W^T + b, PyTorch's nn.Linear ----
// With conv1d (GPT-2's Conv1D) the weight is stored [in, out]: y = x W + b.
class Linear final : public Layer {
 public:
  explicit Linear(const OpDesc& op) : Layer(op), bias_(op.bias), conv1d_(op.conv1d) {}

  void Forward(ConstMatMap x, MatMap y) const override {
    AssertShapes(*this, x, y.rows(), y.cols());
    if (bias_) {
      y.rowwise() = Bias();  // then += x W: the product adds onto the bias
    } else {
      y.setZero();
    }
    if (conv1d_) {
      AddProduct(y, x, WeightInOut());  // (rows, out) += (rows, in) (in, out)
    } else {
      AddProduct(y, x, Weight().transpose());  // (rows, out) += (rows, in) (in, out)
    }
  }

  void BackwardInput(ConstMatMap x, ConstMatMap dy, MatMap dx) const override {
    AssertShapes(*this, x, dy.rows(), dy.cols());
    assert(dx.rows() == x.rows() && dx.cols() == x.cols());
    if (conv1d_) {
      Product(dx, dy, WeightInOut().transpose(), 0.0f);  // (rows, in) = (rows, out) (out, in)
    } else {
      Product(dx, dy, Weight(), 0.0f);  // (rows, in) = (rows, out) (out, in)
    }
  }

  void BackwardWeight(ConstMatMap x, ConstMatMap dy) override {
    AssertShapes(*this, x, dy.rows(), dy.cols());
    if (conv1d_) {
      MatMap dw(grads_, in_features(), out_features());
      AddProduct(dw, x.transpose(), dy);  // (in, out) += (in, rows) (rows, out)
      RowVectorMap db(grads_ + dw.size(), out_features());
      if (bias_) db.noalias() += dy.colwise().sum();
      return;
    }
    MatMap dw(grads_, out_features(), in_features());
    AddProduct(dw, dy.transpose(), x);  // (out, in) += (out, rows) (rows, in)
    if (bias_) {
      RowVectorMap db(grads_ + dw.size(), out_features());
      db.noalias() += dy.colwise().sum();
    }
  }

 private:
  // (out, in)
  ConstMatMap Weight() const { return ConstMatMap(params_, out_features(), in_features()); }
  // (in, out): the conv1d layout
  ConstMatMap WeightInOut() const { return ConstMatMap(params_, in_features(), out_features()); }
  // (out), after the weight
  ConstRowVectorMap Bias() const {
    return ConstRowVectorMap(params_ + static_cast<std::size_t>(out_features()) * in_features(), out_features());
  }

  bool bias_;
  bool conv1d_;
};

// ---- relu: y = max(x, 0) ----
class Relu final : public Layer {
 public:
  explicit Relu(const OpDesc& op) : Layer(op) {}

  void Forward(ConstMatMap x, MatMap y) const override {
    AssertShapes(*this, x, y.rows(), y.cols());
    y = x.cwiseMax(0.0f);
  }

  // The derivative at 0 is taken as 0, as PyTorch does.
  void BackwardInput(ConstMatMap x, ConstMatMap dy, MatMap dx) const override {
    AssertShapes(*this, x, dy.rows(), dy.cols());
    dx.array() = (x.array() > 0.0f).select(dy.array(), 0.0f);
  }
};

// ---- gelu, tanh approximation: PyTorch's nn.GELU(approximate='tanh') ----
//   y = x/2 (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
class Gelu final : public Layer {
 public:
  explicit Gelu(const OpDesc& op) : Layer(op) {}

  void Forward(ConstMatMap x, MatMap y) const override {
    AssertShapes(*this, x, y.rows(), y.cols());
    const auto a = x.array();
    y.array() = 0.5f * a * (1.0f + (kBeta * (a + kKappa * a.cube())).tanh());
  }

  // dy/dx = (1 + t)/2 + x/2 (1 - t^2) sqrt(2/pi) (1 + 3 0.044715 x^2), t = tanh(u),
  // the same terms as PyTorch's GeluBackward. t goes through dx first so it is
  // evaluated once per element.
  void BackwardInput(ConstMatMap x, ConstMatMap dy, MatMap dx) const override {
    AssertShapes(*this, x, dy.rows(), dy.cols());
    const auto a = x.array();
    auto t = dx.array();
    t = (kBeta * (a + kKappa * a.cube())).tanh();
    t = dy.array() * (0.5f * (1.0f + t) + 0.5f * a * (1.0f - t.square()) * kBeta * (1.0f + 3.0f * kKappa * a.square()));
  }

 private:
  static constexpr float kBeta = static_cast<float>(std::numbers::sqrt2 * std::numbers::inv_sqrtpi);  // sqrt(2/pi)
  static constexpr float kKappa = 0.044715f;
};

// ---- layernorm over features: PyTorch's nn.LayerNorm(in), elementwise affine ----
//   xhat = (x - mean) / sqrt(var + eps)  (biased variance),  y = xhat * weight + bias
class LayerNorm final : public Layer {
 public:
  explicit LayerNorm(const OpDesc& op) : Layer(op), eps_(static_cast<float>(op.eps)) {}

  void Forward(ConstMatMap x, MatMap y) const override {
    AssertShapes(*this, x, y.rows(), y.cols());
    const ConstRowVectorMap weight = Weight(), bias = Bias();
    for (Eigen::Index i = 0; i < x.rows(); ++i) {
      const auto [mean, rstd] = Moments(x.row(i));
      y.row(i).array() = (x.row(i).array() - mean) * rstd * weight.array() + bias.array();
    }
  }

  // With g = dy * weight, per row:  dx = rstd (g - mean(g) - xhat mean(g xhat)).
  // g is staged in dx's row.
  void BackwardInput(ConstMatMap x, ConstMatMap dy, MatMap dx) const override {
    AssertShapes(*this, x, dy.rows(), dy.cols());
    const ConstRowVectorMap weight = Weight();
    for (Eigen::Index i = 0; i < x.rows(); ++i) {
      const auto [mean, rstd] = Moments(x.row(i));
      const auto xhat = (x.row(i).array() - mean) * rstd;
      auto g = dx.row(i).array();
      g = dy.row(i).array() * weight.array();
      const float g_mean = g.mean();
      const float gx_mean = (g * xhat).mean();
      g = rstd * (g - g_mean - xhat * gx_mean);
    }
  }

  // dweight += sum over rows of dy * xhat; dbias += sum over rows of dy.
  void BackwardWeight(ConstMatMap x, ConstMatMap dy) override {
    AssertShapes(*this, x, dy.rows(), dy.cols());
    RowVectorMap dweight(grads_, in_features()), dbias(grads_ + in_features(), in_features());
    for (Eigen::Index i = 0; i < x.rows(); ++i) {
      const auto [mean, rstd] = Moments(x.row(i));
      dweight.array() += dy.row(i).array() * (x.row(i).array() - mean) * rstd;
    }
    dbias.noalias() += dy.colwise().sum();
  }

 private:
  struct RowMoments {
    float mean;
    float rstd;  // 1 / sqrt(var + eps)
  };
  // Two passes (mean, then the centred square) keep the variance accurate
  // for rows far from zero.
  template <typename Row>
  RowMoments Moments(const Row& row) const {
    const float mean = row.mean();
    const float var = (row.array() - mean).square().mean();
    return {mean, 1.0f / std::sqrt(var + eps_)};
  }

  ConstRowVectorMap Weight() const { return ConstRowVectorMap(params_, in_features()); }
  ConstRowVectorMap Bias() const { return ConstRowVectorMap(params_ + in_features(), in_features()); }

  float eps_;
};

// ---- embedding: token ids -> rows of the table, nn.Embedding ----
class Embedding final : public Layer {
 public:
  explicit Embedding(const OpDesc& op) : Layer(op) {}

  void Forward(const ConstView& x, const View& y, float*, const SequencePart&) const override {
    const std::int32_t* ids = x.as<std::int32_t>();
    const auto rows = static_cast<std::size_t>(x.desc.elements());
    const auto c = static_cast<std::size_t>(out_features());
    float* out = y.as<float>();
    for (std::size_t r = 0; r < rows; ++r) {
      CheckId(ids[r], r);
      std::copy_n(params_ + static_cast<std::size_t>(ids[r]) * c, c, out + r * c);
    }
  }
  // Token ids have no gradient.
  void BackwardInput(const ConstView&, const float*, const ConstView&, const View&, float*,
                     const SequencePart&) const override {}
  void BackwardWeight(const ConstView& x, const float*, const ConstView& dy, const float*,
                      const SequencePart&) override {
    const std::int32_t* ids = x.as<std::int32_t>();
    const auto rows = static_cast<std::size_t>(x.desc.elements());
    const auto c = static_cast<std::size_t>(out_features());
    const float* g = dy.as<float>();
    for (std::size_t r = 0; r < rows; ++r) {
      float* row = grads_ + static_cast<std::size_t>(ids[r]) * c;
      for (std::size_t k = 0; k < c; ++k) row[k] += g[r * c + k];
    }
  }

 private:
  void CheckId(std::int32_t id, std::size_t row) const {
    if (id < 0 || id >= desc().vocab) {
      throw Error(fmt::format("embedding {}: token {} at row {} is outside the vocabulary [0, {})", desc().name, id,
                              row, desc().vocab));
    }
  }
};

// ---- position_embedding: y[s, t] = x[s, t] + table[t] (GPT-2's wpe) ----
// A slice's tokens take their positions in the sequence; a packed
// document's restart at its first token (SequencePart::starts).
class PositionEmbedding final : public Layer {
 public:
  explicit PositionEmbedding(const OpDesc& op) : Layer(op) {}

  void Forward(const ConstView& x, const View& y, float*, const SequencePart& part) const override {
    const float* in = x.as<float>();
    float* out = y.as<float>();
    const std::size_t c = static_cast<std::size_t>(out_features());
    ForEachToken(x.desc, part, [&](std::size_t row, std::size_t position) {
      const float* t = params_ + position * c;
      for (std::size_t k = 0; k < c; ++k) out[row * c + k] = in[row * c + k] + t[k];
    });
  }
  void BackwardInput(const ConstView&, const float*, const ConstView& dy, const View& dx, float*,
                     const SequencePart&) const override {
    if (dx.data != nullptr) std::copy_n(dy.as<float>(), dy.desc.elements(), dx.as<float>());
  }
  void BackwardWeight(const ConstView&, const float*, const ConstView& dy, const float*,
                      const SequencePart& part) override {
    const float* g = dy.as<float>();
    const std::size_t c = static_cast<std::size_t>(out_features());
    ForEachToken(dy.desc, part, [&](std::size_t row, std::size_t position) {
      float* t = grads_ + position * c;
      for (std::size_t k = 0; k < c; ++k) t[k] += g[row * c + k];
    });
  }

 private:
  // f(row, position) for each token row of `d` (samples x tokens rows, in
  // order) and its position: in the sequence, from its document's first
  // token where documents are packed.
  template <typename F>
  void ForEachToken(const TensorDesc& d, const SequencePart& part, F&& f) const {
    const auto samples = static_cast<std::size_t>(d.shape[0]);
    const std::size_t c = static_cast<std::size_t>(out_features());
    const std::size_t tokens = static_cast<std::size_t>(d.shape.per_sample()) / c;
    const std::size_t begin = static_cast<std::size_t>(part.begin);
    const std::size_t seq = static_cast<std::size_t>(desc().seq);
    for (std::size_t n = 0; n < samples; ++n) {
      for (std::size_t k = 0; k < tokens; ++k) {
        const std::size_t t = begin + k;
        const std::size_t first = part.starts == nullptr ? 0 : static_cast<std::size_t>(part.starts[n * seq + t]);
        f(n * tokens + k, t - first);
      }
    }
  }
};

// ---- attention: causal multi-head self-attention (attention.h) ----
class Attention final : public Layer {
 public:
  Attention(const OpDesc& op, int max_samples)
      : Layer(op), attention_({op.seq, op.in, op.heads}, std::max(max_samples, 1)) {}

  void Forward(const ConstView& x, const View& y, float* saved, const SequencePart& part) const override {
    if (!part.whole()) {
      attention_.ForwardSlice(Params(params_), x.as<float>(), y.as<float>(), saved, Samples(x), Sequence(part));
    } else {
      attention_.Forward(Params(params_), x.as<float>(), y.as<float>(), saved, Samples(x), part.starts, part.length);
    }
  }
  void BackwardInput(const ConstView& x, const float* saved, const ConstView& dy, const View& dx, float* stash,
                     const SequencePart& part) const override {
    if (!part.whole()) {
      attention_.BackwardInputSlice(Params(params_), saved, dy.as<float>(), dx.as<float>(), stash, Samples(x),
                                    Sequence(part));
    } else {
      attention_.BackwardInput(Params(params_), saved, dy.as<float>(), dx.as<float>(), stash, Samples(x),
                               part.starts, part.length);
    }
  }
  std::size_t ScratchBytes() const override { return attention_.ScratchBytes(); }
  void BackwardWeight(const ConstView& x, const float* saved, const ConstView& dy, const float* stash,
                      const SequencePart& part) override {
    const AttentionLayout at(desc());
    const AttentionGrads g{grads_ + at.w_qkv(), grads_ + at.b_qkv(), grads_ + at.w_proj(), grads_ + at.b_proj()};
    if (!part.whole()) {
      attention_.BackwardWeightSlice(g, x.as<float>(), saved, dy.as<float>(), stash, Samples(x), Sequence(part));
    } else {
      attention_.BackwardWeight(g, x.as<float>(), saved, dy.as<float>(), stash, Samples(x), part.length);
    }
  }

 private:
  AttentionParams Params(const float* p) const {
    const AttentionLayout at(desc());
    return {p + at.w_qkv(), p + at.b_qkv(), p + at.w_proj(), p + at.b_proj()};
  }
  int Samples(const ConstView& x) const { return static_cast<int>(x.desc.shape[0]); }
  // The slice and its sequence's q, k, v and their gradients.
  static SequenceSlice Sequence(const SequencePart& part) {
    return {part.begin, part.end, reinterpret_cast<float*>(part.keys_values), reinterpret_cast<float*>(part.gradients),
            part.starts, part.length};
  }

  mutable CausalSelfAttention attention_;  // its scratch is rewritten by every call
};

}  // namespace

// The per-row layers' typed forms: the views as matrices.
namespace {
ConstMatMap AsMatrix(const ConstView& v) {
  return ConstMatMap(v.as<float>(), v.desc.matrix_rows(), v.desc.shape.last());
}
MatMap AsMatrix(const View& v) { return MatMap(v.as<float>(), v.desc.matrix_rows(), v.desc.shape.last()); }
}  // namespace

// Per-row layers compute every token alike: a part of the sequence changes nothing.
void Layer::Forward(const ConstView& x, const View& y, float*, const SequencePart&) const {
  Forward(AsMatrix(x), AsMatrix(y));
}
void Layer::BackwardInput(const ConstView& x, const float*, const ConstView& dy, const View& dx, float*,
                          const SequencePart&) const {
  if (dx.data != nullptr) BackwardInput(AsMatrix(x), AsMatrix(dy), AsMatrix(dx));
}
void Layer::BackwardWeight(const ConstView& x, const float*, const ConstView& dy, const float*, const SequencePart&) {
  BackwardWeight(AsMatrix(x), AsMatrix(dy));
}
void Layer::Forward(ConstMatMap, MatMap) const {
  throw Error(fmt::format("layer {} ({}) has no per-row form", desc().name, EnumName(Type())));
}
void Layer::BackwardInput(ConstMatMap, ConstMatMap, MatMap) const {
  throw Error(fmt::format("layer {} ({}) has no per-row form", desc().name, EnumName(Type())));
}


std::unique_ptr<Layer> MakeLayer(const OpDesc& op, int max_rows) {
  // Layers with matrix products load OpenBLAS when they are made (setup),
  // so that no step loads it.
  if (op.type == LayerType::kLinear || op.type == LayerType::kAttention) host_detail::LoadedBlas();
  switch (op.type) {
    case LayerType::kEmbedding:
      return std::make_unique<Embedding>(op);
    case LayerType::kPositionEmbedding:
      return std::make_unique<PositionEmbedding>(op);
    case LayerType::kAttention:
      return std::make_unique<Attention>(op, max_rows / std::max(op.seq, 1));
    case LayerType::kLinear:
      return std::make_unique<Linear>(op);
    case LayerType::kRelu:
      return std::make_unique<Relu>(op);
    case LayerType::kGelu:
      return std::make_unique<Gelu>(op);
    case LayerType::kLayerNorm:
      return std::make_unique<LayerNorm>(op);
    case LayerType::kResidual:
      break;
  }
  throw Error(fmt::format("op {}: an add is not a layer (the stage adds the skip itself)", op.name));
}

std::unique_ptr<Layer> MakeLayer(const LayerSpec& spec, int in) { return MakeLayer(DescribeLayer(spec, in), 1); }

}  // namespace baton
