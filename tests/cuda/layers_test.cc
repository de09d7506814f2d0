// The CUDA layers and loss against the CPU ones (baton/model.h) on random
// inputs: every layer type's forward, input-gradient and weight-gradient
// backward in FP32 (and linear in BF16 and TF32), the residual additions, and
// cross-entropy's loss, gradient and correct count, ties included. Odd sizes
// and sizes past one block's threads exercise the kernels' index arithmetic.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "baton/error.h"
#include "baton/host.h"
#include "baton/model.h"
#include "cuda_layers.h"
#include "gemm_rate.h"
#include "layers.h"

namespace baton::cuda {
namespace {

std::vector<float> Random(std::size_t n, std::mt19937_64& rng, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> uniform(lo, hi);
  std::vector<float> v(n);
  for (float& f : v) f = uniform(rng);
  return v;
}

// Copies on `stream`, so the data is in place before the next work on it
// (the stream is non-blocking: it would not wait for a plain cudaMemcpy).
template <typename T>
DeviceBuffer<T> Upload(const std::vector<T>& host, cudaStream_t stream) {
  DeviceBuffer<T> d(host.size());
  if (!host.empty()) {
    EXPECT_EQ(cudaMemcpyAsync(d.data(), host.data(), d.bytes(), cudaMemcpyHostToDevice, stream), cudaSuccess);
  }
  return d;
}

template <typename T>
std::vector<T> Download(const T* device, std::size_t n, cudaStream_t stream) {
  std::vector<T> host(n);
  if (n > 0) {
    EXPECT_EQ(cudaMemcpyAsync(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost, stream), cudaSuccess);
  }
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  return host;
}

struct Difference {
  double max_abs = 0.0;  // max |got - want|
  double scale = 0.0;    // max |want|
  double Relative() const { return max_abs / std::max(scale, 1e-30); }
};

Difference Compare(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  Difference d;
  for (std::size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    d.max_abs = std::max(d.max_abs, std::abs(static_cast<double>(got[i]) - static_cast<double>(want[i])));
    d.scale = std::max(d.scale, std::abs(static_cast<double>(want[i])));
  }
  return d;
}

// Within `tolerance` relative to the reference's largest magnitude.
void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, double tolerance,
                 const std::string& what) {
  const Difference d = Compare(got, want);
  EXPECT_LE(d.Relative(), tolerance) << what << ": max |diff| " << d.max_abs << " against max |ref| " << d.scale;
}

// A stream, a cuBLAS handle on it and the Context over both; every test
// skips, saying why, on a machine without a CUDA device.
class CudaTest : public testing::Test {
 protected:
  void SetUp() override {
    if (DeviceCount() == 0) GTEST_SKIP() << "no CUDA device: the CUDA layers cannot run here";
    stream_.emplace();
    cublas_.emplace(stream_->get());
    ctx_.stream = stream_->get();
    ctx_.cublas = cublas_->get();
  }

  std::optional<Stream> stream_;
  std::optional<CublasHandle> cublas_;
  Context ctx_;
};

// ---- Layers ----

struct LayerCase {
  std::string name;
  LayerSpec spec;
  int in = 0;
  int rows = 0;
  int max_rows = 0;
  float x_offset = 0.0f;  // added to x: layernorm rows far from zero
};

// Test names print the case's name, not its bytes.
void PrintTo(const LayerCase& c, std::ostream* os) { *os << c.name; }

LayerSpec Spec(const std::string& type, int out = 0, bool bias = true) {
  LayerSpec s;
  s.type = *ParseEnum<LayerType>(type);
  s.out = out;
  s.bias = bias;
  return s;
}

// Results of one F, I and W pass over the same inputs.
struct Pass {
  std::vector<float> y, dx, grads;
};

class CudaLayerTest : public CudaTest, public testing::WithParamInterface<LayerCase> {
 protected:
  // Random parameters, prefilled gradients (W must add into them), x and dy
  // for GetParam(), drawn the same way whatever runs them.
  void MakeInputs() {
    const LayerCase& c = GetParam();
    std::mt19937_64 rng(1234);
    cpu_ = MakeLayer(c.spec, c.in);
    const std::size_t n = cpu_->NumParams();
    params_ = Random(n, rng);
    grads_ = Random(n, rng);
    x_ = Random(static_cast<std::size_t>(c.rows) * c.in, rng, -2.0f, 2.0f);
    for (float& v : x_) v += c.x_offset;
    dy_ = Random(static_cast<std::size_t>(c.rows) * cpu_->out_features(), rng);
  }

  Pass RunCpu() {
    const LayerCase& c = GetParam();
    const int out = cpu_->out_features();
    Pass p{std::vector<float>(static_cast<std::size_t>(c.rows) * out),
           std::vector<float>(static_cast<std::size_t>(c.rows) * c.in), grads_};
    std::vector<float> params = params_;
    cpu_->Bind(params.data(), p.grads.data());
    const ConstMatMap x(x_.data(), c.rows, c.in), dy(dy_.data(), c.rows, out);
    cpu_->Forward(x, MatMap(p.y.data(), c.rows, out));
    cpu_->BackwardInput(x, dy, MatMap(p.dx.data(), c.rows, c.in));
    cpu_->BackwardWeight(x, dy);
    return p;
  }

  Pass RunCuda(Precision precision) {
    const LayerCase& c = GetParam();
    std::unique_ptr<CudaLayer> layer = MakeCudaLayer(c.spec, c.in, c.max_rows);
    EXPECT_EQ(layer->Type(), cpu_->Type());
    EXPECT_EQ(layer->in_features(), cpu_->in_features());
    EXPECT_EQ(layer->out_features(), cpu_->out_features());
    EXPECT_EQ(layer->NumParams(), cpu_->NumParams());
    const std::vector<ParamInfo> got = layer->Params(), want = cpu_->Params();
    EXPECT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
      EXPECT_EQ(got[i].name, want[i].name);
      EXPECT_EQ(got[i].shape, want[i].shape);
      EXPECT_EQ(got[i].offset, want[i].offset);
      EXPECT_EQ(got[i].size, want[i].size);
    }

    const int out = layer->out_features();
    const std::size_t y_size = static_cast<std::size_t>(c.rows) * out, x_size = x_.size();
    DeviceBuffer<float> params = Upload(params_, ctx_.stream), grads = Upload(grads_, ctx_.stream);
    DeviceBuffer<float> x = Upload(x_, ctx_.stream), dy = Upload(dy_, ctx_.stream);
    DeviceBuffer<float> y(y_size), dx(x_size);
    layer->Bind(params.data(), grads.data());
    Context ctx = ctx_;
    ctx.precision = precision;
    layer->RefreshWeights(ctx);  // as a stage does after binding and after every update
    layer->Forward(ctx, x.data(), y.data(), c.rows);
    layer->BackwardInput(ctx, x.data(), dy.data(), dx.data(), c.rows);
    layer->BackwardWeight(ctx, x.data(), dy.data(), c.rows);
    return {Download(y.data(), y_size, ctx_.stream), Download(dx.data(), x_size, ctx_.stream),
            Download(grads.data(), grads.size(), ctx_.stream)};
  }

  std::unique_ptr<Layer> cpu_;
  std::vector<float> params_, grads_, x_, dy_;
};

TEST_P(CudaLayerTest, Fp32MatchesCpu) {
  MakeInputs();
  const Pass want = RunCpu();
  const Pass got = RunCuda(Precision::kFP32);
  constexpr double kTolerance = 1e-5;
  ExpectClose(got.y, want.y, kTolerance, "forward y");
  ExpectClose(got.dx, want.dx, kTolerance, "backward-input dx");
  ExpectClose(got.grads, want.grads, kTolerance, "backward-weight grads (added to the prefilled ones)");
}

// Reduced-precision products, compared loosely with the CPU's FP32; and they
// must differ from FP32 at all, or the reduced path did not run. Only linear
// layers: precision changes nothing else.
class CudaLinearPrecisionTest : public CudaLayerTest {
 protected:
  void ExpectNearCpu(Precision precision, double tolerance) {
    MakeInputs();
    const Pass want = RunCpu();
    const Pass got = RunCuda(precision);
    const std::string name(EnumName(precision));
    ExpectClose(got.y, want.y, tolerance, name + " forward y");
    ExpectClose(got.dx, want.dx, tolerance, name + " backward-input dx");
    ExpectClose(got.grads, want.grads, tolerance, name + " backward-weight grads");
    EXPECT_GT(Compare(got.y, want.y).max_abs, 0.0) << name << " forward equals the fp32 reference bit for bit";
  }
};
class CudaLinearBf16Test : public CudaLinearPrecisionTest {};
class CudaLinearTf32Test : public CudaLinearPrecisionTest {};

// BF16 operands with FP32 accumulation: each operand carries a relative
// rounding error of up to 2^-9.
TEST_P(CudaLinearBf16Test, NearCpu) { ExpectNearCpu(Precision::kBF16, 2e-2); }

// TF32 products: FP32 data, inputs rounded to a 10-bit mantissa inside the
// tensor cores (relative error up to 2^-11 per operand), FP32 accumulation.
TEST_P(CudaLinearTf32Test, NearCpu) { ExpectNearCpu(Precision::kTF32, 5e-3); }

// The BF16 weight copy is made by RefreshWeights, once per update, not on
// every call: a forward after new weights but before the refresh still
// multiplies with the old copy; after the refresh it equals, bit for bit, a
// fresh layer's forward over the new weights.
TEST_P(CudaLinearBf16Test, WeightCopyFollowsRefreshWeights) {
  MakeInputs();
  const LayerCase& c = GetParam();
  std::unique_ptr<CudaLayer> layer = MakeCudaLayer(c.spec, c.in, c.max_rows);
  const int out = layer->out_features();
  const std::size_t y_size = static_cast<std::size_t>(c.rows) * out;
  std::vector<float> doubled = params_;  // the weights doubled, the bias as it was
  for (std::size_t i = 0; i < static_cast<std::size_t>(out) * c.in; ++i) doubled[i] *= 2.0f;
  DeviceBuffer<float> params = Upload(params_, ctx_.stream), grads = Upload(grads_, ctx_.stream);
  DeviceBuffer<float> x = Upload(x_, ctx_.stream), y(y_size);
  layer->Bind(params.data(), grads.data());
  Context ctx = ctx_;
  ctx.precision = Precision::kBF16;
  layer->RefreshWeights(ctx);
  layer->Forward(ctx, x.data(), y.data(), c.rows);
  const std::vector<float> before = Download(y.data(), y_size, ctx_.stream);

  const DeviceBuffer<float> twice = Upload(doubled, ctx_.stream);
  ASSERT_EQ(cudaMemcpyAsync(params.data(), twice.data(), params.bytes(), cudaMemcpyDeviceToDevice, ctx_.stream),
            cudaSuccess);
  layer->Forward(ctx, x.data(), y.data(), c.rows);
  EXPECT_EQ(Download(y.data(), y_size, ctx_.stream), before) << "the BF16 weights changed without a refresh";
  layer->RefreshWeights(ctx);
  layer->Forward(ctx, x.data(), y.data(), c.rows);
  const std::vector<float> after = Download(y.data(), y_size, ctx_.stream);
  EXPECT_NE(after, before);

  std::unique_ptr<CudaLayer> fresh = MakeCudaLayer(c.spec, c.in, c.max_rows);
  DeviceBuffer<float> fresh_params = Upload(doubled, ctx_.stream), fresh_grads = Upload(grads_, ctx_.stream);
  DeviceBuffer<float> fresh_y(y_size);
  fresh->Bind(fresh_params.data(), fresh_grads.data());
  fresh->RefreshWeights(ctx);
  fresh->Forward(ctx, x.data(), fresh_y.data(), c.rows);
  EXPECT_EQ(after, Download(fresh_y.data(), y_size, ctx_.stream));
}

TEST_P(CudaLayerTest, RowsBeyondMaxRowsAreRefused) {
  const LayerCase& c = GetParam();
  std::unique_ptr<CudaLayer> layer = MakeCudaLayer(c.spec, c.in, c.max_rows);
  // Nothing is read before the check, so no buffers are needed.
  EXPECT_THROW(layer->Forward(ctx_, nullptr, nullptr, c.max_rows + 1), Error);
  EXPECT_THROW(layer->BackwardInput(ctx_, nullptr, nullptr, nullptr, c.max_rows + 1), Error);
  EXPECT_THROW(layer->BackwardWeight(ctx_, nullptr, nullptr, c.max_rows + 1), Error);
  // Zero rows is a call with nothing to do.
  EXPECT_NO_THROW(layer->Forward(ctx_, nullptr, nullptr, 0));
  EXPECT_NO_THROW(layer->BackwardWeight(ctx_, nullptr, nullptr, 0));
  EXPECT_EQ(cudaStreamSynchronize(ctx_.stream), cudaSuccess);
}

LayerSpec Conv1d(int out) {
  LayerSpec s = Spec("linear", out);
  s.conv1d = true;
  return s;
}

LayerSpec LayerNormSpec() {
  LayerSpec s = Spec("layernorm");
  s.eps = 1e-5;
  return s;
}

const LayerCase kLinearCases[] = {
    LayerCase{"linear_37_to_23", Spec("linear", 23), 37, 19, 32},
    // rows == max_rows, products larger than one cuBLAS tile
    LayerCase{"linear_300_to_130", Spec("linear", 130), 300, 200, 200},
    LayerCase{"linear_no_bias_one_row", Spec("linear", 10, false), 64, 1, 8},
    // GPT-2's Conv1D layout: the weight stored (in, out)
    LayerCase{"conv1d_37_to_23", Conv1d(23), 37, 19, 32},
    LayerCase{"conv1d_300_to_130", Conv1d(130), 300, 200, 200},
};

std::string CaseName(const testing::TestParamInfo<LayerCase>& info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(Linear, CudaLinearBf16Test, testing::ValuesIn(kLinearCases), CaseName);
INSTANTIATE_TEST_SUITE_P(Linear, CudaLinearTf32Test, testing::ValuesIn(kLinearCases), CaseName);

INSTANTIATE_TEST_SUITE_P(Linear, CudaLayerTest, testing::ValuesIn(kLinearCases), CaseName);

INSTANTIATE_TEST_SUITE_P(Others, CudaLayerTest,
                         testing::Values(LayerCase{"relu", Spec("relu"), 257, 33, 40},
                                         LayerCase{"gelu", Spec("gelu"), 257, 33, 40},
                                         LayerCase{"layernorm_37", LayerNormSpec(), 37, 19, 19},
                                         // more features than a block's 256 threads; rows far from zero
                                         LayerCase{"layernorm_300_offset", LayerNormSpec(), 300, 70, 100, 5.0f},
                                         LayerCase{"layernorm_3", LayerNormSpec(), 3, 5, 5}),
                         CaseName);

// Setup errors need no device: they are thrown before anything is allocated.
TEST(CudaLayerSetup, RefusesBadSpecs) {
  EXPECT_THROW(MakeCudaLayer(Spec("residual"), 4, 8), ConfigError);
  EXPECT_THROW(MakeCudaLayer(Spec("linear", 0), 4, 8), ConfigError);
  EXPECT_THROW(MakeCudaLayer(Spec("relu"), 0, 8), ConfigError);
  EXPECT_THROW(MakeCudaLayer(Spec("relu"), 4, 0), ConfigError);
}

TEST(CudaLayerSetup, ParsesPrecision) {
  EXPECT_EQ(ParseEnum<Precision>("fp32"), Precision::kFP32);
  EXPECT_EQ(ParseEnum<Precision>("bf16"), Precision::kBF16);
  EXPECT_EQ(ParseEnum<Precision>("tf32"), Precision::kTF32);
  EXPECT_FALSE(ParseEnum<Precision>("fp16"));
  EXPECT_FALSE(ParseEnum<Precision>("FP32"));
}

// ---- Transformer layers: embedding, position embedding, attention ----
//
// Through the stage's view calls, against the host layers' (which the model
// tests check against a naive double-precision reference and finite
// differences): outputs, input gradients, the gradients added into
// prefilled ones, and what attention saves for backward and leaves W.

struct TransformerCase {
  std::string name;
  LayerSpec spec;
  int in = 0;  // features in (1 token id per row for an embedding)
  int samples = 0, seq = 0;
};

void PrintTo(const TransformerCase& c, std::ostream* os) { *os << c.name; }

LayerSpec Embedding(int vocab, int out) {
  LayerSpec s = Spec("embedding", out);
  s.vocab = vocab;
  return s;
}
LayerSpec Positions(int positions) {
  LayerSpec s = Spec("position_embedding");
  s.positions = positions;
  return s;
}
LayerSpec Attention(int heads) {
  LayerSpec s = Spec("attention");
  s.heads = heads;
  return s;
}

class CudaTransformerTest : public CudaTest, public testing::WithParamInterface<TransformerCase> {};

TEST_P(CudaTransformerTest, MatchesTheHostLayer) {
  const TransformerCase& c = GetParam();
  const OpDesc op = DescribeLayer(c.spec, c.in, c.seq);
  const int rows = c.samples * c.seq;
  const bool ids = op.type == LayerType::kEmbedding;
  std::mt19937_64 rng(77);
  const std::vector<float> params = Random(op.num_params, rng), grads0 = Random(op.num_params, rng);
  const std::vector<float> dy = Random(static_cast<std::size_t>(rows) * op.out, rng);
  std::vector<float> x = Random(static_cast<std::size_t>(rows) * op.in, rng, -2.0f, 2.0f);
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(rows));
  // Token ids for the embedding only (the other layers have no vocabulary).
  if (ids) {
    for (std::size_t r = 0; r < tokens.size(); ++r) tokens[r] = static_cast<std::int32_t>((r * 7 + r / 3) % op.vocab);
  }
  const TensorDesc in_desc = ids ? TensorDesc(DType::kI32, {c.samples, c.seq}) : TensorDesc(DType::kF32, {c.samples, c.seq, op.in});
  const TensorDesc out_desc(DType::kF32, {c.samples, c.seq, op.out});
  const std::size_t saved_n = op.saved_per_row * rows, stash_n = op.stash_per_row * rows;

  // The host layer.
  std::unique_ptr<Layer> host = MakeLayer(op, rows);
  std::vector<float> hp = params, hg = grads0, hy(static_cast<std::size_t>(rows) * op.out),
                     hdx(static_cast<std::size_t>(rows) * op.in), hsaved(saved_n), hstash(stash_n);
  host->Bind(hp.data(), hg.data());
  const auto* hx = ids ? reinterpret_cast<const std::byte*>(tokens.data()) : reinterpret_cast<const std::byte*>(x.data());
  const ConstView hxv{hx, in_desc};
  const ConstView hdyv{reinterpret_cast<const std::byte*>(dy.data()), out_desc};
  host->Forward(hxv, View{reinterpret_cast<std::byte*>(hy.data()), out_desc}, hsaved.data());
  const View hdxv = ids ? View{} : View{reinterpret_cast<std::byte*>(hdx.data()), in_desc};
  host->BackwardInput(hxv, hsaved.data(), hdyv, hdxv, hstash.data());
  host->BackwardWeight(hxv, hsaved.data(), hdyv, hstash.data());

  // The CUDA layer.
  std::unique_ptr<CudaLayer> gpu = MakeCudaLayer(op, rows);
  DeviceBuffer<float> dp = Upload(params, ctx_.stream), dg = Upload(grads0, ctx_.stream), ddy = Upload(dy, ctx_.stream);
  DeviceBuffer<float> dxf = Upload(x, ctx_.stream), dy_out(hy.size()), ddx(hdx.size()), dsaved(std::max<std::size_t>(saved_n, 1)),
                      dstash(std::max<std::size_t>(stash_n, 1));
  DeviceBuffer<std::int32_t> dtok = Upload(tokens, ctx_.stream);
  gpu->Bind(dp.data(), dg.data());
  gpu->RefreshWeights(ctx_);
  const auto* gx = ids ? reinterpret_cast<const std::byte*>(dtok.data()) : reinterpret_cast<const std::byte*>(dxf.data());
  const ConstView gxv{gx, in_desc};
  const ConstView gdyv{reinterpret_cast<const std::byte*>(ddy.data()), out_desc};
  gpu->ForwardOp(ctx_, gxv, View{reinterpret_cast<std::byte*>(dy_out.data()), out_desc}, dsaved.data());
  const View gdxv = ids ? View{} : View{reinterpret_cast<std::byte*>(ddx.data()), in_desc};
  gpu->BackwardInputOp(ctx_, gxv, dsaved.data(), gdyv, gdxv, dstash.data());
  gpu->BackwardWeightOp(ctx_, gxv, dsaved.data(), gdyv, dstash.data());

  constexpr double kTolerance = 1e-4;
  ExpectClose(Download(dy_out.data(), hy.size(), ctx_.stream), hy, kTolerance, "forward y");
  if (!ids) ExpectClose(Download(ddx.data(), hdx.size(), ctx_.stream), hdx, kTolerance, "backward-input dx");
  ExpectClose(Download(dg.data(), hg.size(), ctx_.stream), hg, kTolerance, "weight gradients (added)");
  if (saved_n > 0) ExpectClose(Download(dsaved.data(), saved_n, ctx_.stream), hsaved, kTolerance, "saved state");
  if (stash_n > 0) ExpectClose(Download(dstash.data(), stash_n, ctx_.stream), hstash, kTolerance, "stash (qkv gradient)");
}

// Attention without dx (the first stage's input needs none) still leaves W
// the whole qkv gradient.
TEST_F(CudaTest, AttentionWithoutDxStillStashesForW) {
  const OpDesc op = DescribeLayer(Attention(2), 8, 5);
  const int samples = 2, rows = samples * 5;
  std::mt19937_64 rng(5);
  const std::vector<float> params = Random(op.num_params, rng), x = Random(static_cast<std::size_t>(rows) * 8, rng),
                           dy = Random(static_cast<std::size_t>(rows) * 8, rng);
  const TensorDesc desc(DType::kF32, {samples, 5, 8});
  std::unique_ptr<Layer> host = MakeLayer(op, rows);
  std::vector<float> hp = params, hg(op.num_params), hy(x.size()), hsaved(op.saved_per_row * rows),
                     hstash(op.stash_per_row * rows);
  host->Bind(hp.data(), hg.data());
  const ConstView hxv{reinterpret_cast<const std::byte*>(x.data()), desc};
  host->Forward(hxv, View{reinterpret_cast<std::byte*>(hy.data()), desc}, hsaved.data());
  host->BackwardInput(hxv, hsaved.data(), ConstView{reinterpret_cast<const std::byte*>(dy.data()), desc}, View{},
                      hstash.data());

  std::unique_ptr<CudaLayer> gpu = MakeCudaLayer(op, rows);
  DeviceBuffer<float> dp = Upload(params, ctx_.stream), dg(op.num_params), dx = Upload(x, ctx_.stream),
                      ddy = Upload(dy, ctx_.stream), y(x.size()), saved(hsaved.size()), stash(hstash.size());
  gpu->Bind(dp.data(), dg.data());
  const ConstView gxv{reinterpret_cast<const std::byte*>(dx.data()), desc};
  gpu->ForwardOp(ctx_, gxv, View{reinterpret_cast<std::byte*>(y.data()), desc}, saved.data());
  gpu->BackwardInputOp(ctx_, gxv, saved.data(), ConstView{reinterpret_cast<const std::byte*>(ddy.data()), desc}, View{},
                       stash.data());
  ExpectClose(Download(stash.data(), hstash.size(), ctx_.stream), hstash, 1e-4, "stash without dx");
}

// Packed documents (Context::starts, SequencePart::starts): a call of 9
// tokens in samples of 12 positions, each sample cut into documents (one
// token long, the whole length, several, and the positions past the
// sample's last document as one): attention and the position embedding as
// the host layers compute them (each document attends within itself, its
// positions restarting at its first token), outputs, input and weight
// gradients, saved state and stash.
TEST_F(CudaTest, PackedDocumentsAsTheHostLayers) {
  constexpr int kSamples = 3, kSeq = 12, kTokens = 9, kIn = 12;
  std::vector<std::int32_t> starts(static_cast<std::size_t>(kSamples) * kSeq);
  // Each sample's documents' firsts, then its padding's: sample 1's
  // padding starts inside the call's 9 tokens.
  const std::vector<std::vector<int>> documents = {{0, 4, 9}, {0, 6}, {0, 1, 2, 8, 9}};
  for (int n = 0; n < kSamples; ++n) {
    const std::vector<int>& d = documents[static_cast<std::size_t>(n)];
    for (int t = 0; t < kSeq; ++t) {
      int first = 0;
      for (const int f : d) first = t >= f ? f : first;
      starts[static_cast<std::size_t>(n) * kSeq + static_cast<std::size_t>(t)] = first;
    }
  }
  DeviceBuffer<std::int32_t> dstarts = Upload(starts, ctx_.stream);
  for (const LayerSpec& spec : {Attention(3), Positions(16)}) {
    SCOPED_TRACE(spec.type);
    const OpDesc op = DescribeLayer(spec, kIn, kSeq);
    const int rows = kSamples * kTokens;
    std::mt19937_64 rng(31);
    const std::vector<float> params = Random(op.num_params, rng), grads0 = Random(op.num_params, rng);
    const std::vector<float> x = Random(static_cast<std::size_t>(rows) * op.in, rng, -2.0f, 2.0f),
                             dy = Random(static_cast<std::size_t>(rows) * op.out, rng);
    const TensorDesc in_desc(DType::kF32, {kSamples, kTokens, op.in}), out_desc(DType::kF32, {kSamples, kTokens, op.out});
    const std::size_t saved_n = op.saved_per_row * rows, stash_n = op.stash_per_row * rows;

    std::unique_ptr<Layer> host = MakeLayer(op, kSamples * kSeq);
    std::vector<float> hp = params, hg = grads0, hy(static_cast<std::size_t>(rows) * op.out), hdx(x.size()),
                       hsaved(saved_n), hstash(stash_n);
    host->Bind(hp.data(), hg.data());
    SequencePart part;
    part.starts = starts.data();
    part.length = kTokens;
    const ConstView hxv{reinterpret_cast<const std::byte*>(x.data()), in_desc};
    const ConstView hdyv{reinterpret_cast<const std::byte*>(dy.data()), out_desc};
    host->Forward(hxv, View{reinterpret_cast<std::byte*>(hy.data()), out_desc}, hsaved.data(), part);
    host->BackwardInput(hxv, hsaved.data(), hdyv, View{reinterpret_cast<std::byte*>(hdx.data()), in_desc},
                        hstash.data(), part);
    host->BackwardWeight(hxv, hsaved.data(), hdyv, hstash.data(), part);

    std::unique_ptr<CudaLayer> gpu = MakeCudaLayer(op, kSamples * kSeq);
    DeviceBuffer<float> dp = Upload(params, ctx_.stream), dg = Upload(grads0, ctx_.stream),
                        dxf = Upload(x, ctx_.stream), ddy = Upload(dy, ctx_.stream), dy_out(hy.size()), ddx(hdx.size()),
                        dsaved(std::max<std::size_t>(saved_n, 1)), dstash(std::max<std::size_t>(stash_n, 1));
    gpu->Bind(dp.data(), dg.data());
    gpu->RefreshWeights(ctx_);
    Context packed = ctx_;
    packed.starts = dstarts.data();
    const ConstView gxv{reinterpret_cast<const std::byte*>(dxf.data()), in_desc};
    const ConstView gdyv{reinterpret_cast<const std::byte*>(ddy.data()), out_desc};
    gpu->ForwardOp(packed, gxv, View{reinterpret_cast<std::byte*>(dy_out.data()), out_desc}, dsaved.data());
    gpu->BackwardInputOp(packed, gxv, dsaved.data(), gdyv, View{reinterpret_cast<std::byte*>(ddx.data()), in_desc},
                         dstash.data());
    gpu->BackwardWeightOp(packed, gxv, dsaved.data(), gdyv, dstash.data());

    constexpr double kTolerance = 1e-4;
    ExpectClose(Download(dy_out.data(), hy.size(), ctx_.stream), hy, kTolerance, "forward y");
    ExpectClose(Download(ddx.data(), hdx.size(), ctx_.stream), hdx, kTolerance, "backward-input dx");
    ExpectClose(Download(dg.data(), hg.size(), ctx_.stream), hg, kTolerance, "weight gradients (added)");
    if (saved_n > 0) ExpectClose(Download(dsaved.data(), saved_n, ctx_.stream), hsaved, kTolerance, "saved state");
    if (stash_n > 0) ExpectClose(Download(dstash.data(), stash_n, ctx_.stream), hstash, kTolerance, "stash");
  }
}

const TransformerCase kTransformerCases[] = {
    TransformerCase{"embedding_11_by_5", Embedding(11, 5), 1, 3, 7},  // tokens repeat: their gradients add up
    TransformerCase{"positions_12_of_16", Positions(16), 12, 3, 12},
    TransformerCase{"attention_3_heads_seq_7", Attention(3), 12, 3, 7},
    // rows longer than a warp and than one block's threads in the row kernels
    TransformerCase{"attention_4_heads_seq_300", Attention(4), 64, 2, 300},
};

std::string TransformerName(const testing::TestParamInfo<TransformerCase>& info) { return info.param.name; }
INSTANTIATE_TEST_SUITE_P(Transformer, CudaTransformerTest, testing::ValuesIn(kTransformerCases), TransformerName);

// ---- The products' rate (baton bench's hardware reference) ----

using CudaGemmRateTest = CudaTest;

// Every precision's products run and give a finite, positive rate at a
// model's shapes (two layers, rows not a multiple of a tile); no shapes, 0.
TEST_F(CudaGemmRateTest, EveryPrecisionRuns) {
  const std::vector<std::pair<int, int>> shapes = {{300, 130}, {130, 64}};
  for (Precision p : {Precision::kFP32, Precision::kTF32, Precision::kBF16}) {
    const double gflops = LinearGflops(ctx_.stream, p, shapes, 200);
    EXPECT_TRUE(std::isfinite(gflops)) << EnumName(p);
    EXPECT_GT(gflops, 0.0) << EnumName(p);
  }
  EXPECT_EQ(LinearGflops(ctx_.stream, Precision::kFP32, {}, 200), 0.0);
  EXPECT_EQ(cudaStreamSynchronize(ctx_.stream), cudaSuccess);
}

// ---- Residual additions ----

using CudaAddTest = CudaTest;

TEST_F(CudaAddTest, AddAndAddIntoMatchTheHost) {
  std::mt19937_64 rng(7);
  const std::size_t n = 1000 * 257 + 3;  // several blocks and a ragged end
  const std::vector<float> a = Random(n, rng), b = Random(n, rng);
  std::vector<float> sum(n), into(b);
  for (std::size_t i = 0; i < n; ++i) sum[i] = a[i] + b[i];
  for (std::size_t i = 0; i < n; ++i) into[i] += a[i];

  DeviceBuffer<float> da = Upload(a, ctx_.stream), db = Upload(b, ctx_.stream), dout(n);
  Add(ctx_, da.data(), db.data(), dout.data(), n);
  EXPECT_EQ(Download(dout.data(), n, ctx_.stream), sum);
  AddInto(ctx_, da.data(), db.data(), n);
  EXPECT_EQ(Download(db.data(), n, ctx_.stream), into);
}

// ---- Cross-entropy ----

struct LossCase {
  std::string name;
  int rows = 0;
  int classes = 0;
};

void PrintTo(const LossCase& c, std::ostream* os) { *os << c.name; }

class CudaCrossEntropyTest : public CudaTest, public testing::WithParamInterface<LossCase> {};

// Random logits and labels, with rows that pin down the argmax rule: all
// logits equal (the first class wins), and a two-way tie for the maximum
// with the label on the first or on the second of the tied classes (a hit
// only for the first). A quarter of the other rows are labelled with their
// argmax so that hits are counted in bulk; the last is ignored (kIgnoreLabel).
TEST_P(CudaCrossEntropyTest, MatchesCpu) {
  const LossCase& c = GetParam();
  ASSERT_GE(c.rows, 6);
  ASSERT_GE(c.classes, 3);
  std::mt19937_64 rng(99);
  std::vector<float> logits = Random(static_cast<std::size_t>(c.rows) * c.classes, rng, -3.0f, 3.0f);
  std::uniform_int_distribution<std::int32_t> label_of(0, c.classes - 1);
  std::vector<std::int32_t> labels(c.rows);
  for (std::int32_t& l : labels) l = label_of(rng);
  auto row = [&](int i) { return logits.begin() + static_cast<std::ptrdiff_t>(i) * c.classes; };
  std::fill(row(0), row(1), 0.5f);
  labels[0] = 0;
  const int first = c.classes / 3, second = c.classes - 1;
  for (int i : {1, 2}) {
    row(i)[first] = 4.0f;
    row(i)[second] = 4.0f;
  }
  labels[1] = second;
  labels[2] = first;
  for (int i = 3; i < c.rows; i += 4) {
    labels[i] = static_cast<std::int32_t>(std::max_element(row(i), row(i + 1)) - row(i));
  }
  // Packed samples' unfilled positions: no loss, no hit, a zero gradient
  // row (one between rows a block takes after it, one the last).
  labels[4] = kIgnoreLabel;
  labels[static_cast<std::size_t>(c.rows) - 1] = kIgnoreLabel;

  const float grad_scale = 1.0f / 64.0f;
  std::vector<float> want_dlogits(logits.size());
  std::int64_t want_correct = 0;
  const double want_loss = baton::CrossEntropy(ConstMatMap(logits.data(), c.rows, c.classes), labels, grad_scale,
                                               want_dlogits.data(), &want_correct);
  ASSERT_GE(want_correct, 2);  // rows 0 and 2 at least

  // The outputs ADD into what the scalars hold.
  const double loss_start = 1.25;
  const unsigned long long correct_start = 3;
  DeviceBuffer<float> d_logits = Upload(logits, ctx_.stream), d_dlogits(logits.size());
  // NaN everywhere first: every row, an ignored one's zeros too, must be written.
  BATON_CUDA_CHECK(cudaMemsetAsync(d_dlogits.data(), 0xff, d_dlogits.bytes(), ctx_.stream));
  DeviceBuffer<std::int32_t> d_labels = Upload(labels, ctx_.stream);
  DeviceBuffer<double> d_loss = Upload(std::vector<double>{loss_start}, ctx_.stream);
  DeviceBuffer<unsigned long long> d_correct = Upload(std::vector<unsigned long long>{correct_start}, ctx_.stream);
  CrossEntropy(ctx_, d_logits.data(), d_labels.data(), c.rows, c.classes, grad_scale, d_dlogits.data(), d_loss.data(),
               d_correct.data());
  const double got_loss = Download(d_loss.data(), 1, ctx_.stream)[0] - loss_start;
  EXPECT_LE(std::abs(got_loss - want_loss), 1e-5 * std::abs(want_loss)) << got_loss << " vs " << want_loss;
  EXPECT_EQ(Download(d_correct.data(), 1, ctx_.stream)[0] - correct_start,
            static_cast<unsigned long long>(want_correct));
  ExpectClose(Download(d_dlogits.data(), logits.size(), ctx_.stream), want_dlogits, 1e-5, "dlogits");

  // Evaluation: no gradient, the same loss and count added once more.
  CrossEntropy(ctx_, d_logits.data(), d_labels.data(), c.rows, c.classes, grad_scale, nullptr, d_loss.data(),
               d_correct.data());
  const double eval_loss = Download(d_loss.data(), 1, ctx_.stream)[0] - loss_start - got_loss;
  EXPECT_LE(std::abs(eval_loss - want_loss), 1e-5 * std::abs(want_loss)) << eval_loss << " vs " << want_loss;
  EXPECT_EQ(Download(d_correct.data(), 1, ctx_.stream)[0] - correct_start,
            2 * static_cast<unsigned long long>(want_correct));
}

INSTANTIATE_TEST_SUITE_P(Loss, CudaCrossEntropyTest,
                         testing::Values(LossCase{"rows_37_classes_10", 37, 10},
                                         // classes past one block's threads
                                         LossCase{"rows_9_classes_1000", 9, 1000},
                                         // more rows than blocks: each block takes several
                                         LossCase{"rows_3000_classes_10", 3000, 10}),
                         [](const testing::TestParamInfo<LossCase>& info) { return info.param.name; });

}  // namespace
}  // namespace baton::cuda
