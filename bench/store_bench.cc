// Activation store speed: writing one microbatch's activations into its ring
// slot, against two baselines measured in the same run:
//   - memcpy: the same bytes into the same footprint with no bookkeeping (the
//     floor the ring can reach);
//   - whole-buffer update: the naive functional update that builds a new
//     (capacity, slot) buffer from the old one with slot j replaced, which is
//     what XLA does to pipelined activation checkpoints when the update is not
//     done in place.
// Every benchmark reports bytes/s over the slot's bytes, so the columns compare
// directly. BM_Ratios times the three itself, interleaved, and reports
// ring_vs_memcpy and whole_vs_ring per slot size.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <utility>
#include <vector>

#include "baton/store.h"

namespace {

// A deep ring: the simulator's peak in-flight microbatches for an early stage
// of a long pipeline.
constexpr int kCapacity = 15;

// Activations to write: one slot's worth, preallocated.
std::vector<float> Source(std::size_t slot_floats) {
  std::vector<float> src(slot_floats);
  for (std::size_t i = 0; i < slot_floats; ++i) src[i] = static_cast<float>(i % 1024) * 0.5f;
  return src;
}

// The three ways to put microbatch j's activations in place. Each owns its
// memory, allocated (and touched) once in the constructor.

// baton's ring: Acquire, Write, Release, as a forward and its last backward do.
class RingWriter {
 public:
  explicit RingWriter(std::size_t slot_floats)
      : store_("store_bench", slot_floats * sizeof(float), kCapacity, memory_) {}
  void Write(int j, std::span<const float> src) {
    store_.Acquire(j);
    store_.Write(j, 0, std::as_bytes(src));
    store_.Release(j);
  }
  std::size_t BytesCopiedPerWrite() const {
    return store_.writes() == 0 ? 0 : static_cast<std::size_t>(store_.bytes_copied() / store_.writes());
  }

 private:
  baton::HostMemory memory_;
  baton::ActivationStore store_;
};

// Plain memcpy into one of kCapacity destinations, laid out as the ring's
// slots are (one allocation of (capacity, slot)), so only the bookkeeping
// differs.
class MemcpyWriter {
 public:
  explicit MemcpyWriter(std::size_t slot_floats) : slot_floats_(slot_floats), dst_(slot_floats * kCapacity) {}
  void Write(int j, std::span<const float> src) {
    float* out = dst_.data() + static_cast<std::size_t>(j % kCapacity) * slot_floats_;
    std::memcpy(out, src.data(), src.size_bytes());
    benchmark::DoNotOptimize(out);
  }
  std::size_t BytesCopiedPerWrite() const { return slot_floats_ * sizeof(float); }

 private:
  std::size_t slot_floats_;
  std::vector<float> dst_;  // (capacity, slot_floats)
};

// The functional update: new = old with slot j replaced by src, then the new
// buffer becomes the old one. Copies capacity x slot bytes per write.
class WholeBufferWriter {
 public:
  explicit WholeBufferWriter(std::size_t slot_floats)
      : slot_floats_(slot_floats), old_(slot_floats * kCapacity), new_(slot_floats * kCapacity) {}
  void Write(int j, std::span<const float> src) {
    const std::size_t at = static_cast<std::size_t>(j % kCapacity) * slot_floats_;
    const std::size_t after = at + slot_floats_;
    std::memcpy(new_.data(), old_.data(), at * sizeof(float));
    std::memcpy(new_.data() + at, src.data(), src.size_bytes());
    std::memcpy(new_.data() + after, old_.data() + after, (old_.size() - after) * sizeof(float));
    std::swap(old_, new_);
    benchmark::DoNotOptimize(old_.data());
  }
  std::size_t BytesCopiedPerWrite() const { return slot_floats_ * sizeof(float) * kCapacity; }

 private:
  std::size_t slot_floats_;
  std::vector<float> old_, new_;  // each (capacity, slot_floats)
};

// range(0): slot size in bytes.
template <class Writer>
void WriteOneMicrobatch(benchmark::State& state) {
  const std::size_t slot_bytes = static_cast<std::size_t>(state.range(0));
  const std::size_t slot_floats = slot_bytes / sizeof(float);
  Writer writer(slot_floats);
  const std::vector<float> src = Source(slot_floats);
  int j = 0;  // microbatches 0, 1, 2, ... cycle through the kCapacity slots
  for (auto _ : state) {
    writer.Write(j++, src);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(slot_bytes));
  state.counters["slot_bytes"] = static_cast<double>(slot_bytes);
  state.counters["copied_per_write"] = static_cast<double>(writer.BytesCopiedPerWrite());
}

void BM_RingSlotWrite(benchmark::State& state) { WriteOneMicrobatch<RingWriter>(state); }
void BM_Memcpy(benchmark::State& state) { WriteOneMicrobatch<MemcpyWriter>(state); }
void BM_WholeBufferUpdate(benchmark::State& state) { WriteOneMicrobatch<WholeBufferWriter>(state); }

// Seconds per write over `writes` writes starting at microbatch *j.
template <class Writer>
double TimeRun(Writer* writer, std::span<const float> src, int writes, int* j) {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < writes; ++i) {
    writer->Write((*j)++, src);
    benchmark::ClobberMemory();
  }
  const auto stop = std::chrono::steady_clock::now();
  return std::chrono::duration<double>(stop - start).count() / writes;
}

double Median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

// The three methods timed here, in the same process and interleaved run by
// run, so a shared machine's slow moments fall on all three alike. Each run
// is whole laps of the ring (at least ~16 MiB through the ring for small
// slots, so a run is long against the clock); the ratio is of medians.
void BM_Ratios(benchmark::State& state) {
  constexpr int kRuns = 9;
  const std::size_t slot_bytes = static_cast<std::size_t>(state.range(0));
  const std::size_t slot_floats = slot_bytes / sizeof(float);
  const int laps = static_cast<int>(std::max<std::size_t>(1, (std::size_t{16} << 20) / (slot_bytes * kCapacity)));
  const int writes = laps * kCapacity;
  RingWriter ring(slot_floats);
  MemcpyWriter copy(slot_floats);
  WholeBufferWriter whole(slot_floats);
  const std::vector<float> src = Source(slot_floats);
  std::vector<double> ring_s(kRuns), copy_s(kRuns), whole_s(kRuns);
  for (auto _ : state) {
    int j_ring = 0, j_copy = 0, j_whole = 0;
    // Warm-up lap: caches and TLBs as in the steady state.
    TimeRun(&ring, src, kCapacity, &j_ring);
    TimeRun(&copy, src, kCapacity, &j_copy);
    TimeRun(&whole, src, kCapacity, &j_whole);
    for (int r = 0; r < kRuns; ++r) {
      ring_s[r] = TimeRun(&ring, src, writes, &j_ring);
      copy_s[r] = TimeRun(&copy, src, writes, &j_copy);
      whole_s[r] = TimeRun(&whole, src, writes, &j_whole);
    }
  }
  const double ring_t = Median(ring_s), copy_t = Median(copy_s), whole_t = Median(whole_s);
  state.counters["slot_bytes"] = static_cast<double>(slot_bytes);
  state.counters["writes_per_run"] = writes;
  state.counters["ring_us"] = ring_t * 1e6;
  state.counters["memcpy_us"] = copy_t * 1e6;
  state.counters["whole_us"] = whole_t * 1e6;
  state.counters["ring_vs_memcpy"] = ring_t / copy_t;
  state.counters["whole_vs_ring"] = whole_t / ring_t;
}

// 64 KiB, 256 KiB, 1 MiB, 4 MiB, 16 MiB slots.
void SlotSizes(benchmark::internal::Benchmark* b) {
  for (std::int64_t bytes = 64 << 10; bytes <= (16 << 20); bytes *= 4) b->Arg(bytes);
}

}  // namespace

// MinTime keeps the whole program well under a minute on a shared 2-core box.
BENCHMARK(BM_RingSlotWrite)->Apply(SlotSizes)->MinTime(0.2)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Memcpy)->Apply(SlotSizes)->MinTime(0.2)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_WholeBufferUpdate)->Apply(SlotSizes)->MinTime(0.2)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Ratios)->Apply(SlotSizes)->Iterations(1)->Unit(benchmark::kMillisecond);
