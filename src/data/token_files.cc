// The tokenised files people already have, read as documents (data.h):
// Megatron-LM's indexed dataset, llm.c's token shards, JSON Lines text,
// and the fortunes corpus. Every header field and index entry is checked
// against the file's size before it is used, and before anything
// proportional to what a header claims is allocated.
#include <cstring>
#include <limits>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "baton/data.h"
#include "baton/error.h"

namespace baton {

namespace {

template <typename T>
T Load(std::span<const std::byte> bytes, std::size_t at) {
  T v;
  std::memcpy(&v, bytes.data() + at, sizeof v);
  return v;
}

// The ConfigError of a bad file: "PATH: byte N: WHAT (RULE)".
ConfigError Bad(const std::string& path, std::uint64_t byte, const std::string& what) {
  return ConfigError(fmt::format("{}: byte {}: {}", path, byte, what));
}

constexpr char kMegatronMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr std::size_t kMegatronHeader = 9 + 8 + 1 + 8 + 8;  // magic, version, dtype, S, C

// The token type of an MMIDIDX dtype code (at byte 17 of `idx_path`):
// integers only.
TokenDocuments::Type MegatronType(const std::string& idx_path, unsigned code) {
  switch (code) {
    case 1: return TokenDocuments::Type::kU8;
    case 2: return TokenDocuments::Type::kI8;
    case 3: return TokenDocuments::Type::kI16;
    case 4: return TokenDocuments::Type::kI32;
    case 5: return TokenDocuments::Type::kI64;
    case 8: return TokenDocuments::Type::kU16;
    case 6:
    case 7:
      throw Bad(idx_path, 17, fmt::format("dtype code {} ({}): token ids are integers (codes 1-5 and 8)", code,
                                          code == 6 ? "float64" : "float32"));
    default:
      throw Bad(idx_path, 17,
                fmt::format("unknown dtype code {} (1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 8 uint16)", code));
  }
}

}  // namespace

TokenDocuments OpenMegatron(const std::string& prefix) {
  const std::string idx_path = prefix + ".idx", bin_path = prefix + ".bin";
  MappedFile idx(idx_path, "Megatron index file (data.path is the prefix of its .idx and .bin)");
  MappedFile bin(bin_path, "Megatron data file (data.path is the prefix of its .idx and .bin)");
  const std::span<const std::byte> x = idx.bytes();
  if (x.size() < kMegatronHeader) {
    throw Bad(idx_path, x.size(),
              fmt::format("the file ends inside the header: an MMIDIDX index starts with {} bytes (magic, version, "
                          "dtype, sequence and document counts)",
                          kMegatronHeader));
  }
  if (std::memcmp(x.data(), kMegatronMagic, sizeof kMegatronMagic) != 0) {
    throw Bad(idx_path, 0, "not a Megatron-LM indexed dataset: the magic is not \"MMIDIDX\\0\\0\"");
  }
  const auto version = Load<std::uint64_t>(x, 9);
  if (version != 1) throw Bad(idx_path, 9, fmt::format("index version {}; baton reads version 1", version));
  const auto code = static_cast<unsigned>(Load<std::uint8_t>(x, 17));
  const TokenDocuments::Type type = MegatronType(idx_path, code);
  const std::uint64_t sequences = Load<std::uint64_t>(x, 18);
  const std::uint64_t indices = Load<std::uint64_t>(x, 26);
  // The counts against the file, before anything of their size is made.
  const std::uint64_t room = x.size() - kMegatronHeader;
  if (sequences > room / 12 || indices > (room - sequences * 12) / 8 ||
      kMegatronHeader + sequences * 12 + indices * 8 != x.size()) {
    throw Bad(idx_path, 18,
              fmt::format("the header claims {} sequences and {} document indices ({} bytes of index after the "
                          "header: 4 + 8 a sequence, 8 an index), but the file holds {} bytes after it",
                          sequences, indices,
                          sequences <= room && indices <= room ? fmt::format("{}", sequences * 12 + indices * 8)
                                                               : std::string("more than the file"),
                          room));
  }
  if (indices < 1) throw Bad(idx_path, 26, "no document indices: there must be at least the closing one");
  const std::size_t lengths_at = kMegatronHeader, pointers_at = lengths_at + sequences * 4,
                    docs_at = pointers_at + sequences * 8;
  const std::span<const std::byte> b = bin.bytes();
  const int size = type == TokenDocuments::Type::kU8 || type == TokenDocuments::Type::kI8     ? 1
                   : type == TokenDocuments::Type::kI16 || type == TokenDocuments::Type::kU16 ? 2
                   : type == TokenDocuments::Type::kI32                                       ? 4
                                                                                              : 8;
  std::vector<TokenDocuments::Piece> pieces(sequences);
  for (std::uint64_t i = 0; i < sequences; ++i) {
    const std::size_t at_length = lengths_at + i * 4, at_pointer = pointers_at + i * 8;
    const auto length = Load<std::int32_t>(x, at_length);
    const auto pointer = Load<std::int64_t>(x, at_pointer);
    if (length < 0) throw Bad(idx_path, at_length, fmt::format("sequence {} has length {} (below 0)", i, length));
    if (pointer < 0 || static_cast<std::uint64_t>(pointer) > b.size() ||
        static_cast<std::uint64_t>(length) * size > b.size() - static_cast<std::uint64_t>(pointer)) {
      throw Bad(idx_path, at_pointer,
                fmt::format("sequence {} ({} tokens of {} bytes at byte {} of {}) lies past the end of the data "
                            "file, which holds {} bytes",
                            i, length, size, pointer, bin_path, b.size()));
    }
    pieces[i] = {pointer, length};
  }
  std::vector<std::int64_t> starts(indices);
  for (std::uint64_t d = 0; d < indices; ++d) {
    const std::size_t at = docs_at + d * 8;
    const auto index = Load<std::int64_t>(x, at);
    if (d == 0 && index != 0) throw Bad(idx_path, at, fmt::format("the first document index is {}, not 0", index));
    if (d > 0 && index < starts[d - 1]) {
      throw Bad(idx_path, at, fmt::format("document index {} is {}, below the one before ({}): the indices ascend",
                                          d, index, starts[d - 1]));
    }
    if (index < 0 || static_cast<std::uint64_t>(index) > sequences) {
      throw Bad(idx_path, at, fmt::format("document index {} is {}, outside the {} sequences", d, index, sequences));
    }
    starts[d] = index;
  }
  if (static_cast<std::uint64_t>(starts.back()) != sequences) {
    throw Bad(idx_path, docs_at + (indices - 1) * 8,
              fmt::format("the last document index is {}, not the sequence count {}: every sequence is a document's",
                          starts.back(), sequences));
  }
  return TokenDocuments("megatron:" + prefix, bin_path, type, std::move(bin), {}, std::move(pieces),
                        std::move(starts));
}

namespace {
constexpr std::int32_t kLlmcMagic = 20240520;
constexpr std::size_t kLlmcHeader = 256 * 4;
}  // namespace

TokenDocuments OpenLlmc(const std::string& path, std::int64_t eot) {
  MappedFile file(path, "llm.c token shard");
  const std::span<const std::byte> b = file.bytes();
  if (b.size() < kLlmcHeader) {
    throw Bad(path, b.size(), fmt::format("the file ends inside the header: an llm.c shard starts with 256 int32 "
                                          "({} bytes)",
                                          kLlmcHeader));
  }
  if (Load<std::int32_t>(b, 0) != kLlmcMagic) {
    throw Bad(path, 0, fmt::format("not an llm.c token shard: the magic is {}, not {}", Load<std::int32_t>(b, 0),
                                   kLlmcMagic));
  }
  const auto version = Load<std::int32_t>(b, 4);
  if (version != 1) {
    throw Bad(path, 4, fmt::format("shard version {}; baton reads version 1 (uint16 tokens)", version));
  }
  const auto count = Load<std::int32_t>(b, 8);
  if (count < 0) throw Bad(path, 8, fmt::format("a token count of {} (below 0)", count));
  const std::uint64_t want = kLlmcHeader + std::uint64_t(count) * 2;
  if (want != b.size()) {
    throw Bad(path, 8,
              fmt::format("the header claims {} tokens ({} bytes with the header), but the file holds {} bytes",
                          count, want, b.size()));
  }
  std::vector<TokenDocuments::Piece> pieces;
  std::vector<std::int64_t> starts;
  std::int64_t begin = 0;
  for (std::int64_t t = 0; t <= count; ++t) {
    const bool end = t == count;
    if (!end && (t == 0 || Load<std::uint16_t>(b, kLlmcHeader + std::size_t(t) * 2) != eot)) continue;
    if (t > begin) {
      starts.push_back(static_cast<std::int64_t>(pieces.size()));
      pieces.push_back({static_cast<std::int64_t>(kLlmcHeader) + begin * 2, t - begin});
    }
    begin = t;
  }
  starts.push_back(static_cast<std::int64_t>(pieces.size()));
  return TokenDocuments("llmc:" + path, path, TokenDocuments::Type::kU16, std::move(file), {}, std::move(pieces),
                        std::move(starts));
}

TokenDocuments OpenJsonl(const std::string& path) {
  MappedFile file(path, "JSON Lines file");
  const std::span<const std::byte> b = file.bytes();
  const std::string_view text(reinterpret_cast<const char*>(b.data()), b.size());
  std::vector<std::byte> owned;
  std::vector<TokenDocuments::Piece> pieces;
  std::vector<std::int64_t> starts;
  std::size_t line_start = 0;
  for (std::int64_t line = 1; line_start < text.size(); ++line) {
    std::size_t end = text.find('\n', line_start);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view row = text.substr(line_start, end - line_start);
    const std::size_t at = line_start;
    line_start = end + 1;
    if (row.find_first_not_of(" \t\r") == std::string_view::npos) continue;  // a blank line
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(row);
    } catch (const nlohmann::json::exception& e) {
      throw Bad(path, at, fmt::format("line {} is not JSON: {}", line, e.what()));
    }
    if (!j.is_object() || !j.contains("text") || !j["text"].is_string()) {
      throw Bad(path, at, fmt::format("line {} is not an object with a string \"text\" (a document a line)", line));
    }
    const std::string& doc = j["text"].get_ref<const std::string&>();
    if (doc.empty()) continue;
    starts.push_back(static_cast<std::int64_t>(pieces.size()));
    pieces.push_back({static_cast<std::int64_t>(owned.size()), static_cast<std::int64_t>(doc.size())});
    const auto* bytes = reinterpret_cast<const std::byte*>(doc.data());
    owned.insert(owned.end(), bytes, bytes + doc.size());
  }
  starts.push_back(static_cast<std::int64_t>(pieces.size()));
  return TokenDocuments("jsonl:" + path, path, TokenDocuments::Type::kU8, MappedFile(), std::move(owned),
                        std::move(pieces), std::move(starts));
}

TokenDocuments FortuneDocuments(const TextCorpus& corpus, const std::string& split) {
  if (split != "train" && split != "validation") {
    throw ConfigError(fmt::format("fortunes: unknown split '{}' (allowed: train, validation)", split));
  }
  const std::vector<std::uint8_t>& stream = split == "train" ? corpus.train : corpus.validation;
  std::vector<std::byte> owned(stream.size());
  if (!stream.empty()) std::memcpy(owned.data(), stream.data(), stream.size());
  const std::vector<std::int64_t>& ends = split == "train" ? corpus.train_ends : corpus.validation_ends;
  std::vector<TokenDocuments::Piece> pieces;
  std::vector<std::int64_t> starts;
  std::int64_t begin = 0;
  for (const std::int64_t end : ends) {
    starts.push_back(static_cast<std::int64_t>(pieces.size()));
    pieces.push_back({begin, end - begin});
    begin = end;
  }
  starts.push_back(static_cast<std::int64_t>(pieces.size()));
  return TokenDocuments("fortunes/" + split, "fortunes/" + split, TokenDocuments::Type::kU8, MappedFile(),
                        std::move(owned), std::move(pieces), std::move(starts));
}

}  // namespace baton
