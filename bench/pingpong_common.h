// What the two ping-pong benchmarks (p2p_bench: host buffers through the MPI
// transport; cuda_p2p_bench: GPU buffers through the host-staged transport)
// share: their command line, the sizes they measure, medians and size names.
#ifndef BATON_BENCH_PINGPONG_COMMON_H_
#define BATON_BENCH_PINGPONG_COMMON_H_

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "baton/error.h"

namespace baton::bench {

// Request ids: one send and one receive in flight per rank; tags.
inline constexpr int kSend = 0, kRecv = 1;
inline constexpr int kPing = 1, kPong = 2;
inline constexpr std::size_t kMinBytes = std::size_t{1} << 10, kMaxBytes = std::size_t{64} << 20;

struct PingPongOptions {
  double seconds = 0.2;  // measured time per size, roughly
  std::string json_path;
};

// [--seconds S] [--json PATH]; ConfigError naming `program` otherwise.
inline PingPongOptions ParsePingPongArgs(int argc, char** argv, std::string_view program) {
  PingPongOptions o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if ((arg == "--json" || arg == "--seconds") && i + 1 < argc) {
      const std::string value = argv[++i];
      if (arg == "--json") {
        o.json_path = value;
      } else {
        char* end = nullptr;
        o.seconds = std::strtod(value.c_str(), &end);
        if (*end != '\0' || !(o.seconds > 0)) {
          throw ConfigError(fmt::format("--seconds {}: expected a number of seconds > 0", value));
        }
      }
    } else {
      throw ConfigError(
          fmt::format("unexpected argument '{}'; usage: mpirun -np 2 {} [--seconds S] [--json PATH]", arg, program));
    }
  }
  return o;
}

inline double Median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

inline std::string SizeName(std::size_t bytes) {
  if (bytes >= (std::size_t{1} << 20)) return fmt::format("{} MiB", bytes >> 20);
  return fmt::format("{} KiB", bytes >> 10);
}

}  // namespace baton::bench

#endif  // BATON_BENCH_PINGPONG_COMMON_H_
