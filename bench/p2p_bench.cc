// Point-to-point speed of baton's MPI transport: ping-pong between two ranks,
// with Isend/Irecv/Wait used exactly as the executor uses them (the receive
// posted before it is needed, every send waited on), so the figures are the
// transport's own limit for SEND_F/RECV_F and SEND_B/RECV_B.
//
//   mpirun -np 2 build/bench/p2p_bench [--seconds S] [--json PATH]
//
// Rank 0 prints, per message size, the one-way latency (half the median round
// trip) and the bandwidth (size / one-way time).
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
#include "pingpong_common.h"

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

constexpr int kMinReps = 10, kMaxReps = 100000;

struct Row {
  std::size_t bytes = 0;
  int reps = 0;
  double one_way_us = 0;  // half the median round trip
  double gb_per_s = 0;    // bytes / one-way time, 10^9 bytes per second
};

// One round trip of `floats` floats. Rank 0 pings and waits for the pong;
// rank 1 echoes the ping back from the buffer it received it in. Returns the
// round trip's seconds on rank 0 (0 on rank 1).
double RoundTrip(baton::Transport& t, std::vector<float>& out, std::vector<float>& in, std::size_t floats) {
  if (t.rank() == 0) {
    const auto start = std::chrono::steady_clock::now();
    t.Irecv(kRecv, in.data(), floats * sizeof(float), 1, kPong);
    t.Isend(kSend, out.data(), floats * sizeof(float), 1, kPing);
    t.Wait(kSend, {"SEND ping", -1, -1, 1});
    t.Wait(kRecv, {"RECV pong", -1, -1, 1});
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  t.Irecv(kRecv, in.data(), floats * sizeof(float), 0, kPing);
  t.Wait(kRecv, {"RECV ping", -1, -1, 0});
  t.Isend(kSend, in.data(), floats * sizeof(float), 0, kPong);
  t.Wait(kSend, {"SEND pong", -1, -1, 0});
  return 0;
}

std::vector<Row> Measure(baton::Transport& t, const PingPongOptions& options) {
  std::vector<float> out(kMaxBytes / sizeof(float)), in(kMaxBytes / sizeof(float));
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(i % 4093);
  std::vector<double> times(kMaxReps);
  std::vector<Row> rows;
  for (std::size_t bytes = kMinBytes; bytes <= kMaxBytes; bytes *= 4) {
    const std::size_t floats = bytes / sizeof(float);
    // Warm-up, fixed on both ranks: many for small messages (connection and
    // protocol setup), a few for large ones (each moves megabytes). Rank 0
    // sizes the measured run from the second half of it.
    const int warmup = static_cast<int>(std::clamp<std::size_t>((std::size_t{16} << 20) / bytes, 4, 200));
    for (int i = 0; i < warmup; ++i) times[i] = RoundTrip(t, out, in, floats);
    int reps = 0;
    if (t.rank() == 0) {
      const double estimate = Median(std::vector<double>(times.begin() + warmup / 2, times.begin() + warmup));
      reps =
          static_cast<int>(std::clamp(options.seconds / std::max(estimate, 1e-9), double(kMinReps), double(kMaxReps)));
    }
    // Rank 1 offers 0, so every rank runs rank 0's count.
    reps = t.AllMax(reps);
    for (int i = 0; i < reps; ++i) times[i] = RoundTrip(t, out, in, floats);
    if (t.rank() != 0) continue;
    if (in[0] != out[0] || in[floats - 1] != out[floats - 1]) {
      throw baton::Error(fmt::format("rank 0: the {}-byte pong differs from the ping", bytes));
    }
    const double one_way = Median(std::vector<double>(times.begin(), times.begin() + reps)) / 2;
    rows.push_back({bytes, reps, one_way * 1e6, static_cast<double>(bytes) / one_way / 1e9});
  }
  return rows;
}

void Report(const std::vector<Row>& rows, const PingPongOptions& options) {
  std::printf("baton p2p_bench: MPI transport ping-pong, 2 ranks\n");
  std::printf("%10s %12s %8s %16s %14s\n", "size", "bytes", "reps", "one-way (us)", "GB/s");
  for (const Row& r : rows) {
    std::printf("%10s %12zu %8d %16.2f %14.3f\n", SizeName(r.bytes).c_str(), r.bytes, r.reps, r.one_way_us, r.gb_per_s);
  }
  if (options.json_path.empty()) return;
  nlohmann::json j;
  j["benchmark"] = "p2p_bench";
  j["ranks"] = 2;
  j["latency"] = "one-way = median round trip / 2, microseconds";
  j["bandwidth"] = "bytes / one-way time, 1e9 bytes per second";
  for (const Row& r : rows) {
    j["rows"].push_back({{"bytes", r.bytes}, {"reps", r.reps}, {"one_way_us", r.one_way_us}, {"gb_per_s", r.gb_per_s}});
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
      std::fprintf(stderr, "p2p_bench: needs exactly 2 ranks, got %d; run it as: mpirun -np 2 p2p_bench\n",
                   baton::MpiSession::WorldSize());
    }
    return 2;
  }
  try {
    const PingPongOptions options = ParsePingPongArgs(argc, argv, "p2p_bench");
    std::unique_ptr<baton::Transport> t = baton::MakeMpiTransport();
    t->Configure(4, 60);
    const std::vector<Row> rows = Measure(*t, options);
    if (rank == 0) Report(rows, options);
    t->Barrier();
  } catch (const baton::ConfigError& e) {
    // Both ranks parse the same arguments and fail alike; rank 0 explains.
    if (rank == 0) std::fprintf(stderr, "p2p_bench: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "p2p_bench: rank %d: %s\n", rank, e.what());
    baton::MpiSession::AbortWorld(1);
  }
  return 0;
}
