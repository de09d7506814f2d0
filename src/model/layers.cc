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
#include "layers.h"

namespace baton {
namespace {

using model_detail::AddProduct;
using model_detail::Product;
using RowVectorMap = Eigen::Map<Eigen::RowVectorXf>;
using ConstRowVectorMap = Eigen::Map<const Eigen::RowVectorXf>;

// Shapes every layer checks in debug builds (the stage sizes the views).
void AssertShapes([[maybe_unused]] const Layer& l, [[maybe_unused]] ConstMatMap x,
                  [[maybe_unused]] Eigen::Index out_rows, [[maybe_unused]] Eigen::Index out_cols) {
  assert(x.cols() == l.in_features());
  assert(out_rows == x.rows() && out_cols == l.out_features());
}

// ---- linear: y = x W^T + b, PyTorch's nn.Linear ----
class Linear final : public Layer {
 public:
  explicit Linear(const OpDesc& op) : Layer(op), bias_(op.bias) {}

  void Forward(ConstMatMap x, MatMap y) const override {
    AssertShapes(*this, x, y.rows(), y.cols());
    if (bias_) {
      y = Bias().replicate(y.rows(), 1);
    } else {
      y.setZero();
    }
    AddProduct(y, x, Weight().transpose());  // (rows, out) += (rows, in) (in, out)
  }

  void BackwardInput(ConstMatMap x, ConstMatMap dy, MatMap dx) const override {
    AssertShapes(*this, x, dy.rows(), dy.cols());
    assert(dx.rows() == x.rows() && dx.cols() == x.cols());
    Product(dx, dy, Weight(), 0.0f);  // (rows, in) = (rows, out) (out, in)
  }

  void BackwardWeight(ConstMatMap x, ConstMatMap dy) override {
    AssertShapes(*this, x, dy.rows(), dy.cols());
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
  // (out), after the weight
  ConstRowVectorMap Bias() const {
    return ConstRowVectorMap(params_ + static_cast<std::size_t>(out_features()) * in_features(), out_features());
  }

  bool bias_;
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

}  // namespace

namespace model_detail {

void InitBlasThreads() {
  // OpenBLAS reads OPENBLAS_NUM_THREADS itself; without it, one thread.
  static const bool done = [] {
    if (std::getenv("OPENBLAS_NUM_THREADS") == nullptr) openblas_set_num_threads(1);
    return true;
  }();
  (void)done;
}

}  // namespace model_detail

std::unique_ptr<Layer> MakeLayer(const OpDesc& op) {
  switch (op.type) {
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

std::unique_ptr<Layer> MakeLayer(const LayerSpec& spec, int in) { return MakeLayer(DescribeLayer(spec, in)); }

}  // namespace baton
