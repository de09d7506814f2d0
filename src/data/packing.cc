// Documents packed into samples of a token budget (data.h, data.packing):
// first-fit into the samples of a batch, and the packed dataset with each
// position's document start.
#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "baton/data.h"
#include "baton/error.h"

namespace baton {

namespace {

// The pieces in data order, first-fit into the samples of a batch (or,
// `alone`, each a sample of its own), as PackGreedy says; with
// by.tokens > 0 each batch padded to `batch_samples` with empty samples
// (its own at the front) and a last batch the documents ended in dropped.
std::vector<std::vector<DocumentPiece>> FirstFit(std::span<const std::int64_t> lengths, int max_tokens,
                                                 int batch_samples, bool refuse_long, const std::string& name,
                                                 const TokenBatches& by, bool alone) {
  if (max_tokens < 1) throw ConfigError(fmt::format("{}: data.max_tokens must be at least 1, got {}", name, max_tokens));
  if (batch_samples < 1) {
    throw ConfigError(fmt::format("{}: a batch must hold at least one sample, got {}", name, batch_samples));
  }
  if (by.tokens > 0 && by.tokens < max_tokens) {
    throw ConfigError(fmt::format("{}: train.batch_tokens {} is below data.max_tokens {}", name, by.tokens, max_tokens));
  }
  std::vector<std::vector<DocumentPiece>> samples;
  std::vector<int> room;        // the current batch's samples' free positions
  std::size_t batch_first = 0;  // its first sample
  std::int64_t batch_positions = 0;
  auto close = [&] {  // the batch is full: padded, and the next one starts
    if (by.tokens > 0) samples.resize(batch_first + static_cast<std::size_t>(batch_samples));
    batch_first = samples.size();
    room.clear();
    batch_positions = 0;
  };
  auto place = [&](const DocumentPiece& piece) {
    if (by.tokens > 0 && batch_positions + piece.positions > by.tokens) close();
    batch_positions += piece.positions;
    for (std::size_t k = 0; k < room.size() && !alone; ++k) {
      if (room[k] >= piece.positions) {
        samples[batch_first + k].push_back(piece);
        room[k] -= piece.positions;
        return;
      }
    }
    if (room.size() == static_cast<std::size_t>(batch_samples)) {
      close();
      batch_positions = piece.positions;
    }
    samples.push_back({piece});
    room.push_back(max_tokens - piece.positions);
  };
  for (std::size_t d = 0; d < lengths.size(); ++d) {
    const std::int64_t positions = lengths[d] - 1;
    if (positions < 1) continue;
    if (positions > max_tokens && refuse_long) {
      throw ConfigError(fmt::format("{}: document {} has {} tokens, more than data.max_tokens {} positions hold "
                                    "(data.long_documents: refuse; split cuts it into pieces)",
                                    name, d, lengths[d], max_tokens));
    }
    for (std::int64_t begin = 0; begin < positions; begin += max_tokens) {
      place({static_cast<std::int64_t>(d), begin, static_cast<int>(std::min<std::int64_t>(max_tokens, positions - begin))});
    }
  }
  if (by.tokens > 0) {
    samples.resize(batch_first);  // the documents ended before the last batch's budget
    if (samples.empty()) {
      throw ConfigError(fmt::format("{}: its documents hold fewer positions than one batch of train.batch_tokens {}",
                                    name, by.tokens));
    }
  }
  return samples;
}

// train.batch_tokens: each batch's samples dealt to the replicas in turn
// (the i-th to replica i mod D, after its earlier ones), so that every
// replica's slots begin with its samples and end with the empty ones.
void Spread(std::vector<std::vector<DocumentPiece>>& samples, int batch_samples, const TokenBatches& by) {
  const auto B = static_cast<std::size_t>(batch_samples), D = static_cast<std::size_t>(std::max(1, by.replicas));
  if (by.tokens <= 0 || D == 1 || B % D != 0) return;
  std::vector<std::vector<DocumentPiece>> batch(B);
  for (std::size_t first = 0; first + B <= samples.size(); first += B) {
    for (auto& s : batch) s.clear();
    std::size_t i = 0;
    for (std::size_t k = first; k < first + B; ++k) {
      if (samples[k].empty()) continue;
      batch[(i % D) * (B / D) + i / D] = std::move(samples[k]);
      ++i;
    }
    for (std::size_t k = 0; k < B; ++k) samples[first + k] = std::move(batch[k]);
  }
}

}  // namespace

std::vector<std::vector<DocumentPiece>> PackGreedy(std::span<const std::int64_t> lengths, int max_tokens,
                                                   int batch_samples, bool refuse_long, const std::string& name,
                                                   const TokenBatches& by) {
  std::vector<std::vector<DocumentPiece>> samples =
      FirstFit(lengths, max_tokens, batch_samples, refuse_long, name, by, false);
  Spread(samples, batch_samples, by);
  return samples;
}

std::vector<std::vector<DocumentPiece>> PackPadded(std::span<const std::int64_t> lengths, int max_tokens,
                                                   bool refuse_long, const std::string& name, int batch_samples,
                                                   const TokenBatches& by) {
  // Greedy's pieces, in their order, each a sample of its own.
  std::vector<std::vector<DocumentPiece>> samples =
      FirstFit(lengths, max_tokens, by.tokens > 0 ? batch_samples : 1, refuse_long, name, by, true);
  Spread(samples, batch_samples, by);
  return samples;
}

std::optional<std::vector<std::vector<DocumentPiece>>> PackLongestFirst(std::vector<DocumentPiece> pieces,
                                                                        std::size_t samples, int max_tokens,
                                                                        double square, double tilt) {
  auto cost = [square](const DocumentPiece& p) { return p.positions + square * p.positions * double(p.positions); };
  // Costliest first; ties in data order.
  std::stable_sort(pieces.begin(), pieces.end(),
                   [&](const DocumentPiece& a, const DocumentPiece& b) { return cost(a) > cost(b); });
  std::vector<std::vector<DocumentPiece>> packed(samples);
  std::vector<double> load(samples, 0.0);
  std::vector<int> room(samples, max_tokens);
  std::vector<double> weight(samples, 1.0);
  for (std::size_t s = 0; s < samples && samples > 1; ++s) weight[s] = 1 + tilt * (1 - 2.0 * s / (samples - 1));
  for (const DocumentPiece& p : pieces) {
    std::size_t best = samples;
    const double c = cost(p);
    for (std::size_t s = 0; s < samples; ++s) {
      if (room[s] >= p.positions && (best == samples || (load[s] + c) / weight[s] < (load[best] + c) / weight[best])) best = s;
    }
    if (best == samples) return std::nullopt;
    packed[best].push_back(p);
    load[best] += cost(p);
    room[best] -= p.positions;
  }
  for (auto& sample : packed) {
    std::sort(sample.begin(), sample.end(), [](const DocumentPiece& a, const DocumentPiece& b) {
      return a.document != b.document ? a.document < b.document : a.begin < b.begin;
    });
  }
  return packed;
}

std::vector<std::vector<DocumentPiece>> PackBalanced(std::span<const std::int64_t> lengths, int max_tokens,
                                                     int batch_samples, bool refuse_long, double square,
                                                     const std::string& name, const TokenBatches& by) {
  std::vector<std::vector<DocumentPiece>> samples =
      FirstFit(lengths, max_tokens, batch_samples, refuse_long, name, by, false);
  for (std::size_t first = 0; first < samples.size(); first += static_cast<std::size_t>(batch_samples)) {
    std::size_t k = std::min(samples.size() - first, static_cast<std::size_t>(batch_samples));
    while (k > 0 && samples[first + k - 1].empty()) --k;  // a batch by tokens: its own samples
    std::vector<DocumentPiece> pieces;
    for (std::size_t s = first; s < first + k; ++s) pieces.insert(pieces.end(), samples[s].begin(), samples[s].end());
    // Where first fit found room and this does not, the batch keeps first fit's.
    if (auto balanced = PackLongestFirst(std::move(pieces), k, max_tokens, square)) {
      std::move(balanced->begin(), balanced->end(), samples.begin() + static_cast<std::ptrdiff_t>(first));
    }
  }
  Spread(samples, batch_samples, by);
  return samples;
}

Dataset MakePackedDocuments(std::shared_ptr<const TokenDocuments> docs, int max_tokens, int batch_samples,
                            bool refuse_long, int vocab, bool want_inputs, bool want_labels, double square,
                            const TokenBatches& by) {
  const std::span<const std::int64_t> lengths = docs->lengths();
  const std::vector<std::vector<DocumentPiece>> packed =
      square < 0 ? PackGreedy(lengths, max_tokens, batch_samples, refuse_long, docs->name(), by)
                 : PackBalanced(lengths, max_tokens, batch_samples, refuse_long, square, docs->name(), by);
  return PackedDataset(std::move(docs), packed, max_tokens, vocab, want_inputs, want_labels);
}

namespace {

// Packed samples cut from their documents as each is read: each sample's
// pieces, in the order they fill its positions. Holds (pieces) and
// (samples + 1) offsets, not the samples' positions.
class PackedSamples final : public SampleSource {
 public:
  PackedSamples(std::shared_ptr<const TokenDocuments> docs, const std::vector<std::vector<DocumentPiece>>& packed)
      : docs_(std::move(docs)) {
    std::size_t pieces = 0;
    for (const std::vector<DocumentPiece>& sample : packed) pieces += sample.size();
    pieces_.reserve(pieces);
    first_.reserve(packed.size() + 1);
    for (const std::vector<DocumentPiece>& sample : packed) {
      first_.push_back(pieces_.size());
      pieces_.insert(pieces_.end(), sample.begin(), sample.end());
    }
    first_.push_back(pieces_.size());
  }

  void Read(std::int64_t i, std::span<std::int32_t> inputs, std::span<std::int32_t> labels,
            std::span<std::int32_t> starts) const override {
    ReadPieces(Pieces(i), inputs, labels, starts);
  }

  std::span<const DocumentPiece> Pieces(std::int64_t i) const override {
    const std::size_t begin = first_[static_cast<std::size_t>(i)], end = first_[static_cast<std::size_t>(i) + 1];
    return std::span<const DocumentPiece>(pieces_).subspan(begin, end - begin);
  }

  void ReadPieces(std::span<const DocumentPiece> pieces, std::span<std::int32_t> inputs,
                  std::span<std::int32_t> labels, std::span<std::int32_t> starts) const override {
    std::size_t at = 0;
    for (const DocumentPiece& piece : pieces) {
      const auto k = static_cast<std::size_t>(piece.positions);
      // Tokens [begin, begin + k) are the inputs, one further on the labels.
      if (!inputs.empty()) docs_->Read(piece.document, piece.begin, inputs.subspan(at, k));
      if (!labels.empty()) docs_->Read(piece.document, piece.begin + 1, labels.subspan(at, k));
      if (!starts.empty()) std::fill_n(starts.begin() + static_cast<std::ptrdiff_t>(at), k, static_cast<std::int32_t>(at));
      at += k;
    }
    // The positions no document fills: one more run of their own, input 0, no label.
    if (!inputs.empty()) std::fill(inputs.begin() + static_cast<std::ptrdiff_t>(at), inputs.end(), 0);
    if (!labels.empty()) std::fill(labels.begin() + static_cast<std::ptrdiff_t>(at), labels.end(), kIgnoreLabel);
    if (!starts.empty()) {
      std::fill(starts.begin() + static_cast<std::ptrdiff_t>(at), starts.end(), static_cast<std::int32_t>(at));
    }
  }

 private:
  std::shared_ptr<const TokenDocuments> docs_;
  std::vector<DocumentPiece> pieces_;  // (pieces): every sample's, one sample after another
  std::vector<std::size_t> first_;     // (samples + 1): sample s's pieces are [first_[s], first_[s + 1])
};

}  // namespace

Dataset PackedDataset(std::shared_ptr<const TokenDocuments> docs, const std::vector<std::vector<DocumentPiece>>& packed,
                      int max_tokens, int vocab, bool want_inputs, bool want_labels) {
  if (packed.empty()) {
    throw ConfigError(fmt::format("{}: no document has two tokens: nothing to predict", docs->name()));
  }
  Dataset out;
  out.name = docs->name();
  out.samples = static_cast<std::int64_t>(packed.size());
  out.sample = {DType::kI32, {1, max_tokens}};
  out.classes = vocab;
  out.labels_per_sample = max_tokens;
  out.targets.resize(packed.size());  // (samples)
  for (std::size_t s = 0; s < packed.size(); ++s) {
    std::int32_t filled = 0;
    for (const DocumentPiece& p : packed[s]) filled += p.positions;
    out.targets[s] = filled;
  }
  out.source = std::make_shared<PackedSamples>(std::move(docs), packed);
  out.source_inputs = want_inputs;
  out.source_labels = want_labels;
  return out;
}

}  // namespace baton
