// The host-staged transport between GPU buffers on two ranks (device rank %
// devices: on a one-GPU machine both ranks share it), against the floor it is
// built on: a plain cudaMemcpy round trip of the same bytes through pinned
// host memory (device to host, then host to device), measured on rank 0 in
// the same run.
//
//   mpirun -np 2 build/bench/cuda_p2p_bench [--seconds S] [--json PATH]
//
// Rank 0 prints, per message size: the staged one-way time (half the median
// ping-pong round trip, from the first send's enqueue to the pong being in
// device memory), its bandwidth, the cudaMemcpy D2H + H2D time of the same
// bytes, and staged_vs_memcpy = staged one-way / memcpy round trip.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "baton/comm.h"
#include "baton/error.h"
#include "cuda_util.h"
#include "pingpong_common.h"
#include "staged_transport.h"

namespace {

using baton::bench::kMaxBytes;
using baton::bench::kMinBytes;
using baton::bench::kPing;
using baton::bench::kPong;
using baton::bench::kRecv;
using baton::bench::kSend;
using baton::bench::Median;
using baton::bench::ParsePingPongArgs;
using baton::bench::PingPongOptions;
using baton::bench::SizeName;

using baton::cuda::DeviceBuffer;
using baton::cuda::Event;
using baton::cuda::PinnedBuffer;
using baton::cuda::Stream;

constexpr int kMinReps = 10, kMaxReps = 20000;

struct Row {
  std::size_t bytes = 0;
  int reps = 0;
  double one_way_us = 0;
  double gb_per_s = 0;
  double memcpy_round_trip_us = 0;  // D2H + H2D of the same bytes
};

std::byte* Bytes(DeviceBuffer<float>& b) { return reinterpret_cast<std::byte*>(b.data()); }

struct Buffers {
  DeviceBuffer<float> out{kMaxBytes / sizeof(float)}, in{kMaxBytes / sizeof(float)};
  Stream compute;
  Event ready;
};

// One ping-pong of `floats` floats. Rank 1 echoes from the buffer it
// received into, once the compute stream has it. Rank 0 returns the round
// trip's seconds, ending when the pong is in its device buffer.
double RoundTrip(baton::Transport& host, baton::cuda::DeviceTransport& t, Buffers& b, std::size_t floats) {
  const cudaStream_t s = b.compute.get();
  if (host.rank() == 0) {
    const auto start = std::chrono::steady_clock::now();
    t.Irecv(kRecv, Bytes(b.in), floats * sizeof(float), 1, kPong);
    b.ready.Record(s);
    t.Isend(kSend, Bytes(b.out), floats * sizeof(float), 1, kPing, b.ready.get());
    t.WaitSend(kSend, {"SEND ping", -1, -1, 1});
    t.WaitRecv(kRecv, {"RECV pong", -1, -1, 1}, s);
    BATON_CUDA_CHECK(cudaStreamSynchronize(s));  // the benchmark's clock stops when the data is on the GPU
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  t.Irecv(kRecv, Bytes(b.in), floats * sizeof(float), 0, kPing);
  t.WaitRecv(kRecv, {"RECV ping", -1, -1, 0}, s);
  b.ready.Record(s);
  t.Isend(kSend, Bytes(b.in), floats * sizeof(float), 0, kPong, b.ready.get());
  t.WaitSend(kSend, {"SEND pong", -1, -1, 0});
  return 0;
}

// cudaMemcpy D2H then H2D of `bytes` through pinned memory, median of `reps`.
double MemcpyRoundTrip(Buffers& b, PinnedBuffer<float>& staging, std::size_t bytes, int reps) {
  std::vector<double> times(reps);
  for (int i = 0; i < reps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    BATON_CUDA_CHECK(cudaMemcpyAsync(staging.data(), b.out.data(), bytes, cudaMemcpyDeviceToHost, b.compute.get()));
    BATON_CUDA_CHECK(cudaMemcpyAsync(b.in.data(), staging.data(), bytes, cudaMemcpyHostToDevice, b.compute.get()));
    BATON_CUDA_CHECK(cudaStreamSynchronize(b.compute.get()));
    times[i] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  return Median(times);
}

std::vector<Row> Measure(baton::Transport& host, baton::cuda::DeviceTransport& t, const PingPongOptions& options) {
  Buffers b;
  PinnedBuffer<float> staging(kMaxBytes / sizeof(float));
  std::vector<float> pattern(kMaxBytes / sizeof(float));
  for (std::size_t i = 0; i < pattern.size(); ++i) pattern[i] = static_cast<float>(i % 4093);
  BATON_CUDA_CHECK(cudaMemcpy(b.out.data(), pattern.data(), kMaxBytes, cudaMemcpyHostToDevice));
  std::vector<double> times(kMaxReps);
  std::vector<Row> rows;
  for (std::size_t bytes = kMinBytes; bytes <= kMaxBytes; bytes *= 4) {
    const std::size_t floats = bytes / sizeof(float);
    const int warmup = static_cast<int>(std::clamp<std::size_t>((std::size_t{16} << 20) / bytes, 4, 200));
    for (int i = 0; i < warmup; ++i) times[i] = RoundTrip(host, t, b, floats);
    int reps = 0;
    if (host.rank() == 0) {
      const double estimate = Median(std::vector<double>(times.begin() + warmup / 2, times.begin() + warmup));
      reps =
          static_cast<int>(std::clamp(options.seconds / std::max(estimate, 1e-9), double(kMinReps), double(kMaxReps)));
    }
    reps = host.AllMax(reps);
    for (int i = 0; i < reps; ++i) times[i] = RoundTrip(host, t, b, floats);
    if (host.rank() != 0) continue;
    float first = 0, last = 0;
    BATON_CUDA_CHECK(cudaMemcpy(&first, b.in.data(), sizeof(float), cudaMemcpyDeviceToHost));
    BATON_CUDA_CHECK(cudaMemcpy(&last, b.in.data() + floats - 1, sizeof(float), cudaMemcpyDeviceToHost));
    if (first != pattern[0] || last != pattern[floats - 1]) {
      throw baton::Error(fmt::format("rank 0: the {}-byte pong differs from the ping", bytes));
    }
    const double one_way = Median(std::vector<double>(times.begin(), times.begin() + reps)) / 2;
    const double memcpy_rt = MemcpyRoundTrip(b, staging, bytes, std::min(reps, 200));
    rows.push_back({bytes, reps, one_way * 1e6, static_cast<double>(bytes) / one_way / 1e9, memcpy_rt * 1e6});
  }
  return rows;
}

void Report(const std::vector<Row>& rows, const PingPongOptions& options, const std::string& device) {
  std::printf("baton cuda_p2p_bench: host-staged transport ping-pong, 2 ranks on %s\n", device.c_str());
  std::printf("%10s %8s %16s %10s %22s %18s\n", "size", "reps", "one-way (us)", "GB/s", "memcpy D2H+H2D (us)",
              "staged/memcpy");
  for (const Row& r : rows) {
    std::printf("%10s %8d %16.2f %10.3f %22.2f %18.2f\n", SizeName(r.bytes).c_str(), r.reps, r.one_way_us, r.gb_per_s,
                r.memcpy_round_trip_us, r.one_way_us / r.memcpy_round_trip_us);
  }
  if (options.json_path.empty()) return;
  nlohmann::json j;
  j["benchmark"] = "cuda_p2p_bench";
  j["device"] = device;
  j["latency"] = "one-way = median ping-pong round trip / 2, microseconds, device memory to device memory";
  j["baseline"] = "cudaMemcpy device->pinned host->device of the same bytes, median, microseconds";
  for (const Row& r : rows) {
    j["rows"].push_back({{"bytes", r.bytes},
                         {"reps", r.reps},
                         {"one_way_us", r.one_way_us},
                         {"gb_per_s", r.gb_per_s},
                         {"memcpy_round_trip_us", r.memcpy_round_trip_us},
                         {"staged_vs_memcpy", r.one_way_us / r.memcpy_round_trip_us}});
  }
  std::ofstream file(options.json_path);
  file << j.dump(2) << "\n";
  if (!file) throw baton::Error(fmt::format("cannot write {}", options.json_path));
  std::printf("wrote %s\n", options.json_path.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  baton::MpiSession session(&argc, &argv);
  const int rank = baton::MpiSession::WorldRank();
  if (baton::MpiSession::WorldSize() != 2) {
    if (rank == 0) {
      std::fprintf(stderr, "cuda_p2p_bench: needs exactly 2 ranks, got %d; run it as: mpirun -np 2 cuda_p2p_bench\n",
                   baton::MpiSession::WorldSize());
    }
    return 2;
  }
  try {
    const PingPongOptions options = ParsePingPongArgs(argc, argv, "cuda_p2p_bench");
    std::unique_ptr<baton::Transport> host = baton::MakeMpiTransport();
    host->Configure(4, 60);
    const int devices = baton::cuda::DeviceCount();
    if (host->AllMax(devices == 0 ? 1 : 0) != 0) {
      if (rank == 0) std::fprintf(stderr, "cuda_p2p_bench: no CUDA device on some rank; nothing to measure\n");
      return 2;
    }
    BATON_CUDA_CHECK(cudaSetDevice(rank % devices));
    const std::string device = baton::cuda::DeviceDescription(rank % devices);
    std::unique_ptr<baton::cuda::DeviceTransport> t =
        baton::cuda::MakeStagedTransport(*host, 4, kMaxBytes, 60);
    const std::vector<Row> rows = Measure(*host, *t, options);
    if (rank == 0) Report(rows, options, device);
    host->Barrier();
  } catch (const baton::ConfigError& e) {
    if (rank == 0) std::fprintf(stderr, "cuda_p2p_bench: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_p2p_bench: rank %d: %s\n", rank, e.what());
    baton::MpiSession::AbortWorld(1);
  }
  return 0;
}
