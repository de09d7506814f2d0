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
#include <string>
#include <vector>

#include "baton/comm.h"
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
  // Host <-> device copies of the parameters and the optimizer state
  // (no-ops on the host): after initialisation or loading a checkpoint, and
  // before the host reads them. Never inside a step.
  virtual void PushParams() = 0;
  virtual void PullParams() = 0;

  // The optimizer over the stage's parameters, made once at setup, stepping
  // on this device's parameters and gradients.
  virtual void SetOptimizer(const OptimizerSpec& spec) = 0;
  virtual void OptimizerStep() = 0;
  // Host views of the optimizer state, in OptimizerStateNames() order
  // (PyTorch's names); current after PullParams, pushed by PushParams.
  virtual std::vector<std::span<float>> OptimizerState() = 0;
  virtual std::vector<std::string> OptimizerStateNames() const = 0;
  virtual std::int64_t optimizer_steps() const = 0;
  virtual void set_optimizer_steps(std::int64_t steps) = 0;

  virtual void Forward(int layer, const float* x, float* y, int rows) = 0;
  virtual void BackwardInput(int layer, const float* x, const float* dy, float* dx, int rows) = 0;
  // ADDS into the layer's gradients.
  virtual void BackwardWeight(int layer, const float* x, const float* dy, int rows) = 0;
  virtual void Add(const float* a, const float* b, float* out, std::size_t n) = 0;  // out = a + b
  virtual void AddInto(const float* x, float* y, std::size_t n) = 0;                // y += x
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

// A stage's activation ring (baton/store.h's contract) in a device's memory.
class RingStore {
 public:
  virtual ~RingStore() = default;
  virtual float* Acquire(int microbatch) = 0;
  virtual float* Get(int microbatch) = 0;
  virtual void Release(int microbatch) = 0;
  // Copies `floats` floats from `src` (this device's memory) into the slot.
  virtual void Write(int microbatch, std::size_t offset, const float* src, std::size_t floats) = 0;
  virtual void CountInPlace(std::size_t floats) = 0;
  virtual int capacity() const = 0;
  virtual std::size_t slot_bytes() const = 0;
  virtual std::uint64_t bytes_written() const = 0;
  virtual std::uint64_t bytes_copied() const = 0;
  virtual std::uint64_t writes() const = 0;  // slots acquired
};

// What a rank's executor computes on and moves messages with: host memory and
// the host Transport, or one GPU's memory and the host-staged transport. The
// messages take this device's memory; their request ids, deadlines and size
// checks are the Transport's.
class RankDevice {
 public:
  virtual ~RankDevice() = default;
  virtual bool host_memory() const = 0;
  virtual std::unique_ptr<StageDevice> MakeStageDevice() = 0;
  virtual std::unique_ptr<RingStore> MakeRing(std::string name, std::size_t slot_floats, int capacity) = 0;
  // Zeroed memory owned by the device (setup only).
  virtual float* Allocate(std::size_t floats) = 0;
  virtual std::int32_t* AllocateLabels(std::size_t count) = 0;
  // Host data into this device's memory, ordered before the work that
  // follows (asynchronous on a GPU).
  virtual void Upload(float* dst, const float* src, std::size_t floats) = 0;
  virtual void UploadLabels(std::int32_t* dst, const std::int32_t* src, std::size_t count) = 0;
  // Sizes the message buffers (a GPU pins one host buffer per request id of
  // floats_per_request[id] floats). Called once, before any message.
  virtual void ConfigureMessages(const std::vector<std::size_t>& floats_per_request, double timeout_s) = 0;
  virtual void Isend(int id, const float* data, std::size_t count, int peer, int tag) = 0;
  virtual void Irecv(int id, float* data, std::size_t count, int peer, int tag) = 0;
  // A received message is ready for the work enqueued after this returns.
  virtual void WaitRecv(int id, const WaitInfo& info) = 0;
  // A send's source may be overwritten after this returns.
  virtual void WaitSend(int id, const WaitInfo& info) = 0;
  virtual bool Idle(int id) const = 0;
  // Moves messages along (a GPU posts sends whose staging copies are done).
  virtual void Progress() = 0;
};

std::unique_ptr<RankDevice> MakeHostRankDevice(Transport& transport);
// One GPU (local rank modulo the devices on the node), with `precision` for
// the linear layers ("fp32" or "bf16"). Throws ConfigError where baton was
// built without CUDA or no device is visible.
std::unique_ptr<RankDevice> MakeCudaRankDevice(Transport& transport, const std::string& precision);

}  // namespace baton

#endif  // BATON_STAGE_DEVICE_H_
