// The host layers (Eigen) and the loss: the CPU backend's kernels. Private
// to src/host: the executor reaches them through the host StageDevice
// (baton/host.h), tests through this folder's include path.
//
// Every layer's forward, input-gradient backward (I) and weight-gradient
// backward (W) are separate calls, so split schedules (zb_h1, zb_h2, zbv) run
// for real; a full backward (B) is I then W. Layers own no memory:
// parameters and gradients are views into a stage-wide buffer bound once
// (Bind), activations are views the caller provides. A layer's parameter
// layout is its OpDesc's (baton/model.h), the same on every backend.
#ifndef BATON_HOST_LAYERS_H_
#define BATON_HOST_LAYERS_H_

#include <Eigen/Core>

#include <cstdint>
#include <memory>
#include <random>
#include <span>

#include "baton/model.h"
#include "baton/view.h"

namespace baton {

// Row-major float32 matrices over preallocated memory: rows are samples,
// columns features, as in PyTorch's (batch, features) tensors.
using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatMap = Eigen::Map<RowMatrix>;
using ConstMatMap = Eigen::Map<const RowMatrix>;

class Layer : public DescribedLayer {
 public:
  virtual ~Layer() = default;

  // Multiply-adds per sample of one forward.
  double FlopsPerSample() const { return desc().flops_per_row; }

  // REQUIRES: params and grads hold NumParams() floats each and outlive the layer.
  void Bind(float* params, float* grads) {
    params_ = params;
    grads_ = grads;
  }
  // PyTorch's default initialisation (baton::InitParams), drawing from `rng`.
  void Init(std::mt19937_64& rng) { InitParams(desc(), {params_, NumParams()}, rng); }

  // The contract a StageDevice calls, on typed views of the op's input and
  // output tensors ((rows, features), or (samples, seq, features); token ids
  // for an embedding), with the op's saved state (desc().saved_per_row
  // floats per token row, written by Forward for the backward passes; may
  // be unused) and its stash (desc().stash_per_row floats per token row,
  // written by BackwardInput for BackwardWeight). Per-row layers implement
  // the Eigen forms below and inherit these.
  //   Forward:        y = f(x); overwrites y.
  //   BackwardInput:  dx = (df/dx)^T dy; overwrites dx (its data may be null:
  //                   nobody needs it, but the stash must still be written).
  //   BackwardWeight: grads += (df/dparams)^T dy (ADDS). No-op without parameters.
  // `part`: the tokens of each sample's sequence the call computes and an
  // attention layer's key/value slots (SequencePart; whole sequences: {}).
  virtual void Forward(const ConstView& x, const View& y, float* saved, const SequencePart& part) const;
  virtual void BackwardInput(const ConstView& x, const float* saved, const ConstView& dy, const View& dx,
                             float* stash, const SequencePart& part) const;
  virtual void BackwardWeight(const ConstView& x, const float* saved, const ConstView& dy, const float* stash,
                              const SequencePart& part);
  // The same over whole sequences.
  void Forward(const ConstView& x, const View& y, float* saved) const { Forward(x, y, saved, SequencePart{}); }
  void BackwardInput(const ConstView& x, const float* saved, const ConstView& dy, const View& dx, float* stash) const {
    BackwardInput(x, saved, dy, dx, stash, SequencePart{});
  }
  void BackwardWeight(const ConstView& x, const float* saved, const ConstView& dy, const float* stash) {
    BackwardWeight(x, saved, dy, stash, SequencePart{});
  }

  // Bytes the layer allocated for its own use (ScratchBytes, baton/model.h).
  virtual std::size_t ScratchBytes() const { return 0; }

  // The per-row forms. x: (rows, in)  y, dy: (rows, out)  dx: (rows, in).
  // REQUIRES: dx does not alias x or dy.
  virtual void Forward(ConstMatMap x, MatMap y) const;
  virtual void BackwardInput(ConstMatMap x, ConstMatMap dy, MatMap dx) const;
  virtual void BackwardWeight(ConstMatMap x, ConstMatMap dy) { (void)x, (void)dy; }

 protected:
  explicit Layer(OpDesc desc) : DescribedLayer(std::move(desc)) {}
  float* params_ = nullptr;
  float* grads_ = nullptr;
};

// The layer an op describes, called with at most `max_rows` token rows
// (attention sizes its scratch by it). REQUIRES: op.is_layer() (an add is no
// layer: the stage runs it as an addition).
std::unique_ptr<Layer> MakeLayer(const OpDesc& op, int max_rows);
// DescribeLayer + MakeLayer: a layer for `in` features. Throws ConfigError as
// DescribeLayer.
std::unique_ptr<Layer> MakeLayer(const LayerSpec& spec, int in);

// Cross-entropy over one microbatch (softmax + negative log-likelihood).
// logits: (rows, classes); labels: rows values in [0, classes).
// Writes dlogits = (softmax(logits) - onehot(labels)) * grad_scale and
// returns the SUM over rows of -log softmax[label] (the caller divides by the
// whole batch size, and passes grad_scale = 1 / batch size, so that the
// microbatches' gradients add up to the mean loss's gradient). Counts correct
// argmax predictions into *correct if given. dlogits may be null (evaluation).
double CrossEntropy(ConstMatMap logits, std::span<const std::int32_t> labels, float grad_scale, float* dlogits,
                    std::int64_t* correct);

}  // namespace baton

#endif  // BATON_HOST_LAYERS_H_
