// The host backend (src/host): the CPU's layers (Eigen for element-wise
// work, OpenBLAS for the matrix products), its optimizers and its devices,
// and what `baton bench` measures of its matrix products.
#ifndef BATON_HOST_H_
#define BATON_HOST_H_

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "baton/comm.h"
#include "baton/model.h"
#include "baton/stage_device.h"

namespace baton {

// ---- Devices ----
// The host: Eigen layers over host memory.
std::unique_ptr<StageDevice> MakeHostStageDevice();
// Host memory, and messages through `transport` as it is.
std::unique_ptr<RankDevice> MakeHostRankDevice(Transport& transport);

// ---- Optimizers ----
// SGD or AdamW with PyTorch's rules; state is allocated here, once, for
// `num_params` parameters.
std::unique_ptr<Optimizer> MakeOptimizer(const OptimizerSpec& spec, std::size_t num_params);

// The clip's pass over host gradients (train.clip_grad_norm): the sum of
// their squares in double, one after another, and their scaling. The host
// device's GradientSquares and ScaleGradients, and ZeRO 2 and 3's shards.
double SumOfSquares(std::span<const float> g);
void ScaleFloats(std::span<float> g, float factor);

// ---- The host's matrix-product rate (the hardware reference of `baton bench`) ----
// GFLOP/s of the given (in, out) linear shapes' three products (forward,
// input gradient, weight gradient) at `rows` rows, on this process's BLAS
// threads (one by default): the best of several rounds, each long enough to
// time. No step of the same shapes can do its products faster.
double HostGemmGflops(const std::vector<std::pair<int, int>>& shapes, int rows);

// Metering the host's matrix products (`baton bench`): while a meter runs
// on a thread, every SGEMM the layers call there is timed, its FLOPs
// (2 m n k) added up and its shape kept, so a step's products can be
// replayed bare, outside any action, and the two rates compared.
struct GemmCall {
  bool trans_a = false, trans_b = false;
  int m = 0, n = 0, k = 0;
  float beta = 0.0f;
};
struct GemmTotals {
  double seconds = 0.0;
  double flops = 0.0;
  std::vector<GemmCall> calls;  // the first max_calls products' shapes, in order
};
// Starts metering this thread's products, keeping at most `max_calls` shapes.
void StartGemmMeter(std::size_t max_calls);
// Stops it and returns what it saw.
GemmTotals StopGemmMeter();
// Seconds this thread's BLAS takes for `calls` run back to back on buffers
// of their sizes: the best of several rounds, each long enough to time.
double BareGemmSeconds(const std::vector<GemmCall>& calls);

// The CPU kernels OpenBLAS chose when it loaded ("SkylakeX", "Haswell", ...).
std::string HostBlasCore();
// The OPENBLAS_CORETYPE this CPU can run, when OpenBLAS fell back to generic
// kernels because it does not know the CPU's model (an OpenBLAS older than
// the CPU: it then runs SSE3 code, about a third of the speed): "SkylakeX"
// with AVX-512, "Haswell" with AVX2; "" when OpenBLAS's own choice stands or
// the user set OPENBLAS_CORETYPE. OpenBLAS reads it only when it loads, so
// the caller must start the process again with it (baton's main does).
std::string BetterBlasCore();

}  // namespace baton

#endif  // BATON_HOST_H_
