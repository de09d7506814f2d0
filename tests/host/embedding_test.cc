// The token embedding and the position table against hand computations:
// forward lookups and additions, and their gradients against central finite
// differences of L = sum(y * R) (the position table's input gradient and
// weight gradient, the embedding's weight gradient; token ids have none).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "baton/error.h"
#include "baton/model.h"
#include "layers.h"

namespace baton {
namespace {

View F32(std::vector<float>& v, Shape s) { return {reinterpret_cast<std::byte*>(v.data()), {DType::kF32, s}}; }
ConstView I32(const std::vector<std::int32_t>& v, Shape s) {
  return {reinterpret_cast<const std::byte*>(v.data()), {DType::kI32, s}};
}

TEST(Embedding, LooksUpRowsAndScatterAddsGradients) {
  LayerSpec spec;
  spec.type = LayerType::kEmbedding;
  spec.vocab = 5;
  spec.out = 3;
  OpDesc op = DescribeLayer(spec, 1, 4);
  op.name = "wte.";
  auto layer = MakeLayer(op, 8);
  ASSERT_EQ(layer->NumParams(), 15u);
  std::vector<float> w(15), g(15, 0.0f);
  for (int i = 0; i < 15; ++i) w[i] = 0.5f * i;
  layer->Bind(w.data(), g.data());
  const std::vector<std::int32_t> ids = {4, 0, 4, 2, 1, 1, 3, 0};  // 2 samples x 4 tokens
  std::vector<float> y(8 * 3), dy(8 * 3);
  layer->Forward(I32(ids, {2, 4}), F32(y, {2, 4, 3}), nullptr);
  for (int r = 0; r < 8; ++r) {
    for (int k = 0; k < 3; ++k) EXPECT_EQ(y[r * 3 + k], w[ids[r] * 3 + k]) << r << "," << k;
  }
  for (int i = 0; i < 24; ++i) dy[i] = float(i + 1);
  layer->BackwardWeight(I32(ids, {2, 4}), nullptr, F32(dy, {2, 4, 3}), nullptr);
  // Row v's gradient is the sum of dy over the tokens that are v.
  for (int v = 0; v < 5; ++v) {
    for (int k = 0; k < 3; ++k) {
      float want = 0;
      for (int r = 0; r < 8; ++r) want += ids[r] == v ? dy[r * 3 + k] : 0.0f;
      EXPECT_EQ(g[v * 3 + k], want) << "token " << v;
    }
  }
  // An id outside the vocabulary is an error naming it, not a read past the table.
  const std::vector<std::int32_t> bad = {0, 5, 1, 1, 1, 1, 1, 1};
  try {
    layer->Forward(I32(bad, {2, 4}), F32(y, {2, 4, 3}), nullptr);
    FAIL() << "token 5 of a 5-token vocabulary was looked up";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token 5 at row 1 is outside the vocabulary [0, 5)"), std::string::npos)
        << e.what();
  }
}

TEST(PositionEmbedding, AddsItsRowPerPositionAndMatchesFiniteDifferences) {
  const int samples = 3, seq = 4, c = 5;
  LayerSpec spec;
  spec.type = LayerType::kPositionEmbedding;
  spec.positions = 6;  // a table longer than the sequence: rows 0..3 are used
  auto layer = MakeLayer(DescribeLayer(spec, c, seq), samples * seq);
  ASSERT_EQ(layer->NumParams(), std::size_t(6 * c));
  std::mt19937_64 rng(9);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> w(6 * c), g(6 * c, 0.0f), x(samples * seq * c), r(x.size()), y(x.size()), dx(x.size());
  for (float& v : w) v = u(rng);
  for (float& v : x) v = u(rng);
  for (float& v : r) v = u(rng);
  layer->Bind(w.data(), g.data());
  const Shape shape{samples, seq, c};
  layer->Forward(F32(x, shape), F32(y, shape), nullptr);
  for (int n = 0; n < samples; ++n) {
    for (int t = 0; t < seq; ++t) {
      for (int k = 0; k < c; ++k) {
        const int i = (n * seq + t) * c + k;
        EXPECT_EQ(y[i], x[i] + w[t * c + k]);
      }
    }
  }
  layer->BackwardInput(F32(x, shape), nullptr, F32(r, shape), F32(dx, shape), nullptr);
  layer->BackwardWeight(F32(x, shape), nullptr, F32(r, shape), nullptr);
  auto loss = [&] {
    std::vector<float> out(x.size());
    layer->Forward(F32(x, shape), F32(out, shape), nullptr);
    double l = 0;
    for (std::size_t i = 0; i < out.size(); ++i) l += double(out[i]) * r[i];
    return l;
  };
  const float h = 1e-2f;
  auto fd = [&](std::vector<float>& v, std::size_t i) {
    const float keep = v[i];
    v[i] = keep + h;
    const double up = loss();
    v[i] = keep - h;
    const double down = loss();
    v[i] = keep;
    return (up - down) / (2 * h);
  };
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(dx[i], fd(x, i), 1e-3) << "dx " << i;
  for (std::size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(g[i], fd(w, i), 1e-3) << "dw " << i;
  for (std::size_t i = std::size_t(seq) * c; i < w.size(); ++i) EXPECT_EQ(g[i], 0.0f) << "an unused position moved";
}

// Packed documents (SequencePart::starts): a token's position counts from
// its document's first token, so each document reads and trains the rows
// it would alone; a slice of the sequence too.
TEST(PositionEmbedding, PackedDocumentsRestartTheirPositions) {
  const int samples = 2, seq = 6, c = 3;
  LayerSpec spec;
  spec.type = LayerType::kPositionEmbedding;
  spec.positions = seq;
  auto layer = MakeLayer(DescribeLayer(spec, c, seq), samples * seq);
  std::vector<float> w(seq * c), g(seq * c, 0.0f), x(samples * seq * c, 0.0f), y(x.size());
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = float(i);
  layer->Bind(w.data(), g.data());
  // Sample 0: documents of 2, 3 and 1 tokens; sample 1: one of 6.
  const std::vector<std::int32_t> starts{0, 0, 2, 2, 2, 5, 0, 0, 0, 0, 0, 0};
  const std::vector<int> position{0, 1, 0, 1, 2, 0, 0, 1, 2, 3, 4, 5};
  SequencePart packed;
  packed.starts = starts.data();
  const Shape shape{samples, seq, c};
  layer->Forward(F32(x, shape), F32(y, shape), nullptr, packed);
  for (int row = 0; row < samples * seq; ++row) {
    for (int k = 0; k < c; ++k) EXPECT_EQ(y[row * c + k], w[position[row] * c + k]) << "token row " << row;
  }
  std::vector<float> ones(x.size(), 1.0f);
  layer->BackwardWeight(F32(x, shape), nullptr, F32(ones, shape), nullptr, packed);
  const std::vector<float> uses{4, 3, 2, 1, 1, 1};  // how often each position occurs above
  for (int t = 0; t < seq; ++t) EXPECT_EQ(g[t * c], uses[t]) << "position " << t;
  // Tokens 2..4 of each sample as a slice: their positions in their documents.
  SequencePart slice = packed;
  slice.begin = 2;
  slice.end = 5;
  std::vector<float> xs(samples * 3 * c, 0.0f), ys(xs.size());
  const Shape sliced{samples, 3, c};
  layer->Forward(F32(xs, sliced), F32(ys, sliced), nullptr, slice);
  for (int n = 0; n < samples; ++n) {
    for (int k = 0; k < 3; ++k) EXPECT_EQ(ys[(n * 3 + k) * c], w[position[n * seq + 2 + k] * c]) << n << " " << k;
  }
}

TEST(PositionEmbedding, ATableShorterThanTheSequenceIsRefused) {
  LayerSpec spec;
  spec.type = LayerType::kPositionEmbedding;
  spec.positions = 3;
  EXPECT_THROW(DescribeLayer(spec, 4, 8), ConfigError);
}

}  // namespace
}  // namespace baton
