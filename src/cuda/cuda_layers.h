// Layers, the loss and the optimizers on a CUDA device: the same layer types,
// parameter layout (PyTorch's order and shapes) and update rules as the CPU
// path in baton/model.h, so the same config trains on either.
//
// Matrices are row-major (rows = samples, columns = features) in device
// memory, exactly as on the CPU. Linear layers multiply through cuBLAS, in
// FP32; in TF32 (FP32 data, tensor-core products with FP32 accumulation); or
// in BF16 with FP32 accumulation: parameters, gradients and activations stay
// FP32, the weights' BF16 copy is made once per parameter update
// (RefreshWeights), and the activation operands are rounded to BF16 just
// before the multiply. Activations, layernorm and the loss are CUDA kernels.
// Forward (F), input-gradient backward (I) and weight-gradient backward (W)
// are separate calls, as on the CPU.
//
// Every call only enqueues work on ctx.stream: nothing here synchronises the
// host with the device. Scratch memory (BF16 operand copies, layernorm
// statistics) and the weights' BF16 copy are allocated once at construction,
// for up to `max_rows` rows.
#ifndef BATON_CUDA_CUDA_LAYERS_H_
#define BATON_CUDA_CUDA_LAYERS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "baton/choices.h"
#include "baton/model.h"
#include "baton/view.h"
#include "cuda_util.h"

namespace baton::cuda {

// Where a layer's work goes: the compute stream, a cuBLAS handle bound to it,
// and the precision of the linear layers' operands; and for a call on
// packed documents (data.packing), `starts` (SequencePart::starts, in
// device memory): per sample of the call, per token of its whole sequence
// (stride op.seq), its document's first position; the call's views are
// shaped for its tokens. Null: one document a sample.
struct Context {
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;
  Precision precision = Precision::kFP32;
  const std::int32_t* starts = nullptr;
};

class CudaLayer : public DescribedLayer {
 public:
  virtual ~CudaLayer() = default;

  // REQUIRES: device buffers of NumParams() floats that outlive the layer.
  void Bind(float* params, float* grads) {
    params_ = params;
    grads_ = grads;
  }

  // The parameters changed (bound, loaded, or stepped by the optimizer):
  // refreshes what the layer derives from them — in BF16, the weights' BF16
  // copy that every BF16 call multiplies with. Enqueued on ctx.stream, so
  // calls enqueued after it see the new copy. No-op in FP32 and TF32, and
  // for layers without weights.
  virtual void RefreshWeights(const Context& ctx) { (void)ctx; }

  // Bytes of device memory the layer allocated for its own use
  // (ScratchBytes, baton/model.h).
  virtual std::size_t ScratchBytes() const { return 0; }

  // The stage's calls (StageDevice): tensors as views (token ids for an
  // embedding; (samples, seq, features) for attention), with the op's saved
  // state and stash (OpDesc::saved_per_row and stash_per_row floats per
  // token row, device memory; null for layers without them). Per-row layers
  // run the matrix calls below over (every token row, features); I with a
  // null dx does nothing for them, but attention still leaves W its stash.
  virtual void ForwardOp(const Context& ctx, const ConstView& x, const View& y, float* saved) const;
  virtual void BackwardInputOp(const Context& ctx, const ConstView& x, const float* saved, const ConstView& dy,
                               const View& dx, float* stash) const;
  virtual void BackwardWeightOp(const Context& ctx, const ConstView& x, const float* saved, const ConstView& dy,
                                const float* stash);

  // y = f(x).  x: (rows, in)  y: (rows, out), device.  Overwrites y.
  // REQUIRES: rows <= the max_rows given at construction.
  virtual void Forward(const Context& ctx, const float* x, float* y, int rows) const = 0;
  // dx = (df/dx)^T dy given the layer's input x. Overwrites dx.
  virtual void BackwardInput(const Context& ctx, const float* x, const float* dy, float* dx, int rows) const = 0;
  // grads += (df/dparams)^T dy given the layer's input x (ADDS). No-op
  // without parameters.
  virtual void BackwardWeight(const Context& ctx, const float* x, const float* dy, int rows) {
    (void)ctx, (void)x, (void)dy, (void)rows;
  }

 protected:
  explicit CudaLayer(OpDesc desc) : DescribedLayer(std::move(desc)) {}
  float* params_ = nullptr;
  float* grads_ = nullptr;
};

// The layer `op` describes — linear (nn.Linear or Conv1D layout), relu, gelu
// (tanh form), layernorm, embedding, position embedding or causal
// self-attention — for up to `max_rows` token rows per call. Throws
// ConfigError for max_rows < 1 or an add (not a layer).
std::unique_ptr<CudaLayer> MakeCudaLayer(const OpDesc& op, int max_rows);
// DescribeLayer + MakeCudaLayer. Throws ConfigError as DescribeLayer.
std::unique_ptr<CudaLayer> MakeCudaLayer(const LayerSpec& spec, int in, int max_rows);

// out = a + b (n floats), the residual block's skip addition.
void Add(const Context& ctx, const float* a, const float* b, float* out, std::size_t n);
// y += x (n floats): gradients meeting at a residual block's input.
void AddInto(const Context& ctx, const float* x, float* y, std::size_t n);
// *largest (a device scalar) = max(*largest, the bits of the largest |x| of
// the n floats): 0x7f800000 or more means a NaN or an infinity among them.
void LargestBits(const Context& ctx, const float* x, std::size_t n, unsigned* largest);

// The clip's pass (StageDevice::GradientSquares, ScaleGradients), on the
// context's stream. SquareSums: sums[r] (device doubles) = the sum of the
// squares of x's floats [ranges[2r], ranges[2r] + ranges[2r + 1]) for the
// `count` ranges (device (first, count) pairs), `longest`
// the longest count, `partials` count x kSquareBlocks device doubles of
// scratch; each range summed in double in an order fixed by its length
// alone. Scale: x's n floats times `factor`, each a float product.
constexpr int kSquareBlocks = 256;
void SquareSums(const Context& ctx, const float* x, const std::size_t* ranges, int count, std::size_t longest,
                double* partials, double* sums);
void Scale(const Context& ctx, float* x, std::size_t n, float factor);

// Cross-entropy over one microbatch, as baton::CrossEntropy: logits (rows,
// classes), labels (rows, device) in [0, classes). Writes dlogits =
// (softmax(logits) - onehot(labels)) * grad_scale unless dlogits is null,
// ADDS the sum over rows of -log softmax[label] into *loss_sum and the number
// of correct argmax predictions into *correct (both device scalars, read by
// the host once per step).
void CrossEntropy(const Context& ctx, const float* logits, const std::int32_t* labels, int rows, int classes,
                  float grad_scale, float* dlogits, double* loss_sum, unsigned long long* correct);

// SGD and AdamW on device buffers, with the CPU optimizers' formulas (scalar
// coefficients formed in double, rounded to float), so that FP32 runs match
// the CPU path to rounding.
class CudaOptimizer : public OptimizerBook {
 public:
  using OptimizerBook::OptimizerBook;
  virtual ~CudaOptimizer() = default;
  virtual void Step(const Context& ctx, float* params, const float* grads) = 0;
  // Device state buffers in baton::Optimizer::StateNames() order.
  virtual std::vector<std::span<float>> State() = 0;
};
std::unique_ptr<CudaOptimizer> MakeCudaOptimizer(const OptimizerSpec& spec, std::size_t num_params);

}  // namespace baton::cuda

#endif  // BATON_CUDA_CUDA_LAYERS_H_
