// Datasets and the prefetching batch loader.
#ifndef BATON_DATA_H_
#define BATON_DATA_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace baton {

// A whole dataset in memory. Either part may be left empty when a rank does
// not need it (inputs live on the first stage's rank, labels on the last's).
struct Dataset {
  std::string name;
  std::int64_t samples = 0;
  int features = 0;
  int classes = 0;
  std::vector<float> inputs;          // (samples, features), row-major
  std::vector<std::int32_t> labels;   // (samples)
};

// Fashion-MNIST from the gzipped IDX files in `dir` (Debian's
// dataset-fashion-mnist: /usr/share/datasets/fashion-mnist):
// {train,t10k}-images-idx3-ubyte.gz and {train,t10k}-labels-idx1-ubyte.gz.
// Inputs are pixel / 255 as float32 (784 features), labels 0..9.
// `split` is "train" or "test". Throws ConfigError naming the file for a
// missing, truncated or wrong-magic file, or images and labels that disagree.
Dataset LoadFashionMnist(const std::string& dir, const std::string& split, bool want_inputs, bool want_labels);

// Seeded random inputs (uniform in [-1, 1)) and labels (uniform in
// [0, classes)); the same seed gives the same data on every rank.
Dataset MakeSynthetic(std::int64_t samples, int features, int classes, std::uint64_t seed, bool want_inputs,
                      bool want_labels);

// One batch: views into loader-owned, preallocated memory, valid until the
// next call to Next().
struct Batch {
  std::int64_t index = 0;                 // batch number within the epoch
  std::span<const float> inputs;          // (batch_size, features), empty if not loaded
  std::span<const std::int32_t> labels;   // (batch_size), empty if not loaded
};

// Hands out batches of `batch_size` samples in order (shuffle off: batch k is
// samples [k*B, (k+1)*B) of the file; on: a permutation drawn per epoch from
// `seed`). The last partial batch of an epoch is dropped. While the caller
// trains on one batch, the next is gathered on a oneTBB worker thread.
class BatchLoader {
 public:
  virtual ~BatchLoader() = default;
  virtual std::int64_t batches_per_epoch() const = 0;
  // The next batch; waits for the prefetch if it is not ready. Starts a new
  // epoch (and a new permutation) after the last batch of one.
  virtual Batch Next() = 0;
  // Moves to batch `index` of epoch `epoch` (for resuming).
  virtual void Seek(std::int64_t epoch, std::int64_t index) = 0;
};

// REQUIRES: dataset outlives the loader; batch_size <= dataset.samples.
std::unique_ptr<BatchLoader> MakeBatchLoader(const Dataset& dataset, int batch_size, bool shuffle,
                                             std::uint64_t seed);

// ---- safetensors (f32 only) ----
struct NamedTensor {
  std::string name;
  std::vector<std::int64_t> shape;
  std::vector<float> data;
};

// Writes tensors in the safetensors format (8-byte little-endian header
// length, JSON header with dtype "F32", shape and data_offsets, then the raw
// data), so `safetensors.torch.load_file` reads it. Written to a temporary
// file, flushed and renamed: a crash leaves no half-written file.
void WriteSafetensors(const std::string& path, const std::vector<NamedTensor>& tensors);

// Reads a safetensors file of F32 tensors. Throws ConfigError naming the file
// for a truncated file, a header length out of range, malformed JSON, a dtype
// other than F32, offsets outside the data, or a shape that does not match
// the byte count.
std::vector<NamedTensor> ReadSafetensors(const std::string& path);

}  // namespace baton

#endif  // BATON_DATA_H_
