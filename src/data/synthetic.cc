// Seeded synthetic data: classification samples, and token windows. Inputs and labels come from two independent
// std::mt19937_64 streams (seeded with `seed` and `seed ^ kLabelStream`), so
// a rank that asks only for labels gets the same labels as one that asks for
// both. Values are derived from the engine's raw 64-bit output with fixed
// arithmetic instead of std::uniform_*_distribution, whose algorithms the
// standard leaves to the library: the data is the same on every rank and
// every toolchain (mt19937_64's output sequence itself is fully specified).
#include <cstdint>
#include <random>
#include <span>

#include <fmt/format.h>

#include "baton/data.h"
#include "baton/error.h"

namespace baton {
namespace {

constexpr std::uint64_t kLabelStream = 0x9e3779b97f4a7c15ULL;  // 2^64 / golden ratio

// Uniform in [-1, 1): the top 24 bits give k / 2^24 in [0, 1), exactly
// representable as float; 2x - 1 stays exact.
float UniformMinusOneOne(std::mt19937_64& rng) {
  const auto k = static_cast<std::uint32_t>(rng() >> 40);
  return static_cast<float>(k) * (2.0f / 16777216.0f) - 1.0f;
}

// Uniform in [0, classes) by multiply-shift on the top 32 bits; the bias is
// below classes / 2^32.
std::int32_t UniformLabel(std::mt19937_64& rng, int classes) {
  const std::uint64_t top = rng() >> 32;
  return static_cast<std::int32_t>((top * static_cast<std::uint64_t>(classes)) >> 32);
}

}  // namespace

Dataset MakeSynthetic(std::int64_t samples, int features, int classes, std::uint64_t seed, bool want_inputs,
                      bool want_labels) {
  if (samples <= 0) throw ConfigError(fmt::format("synthetic data: samples must be > 0, got {}", samples));
  if (features <= 0) throw ConfigError(fmt::format("synthetic data: features must be > 0, got {}", features));
  if (classes <= 0) throw ConfigError(fmt::format("synthetic data: classes must be > 0, got {}", classes));

  Dataset d;
  d.name = "synthetic";
  d.samples = samples;
  d.sample = {DType::kF32, {1, features}};
  d.classes = classes;
  if (want_inputs) {
    std::mt19937_64 rng(seed);
    d.inputs.resize(static_cast<std::size_t>(samples) * d.sample_bytes());  // (samples, features) f32
    for (float& x : d.inputs_as<float>()) x = UniformMinusOneOne(rng);
  }
  if (want_labels) {
    std::mt19937_64 rng(seed ^ kLabelStream);
    d.labels.resize(static_cast<std::size_t>(samples));  // (samples)
    for (std::int32_t& y : d.labels) y = UniformLabel(rng, classes);
  }
  return d;
}

Dataset MakeSyntheticTokens(std::int64_t samples, int seq_len, int vocab, std::uint64_t seed, bool want_inputs,
                            bool want_labels) {
  if (samples <= 0) throw ConfigError(fmt::format("synthetic tokens: samples must be > 0, got {}", samples));
  if (seq_len <= 0) throw ConfigError(fmt::format("synthetic tokens: seq_len must be > 0, got {}", seq_len));
  if (vocab <= 0) throw ConfigError(fmt::format("synthetic tokens: vocab must be > 0, got {}", vocab));

  Dataset d;
  d.name = "synthetic_tokens";
  d.samples = samples;
  d.sample = {DType::kI32, {1, seq_len}};
  d.classes = vocab;
  d.labels_per_sample = seq_len;
  const std::size_t n = static_cast<std::size_t>(samples), t = static_cast<std::size_t>(seq_len);
  if (want_inputs) d.inputs.resize(n * d.sample_bytes());  // (samples, seq_len) i32
  if (want_labels) d.labels.resize(n * t);                 // (samples, seq_len)
  const std::span<std::int32_t> inputs = d.inputs_as<std::int32_t>();
  // Sample i draws its seq_len + 1 tokens in order whatever is kept, so both
  // parts are the same on every rank.
  std::mt19937_64 rng(seed);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t k = 0; k <= t; ++k) {
      const std::int32_t token = UniformLabel(rng, vocab);
      if (want_inputs && k < t) inputs[i * t + k] = token;
      if (want_labels && k > 0) d.labels[i * t + k - 1] = token;
    }
  }
  return d;
}

}  // namespace baton
