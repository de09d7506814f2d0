// Fuzzes the training-config parser: YAML text in, a TrainConfig or a
// ConfigError out. ParseTrainConfig's contract is that every bad input is a
// baton::Error naming where and why, so only baton::Error is caught here: any
// other exception (a YAML::Exception that slipped past the reader, a
// std::out_of_range, ...) escapes, terminates with its type and message, and
// libFuzzer saves the input as a crash, as do sanitizer reports and hangs.
//
// Lines starting "#set " are YAML comments to the parser and are also passed
// as --set overrides ("#set model.layers.0.out=8"), so the override path is
// fuzzed with the same inputs.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "baton/config.h"
#include "baton/error.h"

namespace {

// Longer inputs add nothing the parser has not seen, and slow the search.
constexpr std::size_t kMaxInput = 8192;

std::vector<std::string> Overrides(std::string_view text) {
  constexpr std::string_view kPrefix = "#set ";
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(start, end - start);
    if (line.substr(0, kPrefix.size()) == kPrefix) out.emplace_back(line.substr(kPrefix.size()));
    start = end + 1;
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > kMaxInput) return -1;  // -1: not added to the corpus
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const baton::TrainConfig config = baton::ParseTrainConfig(text, "fuzz.yaml", Overrides(text));
    // The resolved settings, as `baton validate` prints them.
    (void)baton::DescribeTrainConfig(config);
  } catch (const baton::Error&) {
    // A rejected config: the expected outcome for most inputs.
  }
  return 0;
}
