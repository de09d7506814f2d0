// The CUDA StageDevice. Everything a step does is enqueued on the compute
// stream; the host waits for the device only in TakeLossTotals (once per
// step, for the loss), GradientsFinite (once per step, the check of the
// gradients), GradientSquares (once per step where the norm is taken) and
// in PullParams (outside steps: weights and checkpoints).
#include "cuda_stage_device.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <fmt/format.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "baton/buffer.h"
#include "baton/error.h"
#include "cuda_util.h"

namespace baton::cuda {
namespace {

class CudaStageDevice final : public StageDevice {
 public:
  CudaStageDevice(cudaStream_t stream, Precision precision)
      : cublas_(stream), loss_(1), correct_(1), totals_host_(2), largest_(1), largest_host_(1), taken_() {
    ctx_.stream = stream;
    ctx_.cublas = cublas_.get();
    ctx_.precision = precision;
    BATON_CUDA_CHECK(cudaMemsetAsync(loss_.data(), 0, loss_.bytes(), stream));
    BATON_CUDA_CHECK(cudaMemsetAsync(correct_.data(), 0, correct_.bytes(), stream));
  }

  bool host_memory() const override { return false; }

  std::byte* Allocate(std::size_t bytes) override {
    buffers_.emplace_back(bytes);
    BATON_CUDA_CHECK(cudaMemsetAsync(buffers_.back().data(), 0, buffers_.back().bytes(), ctx_.stream));
    return buffers_.back().data();
  }

  void AddLayer(const OpDesc& op, int max_rows) override { layers_.push_back(MakeCudaLayer(op, max_rows)); }
  std::size_t ScratchBytes() const override {
    return std::accumulate(layers_.begin(), layers_.end(), std::size_t{0},
                           [](std::size_t sum, const auto& l) { return sum + l->ScratchBytes(); });
  }

  void BindParams(std::span<float> host_params, std::span<float> host_grads) override {
    host_params_ = host_params;
    host_grads_ = host_grads;
    params_ = DeviceBuffer<float>(host_params.size());
    grads_ = DeviceBuffer<float>(host_grads.size());
    BATON_CUDA_CHECK(cudaMemsetAsync(grads_.data(), 0, grads_.bytes(), ctx_.stream));
    std::size_t at = 0;
    for (auto& l : layers_) {
      l->Bind(params_.data() + at, grads_.data() + at);
      at += l->NumParams();
    }
    PushParams();
  }
  float* params() override { return params_.data(); }
  float* grads() override { return grads_.data(); }

  // Outside steps only (setup, resume): plain copies ordered after the
  // compute stream's work.
  void PushParams() override {
    if (params_.size() > 0) {
      BATON_CUDA_CHECK(
          cudaMemcpyAsync(params_.data(), host_params_.data(), params_.bytes(), cudaMemcpyHostToDevice, ctx_.stream));
    }
    if (optimizer_) {
      const auto device_state = optimizer_->State();
      for (std::size_t k = 0; k < device_state.size(); ++k) {
        BATON_CUDA_CHECK(cudaMemcpyAsync(device_state[k].data(), host_state_[k].data(), device_state[k].size_bytes(),
                                         cudaMemcpyHostToDevice, ctx_.stream));
      }
    }
    ParamsUpdated();
    BATON_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));  // the host buffers may change after this returns
  }
  void PullParams() override {
    if (params_.size() > 0) {
      BATON_CUDA_CHECK(
          cudaMemcpyAsync(host_params_.data(), params_.data(), params_.bytes(), cudaMemcpyDeviceToHost, ctx_.stream));
    }
    if (optimizer_) {
      const auto device_state = optimizer_->State();
      for (std::size_t k = 0; k < device_state.size(); ++k) {
        BATON_CUDA_CHECK(cudaMemcpyAsync(host_state_[k].data(), device_state[k].data(), device_state[k].size_bytes(),
                                         cudaMemcpyDeviceToHost, ctx_.stream));
      }
    }
    BATON_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
  }

  // The optimizer's state lives on the device; the host copies below are
  // what checkpoints read and write (PullParams / PushParams move them).
  // Over parameters [first, first + count) (count 0: to the end): ZeRO's
  // shard of this replica, or the whole stage.
  void SetShardOptimizer(const OptimizerSpec&, std::span<float>, std::span<float>) override {
    throw Error("sharded data parallel's ZeRO stages 2 and 3 do not run on a GPU yet (data_parallel.zero 0 or 1)");
  }
  void SetOptimizer(const OptimizerSpec& spec, std::size_t first, std::size_t count) override {
    if (count == 0) count = host_params_.size() - first;
    if (first + count > host_params_.size()) {
      throw Error(fmt::format("optimizer over parameters [{}, {}) of a stage of {}", first, first + count,
                              host_params_.size()));
    }
    optimizer_first_ = first;
    optimizer_ = MakeCudaOptimizer(spec, count);
    host_state_.clear();
    for (const auto& d : optimizer_->State()) host_state_.emplace_back(d.size(), 0.0f);
  }
  void OptimizerStep() override {
    optimizer_->Step(ctx_, params_.data() + optimizer_first_, grads_.data() + optimizer_first_);
  }
  void SetLearningRate(double lr) override {
    if (optimizer_) optimizer_->set_lr(lr);
  }
  // On the compute stream, behind the optimizer's kernels and (ZeRO) the
  // all-gather's copies, which that stream waits for.
  void ParamsUpdated() override {
    for (auto& l : layers_) l->RefreshWeights(ctx_);
  }
  std::vector<std::span<float>> OptimizerState() override {
    std::vector<std::span<float>> out;
    for (auto& h : host_state_) out.emplace_back(h);
    return out;
  }
  std::vector<std::string> OptimizerStateNames() const override { return optimizer_->StateNames(); }
  std::int64_t optimizer_steps() const override { return optimizer_->steps(); }
  bool GradientsFinite(std::size_t first, std::size_t count) override {
    if (count == 0) return true;
    // The largest magnitude's bits against the infinity's, reduced on the
    // compute stream after the step's gradients; one 4-byte read back.
    BATON_CUDA_CHECK(cudaMemsetAsync(largest_.data(), 0, sizeof(unsigned), ctx_.stream));
    cuda::LargestBits(ctx_, grads_.data() + first, count, largest_.data());
    BATON_CUDA_CHECK(cudaMemcpyAsync(largest_host_.data(), largest_.data(), sizeof(unsigned), cudaMemcpyDeviceToHost,
                                     ctx_.stream));
    BATON_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));
    return largest_host_.data()[0] < 0x7f800000u;
  }

  // The ranges up in one copy, two kernels, the sums down in one copy.
  void GradientSquares(std::span<const ParamRange> ranges, std::span<double> sums) override {
    if (ranges.empty()) return;
    ReserveSquares(ranges.size());
    std::size_t* pairs = square_ranges_host_.data();
    std::size_t longest = 0;
    for (std::size_t i = 0; i < ranges.size(); ++i) {
      CheckGradients(ranges[i].first, ranges[i].count);
      pairs[2 * i] = ranges[i].first;
      pairs[2 * i + 1] = ranges[i].count;
      longest = std::max(longest, ranges[i].count);
    }
    BATON_CUDA_CHECK(cudaMemcpyAsync(square_ranges_.data(), pairs, 2 * ranges.size() * sizeof(std::size_t),
                                     cudaMemcpyHostToDevice, ctx_.stream));
    cuda::SquareSums(ctx_, grads_.data(), square_ranges_.data(), static_cast<int>(ranges.size()), longest,
                     square_partials_.data(), square_sums_.data());
    BATON_CUDA_CHECK(cudaMemcpyAsync(square_sums_host_.data(), square_sums_.data(), ranges.size() * sizeof(double),
                                     cudaMemcpyDeviceToHost, ctx_.stream));
    BATON_CUDA_CHECK(cudaStreamSynchronize(ctx_.stream));  // also frees the pinned ranges for the next call
    std::copy_n(square_sums_host_.data(), ranges.size(), sums.begin());
  }
  void ScaleGradients(std::size_t first, std::size_t count, float factor) override {
    CheckGradients(first, count);
    cuda::Scale(ctx_, grads_.data() + first, count, factor);
  }
  void set_optimizer_steps(std::int64_t steps) override { optimizer_->set_steps(steps); }

  // Saved state and stash (attention's) are floats in the ring slot.
  void Forward(int layer, const ConstView& x, const View& y, std::byte* saved, const SequencePart& part) override {
    Layer(layer).ForwardOp(Call(part), x, y, reinterpret_cast<float*>(saved));
  }
  void BackwardInput(int layer, const ConstView& x, const std::byte* saved, const ConstView& dy, const View& dx,
                     std::byte* stash, const SequencePart& part) override {
    Layer(layer).BackwardInputOp(Call(part), x, reinterpret_cast<const float*>(saved), dy, dx,
                                 reinterpret_cast<float*>(stash));
  }
  void BackwardWeight(int layer, const ConstView& x, const std::byte* saved, const ConstView& dy,
                      const std::byte* stash, const SequencePart& part) override {
    Layer(layer).BackwardWeightOp(Call(part), x, reinterpret_cast<const float*>(saved), dy,
                                  reinterpret_cast<const float*>(stash));
  }
  void Add(const ConstView& a, const ConstView& b, const View& out) override {
    cuda::Add(ctx_, a.as<float>(), b.as<float>(), out.as<float>(), Elements(out));
  }
  void AddInto(const ConstView& x, const View& y) override { cuda::AddInto(ctx_, x.as<float>(), y.as<float>(), Elements(y)); }
  void Copy(const View& dst, const ConstView& src) override {
    BATON_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, src.bytes(), cudaMemcpyDeviceToDevice, ctx_.stream));
  }
  void Zero(const View& dst) override { BATON_CUDA_CHECK(cudaMemsetAsync(dst.data, 0, dst.bytes(), ctx_.stream)); }
  // A call's context: packed documents' starts (device memory, the
  // executor's upload), on the views already shaped for the call's tokens.
  // The config refuses slices with device: cuda; a plan that gets here
  // anyway is a bug.
  Context Call(const SequencePart& part) const {
    if (!part.whole()) throw Error("the CUDA layers do not run sequence slices (pipeline.seq_slices needs device: cpu)");
    Context call = ctx_;
    call.starts = part.starts;
    return call;
  }
  void CrossEntropy(const ConstView& logits, const ConstView& labels, float grad_scale, const View& dlogits) override {
    cuda::CrossEntropy(ctx_, logits.as<float>(), labels.as<std::int32_t>(), Rows(logits),
                       static_cast<int>(logits.desc.shape.last()), grad_scale, dlogits.as<float>(), loss_.data(),
                       correct_.data());
  }

  // The step's one read-back: both totals in one pinned buffer, then zeroed
  // for the next step, behind everything the step enqueued.
  LossTotals TakeLossTotals() override {
    BATON_CUDA_CHECK(
        cudaMemcpyAsync(totals_host_.data(), loss_.data(), sizeof(double), cudaMemcpyDeviceToHost, ctx_.stream));
    BATON_CUDA_CHECK(cudaMemcpyAsync(totals_host_.data() + 1, correct_.data(), sizeof(unsigned long long),
                                     cudaMemcpyDeviceToHost, ctx_.stream));
    BATON_CUDA_CHECK(cudaMemsetAsync(loss_.data(), 0, loss_.bytes(), ctx_.stream));
    BATON_CUDA_CHECK(cudaMemsetAsync(correct_.data(), 0, correct_.bytes(), ctx_.stream));
    taken_.Record(ctx_.stream);
    BATON_CUDA_CHECK(cudaEventSynchronize(taken_.get()));
    LossTotals t;
    t.loss_sum = totals_host_.data()[0];
    unsigned long long correct = 0;
    static_assert(sizeof(correct) == sizeof(double));
    std::memcpy(&correct, totals_host_.data() + 1, sizeof(correct));
    t.correct = static_cast<std::int64_t>(correct);
    return t;
  }

 private:
  static int Rows(const ConstView& v) { return static_cast<int>(v.desc.matrix_rows()); }
  void CheckGradients(std::size_t first, std::size_t count) const {
    if (first > grads_.size() || count > grads_.size() - first) {
      throw Error(fmt::format("gradients [{}, {}) of a stage of {}", first, first + count, grads_.size()));
    }
  }
  // GradientSquares's buffers for `ranges` ranges: grown at a call that
  // needs more (the first step's), kept after.
  void ReserveSquares(std::size_t ranges) {
    if (ranges <= square_sums_.size()) return;
    square_ranges_host_ = PinnedBuffer<std::size_t>(2 * ranges);
    square_ranges_ = DeviceBuffer<std::size_t>(2 * ranges);
    square_partials_ = DeviceBuffer<double>(ranges * kSquareBlocks);
    square_sums_ = DeviceBuffer<double>(ranges);
    square_sums_host_ = PinnedBuffer<double>(ranges);
  }
  CudaLayer& Layer(int layer) { return *layers_[static_cast<std::size_t>(layer)]; }
  static std::size_t Elements(const ConstView& v) { return static_cast<std::size_t>(v.desc.elements()); }

  CublasHandle cublas_;
  Context ctx_;
  std::vector<std::unique_ptr<CudaLayer>> layers_;
  std::vector<DeviceBuffer<std::byte>> buffers_;
  DeviceBuffer<float> params_, grads_;
  std::span<float> host_params_, host_grads_;
  DeviceBuffer<double> loss_;
  DeviceBuffer<unsigned long long> correct_;
  std::size_t optimizer_first_ = 0;  // the optimizer's first parameter
  PinnedBuffer<double> totals_host_;  // [loss sum, correct count's bits]
  DeviceBuffer<unsigned> largest_;     // GradientsFinite's reduction, and its copy on the host
  PinnedBuffer<unsigned> largest_host_;
  PinnedBuffer<std::size_t> square_ranges_host_;  // GradientSquares's (first, count) pairs, and on the device
  DeviceBuffer<std::size_t> square_ranges_;
  DeviceBuffer<double> square_partials_, square_sums_;  // its blocks' sums, each range's sum
  PinnedBuffer<double> square_sums_host_;
  std::unique_ptr<CudaOptimizer> optimizer_;
  std::vector<FloatBuffer> host_state_;
  Event taken_;
};

}  // namespace

std::unique_ptr<StageDevice> MakeCudaStageDevice(cudaStream_t stream, Precision precision) {
  return std::make_unique<CudaStageDevice>(stream, precision);
}

}  // namespace baton::cuda
