// The host StageDevice: the Eigen layers, in host memory. The parameters
// the layers use are the stage's own host buffers, so pushing and pulling
// them are no-ops.
#include <fmt/format.h>

#include <cstdint>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <utility>
#include <vector>

#include "baton/error.h"
#include "baton/host.h"
#include "baton/store.h"
#include "layers.h"

namespace baton {
namespace {

// An F32 tensor as the matrix a per-row kernel sees: (all rows, last dimension).
ConstMatMap Matrix(const ConstView& v) {
  return ConstMatMap(v.as<float>(), v.desc.matrix_rows(), v.desc.shape.last());
}

class HostStageDevice final : public StageDevice {
 public:
  bool host_memory() const override { return true; }

  std::byte* Allocate(std::size_t bytes) override { return memory_.Allocate(bytes); }
  void AddLayer(const OpDesc& op, int max_rows) override { layers_.push_back(MakeLayer(op, max_rows)); }
  std::size_t ScratchBytes() const override {
    return std::accumulate(layers_.begin(), layers_.end(), std::size_t{0},
                           [](std::size_t sum, const auto& l) { return sum + l->ScratchBytes(); });
  }
  void BindParams(std::span<float> host_params, std::span<float> host_grads) override {
    host_params_ = host_params;
    host_grads_ = host_grads;
    // Either may be empty: nothing bound (sharded data parallel between
    // its windows; the layers are not called then).
    std::size_t at = 0;
    for (auto& l : layers_) {
      l->Bind(host_params.empty() ? nullptr : host_params.data() + at,
              host_grads.empty() ? nullptr : host_grads.data() + at);
      at += l->NumParams();
    }
  }
  float* params() override { return host_params_.data(); }
  float* grads() override { return host_grads_.data(); }
  void PushParams() override {}
  void PullParams() override {}

  void SetOptimizer(const OptimizerSpec& spec, std::size_t first, std::size_t count) override {
    if (count == 0) count = host_params_.size() - first;
    if (first + count > host_params_.size()) {
      throw Error(fmt::format("optimizer over parameters [{}, {}) of a stage of {}", first, first + count,
                              host_params_.size()));
    }
    opt_params_ = host_params_.subspan(first, count);
    opt_grads_ = host_grads_.subspan(first, count);
    optimizer_ = MakeOptimizer(spec, count);
  }
  void SetShardOptimizer(const OptimizerSpec& spec, std::span<float> params, std::span<float> grads) override {
    opt_params_ = params;
    opt_grads_ = grads;
    optimizer_ = MakeOptimizer(spec, params.size());
  }
  void OptimizerStep() override { optimizer_->Step(opt_params_, opt_grads_); }
  void SetLearningRate(double lr) override {
    if (optimizer_) optimizer_->set_lr(lr);
  }
  void ParamsUpdated() override {}  // the layers read the parameters themselves
  std::vector<std::span<float>> OptimizerState() override { return optimizer_->State(); }
  std::vector<std::string> OptimizerStateNames() const override { return optimizer_->StateNames(); }
  std::int64_t optimizer_steps() const override { return optimizer_->steps(); }
  bool GradientsFinite(std::size_t first, std::size_t count) override {
    if (count == 0) return true;  // a stage of weightless layers
    // A float is a NaN or an infinity exactly when its exponent bits are all
    // ones: the largest magnitude's bits against the infinity's, one integer
    // max over the gradients (vectorised; a pass at memory speed).
    const float* g = host_grads_.data() + first;
    std::uint32_t largest = 0;
    for (std::size_t i = 0; i < count; ++i) {
      std::uint32_t bits;
      std::memcpy(&bits, g + i, sizeof bits);
      largest = std::max(largest, bits & 0x7fffffffu);
    }
    return largest < 0x7f800000u;
  }
  void GradientSquares(std::span<const ParamRange> ranges, std::span<double> sums) override {
    for (std::size_t i = 0; i < ranges.size(); ++i) sums[i] = SumOfSquares(Grads(ranges[i].first, ranges[i].count));
  }
  void ScaleGradients(std::size_t first, std::size_t count, float factor) override {
    ScaleFloats(Grads(first, count), factor);
  }
  void set_optimizer_steps(std::int64_t steps) override { optimizer_->set_steps(steps); }

  void Forward(int layer, const ConstView& x, const View& y, std::byte* saved, const SequencePart& part) override {
    layers_[static_cast<std::size_t>(layer)]->Forward(x, y, reinterpret_cast<float*>(saved), part);
  }
  void BackwardInput(int layer, const ConstView& x, const std::byte* saved, const ConstView& dy, const View& dx,
                     std::byte* stash, const SequencePart& part) override {
    layers_[static_cast<std::size_t>(layer)]->BackwardInput(x, reinterpret_cast<const float*>(saved), dy, dx,
                                                            reinterpret_cast<float*>(stash), part);
  }
  void BackwardWeight(int layer, const ConstView& x, const std::byte* saved, const ConstView& dy,
                      const std::byte* stash, const SequencePart& part) override {
    layers_[static_cast<std::size_t>(layer)]->BackwardWeight(x, reinterpret_cast<const float*>(saved), dy,
                                                             reinterpret_cast<const float*>(stash), part);
  }
  void Add(const ConstView& a, const ConstView& b, const View& out) override {
    const float* pa = a.as<float>();
    const float* pb = b.as<float>();
    float* po = out.as<float>();
    const auto n = static_cast<std::size_t>(out.desc.elements());
    for (std::size_t k = 0; k < n; ++k) po[k] = pa[k] + pb[k];
  }
  void AddInto(const ConstView& x, const View& y) override {
    const float* px = x.as<float>();
    float* py = y.as<float>();
    const auto n = static_cast<std::size_t>(y.desc.elements());
    for (std::size_t k = 0; k < n; ++k) py[k] += px[k];
  }
  // A stage of weightless layers has no gradients: its views are null and
  // empty, and memcpy and memset may not be given null even for 0 bytes.
  void Copy(const View& dst, const ConstView& src) override {
    if (src.bytes() > 0) std::memcpy(dst.data, src.data, src.bytes());
  }
  void Zero(const View& dst) override {
    if (dst.bytes() > 0) std::memset(dst.data, 0, dst.bytes());
  }
  void CrossEntropy(const ConstView& logits, const ConstView& labels, float grad_scale, const View& dlogits) override {
    const auto rows = static_cast<std::size_t>(logits.desc.matrix_rows());
    totals_.loss_sum += baton::CrossEntropy(Matrix(logits), std::span<const std::int32_t>(labels.as<std::int32_t>(), rows),
                                            grad_scale, dlogits.as<float>(), &totals_.correct);
  }
  LossTotals TakeLossTotals() override { return std::exchange(totals_, LossTotals{}); }

 private:
  std::span<float> Grads(std::size_t first, std::size_t count) const {
    if (first > host_grads_.size() || count > host_grads_.size() - first) {
      throw Error(fmt::format("gradients [{}, {}) of a stage of {}", first, first + count, host_grads_.size()));
    }
    return host_grads_.subspan(first, count);
  }

  std::vector<std::unique_ptr<Layer>> layers_;
  HostMemory memory_;
  std::span<float> host_params_, host_grads_;
  std::unique_ptr<Optimizer> optimizer_;
  std::span<float> opt_params_, opt_grads_;  // the part the optimizer updates
  LossTotals totals_;
};

}  // namespace

std::unique_ptr<StageDevice> MakeHostStageDevice() { return std::make_unique<HostStageDevice>(); }

}  // namespace baton
