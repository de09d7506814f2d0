// The host StageDevice: the Eigen layers, in host memory. The parameters
// the layers use are the stage's own host buffers, so pushing and pulling
// them are no-ops.
#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "baton/buffer.h"
#include "baton/stage_device.h"
#include "baton/tensor.h"

namespace baton {
namespace {

class HostStageDevice final : public StageDevice {
 public:
  bool host_memory() const override { return true; }

  float* Allocate(std::size_t floats) override {
    buffers_.emplace_back(floats, 0.0f);
    return buffers_.back().data();
  }
  void AddLayer(const LayerSpec&, Layer& host, int) override { layers_.push_back(&host); }
  void BindParams(std::span<float> host_params, std::span<float> host_grads) override {
    host_params_ = host_params;
    host_grads_ = host_grads;
  }
  float* params() override { return host_params_.data(); }
  float* grads() override { return host_grads_.data(); }
  void PushParams() override {}
  void PullParams() override {}

  void SetOptimizer(const OptimizerSpec& spec) override { optimizer_ = MakeOptimizer(spec, host_params_.size()); }
  void OptimizerStep() override { optimizer_->Step(host_params_, host_grads_); }
  std::vector<std::span<float>> OptimizerState() override { return optimizer_->State(); }
  std::vector<std::string> OptimizerStateNames() const override { return optimizer_->StateNames(); }
  std::int64_t optimizer_steps() const override { return optimizer_->steps(); }
  void set_optimizer_steps(std::int64_t steps) override { optimizer_->set_steps(steps); }

  void Forward(int layer, const float* x, float* y, int rows) override {
    const Layer& l = *layers_[layer];
    l.Forward(ConstMatMap(x, rows, l.in_features()), MatMap(y, rows, l.out_features()));
  }
  void BackwardInput(int layer, const float* x, const float* dy, float* dx, int rows) override {
    const Layer& l = *layers_[layer];
    l.BackwardInput(ConstMatMap(x, rows, l.in_features()), ConstMatMap(dy, rows, l.out_features()),
                    MatMap(dx, rows, l.in_features()));
  }
  void BackwardWeight(int layer, const float* x, const float* dy, int rows) override {
    Layer& l = *layers_[layer];
    l.BackwardWeight(ConstMatMap(x, rows, l.in_features()), ConstMatMap(dy, rows, l.out_features()));
  }
  void Add(const float* a, const float* b, float* out, std::size_t n) override {
    for (std::size_t k = 0; k < n; ++k) out[k] = a[k] + b[k];
  }
  void AddInto(const float* x, float* y, std::size_t n) override {
    for (std::size_t k = 0; k < n; ++k) y[k] += x[k];
  }
  void Copy(float* dst, const float* src, std::size_t n) override { std::memcpy(dst, src, n * sizeof(float)); }
  void Zero(float* dst, std::size_t n) override { std::fill_n(dst, n, 0.0f); }
  void CrossEntropy(const float* logits, const std::int32_t* labels, int rows, int classes, float grad_scale,
                    float* dlogits) override {
    totals_.loss_sum += baton::CrossEntropy(ConstMatMap(logits, rows, classes),
                                            std::span<const std::int32_t>(labels, std::size_t(rows)), grad_scale,
                                            dlogits, &totals_.correct);
  }
  LossTotals TakeLossTotals() override { return std::exchange(totals_, LossTotals{}); }

 private:
  std::vector<Layer*> layers_;
  std::vector<FloatBuffer> buffers_;
  std::span<float> host_params_, host_grads_;
  std::unique_ptr<Optimizer> optimizer_;
  LossTotals totals_;
};

}  // namespace

std::unique_ptr<StageDevice> MakeHostStageDevice() { return std::make_unique<HostStageDevice>(); }

}  // namespace baton
