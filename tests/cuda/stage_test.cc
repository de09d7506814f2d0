// A whole stage on a CUDA device against the same stage on the host: the
// tiny model (linear, gelu, a residual block with layernorm, relu) as one
// last stage and as two stages, every checkpointing policy, full (B) and
// split (I then W) backward, FP32. Outputs, the loss, the input gradient and
// the weight gradients agree within 1e-5 relative to the largest value.
// Skips, saying so, where there is no CUDA device.
#include "stage.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "baton/config.h"
#include "cuda_stage_device.h"
#include "cuda_util.h"

namespace baton {
namespace {

using cuda::DeviceBuffer;

struct Case {
  int first = 0, last = 9;
  Checkpointing policy = Checkpointing::kNone;
  bool split = false;
};

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

void Compare(const Case& k) {
  const TrainConfig c = LoadTrainConfig(BATON_SOURCE_DIR "/tests/mpi/tiny.yaml");
  StageOptions o;
  o.first_layer = k.first;
  o.last_layer = k.last;
  o.rows = 4;
  o.checkpointing = k.policy;
  o.keep = {"linear"};
  o.is_last = k.last == 9;
  o.split_backward = k.split;
  cuda::Stream stream;
  Stage host(c.model.layers, c.model.input, o);
  Stage gpu(c.model.layers, c.model.input, o, cuda::MakeCudaStageDevice(stream.get(), cuda::Precision::kFP32));
  host.Init(11);
  gpu.Init(11);
  gpu.device().PushParams();

  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(std::size_t(o.rows) * host.in_features()), dy(std::size_t(o.rows) * host.out_features());
  for (float& v : x) v = normal(rng);
  for (float& v : dy) v = normal(rng);
  const std::vector<std::int32_t> labels = {0, 3, 1, 2};

  // Host.
  std::vector<float> slot(host.slot_floats()), y(dy.size()), dx(x.size());
  std::copy(x.begin(), x.end(), slot.begin());
  std::size_t written = 0;
  if (o.is_last) {
    host.ForwardLoss(slot.data(), labels.data(), 0.25f, &written);
  } else {
    host.Forward(slot.data(), y.data(), &written);
  }
  host.Backward(slot.data(), dy.data(), k.first > 0 ? dx.data() : nullptr, !k.split);
  if (k.split) host.BackwardWeight(slot.data());
  const LossTotals host_loss = host.TakeLossTotals();

  // Device.
  DeviceBuffer<float> dslot(gpu.slot_floats()), dout(y.size()), ddx(dx.size());
  BATON_CUDA_CHECK(cudaMemcpy(dslot.data(), x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice));
  DeviceBuffer<float> ddy = Upload(dy);
  DeviceBuffer<std::int32_t> dlabels(labels.size());
  BATON_CUDA_CHECK(
      cudaMemcpy(dlabels.data(), labels.data(), labels.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice));
  std::size_t gwritten = 0;
  if (o.is_last) {
    gpu.ForwardLoss(dslot.data(), dlabels.data(), 0.25f, &gwritten);
  } else {
    gpu.Forward(dslot.data(), dout.data(), &gwritten);
  }
  gpu.Backward(dslot.data(), ddy.data(), k.first > 0 ? ddx.data() : nullptr, !k.split);
  if (k.split) gpu.BackwardWeight(dslot.data());
  const LossTotals gpu_loss = gpu.TakeLossTotals();

  EXPECT_EQ(gwritten, written);
  if (o.is_last) {
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

INSTANTIATE_TEST_SUITE_P(
    PoliciesAndSplits, CudaStage,
    ::testing::Values(Case{0, 9, Checkpointing::kNone, false}, Case{0, 9, Checkpointing::kFull, false},
                      Case{0, 9, Checkpointing::kSelective, true}, Case{3, 9, Checkpointing::kNone, true},
                      Case{0, 3, Checkpointing::kFull, false}, Case{1, 5, Checkpointing::kSelective, false}),
    CaseName);

}  // namespace
}  // namespace baton
