// The GPU's matrix-product rate at a model's shapes: `baton bench`'s hardware
// reference on `device: cuda`, measured with the CUDA linear layers' own
// products (cuBLAS, in the run's precision) and timed with CUDA events.
#include "gemm_rate.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "baton/model.h"
#include "baton/timing.h"
#include "cuda_layers.h"
#include "cuda_util.h"

namespace baton::cuda {

double LinearGflops(cudaStream_t stream, Precision precision, const std::vector<std::pair<int, int>>& shapes,
                    int rows) {
  if (shapes.empty() || rows < 1) return 0;
  CublasHandle cublas(stream);
  Context ctx;
  ctx.stream = stream;
  ctx.cublas = cublas.get();
  ctx.precision = precision;
  // One layer (no bias: the products alone) and its weights per shape; the
  // activations share three buffers sized for the widest layer. Every byte
  // is 0x3c (floats near 0.0115): the products run on non-zero data, whose
  // rate a GPU's power management may treat differently from zeros.
  std::vector<std::unique_ptr<CudaLayer>> layers;
  std::vector<DeviceBuffer<float>> params, grads;
  std::size_t widest = 0;
  for (auto [in, out] : shapes) {
    LayerSpec spec;
    spec.type = LayerType::kLinear;
    spec.out = out;
    spec.bias = false;
    layers.push_back(MakeCudaLayer(spec, in, rows));
    params.emplace_back(layers.back()->NumParams());
    grads.emplace_back(layers.back()->NumParams());
    BATON_CUDA_CHECK(cudaMemsetAsync(params.back().data(), 0x3c, params.back().bytes(), stream));
    BATON_CUDA_CHECK(cudaMemsetAsync(grads.back().data(), 0, grads.back().bytes(), stream));
    layers.back()->Bind(params.back().data(), grads.back().data());
    layers.back()->RefreshWeights(ctx);
    widest = std::max<std::size_t>(widest, static_cast<std::size_t>(std::max(in, out)));
  }
  DeviceBuffer<float> x(static_cast<std::size_t>(rows) * widest), y(x.size()), dx(x.size());
  BATON_CUDA_CHECK(cudaMemsetAsync(x.data(), 0x3c, x.bytes(), stream));
  BATON_CUDA_CHECK(cudaMemsetAsync(y.data(), 0x3c, y.bytes(), stream));
  auto pass = [&] {
    for (auto& l : layers) {
      l->Forward(ctx, x.data(), y.data(), rows);
      l->BackwardInput(ctx, x.data(), y.data(), dx.data(), rows);
      l->BackwardWeight(ctx, x.data(), y.data(), rows);
    }
  };
  Event start(true), stop(true);
  auto seconds = [&](int passes) {
    start.Record(stream);
    for (int i = 0; i < passes; ++i) pass();
    stop.Record(stream);
    BATON_CUDA_CHECK(cudaEventSynchronize(stop.get()));
    float ms = 0;
    BATON_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
    return 1e-3 * static_cast<double>(ms);
  };
  // The warm-up pass lets cuBLAS pick its kernels and the clocks rise.
  return ProbeFlops(shapes, rows) / BestSecondsPerPass(seconds) / 1e9;
}

}  // namespace baton::cuda
