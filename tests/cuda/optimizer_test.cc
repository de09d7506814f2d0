// The CUDA optimizers against the CPU ones (baton/model.h): several steps of
// SGD (plain, with weight decay, with momentum and weight decay) and AdamW
// (both of torch.lerp's forms) from the same parameters and gradients, the
// parameters and every state buffer compared after each step; the state's
// names, the step count and its restoration; the spec checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <ostream>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "baton/error.h"
#include "baton/host.h"
#include "baton/model.h"
#include "cuda_layers.h"

namespace baton::cuda {
namespace {

std::vector<float> Random(std::size_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& f : v) f = uniform(rng);
  return v;
}

void UploadTo(float* device, const std::vector<float>& host, cudaStream_t stream) {
  ASSERT_EQ(cudaMemcpyAsync(device, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice, stream),
            cudaSuccess);
}

std::vector<float> Download(const float* device, std::size_t n, cudaStream_t stream) {
  std::vector<float> host(n);
  EXPECT_EQ(cudaMemcpyAsync(host.data(), device, n * sizeof(float), cudaMemcpyDeviceToHost, stream), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  return host;
}

// max |got - want| relative to max |want|.
double RelativeDifference(const std::vector<float>& got, std::span<const float> want) {
  EXPECT_EQ(got.size(), want.size());
  double diff = 0.0, scale = 0.0;
  for (std::size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(got[i]) - static_cast<double>(want[i])));
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  }
  return diff / std::max(scale, 1e-30);
}

struct OptimizerCase {
  std::string name;
  OptimizerSpec spec;
  std::size_t num_params = 0;
};

// Test names print the case's name, not its bytes.
void PrintTo(const OptimizerCase& c, std::ostream* os) { *os << c.name; }

OptimizerSpec Sgd(double lr, double momentum, double weight_decay) {
  OptimizerSpec s;
  s.type = OptimizerType::kSgd;
  s.lr = lr;
  s.momentum = momentum;
  s.weight_decay = weight_decay;
  return s;
}

OptimizerSpec AdamW(double lr, double beta1, double weight_decay) {
  OptimizerSpec s;
  s.type = OptimizerType::kAdamW;
  s.lr = lr;
  s.beta1 = beta1;
  s.weight_decay = weight_decay;
  return s;
}

class CudaOptimizerTest : public testing::TestWithParam<OptimizerCase> {
 protected:
  void SetUp() override {
    if (DeviceCount() == 0) GTEST_SKIP() << "no CUDA device: the CUDA optimizers cannot run here";
    stream_.emplace();
    ctx_.stream = stream_->get();
  }

  std::optional<Stream> stream_;
  Context ctx_;
};

// The kernels round every operation as the CPU does; the CPU build may still
// fuse a multiply and an add (-march=native), so equality is to a few ulps.
TEST_P(CudaOptimizerTest, StepsMatchCpu) {
  const OptimizerCase& c = GetParam();
  const std::size_t n = c.num_params;
  std::unique_ptr<Optimizer> cpu = MakeOptimizer(c.spec, n);
  std::unique_ptr<CudaOptimizer> gpu = MakeCudaOptimizer(c.spec, n);
  EXPECT_EQ(gpu->StateNames(), cpu->StateNames());
  ASSERT_EQ(gpu->State().size(), cpu->State().size());

  // Before any step the state is zero, as on the CPU.
  for (std::span<float> s : gpu->State()) {
    ASSERT_EQ(s.size(), n);
    const std::vector<float> host = Download(s.data(), s.size(), ctx_.stream);
    EXPECT_TRUE(std::all_of(host.begin(), host.end(), [](float v) { return v == 0.0f; }));
  }

  std::mt19937_64 rng(42);
  std::vector<float> cpu_params = Random(n, rng);
  DeviceBuffer<float> params(n), grads(n);
  UploadTo(params.data(), cpu_params, ctx_.stream);

  constexpr int kSteps = 5;
  constexpr double kTolerance = 1e-6;
  for (int step = 1; step <= kSteps; ++step) {
    const std::vector<float> g = Random(n, rng);
    cpu->Step(cpu_params, g);
    UploadTo(grads.data(), g, ctx_.stream);
    gpu->Step(ctx_, params.data(), grads.data());
    EXPECT_EQ(gpu->steps(), cpu->steps());

    EXPECT_LE(RelativeDifference(Download(params.data(), n, ctx_.stream), cpu_params), kTolerance)
        << "parameters after step " << step;
    const std::vector<std::span<float>> gpu_state = gpu->State(), cpu_state = cpu->State();
    const std::vector<std::string> names = cpu->StateNames();
    for (std::size_t k = 0; k < cpu_state.size(); ++k) {
      EXPECT_LE(RelativeDifference(Download(gpu_state[k].data(), gpu_state[k].size(), ctx_.stream), cpu_state[k]),
                kTolerance)
          << names[k] << " after step " << step;
    }
  }

  gpu->set_steps(17);
  EXPECT_EQ(gpu->steps(), 17);
}

INSTANTIATE_TEST_SUITE_P(Optimizers, CudaOptimizerTest,
                         testing::Values(OptimizerCase{"sgd", Sgd(0.1, 0.0, 0.0), 1037},
                                         OptimizerCase{"sgd_weight_decay", Sgd(0.1, 0.0, 0.01), 1037},
                                         OptimizerCase{"sgd_momentum_weight_decay", Sgd(0.05, 0.9, 0.01), 1037},
                                         // more elements than the grid's threads: each thread takes several
                                         OptimizerCase{"sgd_momentum_large", Sgd(0.05, 0.9, 0.0), (1u << 24) + 5},
                                         OptimizerCase{"adamw", AdamW(1e-3, 0.9, 0.01), 1037},
                                         // beta1 = 0.3: lerp weight 0.7, torch.lerp's second form
                                         OptimizerCase{"adamw_low_beta1", AdamW(1e-2, 0.3, 0.1), 1037},
                                         OptimizerCase{"adamw_large", AdamW(1e-3, 0.9, 0.0), (1u << 24) + 5}),
                         [](const testing::TestParamInfo<OptimizerCase>& info) { return info.param.name; });

// Setup errors need no device: they are thrown before anything is allocated.
TEST(CudaOptimizerSetup, RefusesBadSpecs) {
  EXPECT_THROW(MakeCudaOptimizer(Sgd(-0.1, 0.0, 0.0), 10), ConfigError);
  EXPECT_THROW(MakeCudaOptimizer(Sgd(0.1, -0.9, 0.0), 10), ConfigError);
  EXPECT_THROW(MakeCudaOptimizer(Sgd(0.1, 0.0, std::nan("")), 10), ConfigError);
  EXPECT_THROW(MakeCudaOptimizer(AdamW(1e-3, 1.0, 0.0), 10), ConfigError);
}

}  // namespace
}  // namespace baton::cuda
