// The host's matrix-product rate at a model's shapes: `baton bench`'s
// hardware reference, measured with the layers' own products (OpenBLAS SGEMM).
#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include <cstdlib>
#include <iterator>
#include <string>

#include "baton/host.h"
#include "baton/timing.h"
#include "gemm.h"
#include "layers.h"

namespace baton {
namespace {


// The seconds of `passes` calls of `pass`, on the host's clock.
template <typename Pass>
std::function<double(int)> HostTimer(Pass& pass) {
  return [&pass](int passes) {
    const double start = MonotonicSeconds();
    for (int i = 0; i < passes; ++i) pass();
    return MonotonicSeconds() - start;
  };
}

}  // namespace

double HostGemmGflops(const std::vector<std::pair<int, int>>& shapes, int rows) {
  // Each linear layer's three products at the microbatch's rows, as a
  // training step runs them: forward (rows, in) x (in, out), input gradient
  // (rows, out) x (out, in), weight gradient (out, rows) x (rows, in).
  std::vector<std::unique_ptr<Layer>> layers;
  std::vector<std::vector<float>> params, grads, xs, ys, dxs;
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
  return ProbeFlops(shapes, rows) / BestSecondsPerPass(HostTimer(pass)) / 1e9;
}

std::string HostBlasCore() { return host_detail::LoadedBlas().corename(); }

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

namespace host_detail {

struct GemmMeter {
  GemmTotals totals;
  std::size_t max_calls = 0;
};
thread_local GemmMeter* tls_gemm_meter = nullptr;

double MeterNow() { return MonotonicSeconds(); }

void MeterAdd(GemmMeter* meter, bool trans_a, bool trans_b, long m, long n, long k, float beta, double seconds) {
  meter->totals.seconds += seconds;
  meter->totals.flops += 2.0 * double(m) * double(n) * double(k);
  if (meter->totals.calls.size() < meter->max_calls) {
    meter->totals.calls.push_back({trans_a, trans_b, int(m), int(n), int(k), beta});
  }
}

}  // namespace host_detail

void StartGemmMeter(std::size_t max_calls) {
  delete host_detail::tls_gemm_meter;
  host_detail::tls_gemm_meter = new host_detail::GemmMeter;
  host_detail::tls_gemm_meter->max_calls = max_calls;
  host_detail::tls_gemm_meter->totals.calls.reserve(max_calls);
}

GemmTotals StopGemmMeter() {
  GemmTotals out;
  if (host_detail::tls_gemm_meter != nullptr) out = std::move(host_detail::tls_gemm_meter->totals);
  delete host_detail::tls_gemm_meter;
  host_detail::tls_gemm_meter = nullptr;
  return out;
}

double BareGemmSeconds(const std::vector<GemmCall>& calls) {
  if (calls.empty()) return 0.0;
  const host_detail::Blas& blas = host_detail::LoadedBlas();
  // One set of operands per call, as the step has its own buffers.
  std::vector<std::vector<float>> a, b, c;
  for (const GemmCall& g : calls) {
    a.emplace_back(std::size_t(g.m) * g.k, 0.5f);
    b.emplace_back(std::size_t(g.k) * g.n, 0.25f);
    c.emplace_back(std::size_t(g.m) * g.n, 0.0f);
  }
  auto pass = [&] {
    for (std::size_t i = 0; i < calls.size(); ++i) {
      const GemmCall& g = calls[i];
      blas.sgemm(CblasRowMajor, g.trans_a ? CblasTrans : CblasNoTrans, g.trans_b ? CblasTrans : CblasNoTrans, g.m,
                  g.n, g.k, 1.0f, a[i].data(), g.trans_a ? g.m : g.k, b[i].data(), g.trans_b ? g.k : g.n, g.beta,
                  c[i].data(), g.n);
    }
  };
  return BestSecondsPerPass(HostTimer(pass));
}

}  // namespace baton
