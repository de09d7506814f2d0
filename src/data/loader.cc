// Double-buffered batch loader.
//
// Two preallocated slots, each one batch: inputs (B, ...) as bytes, whatever
// their element type (a sample is copied whole, or cut from its documents:
// Dataset::ReadSample), and labels (B, labels_per_sample). At any time one
// slot is the caller's (the batch Next() returned last) and the other is
// being filled on a oneTBB worker with the batch at position (epoch_,
// index_), arranged first where the loader arranges batches (balanced). Next() waits for that fill, hands the slot out,
// and starts filling the other slot with the following batch, so the copy
// overlaps the caller's training step. Setup sizes everything; Next()
// allocates nothing.
//
// Shuffling: epoch e uses the permutation std::shuffle(iota(samples),
// std::mt19937_64(seed + e)). mt19937_64 is fully specified by the standard,
// but std::shuffle's use of it is not, so ranks agree on the order as long
// as they are built with the same C++ standard library (they are: one build).
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <tbb/task_group.h>

#include "baton/data.h"
#include "baton/buffer.h"
#include "baton/error.h"

namespace baton {
namespace {

class DoubleBufferedLoader final : public BatchLoader {
 public:
  DoubleBufferedLoader(const Dataset& dataset, int batch_size, bool shuffle, std::uint64_t seed, int slice_begin,
                       int slice_size, ArrangeBatch arrange)
      : data_(dataset),
        arrange_(std::move(arrange)),
        batch_size_(batch_size),
        slice_begin_(slice_begin),
        slice_size_(slice_size),
        sample_bytes_(dataset.sample_bytes()),
        labels_per_sample_(static_cast<std::size_t>(dataset.labels_per_sample)),
        input_(dataset.sample.WithRows(slice_size)),
        shuffle_(shuffle),
        seed_(seed),
        batches_per_epoch_(dataset.samples / batch_size),
        has_inputs_(dataset.has_inputs()),
        has_labels_(dataset.has_labels()),
        packed_(dataset.packed()) {
    const std::size_t b = static_cast<std::size_t>(slice_size);
    for (Slot& s : slots_) {
      if (has_inputs_) s.inputs.resize(b * sample_bytes_);      // (B, ...) bytes
      if (has_labels_) s.labels.resize(b * labels_per_sample_);  // (B, labels_per_sample)
      if (packed_) {
        s.starts.resize(b * labels_per_sample_);  // (B, labels_per_sample)
        s.filled.resize(b);                       // (B)
      }
      if (arrange_) s.arranged.resize(static_cast<std::size_t>(batch_size));  // (global B)
    }
    if (shuffle_) order_.resize(static_cast<std::size_t>(dataset.samples));  // (samples)
    StartFill();
  }

  // tbb::task_group may throw from its destructor when tasks are left
  // running; waiting first makes that impossible.
  ~DoubleBufferedLoader() noexcept override {
    try {
      WaitFill();
    } catch (...) {  // a fill's error (an arrangement's) no Next() took: the batch is not handed out
    }
  }

  std::int64_t batches_per_epoch() const override { return batches_per_epoch_; }

  Batch Next() override {
    WaitFill();
    const Slot& ready = slots_[filling_];
    Batch batch;
    batch.index = ready.index;
    batch.input = input_;
    batch.labels_per_sample = static_cast<int>(labels_per_sample_);
    if (has_inputs_) batch.inputs = ready.inputs;
    if (has_labels_) batch.labels = ready.labels;
    if (packed_) {
      batch.starts = ready.starts;
      batch.targets = ready.targets;
      batch.filled = ready.filled;
    }

    // The caller now holds `ready`; the other slot's batch (the one returned
    // before) is no longer valid, so it can take the following batch.
    filling_ = 1 - filling_;
    if (++index_ == batches_per_epoch_) {
      index_ = 0;
      ++epoch_;
    }
    StartFill();
    return batch;
  }

  void Seek(std::int64_t epoch, std::int64_t index) override {
    if (epoch < 0 || index < 0 || index >= batches_per_epoch_) {
      throw ConfigError(
          fmt::format("batch loader: cannot seek to epoch {}, batch {}: epochs start at 0 and batches "
                      "are 0..{}",
                      epoch, index, batches_per_epoch_ - 1));
    }
    WaitFill();
    epoch_ = epoch;
    index_ = index;
    // Refill the slot that is already being filled, never the caller's.
    StartFill();
  }

 private:
  struct Slot {
    std::int64_t index = 0;
    ByteBuffer inputs;                 // (B, ...) bytes, aligned for the first layer
    std::vector<std::int32_t> labels;  // (B, labels_per_sample)
    std::vector<std::int32_t> starts;  // packed: (B, labels_per_sample)
    std::vector<std::int32_t> filled;  // packed: (B)
    std::int64_t targets = 0;          // packed: the global batch's labels that count
    std::vector<std::vector<DocumentPiece>> arranged;  // arranged: the global batch's samples' pieces (global B)
  };

  // REQUIRES: no fill in flight. The task owns slots_[filling_] and order_
  // until the next WaitFill().
  void StartFill() {
    filling_now_.store(true, std::memory_order_release);
    workers_.run([this, slot = &slots_[filling_], epoch = epoch_, index = index_] {
      filling_now_.load(std::memory_order_acquire);
      Fill(*slot, epoch, index);
      filling_now_.store(false, std::memory_order_release);
    });
  }

  void WaitFill() {
    workers_.wait();
    filling_now_.load(std::memory_order_acquire);
  }

  void Fill(Slot& slot, std::int64_t epoch, std::int64_t index) {
    slot.index = index;
    const std::size_t b = static_cast<std::size_t>(slice_size_);
    const std::size_t f = sample_bytes_;
    const std::size_t l = labels_per_sample_;
    const std::size_t first =
        static_cast<std::size_t>(index) * static_cast<std::size_t>(batch_size_) + static_cast<std::size_t>(slice_begin_);
    const std::size_t batch_first = static_cast<std::size_t>(index) * static_cast<std::size_t>(batch_size_);
    const std::size_t whole = static_cast<std::size_t>(batch_size_);
    if (shuffle_ && order_epoch_ != epoch) {
      std::iota(order_.begin(), order_.end(), std::int64_t{0});
      std::mt19937_64 rng(seed_ + static_cast<std::uint64_t>(epoch));
      std::shuffle(order_.begin(), order_.end(), rng);
      order_epoch_ = epoch;
    }
    // Position i of the batch: sample kB + i in order (batch k is the
    // contiguous range [kB, (k+1)B), the slice a part of it), or that
    // position of the epoch's permutation.
    auto sample = [&](std::size_t i) { return shuffle_ ? static_cast<std::size_t>(order_[i]) : i; };
    if (arrange_) {
      FillArranged(slot, batch_first, sample);
      return;
    }
    for (std::size_t i = 0; i < b; ++i) {
      const std::size_t s = sample(first + i);
      data_.ReadSample(static_cast<std::int64_t>(s),
                       has_inputs_ ? std::span<std::byte>(slot.inputs).subspan(i * f, f) : std::span<std::byte>(),
                       has_labels_ ? std::span<std::int32_t>(slot.labels).subspan(i * l, l) : std::span<std::int32_t>(),
                       packed_ ? std::span<std::int32_t>(slot.starts).subspan(i * l, l) : std::span<std::int32_t>());
      if (packed_) slot.filled[i] = data_.targets[s];
    }
    if (packed_) {
      slot.targets = 0;
      for (std::size_t i = 0; i < whole; ++i) slot.targets += data_.targets[sample(batch_first + i)];
    }
  }

  // The global batch's samples (`sample` of its positions) gathered as
  // pieces, arranged, and the slice read from them.
  template <typename SampleAt>
  void FillArranged(Slot& slot, std::size_t batch_first, const SampleAt& sample) {
    const SampleSource& source = *data_.source;
    for (std::size_t i = 0; i < slot.arranged.size(); ++i) {
      const std::span<const DocumentPiece> pieces = source.Pieces(static_cast<std::int64_t>(sample(batch_first + i)));
      slot.arranged[i].assign(pieces.begin(), pieces.end());
    }
    arrange_(slot.arranged);
    const std::size_t l = labels_per_sample_;
    auto ids = [&](std::span<std::byte> in) {
      return std::span<std::int32_t>(reinterpret_cast<std::int32_t*>(in.data()), in.size() / sizeof(std::int32_t));
    };
    slot.targets = 0;
    for (std::size_t i = 0; i < slot.arranged.size(); ++i) {
      std::int32_t filled = 0;
      for (const DocumentPiece& p : slot.arranged[i]) filled += p.positions;
      slot.targets += filled;
      const std::size_t at = i - static_cast<std::size_t>(slice_begin_);  // the position in the slice
      if (i < static_cast<std::size_t>(slice_begin_) || at >= static_cast<std::size_t>(slice_size_)) continue;
      source.ReadPieces(slot.arranged[i],
                        has_inputs_ ? ids(std::span<std::byte>(slot.inputs).subspan(at * sample_bytes_, sample_bytes_))
                                    : std::span<std::int32_t>(),
                        has_labels_ ? std::span<std::int32_t>(slot.labels).subspan(at * l, l) : std::span<std::int32_t>(),
                        std::span<std::int32_t>(slot.starts).subspan(at * l, l));
      slot.filled[at] = filled;
    }
  }

  const Dataset& data_;
  const ArrangeBatch arrange_;  // balanced: each global batch's samples arranged before the slice is read
  const int batch_size_;        // the global batch
  const int slice_begin_, slice_size_;  // the positions of it this loader gathers
  const std::size_t sample_bytes_;       // one sample's input
  const std::size_t labels_per_sample_;
  const TensorDesc input_;                // (B, ...): what a batch's inputs are
  const bool shuffle_;
  const std::uint64_t seed_;
  const std::int64_t batches_per_epoch_;
  const bool has_inputs_;
  const bool has_labels_;
  const bool packed_;  // the starts and target counts too

  Slot slots_[2];
  int filling_ = 0;         // the slot the in-flight (or finished) fill writes
  std::int64_t epoch_ = 0;  // position of the batch in slots_[filling_]
  std::int64_t index_ = 0;
  std::vector<std::int64_t> order_;  // (samples): this epoch's permutation, shuffle only
  std::int64_t order_epoch_ = -1;    // the epoch order_ was drawn for
  // task_group::run and wait already order the fill after StartFill and
  // before WaitFill returns; this flag states those edges once more with
  // C++ atomics, which ThreadSanitizer can see (oneTBB's own synchronization
  // is invisible to it unless oneTBB itself is instrumented). Two atomic
  // operations per batch.
  std::atomic<bool> filling_now_{false};
  tbb::task_group workers_;
};

}  // namespace

void Dataset::ReadSample(std::int64_t i, std::span<std::byte> in, std::span<std::int32_t> out,
                         std::span<std::int32_t> first) const {
  if (source != nullptr) {
    // A token dataset's input is its ids: i32[1, seq_len].
    source->Read(i, {reinterpret_cast<std::int32_t*>(in.data()), in.size() / sizeof(std::int32_t)}, out, first);
    return;
  }
  const auto s = static_cast<std::size_t>(i);
  if (!in.empty()) std::memcpy(in.data(), inputs.data() + s * in.size(), in.size());
  if (!out.empty()) std::memcpy(out.data(), labels.data() + s * out.size(), out.size() * sizeof(std::int32_t));
  if (!first.empty()) std::memcpy(first.data(), starts.data() + s * first.size(), first.size() * sizeof(std::int32_t));
}

std::unique_ptr<BatchLoader> MakeBatchLoader(const Dataset& dataset, int batch_size, bool shuffle, std::uint64_t seed,
                                             int slice_begin, int slice_size, ArrangeBatch arrange) {
  const std::string what = fmt::format("batch loader for dataset '{}'", dataset.name);
  if (slice_size == 0) slice_size = batch_size;
  if (slice_begin < 0 || slice_size < 1 || slice_begin + slice_size > batch_size) {
    throw ConfigError(fmt::format("{}: a slice of {} samples from position {} does not fit a batch of {}", what,
                                  slice_size, slice_begin, batch_size));
  }
  if (batch_size <= 0 || batch_size > dataset.samples) {
    throw ConfigError(fmt::format("{}: batch size must be in 1..{} (the number of samples), got {}", what,
                                  dataset.samples, batch_size));
  }
  if (dataset.sample.shape.rank < 2 || dataset.sample.shape[0] != 1 || dataset.sample_bytes() == 0) {
    throw ConfigError(fmt::format("{}: a sample must be one non-empty row (dimension 0 is 1), got {}", what,
                                  ToString(dataset.sample)));
  }
  if (!dataset.inputs.empty() &&
      dataset.inputs.size() != static_cast<std::size_t>(dataset.samples) * dataset.sample_bytes()) {
    throw ConfigError(fmt::format("{}: inputs hold {} bytes, expected samples ({}) x {} bytes ({})", what,
                                  dataset.inputs.size(), dataset.samples, dataset.sample_bytes(),
                                  ToString(dataset.sample)));
  }
  if (dataset.labels_per_sample < 1) {
    throw ConfigError(fmt::format("{}: labels per sample must be at least 1, got {}", what,
                                  dataset.labels_per_sample));
  }
  if (!dataset.labels.empty() && dataset.labels.size() != static_cast<std::size_t>(dataset.samples) *
                                                              static_cast<std::size_t>(dataset.labels_per_sample)) {
    throw ConfigError(fmt::format("{}: {} labels, expected {} per sample ({} samples)", what, dataset.labels.size(),
                                  dataset.labels_per_sample, dataset.samples));
  }
  if (dataset.packed() && (dataset.targets.size() != static_cast<std::size_t>(dataset.samples) ||
                           (dataset.source == nullptr &&
                            dataset.starts.size() != static_cast<std::size_t>(dataset.samples) *
                                                         static_cast<std::size_t>(dataset.labels_per_sample)))) {
    throw ConfigError(fmt::format("{}: packed, but {} document starts and {} target counts for {} samples of {} "
                                  "positions",
                                  what, dataset.starts.size(), dataset.targets.size(), dataset.samples,
                                  dataset.labels_per_sample));
  }
  if (arrange && (dataset.source == nullptr || !dataset.packed())) {
    throw ConfigError(fmt::format("{}: arranged batches (data.packing: balanced) need packed documents read from "
                                  "their files",
                                  what));
  }
  return std::make_unique<DoubleBufferedLoader>(dataset, batch_size, shuffle, seed, slice_begin, slice_size,
                                                std::move(arrange));
}

}  // namespace baton
