// Where a stage computes. The stage (src/runtime/stage.h) decides what runs
// — the ops, what each microbatch keeps, recomputation, the gradient flow
// through residual blocks — and a StageDevice runs it: on the host with the
// Eigen layers, or on a CUDA device (src/cuda/cuda_stage_device.h) with the
// CUDA layers.
// Every pointer a stage passes to its device is memory that device
// allocated (Allocate), or a ring slot or message buffer of the same kind
// of memory.
#ifndef BATON_STAGE_DEVICE_H_
#define BATON_STAGE_DEVICE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "baton/model.h"

namespace baton {

struct LossTotals {
  double loss_sum = 0.0;     // sum of per-sample losses
  std::int64_t correct = 0;  // correct argmax predictions
};

class StageDevice {
 public:
  virtual ~StageDevice() = default;

  // True if the device's memory is host memory (the CPU path).
  virtual bool host_memory() const = 0;

  // `floats` zeroed floats owned by the device, for the life of the stage.
  // Called at setup only.
  virtual float* Allocate(std::size_t floats) = 0;
  // Adds the next layer of the stage (in op order). `host` is the stage's
  // host layer (parameter layout, initialisation); a device may compute with
  // it or build its own from `spec`.
  virtual void AddLayer(const LayerSpec& spec, Layer& host, int max_rows) = 0;
  // The parameters and gradients the layers compute with: the host buffers
  // themselves on the host; device copies on a GPU (PushParams fills them).
  // Called once, after the last AddLayer.
  virtual void BindParams(std::span<float> host_params, std::span<float> host_grads) = 0;
  virtual float* params() = 0;
  virtual float* grads() = 0;
  // Host <-> device copies of the parameters (no-ops on the host): after
  // initialisation or loading a checkpoint, and before the host reads them.
  virtual void PushParams() = 0;
  virtual void PullParams() = 0;

  virtual void Forward(int layer, const float* x, float* y, int rows) = 0;
  virtual void BackwardInput(int layer, const float* x, const float* dy, float* dx, int rows) = 0;
  // ADDS into the layer's gradients.
  virtual void BackwardWeight(int layer, const float* x, const float* dy, int rows) = 0;
  virtual void Add(const float* a, const float* b, float* out, std::size_t n) = 0;  // out = a + b
  virtual void AddInto(const float* x, float* y, std::size_t n) = 0;               // y += x
  virtual void Copy(float* dst, const float* src, std::size_t n) = 0;
  virtual void Zero(float* dst, std::size_t n) = 0;
  // Cross-entropy of `rows` logits against `labels` (memory of this device),
  // as baton::CrossEntropy; the loss and correct count are added to totals
  // read by TakeLossTotals.
  virtual void CrossEntropy(const float* logits, const std::int32_t* labels, int rows, int classes, float grad_scale,
                            float* dlogits) = 0;
  // The totals since the last call, and resets them. On a GPU this is the
  // step's one read of device data by the host.
  virtual LossTotals TakeLossTotals() = 0;
};

// The host: Eigen layers over host memory.
std::unique_ptr<StageDevice> MakeHostStageDevice();

}  // namespace baton

#endif  // BATON_STAGE_DEVICE_H_
