// A dataset read from its documents (Dataset::source) with every sample
// held in memory, for tests that look at whole datasets.
#ifndef BATON_TESTS_SUPPORT_HELD_SAMPLES_H_
#define BATON_TESTS_SUPPORT_HELD_SAMPLES_H_

#include <cstdint>
#include <span>

#include "baton/data.h"

namespace baton_test {

// `d` with its inputs, labels and starts (packed) read sample by sample
// through Dataset::ReadSample into memory, its source dropped: what the
// loader hands out, all at once.
inline baton::Dataset HeldSamples(const baton::Dataset& d) {
  baton::Dataset out = d;
  out.source.reset();
  const std::size_t n = static_cast<std::size_t>(d.samples), f = d.sample_bytes(),
                    l = static_cast<std::size_t>(d.labels_per_sample);
  if (d.has_inputs()) out.inputs.resize(n * f);  // (samples, ...)
  if (d.has_labels()) out.labels.resize(n * l);  // (samples, labels_per_sample)
  if (d.packed()) out.starts.resize(n * l);      // (samples, labels_per_sample)
  for (std::size_t i = 0; i < n; ++i) {
    d.ReadSample(static_cast<std::int64_t>(i),
                 d.has_inputs() ? std::span<std::byte>(out.inputs).subspan(i * f, f) : std::span<std::byte>(),
                 d.has_labels() ? std::span<std::int32_t>(out.labels).subspan(i * l, l) : std::span<std::int32_t>(),
                 d.packed() ? std::span<std::int32_t>(out.starts).subspan(i * l, l) : std::span<std::int32_t>());
  }
  return out;
}

}  // namespace baton_test

#endif  // BATON_TESTS_SUPPORT_HELD_SAMPLES_H_
