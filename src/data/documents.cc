// Token documents (data.h TokenDocuments): reading a document's tokens,
// the vocabulary check, windows over the documents, and their statistics.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "baton/data.h"
#include "baton/error.h"

namespace baton {

namespace {

int BytesOf(TokenDocuments::Type type) {
  switch (type) {
    case TokenDocuments::Type::kU8:
    case TokenDocuments::Type::kI8:
      return 1;
    case TokenDocuments::Type::kI16:
    case TokenDocuments::Type::kU16:
      return 2;
    case TokenDocuments::Type::kI32:
      return 4;
    case TokenDocuments::Type::kI64:
      return 8;
  }
  return 1;
}

// A little-endian integer of `T` at `at` (the data is read as it lies:
// Megatron's pointers need not be aligned).
template <typename T>
T Load(const std::byte* at) {
  T v;
  std::memcpy(&v, at, sizeof v);
  return v;
}

}  // namespace

TokenDocuments::TokenDocuments(std::string name, std::string data_path, Type type, MappedFile data,
                               std::vector<std::byte> owned, std::vector<Piece> pieces,
                               std::vector<std::int64_t> starts)
    : name_(std::move(name)),
      data_path_(std::move(data_path)),
      type_(type),
      file_(std::move(data)),
      owned_(std::move(owned)),
      pieces_(std::move(pieces)),
      starts_(std::move(starts)) {
  data_ = owned_.empty() ? file_.bytes().data() : owned_.data();
  lengths_.resize(starts_.size() > 0 ? starts_.size() - 1 : 0);
  for (std::size_t d = 0; d < lengths_.size(); ++d) {
    std::int64_t n = 0;
    for (std::int64_t p = starts_[d]; p < starts_[d + 1]; ++p) n += pieces_[static_cast<std::size_t>(p)].tokens;
    lengths_[d] = n;
    tokens_ += n;
  }
}

int TokenDocuments::token_bytes() const { return BytesOf(type_); }

std::int32_t TokenDocuments::At(std::int64_t byte) const {
  const std::byte* at = data_ + byte;
  switch (type_) {
    case Type::kU8:
      return Load<std::uint8_t>(at);
    case Type::kI8:
      return Load<std::int8_t>(at);
    case Type::kI16:
      return Load<std::int16_t>(at);
    case Type::kU16:
      return Load<std::uint16_t>(at);
    case Type::kI32:
      return Load<std::int32_t>(at);
    case Type::kI64: {
      // An id past int32 is no model's: CheckBelow refuses it first.
      const std::int64_t v = Load<std::int64_t>(at);
      return v < std::numeric_limits<std::int32_t>::min() || v > std::numeric_limits<std::int32_t>::max()
                 ? -1
                 : static_cast<std::int32_t>(v);
    }
  }
  return -1;
}

void TokenDocuments::Read(std::int64_t doc, std::int64_t begin, std::span<std::int32_t> out) const {
  const int size = BytesOf(type_);
  std::size_t filled = 0;
  std::int64_t skip = begin;
  for (std::int64_t p = starts_[static_cast<std::size_t>(doc)];
       p < starts_[static_cast<std::size_t>(doc) + 1] && filled < out.size(); ++p) {
    const Piece& piece = pieces_[static_cast<std::size_t>(p)];
    if (skip >= piece.tokens) {
      skip -= piece.tokens;
      continue;
    }
    for (std::int64_t t = skip; t < piece.tokens && filled < out.size(); ++t) {
      out[filled++] = At(piece.byte + t * size);
    }
    skip = 0;
  }
}

void TokenDocuments::CheckBelow(std::int64_t vocab) const {
  const int size = BytesOf(type_);
  for (std::int64_t d = 0; d < documents(); ++d) {
    std::int64_t position = 0;
    for (std::int64_t p = starts_[static_cast<std::size_t>(d)]; p < starts_[static_cast<std::size_t>(d) + 1]; ++p) {
      const Piece& piece = pieces_[static_cast<std::size_t>(p)];
      for (std::int64_t t = 0; t < piece.tokens; ++t, ++position) {
        const std::int64_t byte = piece.byte + t * size;
        const std::int64_t id = type_ == Type::kI64 ? Load<std::int64_t>(data_ + byte) : At(byte);
        if (id >= 0 && id < vocab) continue;
        throw ConfigError(fmt::format("{}: byte {}: token id {} (document {}, position {}) is outside the model's "
                                      "vocabulary [0, {}): every token id must be below the vocabulary (data.vocab, "
                                      "model.vocab)",
                                      data_path_, byte, id, d, position, vocab));
      }
    }
  }
}

namespace {

// Windows of seq_len + 1 tokens over the documents one after another, the
// stride seq_len (MakeTokenWindows), cut from the documents as each is
// read. Holds the documents' ends in the stream: (documents).
class DocumentWindows final : public SampleSource {
 public:
  DocumentWindows(std::shared_ptr<const TokenDocuments> docs, int seq_len)
      : docs_(std::move(docs)), seq_len_(seq_len), ends_(static_cast<std::size_t>(docs_->documents())) {
    std::int64_t at = 0;
    for (std::int64_t d = 0; d < docs_->documents(); ++d) ends_[static_cast<std::size_t>(d)] = at += docs_->length(d);
  }

  void Read(std::int64_t i, std::span<std::int32_t> inputs, std::span<std::int32_t> labels,
            std::span<std::int32_t> /*starts: one document a sample*/) const override {
    const std::int64_t first = i * seq_len_;
    if (!inputs.empty()) Stream(first, inputs);
    if (!labels.empty()) Stream(first + 1, labels);  // the next token of each input
  }

 private:
  // Tokens [at, at + out.size()) of the documents one after another.
  void Stream(std::int64_t at, std::span<std::int32_t> out) const {
    // The document holding token `at`: the first whose end lies past it.
    auto d = static_cast<std::int64_t>(std::upper_bound(ends_.begin(), ends_.end(), at) - ends_.begin());
    std::size_t filled = 0;
    for (; filled < out.size(); ++d) {
      const std::int64_t begin = at - (ends_[static_cast<std::size_t>(d)] - docs_->length(d));
      const std::size_t take =
          std::min<std::size_t>(static_cast<std::size_t>(docs_->length(d) - begin), out.size() - filled);
      docs_->Read(d, begin, out.subspan(filled, take));
      filled += take;
      at += static_cast<std::int64_t>(take);
    }
  }

  std::shared_ptr<const TokenDocuments> docs_;
  std::int64_t seq_len_;
  std::vector<std::int64_t> ends_;  // (documents): where each document ends in the stream
};

}  // namespace

Dataset MakeDocumentWindows(std::shared_ptr<const TokenDocuments> docs, int seq_len, int vocab, bool want_inputs,
                            bool want_labels) {
  if (seq_len < 1) throw ConfigError(fmt::format("{}: seq_len must be at least 1, got {}", docs->name(), seq_len));
  const std::int64_t windows = docs->tokens() < 1 ? 0 : (docs->tokens() - 1) / seq_len;
  if (windows < 1) {
    throw ConfigError(fmt::format("{}: {} tokens in {} documents do not fill one window of seq_len + 1 = {} tokens",
                                  docs->name(), docs->tokens(), docs->documents(), std::int64_t{seq_len} + 1));
  }
  Dataset out;
  out.name = docs->name();
  out.samples = windows;
  out.sample = {DType::kI32, {1, seq_len}};
  out.classes = vocab;
  out.labels_per_sample = seq_len;
  out.source = std::make_shared<DocumentWindows>(std::move(docs), seq_len);
  out.source_inputs = want_inputs;
  out.source_labels = want_labels;
  return out;
}

DocumentStats DescribeDocuments(const TokenDocuments& docs) {
  DocumentStats s;
  s.documents = docs.documents();
  s.tokens = docs.tokens();
  if (s.documents == 0) return s;
  std::vector<std::int64_t> lengths(docs.lengths().begin(), docs.lengths().end());
  std::sort(lengths.begin(), lengths.end());
  // The nearest rank: the smallest length at or above the fraction q of the documents.
  auto quantile = [&](double q) {
    const auto rank = static_cast<std::size_t>(std::max<double>(1.0, std::ceil(q * static_cast<double>(lengths.size()))));
    return lengths[std::min(rank, lengths.size()) - 1];
  };
  s.shortest = lengths.front();
  s.longest = lengths.back();
  s.median = quantile(0.5);
  s.p90 = quantile(0.9);
  s.p99 = quantile(0.99);
  s.mean = static_cast<double>(s.tokens) / static_cast<double>(s.documents);
  for (const std::int64_t n : lengths) {
    std::size_t bin = 0;
    while (bin < 62 && (std::int64_t{2} << bin) <= n) ++bin;
    if (s.bins.size() <= bin) s.bins.resize(bin + 1, 0);
    ++s.bins[bin];
  }
  return s;
}

}  // namespace baton
