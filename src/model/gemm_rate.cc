// The host's matrix-product rate at a model's shapes: `baton bench`'s
// hardware reference, measured with the layers' own products (OpenBLAS SGEMM).
#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include <cblas.h>

#include <cstdlib>
#include <iterator>
#include <string>

#include "baton/model.h"
#include "layers.h"

namespace baton {
namespace {

double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

double HostGemmGflops(const std::vector<std::pair<int, int>>& shapes, int rows) {
  // Each linear layer's three products at the microbatch's rows, as a
  // training step runs them: forward (rows, in) x (in, out), input gradient
  // (rows, out) x (out, in), weight gradient (out, rows) x (rows, in).
  std::vector<std::unique_ptr<Layer>> layers;
  std::vector<std::vector<float>> params, grads, xs, ys, dxs;
  double flops_per_pass = 0;
  for (auto [in, out] : shapes) {
    LayerSpec spec;
    spec.type = LayerType::kLinear;
    spec.out = out;
    spec.bias = false;
    layers.push_back(MakeLayer(spec, in));
    params.emplace_back(layers.back()->NumParams(), 0.01f);
    grads.emplace_back(layers.back()->NumParams(), 0.0f);
    layers.back()->Bind(params.back().data(), grads.back().data());
    xs.emplace_back(std::size_t(rows) * in, 0.5f);
    ys.emplace_back(std::size_t(rows) * out, 0.0f);
    dxs.emplace_back(std::size_t(rows) * in, 0.0f);
    flops_per_pass += 3 * 2.0 * rows * in * out;
  }
  auto pass = [&] {
    for (std::size_t i = 0; i < layers.size(); ++i) {
      const auto [in, out] = shapes[i];
      const ConstMatMap x(xs[i].data(), rows, in);
      layers[i]->Forward(x, MatMap(ys[i].data(), rows, out));
      const ConstMatMap dy(ys[i].data(), rows, out);
      layers[i]->BackwardInput(x, dy, MatMap(dxs[i].data(), rows, in));
      layers[i]->BackwardWeight(x, dy);
    }
  };
  pass();
  double best = 0;
  for (int round = 0; round < 5; ++round) {
    int passes = 0;
    const double start = Now();
    double now = start;
    while (now - start < 0.05) {
      pass();
      ++passes;
      now = Now();
    }
    best = std::max(best, flops_per_pass * passes / (now - start) / 1e9);
  }
  return best;
}

std::string HostBlasCore() { return openblas_get_corename(); }

std::string BetterBlasCore() {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return "";
  const std::string core = HostBlasCore();
  // Generic or pre-AVX2 kernels: what OpenBLAS picks for a model it does not know.
  static const char* const kGeneric[] = {"Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom", "Katmai",
                                         "Coppermine", "Northwood", "Banias", "Sandybridge"};
  if (std::find(std::begin(kGeneric), std::end(kGeneric), core) == std::end(kGeneric)) return "";
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return "";
}

}  // namespace baton
