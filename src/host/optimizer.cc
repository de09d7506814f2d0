// SGD and AdamW with PyTorch's update rules (torch.optim.SGD with dampening 0
// and nesterov off; torch.optim.AdamW without amsgrad), in float32 the way
// PyTorch's single-tensor CPU path computes them: scalar coefficients are
// formed in double, as Python does, then rounded to float for the tensor ops.
#include <cmath>
#include <string_view>

#include <fmt/format.h>
#include <Eigen/Core>

#include "baton/buffer.h"
#include "baton/error.h"
#include "baton/host.h"
#include "baton/model.h"

namespace baton {
namespace {

using ArrayMap = Eigen::Map<Eigen::ArrayXf>;
using ConstArrayMap = Eigen::Map<const Eigen::ArrayXf>;

void CheckSizes(std::string_view type, std::size_t expected, std::span<float> params, std::span<const float> grads) {
  if (params.size() != expected || grads.size() != expected) {
    throw Error(fmt::format("{} step: {} parameters and {} gradients given, the optimizer was made for {}", type,
                            params.size(), grads.size(), expected));
  }
}

// torch.optim.SGD (dampening 0, nesterov off):
//   g = grad + weight_decay * p
//   buf = g on the first step, momentum * buf + g after   (only when momentum != 0)
//   p -= lr * buf   (or lr * g without momentum)
class Sgd final : public Optimizer {
 public:
  Sgd(const OptimizerSpec& s, std::size_t num_params)
      : Optimizer(s),
        num_params_(num_params),
        momentum_(static_cast<float>(s.momentum)),
        weight_decay_(static_cast<float>(s.weight_decay)),
        buf_(s.momentum != 0.0 ? num_params : 0) {}

  void Step(std::span<float> params, std::span<const float> grads) override {
    CheckSizes("sgd", num_params_, params, grads);
    const auto n = static_cast<Eigen::Index>(num_params_);
    ArrayMap p(params.data(), n);
    const ConstArrayMap grad(grads.data(), n);
    const auto lr = static_cast<float>(spec_.lr);  // the step's rate (a schedule's)
    const auto g = grad + weight_decay_ * p;  // an expression, evaluated where it is used
    if (momentum_ == 0.0f) {
      if (weight_decay_ != 0.0f) {
        p -= lr * g;
      } else {
        p -= lr * grad;
      }
    } else {
      ArrayMap buf(buf_.data(), n);
      if (steps_ == 0) {
        buf = g;
      } else {
        buf = momentum_ * buf + g;
      }
      p -= lr * buf;
    }
    ++steps_;
  }

  std::vector<std::span<float>> State() override {
    if (buf_.empty()) return {};
    return {std::span<float>(buf_)};
  }

 private:
  std::size_t num_params_;
  float momentum_, weight_decay_;
  FloatBuffer buf_;  // momentum buffer; empty without momentum
};

// torch.optim.AdamW (amsgrad off), step t counted from 1:
//   p *= 1 - lr * weight_decay
//   m = lerp(m, g, 1 - beta1)          (= beta1 m + (1 - beta1) g)
//   v = beta2 v + (1 - beta2) g^2
//   p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
class AdamW final : public Optimizer {
 public:
  AdamW(const OptimizerSpec& s, std::size_t num_params)
      : Optimizer(s), num_params_(num_params), exp_avg_(num_params), exp_avg_sq_(num_params) {}

  void Step(std::span<float> params, std::span<const float> grads) override {
    CheckSizes("adamw", num_params_, params, grads);
    const auto n = static_cast<Eigen::Index>(num_params_);
    ArrayMap p(params.data(), n), m(exp_avg_.data(), n), v(exp_avg_sq_.data(), n);
    const ConstArrayMap g(grads.data(), n);
    ++steps_;
    const double t = static_cast<double>(steps_);

    p *= static_cast<float>(1.0 - spec_.lr * spec_.weight_decay);

    // lerp as torch.lerp computes it, choosing the form by the weight.
    const float w = static_cast<float>(1.0 - spec_.beta1);
    if (std::abs(w) < 0.5f) {
      m = m + w * (g - m);
    } else {
      m = g - (g - m) * (1.0f - w);
    }
    v = v * static_cast<float>(spec_.beta2) + static_cast<float>(1.0 - spec_.beta2) * g * g;

    const double bias_correction1 = 1.0 - std::pow(spec_.beta1, t);
    const double bias_correction2 = 1.0 - std::pow(spec_.beta2, t);
    const auto step_size = static_cast<float>(spec_.lr / bias_correction1);
    const auto bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
    const auto eps = static_cast<float>(spec_.eps);
    // sqrt correctly rounded for every element: Eigen's packet sqrt under
    // EIGEN_FAST_MATH (its default) is an rsqrt approximation with one
    // Newton step, while the scalar tail is exact, so which floats got which
    // would depend on where a parameter lies in its stage's buffer, and a
    // placement would change the training (PyTorch rounds sqrt exactly too).
    const auto exact_sqrt = [](float x) { return std::sqrt(x); };
    p += (-step_size * m) / (v.unaryExpr(exact_sqrt) / bias_correction2_sqrt + eps);
  }

  std::vector<std::span<float>> State() override { return {std::span<float>(exp_avg_), std::span<float>(exp_avg_sq_)}; }

 private:
  std::size_t num_params_;
  FloatBuffer exp_avg_;     // m
  FloatBuffer exp_avg_sq_;  // v
};

}  // namespace

std::unique_ptr<Optimizer> MakeOptimizer(const OptimizerSpec& spec, std::size_t num_params) {
  CheckOptimizerSpec(spec);
  if (spec.type == OptimizerType::kSgd) return std::make_unique<Sgd>(spec, num_params);
  return std::make_unique<AdamW>(spec, num_params);
}

double SumOfSquares(std::span<const float> g) {
  double sum = 0;
  for (const float f : g) {
    const double x = f;
    sum += x * x;
  }
  return sum;
}

void ScaleFloats(std::span<float> g, float factor) {
  for (float& x : g) x *= factor;
}

}  // namespace baton
