// Layers, the loss and the optimizers. Every layer's forward, input-gradient
// backward (I) and weight-gradient backward (W) are separate calls, so split
// schedules (zb_h1, zb_h2, zbv) run for real; a full backward (B) is I then W.
//
// Layers own no memory: parameters and gradients are views into a stage-wide
// buffer bound once (Bind), activations are views the caller provides.
#ifndef BATON_MODEL_H_
#define BATON_MODEL_H_

#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "baton/tensor.h"

namespace baton {

// One entry of the model's layer list, as written in the config.
struct LayerSpec {
  std::string type;              // linear | relu | gelu | layernorm | residual
  int out = 0;                   // linear: output features
  bool bias = true;              // linear: with bias
  double eps = 1e-5;             // layernorm
  std::vector<LayerSpec> body;   // residual: y = x + body(x)
};

// A parameter tensor of a layer, in PyTorch's name and layout.
struct ParamInfo {
  std::string name;        // "weight" or "bias"
  std::vector<int> shape;  // linear weight: {out, in}; bias: {out}
  std::size_t offset = 0;  // in floats, from the layer's first parameter
  std::size_t size = 0;    // floats
};

class Layer {
 public:
  virtual ~Layer() = default;

  virtual std::string_view Type() const = 0;
  int in_features() const { return in_; }
  int out_features() const { return out_; }

  // Parameters in PyTorch's order; empty for relu/gelu.
  virtual std::vector<ParamInfo> Params() const { return {}; }
  std::size_t NumParams() const;
  // Multiply-adds per sample of one forward (for balanced partitioning).
  virtual double FlopsPerSample() const { return static_cast<double>(out_); }

  // REQUIRES: params and grads hold NumParams() floats each and outlive the layer.
  void Bind(float* params, float* grads) {
    params_ = params;
    grads_ = grads;
  }

  // PyTorch's default initialisation (nn.Linear: weight and bias uniform in
  // +-1/sqrt(in); nn.LayerNorm: weight 1, bias 0), drawing from `rng`.
  virtual void Init(std::mt19937_64& rng) { (void)rng; }

  // y = f(x).  x: (rows, in)  y: (rows, out).  Overwrites y.
  virtual void Forward(ConstMatMap x, MatMap y) const = 0;
  // dx = (df/dx)^T dy given the layer's input x.  dy: (rows, out)  dx: (rows, in).
  // Overwrites dx. REQUIRES: dx does not alias x or dy.
  virtual void BackwardInput(ConstMatMap x, ConstMatMap dy, MatMap dx) const = 0;
  // grads += (df/dparams)^T dy given the layer's input x. ADDS into the
  // gradient buffer. No-op for layers without parameters.
  virtual void BackwardWeight(ConstMatMap x, ConstMatMap dy) { (void)x, (void)dy; }

 protected:
  Layer(int in, int out) : in_(in), out_(out) {}
  float* params_ = nullptr;
  float* grads_ = nullptr;

 private:
  int in_, out_;
};

// Builds linear, relu, gelu (tanh form) or layernorm for `in` input features.
// Throws ConfigError for an unknown type or a bad size. (residual is not a
// layer: the stage flattens it into its body plus a skip addition.)
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

// ---- Optimizers: exactly PyTorch's update rules ----
struct OptimizerSpec {
  std::string type = "sgd";   // sgd | adamw
  double lr = 0.01;
  double momentum = 0.0;      // sgd
  double weight_decay = 0.0;  // sgd: added to the gradient; adamw: decoupled
  double beta1 = 0.9;         // adamw
  double beta2 = 0.999;       // adamw
  double eps = 1e-8;          // adamw
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update of params from grads (same size as given at construction).
  virtual void Step(std::span<float> params, std::span<const float> grads) = 0;
  // Optimizer state (momentum buffer; Adam's m and v), for checkpoints.
  virtual std::vector<std::span<float>> State() = 0;
  // PyTorch's names of the State() buffers, in order: "momentum_buffer" (SGD
  // with momentum); "exp_avg", "exp_avg_sq" (AdamW).
  virtual std::vector<std::string> StateNames() const = 0;
  virtual std::int64_t steps() const = 0;
  // Restores the number of steps taken (resuming from a checkpoint: AdamW's
  // bias correction and SGD's first-step momentum depend on it).
  virtual void set_steps(std::int64_t steps) = 0;
};

// State is allocated here, once, for `num_params` parameters.
std::unique_ptr<Optimizer> MakeOptimizer(const OptimizerSpec& spec, std::size_t num_params);

}  // namespace baton

#endif  // BATON_MODEL_H_
