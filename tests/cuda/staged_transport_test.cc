// The host-staged device transport between 2 ranks, run by ctest as
// `mpirun -np 2 cuda_staged_transport_test`; the ranks share one GPU when
// there is only one. Exit code 0: passed, 1: failed, 77: skipped (no GPU).
//
//   one way:   rank 0 sends 4 messages of different sizes (the largest is the
//              staging buffers' size) to rank 1, for several rounds over the
//              same request ids, without waiting for the GPU between rounds;
//              rank 1 checks every message afterwards.
//   ping-pong: rank 0 sends, rank 1 receives and sends the same device buffer
//              back on the same request id, rank 0 checks the echo.
//   errors:    a message larger than the staging buffer and a request id out
//              of range are refused.
#include "staged_transport.h"

#include <cstdio>
#include <exception>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "baton/comm.h"
#include "baton/error.h"
#include "cuda_util.h"

namespace {

using baton::cuda::DeviceBuffer;
using baton::cuda::Event;
using baton::cuda::Stream;

constexpr int kMaxRequests = 8;
constexpr std::size_t kMaxFloats = std::size_t{1} << 16;

// Messages are bytes; these tests send floats.
std::byte* B(float* p) { return reinterpret_cast<std::byte*>(p); }
const std::byte* B(const float* p) { return reinterpret_cast<const std::byte*>(p); }
constexpr double kTimeoutS = 60.0;
constexpr int kRounds = 4;
constexpr int kPingPongs = 5;
constexpr std::size_t kSizes[] = {1, 1000, 4099, kMaxFloats};  // per message; message m uses request id m
constexpr int kMessages = static_cast<int>(std::size(kSizes));

// Distinct small integers (exact in float) for each round, message and float.
std::vector<float> Pattern(int round, int message, std::size_t floats) {
  std::vector<float> v(floats);
  for (std::size_t i = 0; i < floats; ++i) {
    v[i] = static_cast<float>((i * 7 + static_cast<std::size_t>(round) * 131 + static_cast<std::size_t>(message) * 17) %
                              100003);
  }
  return v;
}

// `device` (floats of `expected.size()`) against `expected`; prints the first
// difference. REQUIRES: the work writing `device` has finished.
bool Matches(const float* device, const std::vector<float>& expected, int rank, const std::string& what) {
  std::vector<float> got(expected.size());
  BATON_CUDA_CHECK(cudaMemcpy(got.data(), device, got.size() * sizeof(float), cudaMemcpyDeviceToHost));
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] != expected[i]) {
      std::printf("rank %d: mismatch in %s (%zu floats): float %zu is %g, expected %g\n", rank, what.c_str(),
                  expected.size(), i, got[i], expected[i]);
      return false;
    }
  }
  return true;
}

// Returns true if every check on this rank passed.
bool OneWay(baton::cuda::DeviceTransport& dt, int rank, cudaStream_t compute) {
  std::vector<std::vector<std::vector<float>>> patterns(kRounds);  // (round, message, floats)
  for (int r = 0; r < kRounds; ++r) {
    for (int m = 0; m < kMessages; ++m) patterns[r].push_back(Pattern(r, m, kSizes[m]));
  }
  if (rank == 0) {
    std::vector<DeviceBuffer<float>> src;
    std::vector<Event> ready(kMessages);
    for (int m = 0; m < kMessages; ++m) src.emplace_back(kSizes[m]);
    for (int r = 0; r < kRounds; ++r) {
      for (int m = 0; m < kMessages; ++m) {
        // The producer: an upload on the compute stream that the staging copy
        // must wait for through `ready`. `patterns` outlives the copy.
        BATON_CUDA_CHECK(
            cudaMemcpyAsync(src[m].data(), patterns[r][m].data(), src[m].bytes(), cudaMemcpyHostToDevice, compute));
        ready[m].Record(compute);
        dt.Isend(m, B(src[m].data()), (kSizes[m]) * sizeof(float), 1, 10 + m, ready[m].get());
        dt.Progress();
      }
      // src[m] is refilled next round, so every send must be done with it.
      for (int m = 0; m < kMessages; ++m) dt.WaitSend(m, {"SEND (one way)", -1, r, 1});
    }
    std::printf("rank 0: ok: sent %d rounds of %d messages (1 to %zu floats) over reused request ids\n", kRounds,
                kMessages, kMaxFloats);
    return true;
  }
  // Rank 1: a destination per round and message, so that rounds follow each
  // other without a synchronisation and a new receive on an id meets the
  // previous round's host-to-device copy from its pinned buffer still queued.
  std::vector<std::vector<DeviceBuffer<float>>> dst(kRounds);
  for (int r = 0; r < kRounds; ++r) {
    for (int m = 0; m < kMessages; ++m) {
      dst[r].emplace_back(kSizes[m]);
      // NaN bytes, on the consumer stream: a copy that lands before this
      // poison (or not at all) shows up as a mismatch.
      BATON_CUDA_CHECK(cudaMemsetAsync(dst[r][m].data(), 0xff, dst[r][m].bytes(), compute));
    }
  }
  for (int r = 0; r < kRounds; ++r) {
    for (int m = 0; m < kMessages; ++m) dt.Irecv(m, B(dst[r][m].data()), (kSizes[m]) * sizeof(float), 0, 10 + m);
    for (int m = 0; m < kMessages; ++m) dt.WaitRecv(m, {"RECV (one way)", -1, r, 0}, compute);
  }
  BATON_CUDA_CHECK(cudaStreamSynchronize(compute));
  bool ok = true;
  for (int r = 0; r < kRounds; ++r) {
    for (int m = 0; m < kMessages; ++m) {
      ok &= Matches(dst[r][m].data(), patterns[r][m], rank,
                    "round " + std::to_string(r) + " message " + std::to_string(m));
    }
  }
  if (ok) {
    std::printf("rank 1: ok: received %d rounds of %d messages (1 to %zu floats) intact over reused request ids\n",
                kRounds, kMessages, kMaxFloats);
  }
  return ok;
}

bool PingPong(baton::cuda::DeviceTransport& dt, int rank, cudaStream_t compute) {
  DeviceBuffer<float> out(kMaxFloats), back(kMaxFloats);
  Event ready;
  bool ok = true;
  for (int i = 0; i < kPingPongs; ++i) {
    const std::size_t n = i % 2 == 0 ? kMaxFloats : kSizes[i % kMessages];
    if (rank == 0) {
      const std::vector<float> ping = Pattern(100 + i, 0, n);
      BATON_CUDA_CHECK(cudaMemcpyAsync(out.data(), ping.data(), n * sizeof(float), cudaMemcpyHostToDevice, compute));
      ready.Record(compute);
      dt.Irecv(1, B(back.data()), (n) * sizeof(float), 1, 51);
      dt.Isend(0, B(out.data()), (n) * sizeof(float), 1, 50, ready.get());
      dt.WaitSend(0, {"SEND (ping)", -1, i, 1});
      dt.WaitRecv(1, {"RECV (pong)", -1, i, 1}, compute);
      BATON_CUDA_CHECK(cudaStreamSynchronize(compute));  // also keeps `ping` alive until its upload is done
      ok &= Matches(back.data(), ping, rank, "ping-pong " + std::to_string(i));
    } else {
      // The echo goes out of the buffer it came in on and reuses the receive's
      // request id: the staging copy back must follow the copy in.
      dt.Irecv(0, B(back.data()), (n) * sizeof(float), 0, 50);
      dt.WaitRecv(0, {"RECV (ping)", -1, i, 0}, compute);
      ready.Record(compute);
      dt.Isend(0, B(back.data()), (n) * sizeof(float), 0, 51, ready.get());
      dt.WaitSend(0, {"SEND (pong)", -1, i, 0});
    }
  }
  if (ok && rank == 0)
    std::printf("rank 0: ok: %d ping-pongs of up to %zu floats came back intact\n", kPingPongs, kMaxFloats);
  return ok;
}

bool Refusals(baton::cuda::DeviceTransport& dt, int rank) {
  DeviceBuffer<float> buf(kMaxFloats + 1);
  bool ok = true;
  auto expect_error = [&](const char* what, auto call) {
    try {
      call();
      std::printf("rank %d: %s was accepted\n", rank, what);
      ok = false;
    } catch (const baton::Error&) {
    }
  };
  expect_error("a receive larger than the staging buffer",
               [&] { dt.Irecv(0, B(buf.data()), (kMaxFloats + 1) * sizeof(float), 1 - rank, 99); });
  expect_error("a send larger than the staging buffer",
               [&] { dt.Isend(0, B(buf.data()), (kMaxFloats + 1) * sizeof(float), 1 - rank, 99, nullptr); });
  expect_error("request id -1", [&] { dt.Irecv(-1, B(buf.data()), (1) * sizeof(float), 1 - rank, 99); });
  expect_error("request id max_requests", [&] { dt.Isend(kMaxRequests, B(buf.data()), (1) * sizeof(float), 1 - rank, 99, nullptr); });
  expect_error("WaitRecv with no receive", [&] { dt.WaitRecv(2, {"RECV", -1, 0, 1 - rank}, nullptr); });
  if (ok) std::printf("rank %d: ok: oversized messages and bad request ids are refused\n", rank);
  return ok;
}

int Run() {
  std::unique_ptr<baton::Transport> host = baton::MakeMpiTransport(kMaxRequests, kTimeoutS);
  host->Configure(kMaxRequests, kTimeoutS);
  const int rank = host->rank();
  if (host->size() != 2) {
    if (rank == 0) std::printf("this test needs exactly 2 ranks, got %d\n", host->size());
    return 1;
  }
  const int devices = baton::cuda::DeviceCount();
  if (host->AllMax(devices == 0 ? 1 : 0) != 0) {
    if (rank == 0) std::printf("skipped: no CUDA device on at least one rank\n");
    return 77;
  }
  BATON_CUDA_CHECK(cudaSetDevice(rank % devices));
  bool ok = true;
  {
    Stream compute;
    std::unique_ptr<baton::cuda::DeviceTransport> dt =
        baton::cuda::MakeStagedTransport(*host, kMaxRequests, kMaxFloats * sizeof(float), kTimeoutS);
    ok &= OneWay(*dt, rank, compute.get());
    ok &= PingPong(*dt, rank, compute.get());
    ok &= Refusals(*dt, rank);
  }
  // Every rank exits with the same code, so no rank is left waiting.
  const bool all_ok = host->AllMax(ok ? 0 : 1) == 0;
  if (rank == 0) std::printf("%s\n", all_ok ? "ok: staged transport" : "FAILED: staged transport");
  return all_ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  baton::MpiSession mpi(&argc, &argv);
  try {
    return Run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", baton::MpiSession::WorldRank(), e.what());
    baton::MpiSession::AbortWorld(1);
  }
}
