// Where a rank computes and keeps its memory: the device seams.
//
// The rank plan (baton/plan.h) decides everything: which ops run,
// what each microbatch keeps in its ring slot, which messages go where. A
// StageDevice runs one stage's ops — on the host with the Eigen layers, or
// on a CUDA device (src/cuda/cuda_stage_device.h) with the CUDA layers — and
// a RankDevice holds the rank's memory and moves its messages.
//
// Every view a stage passes to its device is memory of that device: what it
// allocated, a ring slot, or a message buffer of the same rank device.
#ifndef BATON_STAGE_DEVICE_H_
#define BATON_STAGE_DEVICE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "baton/choices.h"
#include "baton/comm.h"
#include "baton/model.h"
#include "baton/store.h"
#include "baton/view.h"

namespace baton {

struct LossTotals {
  double loss_sum = 0.0;     // sum of per-sample losses
  std::int64_t correct = 0;  // correct argmax predictions
};

// Parameters [first, first + count) of a stage.
struct ParamRange {
  std::size_t first = 0;
  std::size_t count = 0;
};

class StageDevice {
 public:
  virtual ~StageDevice() = default;

  // True if the device's memory is host memory (the CPU path).
  virtual bool host_memory() const = 0;

  // `bytes` zeroed bytes owned by the device, for the life of the stage.
  // Called at setup only.
  virtual std::byte* Allocate(std::size_t bytes) = 0;
  // Adds the next layer of the stage (in op order; adds are not layers).
  // Its parameter layout is op's; it is called with at most `max_rows` rows.
  // `max_rows`: the most token rows (samples x sequence) of a call.
  virtual void AddLayer(const OpDesc& op, int max_rows) = 0;
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

  // The optimizer over the stage's parameters [first, first + count)
  // (count 0: all of them; a part: ZeRO's shard of this replica), made once
  // at setup, stepping on this device's parameters and gradients. Its state
  // (OptimizerState) covers that part only.
  virtual void SetOptimizer(const OptimizerSpec& spec, std::size_t first = 0, std::size_t count = 0) = 0;
  // The optimizer over `params` with gradients `grads` (as many floats,
  // the device's memory, outside the bound parameters): sharded data
  // parallel's resting shards (ZeRO 2 and 3), which the host runs only.
  virtual void SetShardOptimizer(const OptimizerSpec& spec, std::span<float> params, std::span<float> grads) = 0;
  virtual void OptimizerStep() = 0;
  // The rate the following optimizer steps take (train.lr_schedule's of
  // the step, LearningRateAt); until set, the spec's.
  virtual void SetLearningRate(double lr) = 0;
  // Every replica's update of the parameters is in (the optimizer step, and
  // with ZeRO the all-gather): the device refreshes what it derives from
  // them once per update rather than on every call (a GPU's BF16 weight
  // copies). PushParams does it too. Nothing derived on the host.
  virtual void ParamsUpdated() = 0;
  // Host views of the optimizer state, in OptimizerStateNames() order
  // (PyTorch's names); current after PullParams, pushed by PushParams.
  virtual std::vector<std::span<float>> OptimizerState() = 0;
  virtual std::vector<std::string> OptimizerStateNames() const = 0;
  virtual std::int64_t optimizer_steps() const = 0;
  // False if a gradient in [first, first + count) is a NaN or an infinity:
  // the step's check of its numbers. Waits for the device. Between a step's
  // gradients and its optimizer step only.
  virtual bool GradientsFinite(std::size_t first, std::size_t count) = 0;
  // The clip's pass (train.clip_grad_norm), between a step's gradients and
  // its optimizer step. GradientSquares: sums[i] = the sum of the squares of
  // the gradients in ranges[i], in double, in an order fixed by the range's
  // length alone (a range of the same floats sums to the same bits on every
  // rank and in every run); waits for the device. ScaleGradients: the
  // gradients in [first, first + count) times `factor`, each a float product.
  virtual void GradientSquares(std::span<const ParamRange> ranges, std::span<double> sums) = 0;
  virtual void ScaleGradients(std::size_t first, std::size_t count, float factor) = 0;
  virtual void set_optimizer_steps(std::int64_t steps) = 0;

  // Layer `layer` (AddLayer order): y = f(x); dx = (df/dx)^T dy; and
  // grads += (df/dparams)^T dy (ADDS). x, y, dx: the layer's input and
  // output tensors. `saved`: the op's saved state (OpDesc::saved_per_row
  // floats per token row), written by Forward for the backward passes;
  // `stash`: what BackwardInput leaves for BackwardWeight
  // (OpDesc::stash_per_row); null for layers without them. dx's data may be
  // null when nobody needs the input gradient. `part`: the tokens of each
  // sample's sequence the call computes, the views shaped for them, and an
  // attention layer's part of the sequence's key/value slots (sequence
  // slices, Seq1F1B); whole sequences: {}.
  virtual void Forward(int layer, const ConstView& x, const View& y, std::byte* saved, const SequencePart& part) = 0;
  virtual void BackwardInput(int layer, const ConstView& x, const std::byte* saved, const ConstView& dy,
                             const View& dx, std::byte* stash, const SequencePart& part) = 0;
  virtual void BackwardWeight(int layer, const ConstView& x, const std::byte* saved, const ConstView& dy,
                              const std::byte* stash, const SequencePart& part) = 0;
  virtual void Add(const ConstView& a, const ConstView& b, const View& out) = 0;  // out = a + b
  virtual void AddInto(const ConstView& x, const View& y) = 0;              // y += x
  virtual void Copy(const View& dst, const ConstView& src) = 0;
  virtual void Zero(const View& dst) = 0;
  // Cross-entropy of logits (rows, classes) against labels (i32, rows), as
  // the host's CrossEntropy (src/model/layers.h); writes dlogits unless its
  // data is null. The loss and correct count are added to totals read by
  // TakeLossTotals.
  virtual void CrossEntropy(const ConstView& logits, const ConstView& labels, float grad_scale, const View& dlogits) = 0;
  // The totals since the last call, and resets them. On a GPU this is the
  // step's one read of device data by the host.
  virtual LossTotals TakeLossTotals() = 0;
  // Bytes the layers added so far allocated for their own use: what the
  // memory plan counts as their scratch (ScratchBytes, baton/model.h).
  virtual std::size_t ScratchBytes() const = 0;
};


// What a rank's executor computes on and moves messages with: host memory and
// the host Transport, or one GPU's memory and the host-staged transport. Its
// Memory holds the rank's rings, message buffers and step inputs. The
// messages take this device's memory; their request ids, deadlines and size
// checks are the Transport's.
class RankDevice : public Memory {
 public:
  virtual bool host_memory() const = 0;
  virtual std::unique_ptr<StageDevice> MakeStageDevice() = 0;
  // Host data into this device's memory, ordered before the work that
  // follows (asynchronous on a GPU); `src` may be reused when it returns.
  virtual void Upload(std::byte* dst, const void* src, std::size_t bytes) = 0;
  // Sizes the message buffers (a GPU pins one host buffer per request id of
  // bytes_per_request[id] bytes). Called once, before any message.
  virtual void ConfigureMessages(const std::vector<std::size_t>& bytes_per_request, double timeout_s) = 0;
  virtual void Isend(int id, const std::byte* data, std::size_t bytes, int peer, int tag) = 0;
  virtual void Irecv(int id, std::byte* data, std::size_t bytes, int peer, int tag) = 0;
  // A received message is ready for the work enqueued after this returns.
  virtual void WaitRecv(int id, const WaitInfo& info) = 0;
  // A send's source may be overwritten after this returns.
  virtual void WaitSend(int id, const WaitInfo& info) = 0;
  virtual bool Idle(int id) const = 0;
  // Moves messages along (a GPU posts sends whose staging copies are done).
  virtual void Progress() = 0;
  // Data parallelism: the group this device's gradient buckets are summed
  // through, given the replicas' group `host` (host memory) and the largest
  // bucket, in floats, of each request id. Host memory sums through `host`
  // itself; a GPU stages each bucket through pinned host memory. Setup only;
  // the device owns what it returns.
  virtual ReplicaGroup& GradientGroup(ReplicaGroup& host, const std::vector<std::size_t>& floats_per_request) = 0;

  // `baton bench`'s hardware reference: this device's matrix-product rate,
  // GFLOP/s, at a model's linear shapes (in, out) with `rows` rows — each
  // layer's forward, input-gradient and weight-gradient products as a step
  // runs them, through the layers' own code, in the run's precision
  // (OpenBLAS on the host; cuBLAS on a GPU, timed with CUDA events). Outside
  // steps only; allocates what it needs and frees it.
  virtual double GemmGflops(const std::vector<std::pair<int, int>>& shapes, int rows) = 0;
  // What computed those products: OpenBLAS's kernels on the host
  // ("Haswell"), "cuBLAS <precision>, <GPU name>" on a GPU.
  virtual std::string GemmKernels() const = 0;

  // The device's own clock, for `baton bench`. A GPU computes after the host
  // has enqueued the work, so the host's clock times only the enqueueing:
  // its actions are timed by marks the device passes in its own order (CUDA
  // events on the compute stream). The host computes as it goes: no clock
  // (has_clock false; the host's clock times its actions).
  virtual bool has_clock() const = 0;
  // Waits until the device has done all the work enqueued so far.
  virtual void Synchronize() = 0;
  // Starts a step's clock at mark 0, where the device reaches this call,
  // with room for `marks` more. Outside steps (it may allocate).
  virtual void StartClock(std::size_t marks) = 0;
  // A mark where the device reaches this point of its work: its index.
  // Throws Error past the room StartClock made.
  virtual int MarkClock() = 0;
  // Waits for the last mark, then writes the seconds from mark 0 to each
  // mark since StartClock, in index order (mark 0 included: 0).
  virtual void ReadClock(std::vector<double>* seconds) = 0;
};

// The device the rank's stages compute on. `device` kCpu: the host
// (baton/host.h). kCuda: one GPU (local rank modulo the devices on the
// node) computing its linear layers in `precision`, from the CUDA backend
// module, libbaton_cuda.so, which the first such call loads from beside the
// executable (BATON_CUDA_MODULE names another file): `baton` itself links
// no CUDA library. Throws ConfigError, naming what is missing and where it
// looked, where the module is not there (a build without CUDA), cannot load
// (no CUDA runtime libraries), is of another build, or sees no GPU.
std::unique_ptr<RankDevice> MakeRankDevice(Device device, Transport& transport, Precision precision);
// Loads the CUDA backend module as device: cuda would (nothing else: no GPU
// is touched) and returns its path; ConfigError saying why it cannot
// (`baton doctor`).
std::string LoadCudaModule();

// What the CUDA module and the executable that loads it must agree on:
// bumped whenever these interfaces (RankDevice, StageDevice, Transport,
// ReplicaGroup, Memory) change, so a module of another build is refused
// rather than called.
inline constexpr int kDeviceSeamVersion = 3;

}  // namespace baton

#endif  // BATON_STAGE_DEVICE_H_
