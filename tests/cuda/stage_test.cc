// A whole stage on a CUDA device against the same stage on the host: the
// tiny model (linear, gelu, a residual block with layernorm, relu) as one
// last stage and as two stages, every checkpointing policy, full (B) and
// split (I then W) backward, FP32. Outputs, the loss, the input gradient and
// the weight gradients agree within 1e-5 relative to the largest value.
// Skips, saying so, where there is no CUDA device.
#include "stage.h"

#include <gtest/gtest.h>

#include <ostream>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <cstring>
#include <limits>

#include "baton/config.h"
#include "baton/error.h"
#include "baton/host.h"
#include "cuda_layers.h"
#include "cuda_stage_device.h"
#include "baton/plan.h"
#include "cuda_util.h"

namespace baton {
namespace {

using cuda::DeviceBuffer;

struct Case {
  int first = 0, last = 9;
  Checkpointing policy = Checkpointing::kNone;
  bool split = false;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << "layers " << c.first << ".." << c.last - 1 << ", checkpointing " << EnumName(c.policy)
      << (c.split ? ", split backward" : "");
}

// The run settings that put layers [first, last) of tiny.yaml on one rank's
// only stage, and that rank: 4 rows per microbatch; ZB-H1 splits backward.
std::pair<std::vector<std::string>, int> Settings(const Case& k) {
  std::vector<std::string> sets = {std::string("pipeline.checkpointing=") + std::string(EnumName(k.policy)),
                                   k.policy == Checkpointing::kSelective ? "pipeline.keep=[linear]" : "pipeline.keep=[]",
                                   k.split ? "pipeline.schedule=zb_h1" : "pipeline.schedule=1f1b"};
  std::vector<int> counts;
  int rank = 0;
  if (k.first > 0) {
    counts.push_back(k.first);
    rank = 1;
  }
  counts.push_back(k.last - k.first);
  if (k.last < 9) counts.push_back(9 - k.last);
  std::string list;
  for (int c : counts) list += (list.empty() ? "" : ", ") + std::to_string(c);
  sets.push_back("pipeline.ranks=" + std::to_string(counts.size()));
  if (counts.size() > 1) sets.push_back("pipeline.partition=[" + list + "]");
  return {sets, rank};
}

std::vector<float> Download(const float* device, std::size_t n) {
  std::vector<float> out(n);
  BATON_CUDA_CHECK(cudaDeviceSynchronize());  // test only: read results after all streams
  BATON_CUDA_CHECK(cudaMemcpy(out.data(), device, n * sizeof(float), cudaMemcpyDeviceToHost));
  return out;
}

DeviceBuffer<float> Upload(const std::vector<float>& host) {
  DeviceBuffer<float> d(host.size());
  BATON_CUDA_CHECK(cudaMemcpy(d.data(), host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice));
  return d;
}

void ExpectClose(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 1e-6, diff = 0;
  for (std::size_t k = 0; k < want.size(); ++k) {
    scale = std::max(scale, double(std::abs(want[k])));
    diff = std::max(diff, double(std::abs(got[k] - want[k])));
  }
  EXPECT_LE(diff, 1e-5 * scale) << what << ": max |cuda - host| " << diff << " against max |host| " << scale;
}

template <typename T>
const std::byte* Bytes(const T* p) {
  return reinterpret_cast<const std::byte*>(p);
}
template <typename T>
std::byte* Bytes(T* p) {
  return reinterpret_cast<std::byte*>(p);
}

// The stage's layers allocated what the memory plan counts as their
// scratch on `device` (ScratchBytes), as the device reports it.
void ExpectPlannedScratch(const RunPlan& run, const StagePlan& sp, const Stage& stage, Device device) {
  std::size_t planned = 0;
  for (int i = 0; i < sp.ops(); ++i) {
    if (sp.layer[i] < 0) continue;
    planned += ScratchBytes(run.model.ops[static_cast<std::size_t>(sp.first_op + i)], sp.rows * sp.tokens_per_sample,
                            device);
  }
  EXPECT_EQ(const_cast<Stage&>(stage).device().ScratchBytes(), planned) << EnumName(device);
}

void Compare(const Case& k) {
  const auto [sets, rank] = Settings(k);
  const RunPlan run = PlanRun(LoadTrainConfig(BATON_SOURCE_DIR "/tests/mpi/tiny.yaml", sets));
  const RankPlan plan = PlanRank(run, rank);
  const StagePlan& sp = plan.local_stages.at(0);
  ASSERT_EQ(sp.first_layer, k.first);
  ASSERT_EQ(sp.last_layer, k.last);
  ASSERT_EQ(sp.split_backward, k.split);
  cuda::Stream stream;
  Stage host(run.model, sp, MakeHostStageDevice());
  Stage gpu(run.model, sp, cuda::MakeCudaStageDevice(stream.get(), Precision::kFP32));
  host.Init(11);
  gpu.Init(11);
  gpu.device().PushParams();
  ExpectPlannedScratch(run, sp, host, Device::kCpu);
  ExpectPlannedScratch(run, sp, gpu, Device::kCuda);

  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(sp.input().elements()), dy(sp.output().elements());
  for (float& v : x) v = normal(rng);
  for (float& v : dy) v = normal(rng);
  const std::vector<std::int32_t> labels = {0, 3, 1, 2};
  const TensorDesc label_desc{DType::kI32, {4}};

  // Host.
  std::vector<std::byte> slot(sp.slot_bytes);
  std::vector<float> y(dy.size()), dx(x.size());
  std::memcpy(slot.data() + sp.kept_offset[0], x.data(), x.size() * sizeof(float));
  std::size_t written = 0;
  if (sp.is_last) {
    host.ForwardLoss({Bytes(x.data()), sp.input()}, slot.data(), {Bytes(labels.data()), label_desc}, 0.25f, &written);
  } else {
    host.Forward({Bytes(x.data()), sp.input()}, slot.data(), {Bytes(y.data()), sp.output()}, &written);
  }
  host.Backward(slot.data(), {Bytes(dy.data()), sp.output()},
                {k.first > 0 ? Bytes(dx.data()) : nullptr, sp.input()}, !k.split);
  if (k.split) host.BackwardWeight(slot.data(), sp.rows);
  const LossTotals host_loss = host.TakeLossTotals();

  // Device.
  DeviceBuffer<std::byte> dslot(sp.slot_bytes);
  DeviceBuffer<float> dout(y.size()), ddx(dx.size());
  BATON_CUDA_CHECK(cudaMemcpy(dslot.data() + sp.kept_offset[0], x.data(), x.size() * sizeof(float),
                              cudaMemcpyHostToDevice));
  DeviceBuffer<float> ddx_in = Upload(x);
  DeviceBuffer<float> ddy = Upload(dy);
  DeviceBuffer<std::int32_t> dlabels(labels.size());
  BATON_CUDA_CHECK(
      cudaMemcpy(dlabels.data(), labels.data(), labels.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice));
  std::size_t gwritten = 0;
  if (sp.is_last) {
    gpu.ForwardLoss({Bytes(ddx_in.data()), sp.input()}, dslot.data(), {Bytes(dlabels.data()), label_desc}, 0.25f,
                    &gwritten);
  } else {
    gpu.Forward({Bytes(ddx_in.data()), sp.input()}, dslot.data(), {Bytes(dout.data()), sp.output()}, &gwritten);
  }
  gpu.Backward(dslot.data(), {Bytes(ddy.data()), sp.output()},
               {k.first > 0 ? Bytes(ddx.data()) : nullptr, sp.input()}, !k.split);
  if (k.split) gpu.BackwardWeight(dslot.data(), sp.rows);
  const LossTotals gpu_loss = gpu.TakeLossTotals();

  EXPECT_EQ(gwritten, written);
  if (sp.is_last) {
    EXPECT_NEAR(gpu_loss.loss_sum, host_loss.loss_sum, 1e-5 * std::abs(host_loss.loss_sum));
    EXPECT_EQ(gpu_loss.correct, host_loss.correct);
  } else {
    ExpectClose(Download(dout.data(), y.size()), y, "stage output");
  }
  if (k.first > 0) ExpectClose(Download(ddx.data(), dx.size()), dx, "input gradient");
  ExpectClose(Download(gpu.device().grads(), host.grads().size()),
              std::vector<float>(host.grads().begin(), host.grads().end()), "weight gradients");
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  static const char* const kPolicy[] = {"none", "full", "selective"};
  return "layers_" + std::to_string(info.param.first) + "_" + std::to_string(info.param.last) + "_" +
         kPolicy[static_cast<int>(info.param.policy)] + (info.param.split ? "_split" : "_full_backward");
}

class CudaStage : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device: the CUDA stage runs only on a GPU machine";
  }
};

TEST_P(CudaStage, MatchesTheHostStage) { Compare(GetParam()); }

// The GPT's layers on the GPU (attention keeps every head's scores at
// once) allocate what the memory plan counts for device: cuda.
TEST(CudaStageScratch, GptLayersAllocateWhatThePlanCounts) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device: the CUDA stage runs only on a GPU machine";
  const RunPlan run = PlanRun(LoadTrainConfig(BATON_SOURCE_DIR "/tests/mpi/tiny_gpt.yaml",
                                              {"data.dataset=synthetic_tokens", "device=cuda"}));
  const RankPlan plan = PlanRank(run, 0);
  cuda::Stream stream;
  for (const StagePlan& sp : plan.local_stages) {
    Stage gpu(run.model, sp, cuda::MakeCudaStageDevice(stream.get(), Precision::kFP32));
    ExpectPlannedScratch(run, sp, gpu, Device::kCuda);
  }
  EXPECT_GT(PlanMemory(run)[0].layer_scratch, 0u);
}

// The step's check of its gradients on the GPU (GradientsFinite, a bits-max
// kernel): a NaN or an infinity in the range makes it false; the largest
// finite floats do not, nor a NaN outside the range.
TEST(CudaGradients, TheFiniteCheckFindsANanOrAnInfinityInItsRangeOnly) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device: the CUDA stage runs only on a GPU machine";
  const RunPlan run = PlanRun(LoadTrainConfig(BATON_SOURCE_DIR "/tests/mpi/tiny.yaml", {"device=cuda"}));
  const RankPlan plan = PlanRank(run, 0);
  const StagePlan& sp = plan.local_stages.front();
  cuda::Stream stream;
  Stage gpu(run.model, sp, cuda::MakeCudaStageDevice(stream.get(), Precision::kFP32));
  StageDevice& dev = gpu.device();
  const std::size_t n = sp.num_params;
  ASSERT_GT(n, 100u);
  std::vector<float> grads(n, 0.5f);
  grads[7] = -3.4e38f;  // finite, the largest magnitude there is
  auto upload = [&] {
    BATON_CUDA_CHECK(cudaMemcpy(dev.grads(), grads.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  };
  upload();
  EXPECT_TRUE(dev.GradientsFinite(0, n));
  grads[n - 1] = std::nanf("");
  upload();
  EXPECT_FALSE(dev.GradientsFinite(0, n));
  EXPECT_TRUE(dev.GradientsFinite(0, n - 1));  // the NaN outside the range
  grads[n - 1] = 0.0f;
  grads[n / 2] = -std::numeric_limits<float>::infinity();
  upload();
  EXPECT_FALSE(dev.GradientsFinite(0, n));
  EXPECT_TRUE(dev.GradientsFinite(n / 2 + 1, n - n / 2 - 1));
}

// The clip's pass on the GPU (cuda::SquareSums, cuda::Scale): each
// range's squares summed in double, within 1e-12 of a long double sum on
// the host, over ranges of one float to past the kernel's block cap; the
// same floats at another offset, and the same call again, sum to the same
// bits; the scaling is each float's product, bit for bit.
TEST(CudaGradients, TheClipsSquaresAndScalingOverRangesOfEveryLength) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device: the CUDA stage runs only on a GPU machine";
  const std::size_t n = 3'000'000, gap = 777;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-20, 20);
  std::vector<float> host(2 * n + gap);
  for (std::size_t i = 0; i < n; ++i) host[i] = host[n + gap + i] = std::ldexp(normal(rng), exponent(rng));
  DeviceBuffer<float> x = Upload(host);
  const std::vector<std::size_t> pairs = {0, n, n + gap, n, 5, 1, 10, 0, 0, 3000, 100, 600'000, 1, 2048, 1, 2049};
  const std::size_t count = pairs.size() / 2;
  DeviceBuffer<std::size_t> ranges(pairs.size());
  BATON_CUDA_CHECK(cudaMemcpy(ranges.data(), pairs.data(), pairs.size() * sizeof(std::size_t), cudaMemcpyHostToDevice));
  BATON_CUDA_CHECK(cudaDeviceSynchronize());  // both landed before the stream's kernels read them
  DeviceBuffer<double> partials(count * cuda::kSquareBlocks), sums(count);
  cuda::Stream stream;
  cuda::Context ctx;
  ctx.stream = stream.get();
  auto run = [&] {
    cuda::SquareSums(ctx, x.data(), ranges.data(), static_cast<int>(count), n, partials.data(), sums.data());
    std::vector<double> out(count);
    BATON_CUDA_CHECK(cudaStreamSynchronize(ctx.stream));
    BATON_CUDA_CHECK(cudaMemcpy(out.data(), sums.data(), count * sizeof(double), cudaMemcpyDeviceToHost));
    return out;
  };
  const std::vector<double> got = run();
  for (std::size_t r = 0; r < count; ++r) {
    long double want = 0;
    for (std::size_t i = pairs[2 * r]; i < pairs[2 * r] + pairs[2 * r + 1]; ++i) {
      want += static_cast<long double>(host[i]) * host[i];
    }
    EXPECT_NEAR(got[r], static_cast<double>(want), 1e-12 * static_cast<double>(want)) << "range " << r;
  }
  EXPECT_EQ(got[3], 0.0);
  EXPECT_EQ(std::memcmp(&got[0], &got[1], sizeof(double)), 0) << "the same floats at another offset";
  const std::vector<double> again = run();
  EXPECT_EQ(std::memcmp(got.data(), again.data(), count * sizeof(double)), 0) << "the same call again";

  const float factor = 0.37f;
  cuda::Scale(ctx, x.data() + gap, n, factor);
  const std::vector<float> scaled = Download(x.data(), host.size());
  for (std::size_t i = 0; i < host.size(); ++i) {
    const float want = i >= gap && i < gap + n ? host[i] * factor : host[i];
    ASSERT_EQ(std::memcmp(&scaled[i], &want, sizeof(float)), 0) << "float " << i;
  }
}

// The same pass through the stage's device (StageDevice::GradientSquares
// and ScaleGradients, as the executor calls them op by op): the host
// device's sums within 1e-12 and its scaled gradients bit for bit; a range
// past the stage's gradients refused.
TEST(CudaGradients, TheStagesClipPassIsTheHostStages) {
  if (cuda::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device: the CUDA stage runs only on a GPU machine";
  const RunPlan run = PlanRun(LoadTrainConfig(BATON_SOURCE_DIR "/tests/mpi/tiny.yaml", {"device=cuda"}));
  const RankPlan plan = PlanRank(run, 0);
  const StagePlan& sp = plan.local_stages.front();
  cuda::Stream stream;
  Stage gpu(run.model, sp, cuda::MakeCudaStageDevice(stream.get(), Precision::kFP32));
  Stage cpu(run.model, sp, MakeHostStageDevice());
  gpu.Init(1);
  cpu.Init(1);
  const std::size_t n = sp.num_params;
  std::vector<float> grads(n);
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 0.1f);
  for (float& g : grads) g = normal(rng);
  std::copy(grads.begin(), grads.end(), cpu.device().grads());
  BATON_CUDA_CHECK(cudaMemcpy(gpu.device().grads(), grads.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  BATON_CUDA_CHECK(cudaDeviceSynchronize());  // landed before the stage's stream reads it
  std::vector<ParamRange> ranges;
  std::vector<int> ops;
  OpRanges(run.model, sp, {0, n}, ranges, ops);
  ASSERT_GT(ranges.size(), 1u);
  std::vector<double> on_gpu(ranges.size()), on_cpu(ranges.size());
  gpu.device().GradientSquares(ranges, on_gpu);
  cpu.device().GradientSquares(ranges, on_cpu);
  for (std::size_t i = 0; i < ranges.size(); ++i) EXPECT_NEAR(on_gpu[i], on_cpu[i], 1e-12 * on_cpu[i]) << "op " << ops[i];
  gpu.device().ScaleGradients(1, n - 1, 0.25f);
  cpu.device().ScaleGradients(1, n - 1, 0.25f);
  const std::vector<float> scaled = Download(gpu.device().grads(), n);
  EXPECT_EQ(std::memcmp(scaled.data(), cpu.device().grads(), n * sizeof(float)), 0);
  EXPECT_EQ(scaled[0], grads[0]);
  const std::vector<ParamRange> past = {{n - 1, 2}};
  EXPECT_THROW(gpu.device().GradientSquares(past, on_gpu), Error);
  EXPECT_THROW(gpu.device().ScaleGradients(n, 1, 2.0f), Error);
}

INSTANTIATE_TEST_SUITE_P(
    PoliciesAndSplits, CudaStage,
    ::testing::Values(Case{0, 9, Checkpointing::kNone, false}, Case{0, 9, Checkpointing::kFull, false},
                      Case{0, 9, Checkpointing::kSelective, true}, Case{3, 9, Checkpointing::kNone, true},
                      Case{0, 3, Checkpointing::kFull, false}, Case{1, 5, Checkpointing::kSelective, false}),
    CaseName);

}  // namespace
}  // namespace baton
