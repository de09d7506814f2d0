// The ring store's slot writes in device memory against cudaMemcpy device to
// device of the same bytes into the same footprint, timed on the GPU with
// CUDA events (manual time), so the host's bookkeeping (Acquire, Release)
// counts only where it delays the copies. BM_Ratio times the two
// interleaved in one run and reports store_vs_memcpy (1.0 = no overhead).
//
//   build/bench/cuda_store_bench
#include <benchmark/benchmark.h>

#include <cstddef>
#include <vector>

#include "cuda_util.h"
#include "baton/store.h"
#include "device_memory.h"

namespace {

using baton::cuda::DeviceBuffer;
using baton::cuda::Event;
using baton::cuda::Stream;

constexpr int kCapacity = 15;  // a deep ring: an early stage of a long pipeline
constexpr int kWritesPerTiming = 64;

bool HaveDevice(benchmark::State& state) {
  if (baton::cuda::DeviceCount() > 0) return true;
  state.SkipWithError("no CUDA device");
  return false;
}

// One microbatch's activations, on the device.
DeviceBuffer<float> Source(std::size_t floats) {
  DeviceBuffer<float> src(floats);
  BATON_CUDA_CHECK(cudaMemset(src.data(), 0x3f, src.bytes()));
  return src;
}

// GPU seconds of `writes` calls of `one(j)` on `stream`.
template <typename F>
double GpuSeconds(Stream& stream, int first, int writes, F one) {
  Event start(true), stop(true);
  start.Record(stream.get());
  for (int j = first; j < first + writes; ++j) one(j);
  stop.Record(stream.get());
  BATON_CUDA_CHECK(cudaEventSynchronize(stop.get()));  // the benchmark's own timing, outside any step
  float ms = 0;
  BATON_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
  return ms * 1e-3;
}

void BM_StoreWrite(benchmark::State& state) {
  if (!HaveDevice(state)) return;
  const auto floats = static_cast<std::size_t>(state.range(0)) / sizeof(float);
  DeviceBuffer<float> src = Source(floats);
  Stream stream;
  baton::cuda::DeviceMemory memory(stream.get());
  baton::ActivationStore store("bench", floats * sizeof(float), kCapacity, memory);
  int j = 0;
  for (auto _ : state) {
    state.SetIterationTime(GpuSeconds(stream, j, kWritesPerTiming, [&](int mb) {
      store.Acquire(mb);
      store.Write(mb, 0, {reinterpret_cast<const std::byte*>(src.data()), floats * sizeof(float)});
      store.Release(mb);
    }));
    j += kWritesPerTiming;
  }
  state.SetBytesProcessed(state.iterations() * kWritesPerTiming * static_cast<std::int64_t>(floats * sizeof(float)));
}

void BM_MemcpyD2D(benchmark::State& state) {
  if (!HaveDevice(state)) return;
  const auto floats = static_cast<std::size_t>(state.range(0)) / sizeof(float);
  DeviceBuffer<float> ring(floats * kCapacity);
  DeviceBuffer<float> src = Source(floats);
  Stream stream;
  int j = 0;
  for (auto _ : state) {
    state.SetIterationTime(GpuSeconds(stream, j, kWritesPerTiming, [&](int mb) {
      BATON_CUDA_CHECK(cudaMemcpyAsync(ring.data() + (mb % kCapacity) * floats, src.data(), floats * sizeof(float),
                                       cudaMemcpyDeviceToDevice, stream.get()));
    }));
    j += kWritesPerTiming;
  }
  state.SetBytesProcessed(state.iterations() * kWritesPerTiming * static_cast<std::int64_t>(floats * sizeof(float)));
}

// Both, interleaved in one run: store_vs_memcpy = store time / memcpy time.
void BM_Ratio(benchmark::State& state) {
  if (!HaveDevice(state)) return;
  const auto floats = static_cast<std::size_t>(state.range(0)) / sizeof(float);
  DeviceBuffer<float> ring(floats * kCapacity);
  DeviceBuffer<float> src = Source(floats);
  Stream stream;
  baton::cuda::DeviceMemory memory(stream.get());
  baton::ActivationStore store("bench", floats * sizeof(float), kCapacity, memory);
  double store_s = 0, memcpy_s = 0;
  int j = 0;
  for (auto _ : state) {
    store_s += GpuSeconds(stream, j, kWritesPerTiming, [&](int mb) {
      store.Acquire(mb);
      store.Write(mb, 0, {reinterpret_cast<const std::byte*>(src.data()), floats * sizeof(float)});
      store.Release(mb);
    });
    memcpy_s += GpuSeconds(stream, j, kWritesPerTiming, [&](int mb) {
      BATON_CUDA_CHECK(cudaMemcpyAsync(ring.data() + (mb % kCapacity) * floats, src.data(), floats * sizeof(float),
                                       cudaMemcpyDeviceToDevice, stream.get()));
    });
    j += kWritesPerTiming;
    state.SetIterationTime(1.0);  // the counters carry the result
  }
  const double bytes = double(state.iterations()) * kWritesPerTiming * double(floats * sizeof(float));
  state.counters["store_GBps"] = bytes / store_s / 1e9;
  state.counters["memcpy_GBps"] = bytes / memcpy_s / 1e9;
  state.counters["store_vs_memcpy"] = store_s / memcpy_s;
}

// Slot sizes from a small MLP's microbatch (64 KiB) to a transformer layer's
// (64 MiB).
BENCHMARK(BM_StoreWrite)->RangeMultiplier(16)->Range(64 << 10, 64 << 20)->UseManualTime();
BENCHMARK(BM_MemcpyD2D)->RangeMultiplier(16)->Range(64 << 10, 64 << 20)->UseManualTime();
BENCHMARK(BM_Ratio)->RangeMultiplier(16)->Range(64 << 10, 64 << 20)->UseManualTime()->Iterations(20);

}  // namespace
