// Layers and the loss: finite-difference gradient checks (input gradient and
// weight gradient separately), exact small cases, PyTorch's initialisation,
// large products against a double-precision reference, and a training step
// that allocates nothing.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "baton/error.h"
#include "baton/host.h"
#include "baton/model.h"
#include "blas.h"
#include "layers.h"

// ---- Counting every heap allocation of the process ----
// glibc's allocator is reachable as __libc_*, so the test binary can put its
// own malloc in front of it; operator new and Eigen's aligned_malloc both end
// up here. Not under sanitizers, which bring their own malloc.
#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__) && \
    !defined(__SANITIZE_MEMORY__)
#define BATON_TEST_COUNTS_ALLOCATIONS 1
namespace {
std::atomic<bool> g_counting{false};
std::atomic<long> g_allocations{0};
void Count() {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace
extern "C" {
void* __libc_malloc(std::size_t);
void* __libc_calloc(std::size_t, std::size_t);
void* __libc_realloc(void*, std::size_t);
void* __libc_memalign(std::size_t, std::size_t);
void* malloc(std::size_t n) noexcept {
  Count();
  return __libc_malloc(n);
}
void* calloc(std::size_t n, std::size_t size) noexcept {
  Count();
  return __libc_calloc(n, size);
}
void* realloc(void* p, std::size_t n) noexcept {
  Count();
  return __libc_realloc(p, n);
}
int posix_memalign(void** p, std::size_t alignment, std::size_t n) noexcept {
  Count();
  *p = __libc_memalign(alignment, n);
  return *p != nullptr ? 0 : ENOMEM;
}
void* aligned_alloc(std::size_t alignment, std::size_t n) noexcept {
  Count();
  return __libc_memalign(alignment, n);
}
void* memalign(std::size_t alignment, std::size_t n) noexcept {
  Count();
  return __libc_memalign(alignment, n);
}
}  // extern "C"
#endif

namespace baton {
namespace {

// Heap allocations made while one of these is alive.
class AllocationCounter {
 public:
#ifdef BATON_TEST_COUNTS_ALLOCATIONS
  AllocationCounter() {
    g_allocations = 0;
    g_counting = true;
  }
  ~AllocationCounter() { g_counting = false; }
  long count() const { return g_allocations.load(); }
#else
  long count() const { return 0; }
#endif
};

MatMap View(RowMatrix& m) { return MatMap(m.data(), m.rows(), m.cols()); }
ConstMatMap CView(const RowMatrix& m) { return ConstMatMap(m.data(), m.rows(), m.cols()); }

RowMatrix Random(int rows, int cols, std::mt19937_64& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> u(lo, hi);
  RowMatrix m(rows, cols);
  for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = u(rng);
  return m;
}

// A layer with its own parameter and gradient storage.
struct TestLayer {
  std::unique_ptr<Layer> layer;
  std::vector<float> params, grads;
};

TestLayer Make(const LayerSpec& spec, int in, std::uint64_t seed = 1) {
  TestLayer t{MakeLayer(spec, in), {}, {}};
  t.params.assign(t.layer->NumParams(), 0.0f);
  t.grads.assign(t.layer->NumParams(), 0.0f);
  t.layer->Bind(t.params.data(), t.grads.data());
  std::mt19937_64 rng(seed);
  t.layer->Init(rng);
  return t;
}

LayerSpec Spec(const std::string& type, int out = 0, bool bias = true) {
  LayerSpec s;
  s.type = *ParseEnum<LayerType>(type);
  s.out = out;
  s.bias = bias;
  return s;
}

// ---- Finite differences ----
// For L = sum(f(x) * R) with a fixed random R, dL/dx = BackwardInput(x, R) and
// dL/dparams = BackwardWeight(x, R). Each analytic entry is compared with the
// central difference (L(v + h) - L(v - h)) / 2h, with the relative error
// |analytic - numeric| / max(1, |analytic|, |numeric|).
constexpr float kH = 3e-3f;
constexpr double kTolerance = 1e-2;
double g_max_fd_error = 0.0;  // over the whole run, printed at the end

double Objective(const Layer& layer, const RowMatrix& x, const RowMatrix& r) {
  RowMatrix y(x.rows(), layer.out_features());
  layer.Forward(CView(x), View(y));
  return (y.cast<double>().array() * r.cast<double>().array()).sum();
}

// Perturbs each entry of `v` in turn (restoring it), returning the central
// differences of `objective`.
template <typename F>
std::vector<double> CentralDifferences(float* v, std::size_t n, F objective) {
  std::vector<double> d(n);
  for (std::size_t i = 0; i < n; ++i) {
    const float saved = v[i];
    v[i] = saved + kH;
    const double plus = objective();
    v[i] = saved - kH;
    const double minus = objective();
    v[i] = saved;
    // The step actually taken, after rounding saved +- h to float.
    d[i] = (plus - minus) / (static_cast<double>(saved + kH) - static_cast<double>(saved - kH));
  }
  return d;
}

double MaxRelativeError(const float* analytic, const std::vector<double>& numeric) {
  double worst = 0.0;
  for (std::size_t i = 0; i < numeric.size(); ++i) {
    const double a = analytic[i], n = numeric[i];
    worst = std::max(worst, std::abs(a - n) / std::max({1.0, std::abs(a), std::abs(n)}));
  }
  return worst;
}

void Report(const std::string& what, double error) {
  g_max_fd_error = std::max(g_max_fd_error, error);
  std::printf("  FD %-48s max rel error %.3g\n", what.c_str(), error);
  EXPECT_LT(error, kTolerance) << what;
}

struct Shape {
  int rows, in, out;
};

std::string Describe(const LayerSpec& spec, const Shape& s) {
  return std::string(EnumName(spec.type)) + (spec.type == "linear" && !spec.bias ? "(no bias)" : "") + " rows=" + std::to_string(s.rows) +
         " in=" + std::to_string(s.in) + " out=" + std::to_string(s.out);
}

// Random parameters instead of Init's, so every parameter matters (layernorm's
// weight 1 / bias 0 would hide a swapped weight and bias gradient).
void RandomizeParams(TestLayer& t, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(0.5f, 1.5f);
  std::bernoulli_distribution sign(0.5);
  for (float& p : t.params) p = sign(rng) ? u(rng) : -u(rng);
}

// ReLU's kink at 0 breaks a central difference: keep inputs at least 5h away.
void AwayFromZero(RowMatrix& x) {
  for (Eigen::Index i = 0; i < x.size(); ++i) {
    float& v = x.data()[i];
    if (std::abs(v) < 5 * kH) v = v < 0 ? -5 * kH - std::abs(v) : 5 * kH + v;
  }
}

void CheckGradients(const LayerSpec& spec, const Shape& shape, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  TestLayer t = Make(spec, shape.in, seed);
  ASSERT_EQ(t.layer->out_features(), shape.out);
  RandomizeParams(t, rng);
  RowMatrix x = Random(shape.rows, shape.in, rng, -2.0f, 2.0f);
  if (spec.type == "relu") AwayFromZero(x);
  const RowMatrix r = Random(shape.rows, shape.out, rng);
  const std::string what = Describe(spec, shape);

  // Input gradient.
  RowMatrix dx(shape.rows, shape.in);
  t.layer->BackwardInput(CView(x), CView(r), View(dx));
  const auto dx_numeric = CentralDifferences(x.data(), x.size(), [&] { return Objective(*t.layer, x, r); });
  Report(what + " dx", MaxRelativeError(dx.data(), dx_numeric));

  // Weight gradient.
  if (t.params.empty()) return;
  std::fill(t.grads.begin(), t.grads.end(), 0.0f);
  t.layer->BackwardWeight(CView(x), CView(r));
  const auto dw_numeric =
      CentralDifferences(t.params.data(), t.params.size(), [&] { return Objective(*t.layer, x, r); });
  Report(what + " dparams", MaxRelativeError(t.grads.data(), dw_numeric));
}

const std::vector<Shape> kLinearShapes = {{1, 3, 17}, {5, 17, 3}, {5, 8, 8}, {1, 17, 1}, {5, 3, 1}, {5, 1, 9}};
const std::vector<Shape> kElementwiseShapes = {{1, 3, 3}, {5, 3, 3}, {5, 8, 8}, {1, 17, 17}, {5, 17, 17}};

TEST(LayerGradients, Linear) {
  std::uint64_t seed = 100;
  for (const Shape& s : kLinearShapes) {
    CheckGradients(Spec("linear", s.out), s, ++seed);
    CheckGradients(Spec("linear", s.out, /*bias=*/false), s, ++seed);
  }
}

TEST(LayerGradients, Relu) {
  std::uint64_t seed = 200;
  for (const Shape& s : kElementwiseShapes) CheckGradients(Spec("relu"), s, ++seed);
}

TEST(LayerGradients, Gelu) {
  std::uint64_t seed = 300;
  for (const Shape& s : kElementwiseShapes) CheckGradients(Spec("gelu"), s, ++seed);
}

TEST(LayerGradients, LayerNorm) {
  std::uint64_t seed = 400;
  for (const Shape& s : kElementwiseShapes) CheckGradients(Spec("layernorm"), s, ++seed);
}

TEST(LayerGradients, CrossEntropy) {
  std::uint64_t seed = 500;
  for (const Shape& s : std::vector<Shape>{{1, 3, 3}, {5, 3, 3}, {5, 10, 10}, {1, 17, 17}, {5, 17, 17}}) {
    std::mt19937_64 rng(++seed);
    RowMatrix logits = Random(s.rows, s.in, rng, -3.0f, 3.0f);
    std::uniform_int_distribution<std::int32_t> label(0, s.in - 1);
    std::vector<std::int32_t> labels(s.rows);
    for (auto& l : labels) l = label(rng);

    RowMatrix dlogits(s.rows, s.in);
    CrossEntropy(CView(logits), labels, 1.0f, dlogits.data(), nullptr);
    const auto numeric = CentralDifferences(
        logits.data(), logits.size(), [&] { return CrossEntropy(CView(logits), labels, 1.0f, nullptr, nullptr); });
    Report("cross-entropy rows=" + std::to_string(s.rows) + " classes=" + std::to_string(s.in) + " dlogits",
           MaxRelativeError(dlogits.data(), numeric));
  }
}

// ---- Exact small cases ----

TEST(Linear, HandSetWeights) {
  TestLayer t = Make(Spec("linear", 2), 3);
  // weight (2, 3) row-major, then bias (2)
  t.params = {1, 2, 3, 4, 5, 6, 0.5f, -1};
  t.layer->Bind(t.params.data(), t.grads.data());
  RowMatrix x(2, 3);
  x << 1, 0, -1, 2, 1, 0;
  RowMatrix y(2, 2);
  t.layer->Forward(CView(x), View(y));
  EXPECT_FLOAT_EQ(y(0, 0), 1 - 3 + 0.5f);
  EXPECT_FLOAT_EQ(y(0, 1), 4 - 6 - 1);
  EXPECT_FLOAT_EQ(y(1, 0), 2 + 2 + 0.5f);
  EXPECT_FLOAT_EQ(y(1, 1), 8 + 5 - 1);

  RowMatrix dy(2, 2);
  dy << 1, 0, 0, 2;
  RowMatrix dx(2, 3);
  t.layer->BackwardInput(CView(x), CView(dy), View(dx));  // dy W
  RowMatrix expected_dx(2, 3);
  expected_dx << 1, 2, 3, 8, 10, 12;
  EXPECT_EQ(dx, expected_dx);

  t.layer->BackwardWeight(CView(x), CView(dy));  // dW = dy^T x, db = column sums of dy
  EXPECT_EQ(t.grads, (std::vector<float>{1, 0, -1, 4, 2, 0, 1, 2}));
}

TEST(Linear, WithoutBias) {
  TestLayer t = Make(Spec("linear", 2, /*bias=*/false), 2);
  ASSERT_EQ(t.layer->NumParams(), 4u);
  t.params = {1, 2, 3, 4};
  t.layer->Bind(t.params.data(), t.grads.data());
  RowMatrix x(1, 2);
  x << 1, -1;
  RowMatrix y(1, 2);
  t.layer->Forward(CView(x), View(y));
  EXPECT_FLOAT_EQ(y(0, 0), -1);
  EXPECT_FLOAT_EQ(y(0, 1), -1);
}

TEST(Linear, ParamsInPyTorchLayout) {
  TestLayer t = Make(Spec("linear", 4), 3);
  EXPECT_EQ(t.layer->Type(), "linear");
  EXPECT_EQ(t.layer->in_features(), 3);
  EXPECT_EQ(t.layer->out_features(), 4);
  const auto p = t.layer->Params();
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].name, "weight");
  EXPECT_EQ(p[0].shape, (std::vector<int>{4, 3}));
  EXPECT_EQ(p[0].offset, 0u);
  EXPECT_EQ(p[0].size, 12u);
  EXPECT_EQ(p[1].name, "bias");
  EXPECT_EQ(p[1].shape, (std::vector<int>{4}));
  EXPECT_EQ(p[1].offset, 12u);
  EXPECT_EQ(p[1].size, 4u);
  EXPECT_EQ(t.layer->NumParams(), 16u);
  EXPECT_DOUBLE_EQ(t.layer->FlopsPerSample(), 12.0);
  EXPECT_EQ(Make(Spec("linear", 4, false), 3).layer->Params().size(), 1u);
}

TEST(Gelu, KnownValuesAndDerivatives) {
  // PyTorch's F.gelu(x, approximate='tanh') and its derivative, in double.
  const std::vector<std::pair<float, std::pair<double, double>>> cases = {
      {1.0f, {0.8411919906082768, 1.0829640838457826}},
      {-1.0f, {-0.15880800939172324, -0.08296408384578255}},
      {0.0f, {0.0, 0.5}},
      {3.0f, {2.996362607918227, 1.0115841666309695}},
      {-3.0f, {-0.0036373920817729943, -0.011584166630969516}},
      {0.5f, {0.34571400982514394, 0.8673699035346424}}};
  TestLayer t = Make(Spec("gelu"), static_cast<int>(cases.size()));
  EXPECT_EQ(t.layer->NumParams(), 0u);
  RowMatrix x(1, cases.size()), y(1, cases.size()), ones = RowMatrix::Ones(1, cases.size()), dx(1, cases.size());
  for (std::size_t i = 0; i < cases.size(); ++i) x(0, i) = cases[i].first;
  t.layer->Forward(CView(x), View(y));
  t.layer->BackwardInput(CView(x), CView(ones), View(dx));
  for (std::size_t i = 0; i < cases.size(); ++i) {
    EXPECT_NEAR(y(0, i), cases[i].second.first, 1e-6) << "gelu(" << x(0, i) << ")";
    EXPECT_NEAR(dx(0, i), cases[i].second.second, 1e-6) << "gelu'(" << x(0, i) << ")";
  }
}

TEST(Relu, ValuesAndMask) {
  TestLayer t = Make(Spec("relu"), 4);
  RowMatrix x(1, 4), y(1, 4), dy(1, 4), dx(1, 4);
  x << -2, 0, 0.5f, 3;
  dy << 10, 20, 30, 40;
  t.layer->Forward(CView(x), View(y));
  t.layer->BackwardInput(CView(x), CView(dy), View(dx));
  RowMatrix expected_y(1, 4), expected_dx(1, 4);
  expected_y << 0, 0, 0.5f, 3;
  expected_dx << 0, 0, 30, 40;  // the derivative at 0 is 0, as in PyTorch
  EXPECT_EQ(y, expected_y);
  EXPECT_EQ(dx, expected_dx);
}

TEST(LayerNorm, KnownRow) {
  TestLayer t = Make(Spec("layernorm"), 4);
  RowMatrix x(2, 4), y(2, 4);
  x << 1, 2, 3, 4, 101, 102, 103, 104;  // the second row is the first shifted: same output
  t.layer->Forward(CView(x), View(y));
  const double expected[] = {-1.3416354199689269, -0.447211806656309, 0.447211806656309, 1.3416354199689269};
  for (int r = 0; r < 2; ++r) {
    for (int c = 0; c < 4; ++c) EXPECT_NEAR(y(r, c), expected[c], 1e-5) << r << "," << c;
  }
  // With affine parameters: y = xhat * weight + bias.
  const float weight[] = {1, 2, -1, 0.5f}, bias[] = {0, 1, 2, -3};
  std::copy(weight, weight + 4, t.params.begin());
  std::copy(bias, bias + 4, t.params.begin() + 4);
  t.layer->Forward(CView(x), View(y));
  for (int c = 0; c < 4; ++c) EXPECT_NEAR(y(0, c), expected[c] * weight[c] + bias[c], 1e-5) << c;

  // dbias = column sums of dy; dweight = sum of dy * xhat.
  RowMatrix dy = RowMatrix::Ones(2, 4);
  t.layer->BackwardWeight(CView(x), CView(dy));
  for (int c = 0; c < 4; ++c) {
    EXPECT_NEAR(t.grads[c], 2 * expected[c], 1e-4) << c;
    EXPECT_FLOAT_EQ(t.grads[4 + c], 2.0f) << c;
  }
  // A constant dy only moves the mean, which layernorm removes: dx = 0 when weight = 1.
  std::fill(t.params.begin(), t.params.begin() + 4, 1.0f);
  RowMatrix dx(2, 4);
  t.layer->BackwardInput(CView(x), CView(dy), View(dx));
  EXPECT_LT(dx.cwiseAbs().maxCoeff(), 1e-5);
}

TEST(LayerNorm, ParamsAndEps) {
  LayerSpec spec = Spec("layernorm");
  spec.eps = 0.5;
  TestLayer t = Make(spec, 2);
  const auto p = t.layer->Params();
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].name, "weight");
  EXPECT_EQ(p[0].shape, (std::vector<int>{2}));
  EXPECT_EQ(p[1].name, "bias");
  EXPECT_EQ(p[1].offset, 2u);
  RowMatrix x(1, 2), y(1, 2);
  x << -1, 1;  // mean 0, var 1: y = x / sqrt(1 + 0.5)
  t.layer->Forward(CView(x), View(y));
  EXPECT_NEAR(y(0, 1), 1.0 / std::sqrt(1.5), 1e-6);
}

TEST(CrossEntropy, KnownLogits) {
  RowMatrix logits(2, 3);
  logits << 1, 2, 3, 1000, 1001, 1002;  // the second row would overflow exp without the max subtracted
  const std::vector<std::int32_t> labels = {2, 0};
  RowMatrix d(2, 3);
  std::int64_t correct = 5;  // adds to what is there
  const double loss = CrossEntropy(CView(logits), labels, 0.5f, d.data(), &correct);
  // log-sum-exp minus the label's logit
  const double row0 = 0.40760596444438013, row1 = 0.40760596444438013 + 2.0;
  EXPECT_NEAR(loss, row0 + row1, 1e-5);
  EXPECT_EQ(correct, 6);  // row 0 right, row 1 wrong
  const double softmax[] = {0.09003057317038048, 0.2447284710547977, 0.665240955774822};
  for (int c = 0; c < 3; ++c) {
    EXPECT_NEAR(d(0, c), 0.5 * (softmax[c] - (c == 2)), 1e-6) << c;
    EXPECT_NEAR(d(1, c), 0.5 * (softmax[c] - (c == 0)), 1e-6) << c;
  }
  EXPECT_NEAR(CrossEntropy(CView(logits), labels, 0.5f, nullptr, nullptr), loss, 1e-12);
}

// kIgnoreLabel (PyTorch's ignore_index, a packed sample's unfilled
// positions): no loss, no correct count, a zero gradient row; the other
// rows as before.
TEST(CrossEntropy, AnIgnoredLabelCountsForNothing) {
  RowMatrix logits(3, 3);
  logits << 1, 2, 3, 9, 9, 9, 1000, 1001, 1002;
  RowMatrix d = RowMatrix::Constant(3, 3, 7.0f);
  std::int64_t correct = 0;
  const double loss =
      CrossEntropy(CView(logits), std::vector<std::int32_t>{2, kIgnoreLabel, 0}, 0.5f, d.data(), &correct);
  EXPECT_NEAR(loss, 2 * 0.40760596444438013 + 2.0, 1e-5);
  EXPECT_EQ(correct, 1);
  for (int c = 0; c < 3; ++c) EXPECT_EQ(d(1, c), 0.0f) << c;
  EXPECT_NEAR(d(0, 2), 0.5 * (0.665240955774822 - 1), 1e-6);
  // Other negative labels are still refused.
  EXPECT_THROW(CrossEntropy(CView(logits), std::vector<std::int32_t>{2, -1, 0}, 1.0f, nullptr, nullptr), Error);
}

TEST(CrossEntropy, ArgmaxTiesPickTheFirst) {
  RowMatrix logits(2, 3);
  logits << 1, 5, 5, 7, 7, 0;
  std::int64_t correct = 0;
  CrossEntropy(CView(logits), std::vector<std::int32_t>{1, 1}, 1.0f, nullptr, &correct);
  EXPECT_EQ(correct, 1);  // row 0's argmax is 1, row 1's is 0
}

TEST(CrossEntropy, BadLabels) {
  RowMatrix logits = RowMatrix::Zero(3, 4);
  RowMatrix d = RowMatrix::Constant(3, 4, 7.0f);
  try {
    CrossEntropy(CView(logits), std::vector<std::int32_t>{0, 3, 4}, 1.0f, d.data(), nullptr);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("row 2"), std::string::npos) << msg;
    EXPECT_NE(msg.find("label 4"), std::string::npos) << msg;
  }
  EXPECT_TRUE((d.array() == 7.0f).all()) << "dlogits written before the labels were checked";
  EXPECT_THROW(CrossEntropy(CView(logits), std::vector<std::int32_t>{0, -1, 0}, 1.0f, nullptr, nullptr), Error);
  EXPECT_THROW(CrossEntropy(CView(logits), std::vector<std::int32_t>{0, 1}, 1.0f, nullptr, nullptr), Error);
}

// ---- Initialisation ----

TEST(Init, LinearMatchesPyTorchRange) {
  const int in = 1000, out = 300;
  TestLayer t = Make(Spec("linear", out), in, 7);
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));
  const Eigen::Map<const Eigen::ArrayXf> all(t.params.data(), t.params.size());
  EXPECT_LE(all.abs().maxCoeff(), bound);
  const Eigen::Map<const Eigen::ArrayXf> w(t.params.data(), in * out), b(t.params.data() + in * out, out);
  // U(-b, b): mean 0 (std b/sqrt(3n)), variance b^2/3, and the whole range is used.
  const double mean = w.cast<double>().mean();
  const double var = (w.cast<double>() - mean).square().mean();
  EXPECT_LT(std::abs(mean), 0.01 * bound);
  EXPECT_NEAR(var, bound * bound / 3, 0.01 * bound * bound);
  EXPECT_GT(w.maxCoeff(), 0.999 * bound);
  EXPECT_LT(w.minCoeff(), -0.999 * bound);
  EXPECT_GT(b.maxCoeff(), 0.9 * bound);
  EXPECT_LT(b.minCoeff(), -0.9 * bound);
}

TEST(Init, LinearDrawsWeightRowMajorThenBias) {
  TestLayer t = Make(Spec("linear", 3), 5, 42);
  std::mt19937_64 rng(42);
  const float bound = static_cast<float>(1.0 / std::sqrt(5.0));
  std::uniform_real_distribution<float> u(-bound, bound);
  for (std::size_t i = 0; i < t.params.size(); ++i) EXPECT_EQ(t.params[i], u(rng)) << i;
}

TEST(Init, SameSeedSameParameters) {
  for (const LayerSpec& spec : {Spec("linear", 9), Spec("layernorm")}) {
    const TestLayer a = Make(spec, 7, 123), b = Make(spec, 7, 123), c = Make(spec, 7, 124);
    EXPECT_EQ(a.params, b.params) << spec.type;
    if (spec.type == "linear") {
      EXPECT_NE(a.params, c.params);
    }
  }
}

TEST(Init, LayerNormWeightOneBiasZero) {
  TestLayer t = Make(Spec("layernorm"), 6, 9);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(t.params[i], 1.0f);
    EXPECT_EQ(t.params[6 + i], 0.0f);
  }
}

// ---- Accumulation ----

TEST(BackwardWeight, Adds) {
  for (const LayerSpec& spec : {Spec("linear", 4), Spec("layernorm")}) {
    std::mt19937_64 rng(5);
    TestLayer t = Make(spec, 4, 5);
    RandomizeParams(t, rng);
    const RowMatrix x = Random(3, 4, rng), dy = Random(3, 4, rng);
    t.layer->BackwardWeight(CView(x), CView(dy));
    const std::vector<float> once = t.grads;
    t.layer->BackwardWeight(CView(x), CView(dy));
    for (std::size_t i = 0; i < once.size(); ++i) EXPECT_FLOAT_EQ(t.grads[i], 2 * once[i]) << spec.type << " " << i;
  }
  // Layers without parameters have nothing to add to.
  TestLayer relu = Make(Spec("relu"), 4);
  RowMatrix x = RowMatrix::Ones(2, 4);
  relu.layer->BackwardWeight(CView(x), CView(x));
}

// ---- Large products against double precision (every GEMM blocking edge) ----

TEST(Linear, LargeShapesMatchDoubleReference) {
  const std::vector<Shape> shapes = {{67, 1031, 517}, {300, 600, 40}, {1, 784, 256},
                                     {64, 784, 1},    {2, 3, 2},      {256, 20, 300}};
  std::uint64_t seed = 900;
  for (const Shape& s : shapes) {
    std::mt19937_64 rng(++seed);
    TestLayer t = Make(Spec("linear", s.out), s.in, seed);
    const RowMatrix x = Random(s.rows, s.in, rng), dy = Random(s.rows, s.out, rng);
    RowMatrix y(s.rows, s.out), dx(s.rows, s.in);
    t.layer->Forward(CView(x), View(y));
    t.layer->BackwardInput(CView(x), CView(dy), View(dx));
    t.layer->BackwardWeight(CView(x), CView(dy));

    using RowMatrixD = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    const Eigen::Map<const RowMatrix> w(t.params.data(), s.out, s.in);
    const Eigen::Map<const Eigen::RowVectorXf> b(t.params.data() + s.out * s.in, s.out);
    const RowMatrixD xd = x.cast<double>(), dyd = dy.cast<double>(), wd = w.cast<double>();
    const RowMatrixD y_ref = (xd * wd.transpose()).rowwise() + b.cast<double>();
    const RowMatrixD dx_ref = dyd * wd, dw_ref = dyd.transpose() * xd;
    const Eigen::RowVectorXd db_ref = dyd.colwise().sum();
    const Eigen::Map<const RowMatrix> dw(t.grads.data(), s.out, s.in);
    const Eigen::Map<const Eigen::RowVectorXf> db(t.grads.data() + s.out * s.in, s.out);
    // float sums of `depth` terms of size <= 1: allow depth * float epsilon.
    auto check = [&](const char* what, const auto& got, const auto& ref, int depth) {
      const double err = (got.template cast<double>() - ref).cwiseAbs().maxCoeff();
      EXPECT_LT(err, 4e-7 * depth + 1e-6) << what << " rows=" << s.rows << " in=" << s.in << " out=" << s.out;
    };
    check("y", y, y_ref, s.in + 1);
    check("dx", dx, dx_ref, s.out);
    check("dW", dw, dw_ref, s.rows);
    check("db", db, db_ref, s.rows);
  }
}

// ---- No heap allocation in a training step ----

TEST(SteadyState, TrainingStepDoesNotAllocate) {
#ifndef BATON_TEST_COUNTS_ALLOCATIONS
  GTEST_SKIP() << "allocations are only counted on glibc without sanitizers";
#else
  {
    // The counter sees what the test itself allocates.
    AllocationCounter counter;
    std::vector<float>* v = new std::vector<float>(10);
    delete v;
    void* p = std::malloc(100);
    std::free(p);
    ASSERT_EQ(counter.count(), 3);  // the vector, its buffer, the malloc
  }
  for (const int rows : {1, 64, 256}) {
    // MLP: 784 -> 256 -> layernorm -> gelu -> 1024 -> relu -> 10, then the loss.
    std::vector<LayerSpec> specs = {Spec("linear", 256),  Spec("layernorm"), Spec("gelu"),
                                    Spec("linear", 1024), Spec("relu"),      Spec("linear", 10)};
    std::vector<TestLayer> layers;
    std::vector<RowMatrix> acts = {RowMatrix::Zero(rows, 784)}, grads;
    std::mt19937_64 rng(rows);
    acts[0] = Random(rows, 784, rng);
    std::size_t num_params = 0;
    int in = 784;
    for (const LayerSpec& spec : specs) {
      layers.push_back(Make(spec, in, rng()));
      in = layers.back().layer->out_features();
      acts.emplace_back(rows, in);
      num_params += layers.back().params.size();
    }
    for (const RowMatrix& a : acts) grads.emplace_back(a.rows(), a.cols());
    std::vector<std::int32_t> labels(rows);
    for (int i = 0; i < rows; ++i) labels[i] = i % 10;
    std::vector<float> flat_params(num_params), flat_grads(num_params, 0.01f);
    OptimizerSpec adamw;
    adamw.type = OptimizerType::kAdamW;
    adamw.weight_decay = 0.01;
    OptimizerSpec sgd;
    sgd.momentum = 0.9;
    std::vector<std::unique_ptr<Optimizer>> optimizers;
    optimizers.push_back(MakeOptimizer(adamw, num_params));
    optimizers.push_back(MakeOptimizer(sgd, num_params));
    std::int64_t correct = 0;

    AllocationCounter counter;
    for (int step = 0; step < 2; ++step) {
      for (std::size_t l = 0; l < layers.size(); ++l) layers[l].layer->Forward(CView(acts[l]), View(acts[l + 1]));
      CrossEntropy(CView(acts.back()), labels, 1.0f / rows, grads.back().data(), &correct);
      for (std::size_t l = layers.size(); l-- > 0;) {
        layers[l].layer->BackwardInput(CView(acts[l]), CView(grads[l + 1]), View(grads[l]));  // I
        layers[l].layer->BackwardWeight(CView(acts[l]), CView(grads[l + 1]));                 // W
      }
      for (auto& o : optimizers) o->Step(flat_params, flat_grads);
    }
    EXPECT_EQ(counter.count(), 0) << "rows=" << rows;
  }
  // Linear layers whose products are matrix-vector ones.
  for (const Shape& s : std::vector<Shape>{{64, 784, 1}, {64, 1, 300}, {1, 5000, 3}, {1, 1, 1}}) {
    std::mt19937_64 rng(s.in);
    TestLayer t = Make(Spec("linear", s.out), s.in, 3);
    const RowMatrix x = Random(s.rows, s.in, rng), dy = Random(s.rows, s.out, rng);
    RowMatrix y(s.rows, s.out), dx(s.rows, s.in);
    // OpenBLAS 0.3.21's AVX-512 kernels (SkylakeX, Cooperlake) allocate a
    // buffer inside SGEMM on every call with a depth of one (in = 1): that
    // is the library's, not baton's. Its other kernels allocate nothing.
    const std::string core = host_detail::LoadedBlas().corename();
    if (s.in == 1 && (core == "SkylakeX" || core == "Cooperlake" || core == "Sapphirerapids")) continue;
    AllocationCounter counter;
    t.layer->Forward(CView(x), View(y));
    t.layer->BackwardInput(CView(x), CView(dy), View(dx));
    t.layer->BackwardWeight(CView(x), CView(dy));
    EXPECT_EQ(counter.count(), 0) << "rows=" << s.rows << " in=" << s.in << " out=" << s.out;
  }
#endif
}

// ---- Errors ----

TEST(MakeLayer, Errors) {
  auto message = [](const LayerSpec& spec, int in) -> std::string {
    try {
      MakeLayer(spec, in);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "(no error)";
  };
  LayerSpec residual = Spec("residual");
  residual.body = {Spec("linear", 4)};
  const std::string r = message(residual, 4);
  EXPECT_NE(r.find("residual"), std::string::npos) << r;
  EXPECT_NE(r.find("stage"), std::string::npos) << r;
  EXPECT_NE(message(Spec("linear", 0), 4).find("out"), std::string::npos) << message(Spec("linear", 0), 4);
  EXPECT_NE(message(Spec("linear", -3), 4).find("-3"), std::string::npos);
  EXPECT_NE(message(Spec("linear", 2), 0).find("input features"), std::string::npos) << message(Spec("linear", 2), 0);
  EXPECT_THROW(MakeLayer(Spec("relu"), 0), ConfigError);
  EXPECT_THROW(MakeLayer(Spec("gelu"), -1), ConfigError);
  for (const double eps : {0.0, -1e-5, std::nan("")}) {
    LayerSpec ln = Spec("layernorm");
    ln.eps = eps;
    EXPECT_NE(message(ln, 4).find("eps"), std::string::npos) << eps << ": " << message(ln, 4);
  }
  EXPECT_NO_THROW(MakeLayer(Spec("linear", 1), 1));
}

class PrintMaxFdError : public ::testing::Environment {
 public:
  void TearDown() override {
    if (g_max_fd_error > 0) std::printf("max finite-difference relative error over all checks: %.3g\n", g_max_fd_error);
  }
};
const auto* const kPrintMaxFdError = ::testing::AddGlobalTestEnvironment(new PrintMaxFdError);

}  // namespace
}  // namespace baton
