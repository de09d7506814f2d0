// The host's matrix-product rate at a model's shapes: `baton bench`'s
// hardware reference, measured with the layers' own products.
#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include "baton/model.h"
#include "layers.h"

namespace baton {
namespace {

double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

double HostGemmGflops(const std::vector<std::pair<int, int>>& shapes, int rows) {
  std::vector<std::unique_ptr<Layer>> layers;
  std::vector<std::vector<float>> params, xs, ys;
  double flops_per_pass = 0;
  for (auto [in, out] : shapes) {
    LayerSpec spec;
    spec.type = LayerType::kLinear;
    spec.out = out;
    layers.push_back(MakeLayer(spec, in));
    params.emplace_back(layers.back()->NumParams(), 0.01f);
    layers.back()->Bind(params.back().data(), params.back().data());
    xs.emplace_back(std::size_t(rows) * in, 0.5f);
    ys.emplace_back(std::size_t(rows) * out, 0.0f);
    flops_per_pass += 2.0 * rows * in * out;
  }
  auto pass = [&] {
    for (std::size_t i = 0; i < layers.size(); ++i) {
      layers[i]->Forward(ConstMatMap(xs[i].data(), rows, shapes[i].first),
                         MatMap(ys[i].data(), rows, shapes[i].second));
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

}  // namespace baton
