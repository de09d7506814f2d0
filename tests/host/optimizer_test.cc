// SGD and AdamW against PyTorch's update rules: numbers worked out by hand,
// and three steps against an independent double-precision implementation of
// the formulas in torch.optim's documentation.
#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "baton/error.h"
#include "baton/host.h"
#include "baton/model.h"

namespace baton {
namespace {

// ---- Reference implementations, in double, straight from the formulas ----

// torch.optim.SGD, dampening 0, nesterov off.
struct ReferenceSgd {
  double lr, momentum, weight_decay;
  std::vector<double> buf;
  int t = 0;

  void Step(std::vector<double>& p, const std::vector<float>& grad) {
    if (buf.empty()) buf.assign(p.size(), 0.0);
    for (std::size_t i = 0; i < p.size(); ++i) {
      double g = grad[i] + weight_decay * p[i];
      if (momentum != 0.0) {
        buf[i] = t == 0 ? g : momentum * buf[i] + g;
        g = buf[i];
      }
      p[i] -= lr * g;
    }
    ++t;
  }
};

// torch.optim.AdamW, amsgrad off.
struct ReferenceAdamW {
  double lr, beta1, beta2, eps, weight_decay;
  std::vector<double> m, v;
  int t = 0;

  void Step(std::vector<double>& p, const std::vector<float>& grad) {
    if (m.empty()) m.assign(p.size(), 0.0), v.assign(p.size(), 0.0);
    ++t;
    const double bc1 = 1 - std::pow(beta1, t), bc2 = 1 - std::pow(beta2, t);
    for (std::size_t i = 0; i < p.size(); ++i) {
      const double g = grad[i];
      p[i] *= 1 - lr * weight_decay;
      m[i] = beta1 * m[i] + (1 - beta1) * g;
      v[i] = beta2 * v[i] + (1 - beta2) * g * g;
      const double denom = std::sqrt(v[i]) / std::sqrt(bc2) + eps;
      p[i] -= lr / bc1 * m[i] / denom;
    }
  }
};

// Three steps of gradients for four parameters, of mixed signs and sizes.
const std::vector<float> kInitial = {1.0f, -2.0f, 0.5f, 3.0f};
const std::vector<std::vector<float>> kGrads = {
    {0.3f, -4.0f, 1e-3f, 0.0f}, {0.1f, -3.0f, -0.02f, 0.5f}, {-0.2f, 1.0f, 0.05f, -0.25f}};

void ExpectNear(const std::vector<float>& got, const std::vector<double>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 2e-6 * (1 + std::abs(want[i]))) << what << " [" << i << "]";
  }
}

OptimizerSpec Sgd(double lr, double momentum = 0.0, double weight_decay = 0.0) {
  OptimizerSpec s;
  s.type = OptimizerType::kSgd;
  s.lr = lr;
  s.momentum = momentum;
  s.weight_decay = weight_decay;
  return s;
}

OptimizerSpec AdamW(double lr, double weight_decay = 0.0, double beta1 = 0.9, double beta2 = 0.999, double eps = 1e-8) {
  OptimizerSpec s;
  s.type = OptimizerType::kAdamW;
  s.lr = lr;
  s.weight_decay = weight_decay;
  s.beta1 = beta1;
  s.beta2 = beta2;
  s.eps = eps;
  return s;
}

// ---- Literally hand-computed ----

TEST(Sgd, HandComputed) {
  // lr 0.1, p = 1, g = 0.5: p = 1 - 0.05.
  auto plain = MakeOptimizer(Sgd(0.1), 1);
  std::vector<float> p = {1.0f};
  const std::vector<float> g = {0.5f};
  plain->Step(p, g);
  EXPECT_FLOAT_EQ(p[0], 0.95f);
  EXPECT_TRUE(plain->State().empty());  // no momentum buffer
  EXPECT_EQ(plain->steps(), 1);

  // momentum 0.9: buf = 0.5, 0.95, 1.355; p = 0.95, 0.855, 0.7195.
  auto momentum = MakeOptimizer(Sgd(0.1, 0.9), 1);
  p = {1.0f};
  const float expected_p[] = {0.95f, 0.855f, 0.7195f}, expected_buf[] = {0.5f, 0.95f, 1.355f};
  for (int step = 0; step < 3; ++step) {
    momentum->Step(p, g);
    EXPECT_FLOAT_EQ(p[0], expected_p[step]) << step;
    ASSERT_EQ(momentum->State().size(), 1u);
    EXPECT_FLOAT_EQ(momentum->State()[0][0], expected_buf[step]) << step;
  }
  EXPECT_EQ(momentum->steps(), 3);

  // weight decay 0.1 joins the gradient: g = 0.5 + 0.1 * 2 = 0.7, p = 2 - 0.07.
  auto decay = MakeOptimizer(Sgd(0.1, 0.0, 0.1), 1);
  p = {2.0f};
  decay->Step(p, g);
  EXPECT_FLOAT_EQ(p[0], 1.93f);
}

TEST(AdamW, FirstStepMovesEachParameterByLr) {
  // Step 1: m_hat = g, sqrt(v_hat) = |g|, so p -= lr * g / (|g| + eps) = lr * sign(g),
  // whatever the gradient's size.
  auto opt = MakeOptimizer(AdamW(0.01), 3);
  std::vector<float> p = {1.0f, -2.0f, 0.5f};
  opt->Step(p, std::vector<float>{0.3f, -4.0f, 1e-3f});
  EXPECT_NEAR(p[0], 0.99, 1e-6);
  EXPECT_NEAR(p[1], -1.99, 1e-6);
  EXPECT_NEAR(p[2], 0.49, 1e-6);  // lr * 1e-3 / (1e-3 + 1e-8): 1e-7 short of 0.49
  EXPECT_EQ(opt->steps(), 1);
  const auto state = opt->State();
  ASSERT_EQ(state.size(), 2u);             // exp_avg, exp_avg_sq
  EXPECT_FLOAT_EQ(state[0][1], -0.4f);     // (1 - 0.9) * -4
  EXPECT_NEAR(state[1][1], 0.016f, 1e-9);  // (1 - 0.999) * 16
}

TEST(AdamW, ConstantGradientMovesLrEveryStep) {
  // With a constant gradient the bias corrections make m_hat = g and
  // v_hat = g^2 exactly, so every step is lr * sign(g).
  auto opt = MakeOptimizer(AdamW(0.05), 2);
  std::vector<float> p = {0.0f, 1.0f};
  const std::vector<float> g = {2.0f, -0.5f};
  for (int step = 1; step <= 3; ++step) {
    opt->Step(p, g);
    EXPECT_NEAR(p[0], -0.05 * step, 1e-6) << step;
    EXPECT_NEAR(p[1], 1 + 0.05 * step, 1e-6) << step;
  }
}

TEST(AdamW, DecoupledWeightDecay) {
  // p = 1 * (1 - lr * wd) - lr * sign(g) = 1 * (1 - 0.001) - 0.01 = 0.989:
  // the decay is applied to p, not added to the gradient.
  auto opt = MakeOptimizer(AdamW(0.01, 0.1), 1);
  std::vector<float> p = {1.0f};
  opt->Step(p, std::vector<float>{0.3f});
  EXPECT_NEAR(p[0], 0.989, 1e-6);
}

// ---- Three steps against the double-precision reference ----

void RunSgd(const OptimizerSpec& spec) {
  const std::string what = "sgd lr=" + std::to_string(spec.lr) + " momentum=" + std::to_string(spec.momentum) +
                           " weight_decay=" + std::to_string(spec.weight_decay);
  auto opt = MakeOptimizer(spec, kInitial.size());
  ReferenceSgd ref{spec.lr, spec.momentum, spec.weight_decay, {}};
  std::vector<float> p = kInitial;
  std::vector<double> p_ref(kInitial.begin(), kInitial.end());
  for (std::size_t step = 0; step < kGrads.size(); ++step) {
    opt->Step(p, kGrads[step]);
    ref.Step(p_ref, kGrads[step]);
    ExpectNear(p, p_ref, what + " step " + std::to_string(step + 1));
  }
  EXPECT_EQ(opt->steps(), 3);
  if (spec.momentum != 0.0) {
    ASSERT_EQ(opt->State().size(), 1u);
    const auto buf = opt->State()[0];
    ExpectNear(std::vector<float>(buf.begin(), buf.end()), ref.buf, what + " momentum buffer");
  } else {
    EXPECT_TRUE(opt->State().empty());
  }
}

TEST(Sgd, MatchesReference) {
  RunSgd(Sgd(0.1));
  RunSgd(Sgd(0.1, 0.0, 0.01));
  RunSgd(Sgd(0.05, 0.9));
  RunSgd(Sgd(0.05, 0.9, 0.01));
  RunSgd(Sgd(0.3, 0.5, 0.2));
}

void RunAdamW(const OptimizerSpec& spec) {
  const std::string what = "adamw lr=" + std::to_string(spec.lr) +
                           " weight_decay=" + std::to_string(spec.weight_decay) +
                           " betas=" + std::to_string(spec.beta1) + "," + std::to_string(spec.beta2);
  auto opt = MakeOptimizer(spec, kInitial.size());
  ReferenceAdamW ref{spec.lr, spec.beta1, spec.beta2, spec.eps, spec.weight_decay, {}, {}};
  std::vector<float> p = kInitial;
  std::vector<double> p_ref(kInitial.begin(), kInitial.end());
  for (std::size_t step = 0; step < kGrads.size(); ++step) {
    opt->Step(p, kGrads[step]);
    ref.Step(p_ref, kGrads[step]);
    ExpectNear(p, p_ref, what + " step " + std::to_string(step + 1));
  }
  EXPECT_EQ(opt->steps(), 3);
  const auto state = opt->State();
  ASSERT_EQ(state.size(), 2u);
  ExpectNear(std::vector<float>(state[0].begin(), state[0].end()), ref.m, what + " exp_avg");
  ExpectNear(std::vector<float>(state[1].begin(), state[1].end()), ref.v, what + " exp_avg_sq");
}

TEST(AdamW, MatchesReference) {
  RunAdamW(AdamW(1e-3, 0.01));
  RunAdamW(AdamW(0.1, 0.1, 0.8, 0.99, 1e-6));
  RunAdamW(AdamW(0.01, 0.0));
  RunAdamW(AdamW(0.01, 0.05, 0.0, 0.0));  // no averaging: m = g, v = g^2
  RunAdamW(AdamW(0.01, 0.05, 0.6, 0.9));  // 1 - beta1 >= 0.5 takes lerp's other form
}

TEST(Optimizer, StateIsAllocatedOnceAndPersists) {
  auto opt = MakeOptimizer(AdamW(0.01), 3);
  const auto before = opt->State();
  std::vector<float> p = {1, 2, 3};
  opt->Step(p, std::vector<float>{1, 1, 1});
  const auto after = opt->State();
  ASSERT_EQ(after.size(), 2u);
  EXPECT_EQ(before[0].data(), after[0].data());
  EXPECT_EQ(after[0].size(), 3u);
  EXPECT_EQ(after[1].size(), 3u);
  // An empty parameter set is allowed (a stage of parameterless layers).
  auto empty = MakeOptimizer(Sgd(0.1, 0.9), 0);
  empty->Step({}, {});
  EXPECT_EQ(empty->steps(), 1);
}

// ---- Errors ----

std::string ErrorOf(const OptimizerSpec& spec) {
  try {
    MakeOptimizer(spec, 4);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Optimizer, SpecErrorsNameTheFieldAndRule) {
  struct Case {
    OptimizerSpec spec;
    std::string field, rule;
  };
  const double nan = std::nan("");
  std::vector<Case> cases;
  cases.push_back({Sgd(0.0), "lr", "> 0"});
  cases.push_back({Sgd(-0.1), "lr", "> 0"});
  cases.push_back({Sgd(nan), "lr", "> 0"});
  cases.push_back({AdamW(0.0), "lr", "> 0"});
  cases.push_back({Sgd(0.1, -0.5), "momentum", ">= 0"});
  cases.push_back({Sgd(0.1, 0.0, -1e-4), "weight_decay", ">= 0"});
  cases.push_back({AdamW(0.1, -0.01), "weight_decay", ">= 0"});
  cases.push_back({AdamW(0.1, 0.0, 1.0), "beta1", "[0, 1)"});
  cases.push_back({AdamW(0.1, 0.0, -0.1), "beta1", "[0, 1)"});
  cases.push_back({AdamW(0.1, 0.0, 0.9, 1.0), "beta2", "[0, 1)"});
  cases.push_back({AdamW(0.1, 0.0, 0.9, 1.5), "beta2", "[0, 1)"});
  cases.push_back({AdamW(0.1, 0.0, 0.9, 0.999, 0.0), "eps", "> 0"});
  cases.push_back({AdamW(0.1, 0.0, 0.9, 0.999, -1e-8), "eps", "> 0"});
  for (const Case& c : cases) {
    const std::string msg = ErrorOf(c.spec);
    EXPECT_NE(msg.find(c.field), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.rule), std::string::npos) << msg;
  }
  EXPECT_EQ(ErrorOf(Sgd(0.1, 0.9, 1e-4)), "(no error)");
  EXPECT_EQ(ErrorOf(AdamW(1e-3, 0.01, 0.0, 0.0)), "(no error)");
}

TEST(Optimizer, StepWithWrongSizesThrows) {
  for (const OptimizerSpec& spec : {Sgd(0.1), AdamW(0.1)}) {
    auto opt = MakeOptimizer(spec, 3);
    std::vector<float> p(3), g(2);
    EXPECT_THROW(opt->Step(p, g), Error) << spec.type;
    std::vector<float> p4(4), g3(3);
    EXPECT_THROW(opt->Step(p4, g3), Error) << spec.type;
    EXPECT_EQ(opt->steps(), 0) << spec.type;
  }
}

}  // namespace
}  // namespace baton
