// Text as byte tokens: the fortune-format corpus reader, next-token windows,
// the token-id check and the unigram baseline.
//
// A fortune file is lines separated by '\n'; a line that is exactly "%" ends
// an entry. The corpus is read whole (Debian's fortunes are 2.7 MB), split
// by entry index, and each split becomes one stream of bytes that windows
// are cut from.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "baton/data.h"
#include "baton/error.h"

namespace baton {
namespace {

constexpr const char* kPackageHint =
    "the fortunes corpus is provided by the Debian package fortunes (files in /usr/share/games/fortunes)";
// Entry k goes to validation when k % kValidationEvery == kValidationEvery - 1.
constexpr std::int64_t kValidationEvery = 10;

std::vector<std::uint8_t> ReadBytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw ConfigError(fmt::format("fortune file '{}' cannot be opened: {}", path.string(), std::strerror(errno)));
  }
  std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw ConfigError(fmt::format("fortune file '{}' cannot be read", path.string()));
  return bytes;
}

// Calls `entry(begin, end)` for every non-empty entry of `text`; an entry's
// last line gets its '\n' from the caller if the file lacks one.
template <typename F>
void ForEachEntry(const std::vector<std::uint8_t>& text, F entry) {
  std::size_t start = 0;  // the current entry's first byte
  std::size_t line = 0;   // the current line's first byte
  while (line < text.size()) {
    const auto nl = std::find(text.begin() + static_cast<std::ptrdiff_t>(line), text.end(), std::uint8_t{'\n'});
    const std::size_t end = static_cast<std::size_t>(nl - text.begin());  // the line is [line, end)
    if (end - line == 1 && text[line] == '%') {
      if (line > start) entry(start, line);
      start = std::min(end + 1, text.size());
    }
    line = end + 1;
  }
  if (text.size() > start) entry(start, text.size());
}

}  // namespace

TextCorpus ReadFortuneFolder(const std::string& dir) {
  std::error_code ec;
  if (std::filesystem::exists(dir, ec) && !std::filesystem::is_directory(dir, ec)) {
    throw ConfigError(fmt::format("data.path: fortunes folder '{}' is a file, not a folder: data.path names the "
                                  "folder of fortune files (like /usr/share/games/fortunes)",
                                  dir));
  }
  if (!std::filesystem::is_directory(dir, ec)) {
    throw ConfigError(fmt::format("fortunes folder '{}' not found; {}", dir, kPackageHint));
  }
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.is_symlink() || !e.is_regular_file() || e.path().extension() == ".dat") continue;
    files.push_back(e.path());
  }
  if (ec) throw ConfigError(fmt::format("fortunes folder '{}' cannot be listed: {}", dir, ec.message()));
  std::sort(files.begin(), files.end(), [](const auto& a, const auto& b) { return a.filename() < b.filename(); });

  TextCorpus c;
  c.files = static_cast<std::int64_t>(files.size());
  for (const auto& path : files) {
    const std::vector<std::uint8_t> text = ReadBytes(path);
    ForEachEntry(text, [&](std::size_t begin, std::size_t end) {
      const bool validation = c.entries % kValidationEvery == kValidationEvery - 1;
      std::vector<std::uint8_t>& out = validation ? c.validation : c.train;
      out.insert(out.end(), text.begin() + static_cast<std::ptrdiff_t>(begin),
                 text.begin() + static_cast<std::ptrdiff_t>(end));
      std::int64_t bytes = static_cast<std::int64_t>(end - begin);
      if (text[end - 1] != '\n') {  // the file's last line
        out.push_back('\n');
        ++bytes;
      }
      out.push_back(kEntrySeparator);
      (validation ? c.validation_ends : c.train_ends).push_back(static_cast<std::int64_t>(out.size()));
      c.bytes += bytes;
      ++(validation ? c.validation_entries : c.train_entries);
      ++c.entries;
    });
  }
  if (c.entries == 0) {
    throw ConfigError(fmt::format("fortunes folder '{}' holds no entries in {} text files (expected files of "
                                  "entries separated by lines holding a single '%'); {}",
                                  dir, c.files, kPackageHint));
  }
  return c;
}

Dataset MakeTokenWindows(std::span<const std::uint8_t> tokens, int seq_len, const std::string& name,
                         bool want_inputs, bool want_labels) {
  if (seq_len < 1) throw ConfigError(fmt::format("{}: seq_len must be at least 1, got {}", name, seq_len));
  const std::int64_t windows = tokens.empty() ? 0 : static_cast<std::int64_t>(tokens.size() - 1) / seq_len;
  if (windows < 1) {
    throw ConfigError(fmt::format("{}: {} tokens do not fill one window of seq_len + 1 = {} tokens", name,
                                  tokens.size(), std::int64_t{seq_len} + 1));
  }
  Dataset d;
  d.name = name;
  d.samples = windows;
  d.sample = {DType::kI32, {1, seq_len}};
  d.classes = kByteVocabulary;
  d.labels_per_sample = seq_len;
  const std::size_t n = static_cast<std::size_t>(windows), t = static_cast<std::size_t>(seq_len);
  if (want_inputs) {
    d.inputs.resize(n * d.sample_bytes());  // (samples, seq_len) i32
    const std::span<std::int32_t> inputs = d.inputs_as<std::int32_t>();
    for (std::size_t i = 0; i < n * t; ++i) inputs[i] = tokens[i];  // window i starts at i * seq_len
  }
  if (want_labels) {
    d.labels.resize(n * t);  // (samples, seq_len): the inputs shifted by one
    for (std::size_t i = 0; i < n * t; ++i) d.labels[i] = tokens[i + 1];
  }
  return d;
}

Dataset LoadFortunes(const std::string& dir, const std::string& split, int seq_len, bool want_inputs,
                     bool want_labels) {
  if (split != "train" && split != "validation") {
    throw ConfigError(fmt::format("fortunes: unknown split '{}' (allowed: train, validation)", split));
  }
  if (seq_len < 1) throw ConfigError(fmt::format("fortunes: seq_len must be at least 1, got {}", seq_len));
  const TextCorpus corpus = ReadFortuneFolder(dir);
  const std::vector<std::uint8_t>& tokens = split == "train" ? corpus.train : corpus.validation;
  return MakeTokenWindows(tokens, seq_len, "fortunes/" + split, want_inputs, want_labels);
}

void CheckTokens(const Dataset& data, int vocab) {
  if (data.sample.dtype != DType::kI32) {
    throw ConfigError(fmt::format("dataset '{}' holds {} inputs, not token ids: a token model needs a token "
                                  "dataset (fortunes, synthetic_tokens)",
                                  data.name, ToString(data.sample)));
  }
  // A packed sample's unfilled positions are labelled kIgnoreLabel.
  auto check = [&](std::span<const std::int32_t> ids, std::int64_t per_sample, const char* part, bool ignored) {
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if ((ids[i] >= 0 && ids[i] < vocab) || (ignored && ids[i] == kIgnoreLabel)) continue;
      throw ConfigError(fmt::format("dataset '{}': {} token id {} (sample {}, position {}) is outside the model's "
                                    "vocabulary of {} (ids must be in 0..{})",
                                    data.name, part, ids[i], static_cast<std::int64_t>(i) / per_sample,
                                    static_cast<std::int64_t>(i) % per_sample, vocab, vocab - 1));
    }
  };
  check(data.inputs_as<std::int32_t>(), data.sample_elements(), "input", false);
  check(data.labels, data.labels_per_sample, "label", data.packed());
}

double UnigramCrossEntropy(const Dataset& train, const Dataset& validation, int vocab) {
  if (vocab < 1) throw ConfigError(fmt::format("unigram baseline: vocab must be at least 1, got {}", vocab));
  for (const Dataset* d : {&train, &validation}) {
    if (d->labels.empty()) throw ConfigError(fmt::format("unigram baseline: dataset '{}' holds no labels", d->name));
    for (std::int32_t t : d->labels) {
      if (t == kIgnoreLabel && d->packed()) continue;  // counts for nothing
      if (t < 0 || t >= vocab) {
        throw ConfigError(fmt::format("unigram baseline: dataset '{}' has token id {} outside 0..{}", d->name, t,
                                      vocab - 1));
      }
    }
  }
  std::vector<std::int64_t> count(static_cast<std::size_t>(vocab), 0);
  std::int64_t trained = 0, validated = 0;
  for (std::int32_t t : train.labels) {
    if (t == kIgnoreLabel) continue;
    ++count[static_cast<std::size_t>(t)];
    ++trained;
  }
  const double denominator = static_cast<double>(trained) + vocab;
  double sum = 0.0;
  for (std::int32_t t : validation.labels) {
    if (t == kIgnoreLabel) continue;
    sum -= std::log((static_cast<double>(count[static_cast<std::size_t>(t)]) + 1.0) / denominator);
    ++validated;
  }
  return sum / static_cast<double>(validated);
}

}  // namespace baton
