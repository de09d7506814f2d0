// Datasets and the prefetching batch loader.
#ifndef BATON_DATA_H_
#define BATON_DATA_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <memory>
#include <span>
#include <map>
#include <string>
#include <vector>

#include "baton/buffer.h"
#include "baton/env.h"
#include "baton/files.h"
#include "baton/view.h"

namespace baton {

// Tokens [begin, begin + positions + 1) of document `document`: `positions`
// next-token positions (inputs the first `positions` tokens, labels the
// last), one document of a packed sample.
struct DocumentPiece {
  std::int64_t document = 0, begin = 0;
  int positions = 0;
  bool operator==(const DocumentPiece&) const = default;
};

// Where a dataset's samples come from when it does not hold them
// (Dataset::source, below): token documents, memory-mapped, each sample
// cut from them when its batch is gathered (MakeDocumentWindows,
// PackedDataset).
class SampleSource {
 public:
  virtual ~SampleSource() = default;
  // Sample i's next-token positions: its input ids into `inputs`, its
  // labels into `labels`, each position's document's first into `starts`
  // (packed samples), each span one sample's positions; an empty span is
  // not written. REQUIRES: 0 <= i < the dataset's samples. Allocates
  // nothing; safe to call from several threads at once.
  virtual void Read(std::int64_t i, std::span<std::int32_t> inputs, std::span<std::int32_t> labels,
                    std::span<std::int32_t> starts) const = 0;
  // Packed samples: sample i's pieces, in the order they fill its
  // positions; empty for samples that are not packed.
  virtual std::span<const DocumentPiece> Pieces(std::int64_t /*i*/) const { return {}; }
  // Packed samples: the sample that `pieces` (of this source's documents,
  // at most a sample's positions in all) make, read as Read reads one.
  virtual void ReadPieces(std::span<const DocumentPiece> /*pieces*/, std::span<std::int32_t> /*inputs*/,
                          std::span<std::int32_t> /*labels*/, std::span<std::int32_t> /*starts*/) const {}
};

// A dataset: `samples` samples, each an input tensor of
// `sample` and `labels_per_sample` int32 labels. Either part may be left
// empty when a rank does not need it (inputs live on the first stage's rank,
// labels on the last's).
//
//   classification (Fashion-MNIST, synthetic): sample f32[1, features], one
//     label per sample, a class in [0, classes)
//   next-token (fortunes, synthetic_tokens): sample i32[1, seq_len] token
//     ids, seq_len labels per sample: label t of a sample is the token that
//     follows its input token t; every id is in [0, classes) (the vocabulary)
//
//   packed documents (data.packing, MakePackedDocuments): next-token
//     samples whose positions hold several documents; `starts` gives each
//     position its document's first, every rank has them (attention and
//     positions need them on every stage); a position no document fills is
//     labelled kIgnoreLabel (no loss, no gradient); `targets` counts each
//     sample's other labels.
//
// A dataset of token documents (MakeDocumentWindows, PackedDataset) holds
// no sample: its `source` cuts each from the memory-mapped documents when a
// batch wants it, so a rank holds nothing proportional to the tokens
// (inputs, labels and starts stay empty; has_inputs and has_labels say
// which parts the rank reads). The others hold every sample in memory.
struct Dataset {
  std::string name;
  std::int64_t samples = 0;
  TensorDesc sample;                  // one sample's input; dimension 0 is 1 (view.h: it is the samples)
  int classes = 0;                    // labels (and token ids) are in [0, classes)
  int labels_per_sample = 1;          // 1: a class per sample; seq_len: a next token per position
  ByteBuffer inputs;                  // (samples, ...) as `sample` says, row-major, 64-byte aligned
  std::vector<std::int32_t> labels;   // (samples, labels_per_sample)
  std::vector<std::int32_t> starts;   // packed: (samples, labels_per_sample); empty: one document a sample
  std::vector<std::int32_t> targets;  // packed: (samples), the labels that are not kIgnoreLabel
  std::shared_ptr<const SampleSource> source;  // set: the samples are read from it, not held above
  bool source_inputs = false, source_labels = false;  // with `source`: the parts this rank reads
  bool packed() const { return !targets.empty(); }
  bool has_inputs() const { return !inputs.empty() || (source != nullptr && source_inputs); }
  bool has_labels() const { return !labels.empty() || (source != nullptr && source_labels); }
  // Sample i's parts, from memory or from the source: its input into
  // `inputs` (sample_bytes()), its labels into `labels` (labels_per_sample),
  // packed, its starts into `starts` (labels_per_sample). An empty span is
  // not written. REQUIRES: 0 <= i < samples; each part asked for is held
  // (has_inputs, has_labels; starts: packed). Allocates nothing.
  void ReadSample(std::int64_t i, std::span<std::byte> inputs, std::span<std::int32_t> labels,
                  std::span<std::int32_t> starts) const;

  std::size_t sample_bytes() const { return sample.bytes(); }
  // Input elements per sample: features, or seq_len.
  std::int64_t sample_elements() const { return sample.elements(); }
  // The inputs as elements of type T. REQUIRES: T is float for f32 data,
  // std::int32_t for i32 data.
  template <typename T>
  std::span<const T> inputs_as() const {
    return {reinterpret_cast<const T*>(inputs.data()), inputs.size() / sizeof(T)};
  }
  template <typename T>
  std::span<T> inputs_as() {
    return {reinterpret_cast<T*>(inputs.data()), inputs.size() / sizeof(T)};
  }
};

// Fashion-MNIST from the gzipped IDX files in `dir` (Debian's
// dataset-fashion-mnist: /usr/share/datasets/fashion-mnist):
// {train,t10k}-images-idx3-ubyte.gz and {train,t10k}-labels-idx1-ubyte.gz.
// Inputs are pixel / 255 as f32[1, 784] per sample, labels 0..9.
// `split` is "train" or "test". Throws ConfigError naming the file for a
// missing, truncated or wrong-magic file, or images and labels that disagree.
Dataset LoadFashionMnist(const std::string& dir, const std::string& split, bool want_inputs, bool want_labels);

// Seeded random inputs (f32[1, features], uniform in [-1, 1)) and labels
// (uniform in [0, classes)); the same seed gives the same data on every rank.
Dataset MakeSynthetic(std::int64_t samples, int features, int classes, std::uint64_t seed, bool want_inputs,
                      bool want_labels);

// ---- Text as byte tokens ----
// Every byte is a token: the vocabulary is the 256 byte values, and no
// tokenizer is involved.
inline constexpr int kByteVocabulary = 256;
// Ends every entry of a corpus split's token stream.
inline constexpr std::uint8_t kEntrySeparator = '\n';

// A text corpus read from a folder in the fortune format: plain-text files
// whose entries are separated by lines holding a single '%'. Entry k (counted
// over all files, in order) goes to the validation split if k % 10 == 9 and
// to the train split otherwise: a fixed, seed-free split that takes every
// file's topics into both. An entry is the bytes of its lines, each ending in
// '\n' (a last line without one gets one); entries with no bytes (two '%'
// lines in a row) are skipped.
struct TextCorpus {
  std::int64_t files = 0;
  std::int64_t entries = 0;  // train_entries + validation_entries
  std::int64_t train_entries = 0, validation_entries = 0;
  std::int64_t bytes = 0;    // the entries' bytes, without separators
  // Each split's entries in order, each followed by kEntrySeparator.
  std::vector<std::uint8_t> train, validation;
  // Where each split's entries end in it (just past the separator), in order.
  std::vector<std::int64_t> train_ends, validation_ends;
};

// Reads every regular file of `dir` in sorted file-name order, skipping
// `.dat` index files and symbolic links (Debian's `.u8` names are links to
// the same text). Throws ConfigError for a missing folder (naming the Debian
// package fortunes), an unreadable file, or a folder with no entries.
TextCorpus ReadFortuneFolder(const std::string& dir);

// Next-token samples over `tokens`: sample i is the window of seq_len + 1
// tokens starting at i * seq_len; its input (i32[1, seq_len]) is the first
// seq_len, its labels the last seq_len. Windows do not overlap (the stride
// is seq_len: each token is a target once); the tail that does not fill a
// window is dropped, so there are (tokens.size() - 1) / seq_len samples.
// Throws ConfigError naming `name` if seq_len < 1 or no window fits.
Dataset MakeTokenWindows(std::span<const std::uint8_t> tokens, int seq_len, const std::string& name,
                         bool want_inputs, bool want_labels);

// The fortunes corpus in `dir` (Debian's package fortunes:
// /usr/share/games/fortunes) as next-token windows of one split ("train" or
// "validation"), named "fortunes/<split>", vocabulary kByteVocabulary.
// Throws ConfigError as ReadFortuneFolder and MakeTokenWindows do, or for an
// unknown split.
Dataset LoadFortunes(const std::string& dir, const std::string& split, int seq_len, bool want_inputs,
                     bool want_labels);

// ---- Token documents: the tokenised datasets people already have ----
// A corpus as documents of token ids, read from memory-mapped files (or,
// for text, from the text's bytes): each document is one or more pieces,
// runs of tokens in the data. Opening a file checks every header field and
// index entry against the file's size before anything is read through it,
// and before anything proportional to what the header claims is allocated;
// a bad file is one ConfigError naming the file, the byte offset and the
// rule broken. Reading a document allocates nothing.
class TokenDocuments {
 public:
  // How the tokens are stored: Megatron's dtype codes 1-5 and 8 (the
  // integer ones), llm.c's uint16, bytes for text.
  enum class Type : std::uint8_t { kU8, kI8, kI16, kI32, kI64, kU16 };
  // One run of a document's tokens: `tokens` of them from byte `byte` of
  // the data (the mapped file, or the text's bytes).
  struct Piece {
    std::int64_t byte = 0;
    std::int64_t tokens = 0;
  };

  // `data`: the tokens (a mapped file, or text bytes held here: `owned`);
  // `pieces`, each document's (document d: pieces [starts[d], starts[d +
  // 1]), starts.size() = documents + 1). REQUIRES: every piece lies in
  // the data (the readers check it first).
  TokenDocuments(std::string name, std::string data_path, Type type, MappedFile data, std::vector<std::byte> owned,
                 std::vector<Piece> pieces, std::vector<std::int64_t> starts);
  TokenDocuments(TokenDocuments&&) noexcept = default;
  TokenDocuments& operator=(TokenDocuments&&) noexcept = default;

  // "megatron:PREFIX", "llmc:FILE", "jsonl:FILE", "fortunes/train", ...
  const std::string& name() const { return name_; }
  std::int64_t documents() const { return static_cast<std::int64_t>(starts_.size()) - 1; }
  std::int64_t tokens() const { return tokens_; }
  // Document `doc`'s tokens. REQUIRES: 0 <= doc < documents().
  std::int64_t length(std::int64_t doc) const { return lengths_[static_cast<std::size_t>(doc)]; }
  std::span<const std::int64_t> lengths() const { return lengths_; }  // each document's, in order
  // Tokens [begin, begin + out.size()) of document `doc`, as int32 ids.
  // REQUIRES: the range lies in the document.
  void Read(std::int64_t doc, std::int64_t begin, std::span<std::int32_t> out) const;
  // Throws ConfigError naming the data file, the byte offset, the document
  // and the id if any token id is negative or not below `vocab`.
  void CheckBelow(std::int64_t vocab) const;
  // The size in bytes of one stored token.
  int token_bytes() const;

 private:
  std::int32_t At(std::int64_t byte) const;  // the token stored at `byte` of the data
  std::string name_, data_path_;
  Type type_;
  MappedFile file_;
  std::vector<std::byte> owned_;
  const std::byte* data_ = nullptr;
  std::vector<Piece> pieces_;
  std::vector<std::int64_t> starts_, lengths_;
  std::int64_t tokens_ = 0;
};

// Megatron-LM's indexed dataset (MMIDIDX, version 1): `prefix`.idx and
// `prefix`.bin, as its preprocessing writes them. The index: the 9-byte
// magic "MMIDIDX\0\0", a little-endian u64 version (1), a u8 dtype code
// (1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 6 float64, 7 float32, 8
// uint16; the float codes are refused: token ids are integers), u64
// sequence count S, u64 document-index count C, then S int32 sequence
// lengths, S int64 byte pointers into the .bin and C int64 document
// indices (ascending from 0 to S: document d is sequences [idx[d],
// idx[d + 1]), so there are C - 1 documents).
TokenDocuments OpenMegatron(const std::string& prefix);
// llm.c's token shard: a header of 256 little-endian int32 (magic
// 20240520, version 1, the token count N), then N uint16 tokens, exactly.
// Documents start at each end-of-text token `eot` (llm.c writes one before
// every document; it stays the document's first token); tokens before the
// first make one too.
TokenDocuments OpenLlmc(const std::string& path, std::int64_t eot);
// JSON Lines: one document a line, an object with a string "text", as
// byte tokens (its UTF-8 bytes; vocabulary kByteVocabulary). Blank lines
// and empty texts are skipped. A line that is not such an object is a
// ConfigError naming the line and its byte offset.
TokenDocuments OpenJsonl(const std::string& path);
// The fortunes corpus's split ("train" or "validation") as documents: one
// fortune one document, its bytes then kEntrySeparator (so the documents
// one after another are the split's stream, LoadFortunes's windows).
TokenDocuments FortuneDocuments(const TextCorpus& corpus, const std::string& split);

// Next-token windows (MakeTokenWindows) over `docs`' documents one after
// another: every token once, in order, as the fixed windows Megatron-LM's
// GPT dataset and llm.c's loader cut from the same file; ids in [0, vocab)
// (the caller checks: TokenDocuments::CheckBelow). Read from `docs` as
// batches want them (Dataset::source: nothing proportional to the tokens
// is held but the documents' ends). Throws ConfigError as MakeTokenWindows does.
Dataset MakeDocumentWindows(std::shared_ptr<const TokenDocuments> docs, int seq_len, int vocab, bool want_inputs,
                            bool want_labels);

// ---- Packed documents (data.packing) ----
// (A packed sample's positions past its last document are labelled
// kIgnoreLabel, view.h.)

// A global batch by tokens (train.batch_tokens; `tokens` 0: off): the
// batch also ends before the piece that would take its positions past
// `tokens`, and is then padded with empty samples (no positions) to its
// `batch_samples` slots; its samples dealt to the `replicas` in turn (the
// i-th of the batch to replica i mod D, after that replica's earlier
// ones: replica r's slots are [r B / D, (r + 1) B / D), its own samples
// first). A last batch the documents end in before its budget is
// dropped; documents too few for one batch are refused (ConfigError), as
// is `tokens` below max_tokens.
struct TokenBatches {
  std::int64_t tokens = 0;
  int replicas = 1;
};

// How documents go into samples of `max_tokens` positions (data.packing:
// greedy). A document of n tokens has n - 1 next-token positions (one of
// fewer than 2 tokens has none and is skipped). A document with more than
// `max_tokens` is cut into pieces of `max_tokens` positions (the last
// shorter), each packed as a document of its own (a piece's first input
// is the piece before's last label), or, with `refuse_long`, refused
// (ConfigError naming the document and its length). In data order, each
// piece goes into the first sample of the current batch of `batch_samples`
// with room for it (first-fit); a piece that fits in none of them once the
// batch has all its samples starts the next batch. So each batch holds
// whole documents in data order, the next batch starting where it ended.
// Throws ConfigError (naming `name`) for max_tokens or batch_samples < 1.
// With `by` (TokenBatches), a batch holds as many samples as its pieces fill.
std::vector<std::vector<DocumentPiece>> PackGreedy(std::span<const std::int64_t> lengths, int max_tokens,
                                                   int batch_samples, bool refuse_long, const std::string& name,
                                                   const TokenBatches& by = {});

// data.packing: balanced: each batch of PackGreedy's (the same documents)
// packed again into as many samples, so that the costliest sample costs
// least: a piece of n positions costs n + square x n^2 (the MLPs' work is
// a token's, attention's a pair's: `square` is a pair's cost in tokens',
// GptPairCost), the pieces taken costliest first, each into the cheapest
// sample with room (longest processing time first); a batch where a
// piece finds no room keeps the greedy packing. A sample's pieces stay in
// data order. With `by`, as many samples as greedy's batch fills.
std::vector<std::vector<DocumentPiece>> PackBalanced(std::span<const std::int64_t> lengths, int max_tokens,
                                                     int batch_samples, bool refuse_long, double square,
                                                     const std::string& name, const TokenBatches& by = {});

// PackBalanced's step: `pieces` into `samples` samples of `max_tokens`
// positions, costliest first (n + square n^2 a piece of n positions) each
// into the sample with room whose load with it is least for its share,
// each sample's pieces then in data order; none where a piece finds no
// room. Sample s of k has the share 1 + tilt (1 - 2s / (k - 1)): tilt 0,
// equal shares (longest processing time first); tilt t in [0, 1), the
// first sample's 1 + t falling evenly to the last's 1 - t.
std::optional<std::vector<std::vector<DocumentPiece>>> PackLongestFirst(std::vector<DocumentPiece> pieces,
                                                                        std::size_t samples, int max_tokens,
                                                                        double square, double tilt = 0);

// data.packing: pad: each piece (a document, or a piece of one longer
// than `max_tokens`, cut as PackGreedy cuts it) a sample of its own, in
// data order, the rest of the sample unfilled: the baseline of padding
// every document to the budget. Throws as PackGreedy does. With `by`,
// batches of at most `batch_samples` such samples by tokens.
std::vector<std::vector<DocumentPiece>> PackPadded(std::span<const std::int64_t> lengths, int max_tokens,
                                                   bool refuse_long, const std::string& name, int batch_samples = 1,
                                                   const TokenBatches& by = {});

// data.packing: balanced's arrangement of one global batch's samples (in
// place: the same documents, packed again and reordered) into the step's
// microbatches, as the run's plan prices the step (ArrangeBalanced,
// baton/profile_price.h). The batch loader arranges each batch as it
// gathers it (MakeBatchLoader), ahead of the step that takes it.
using ArrangeBatch = std::function<void(std::span<std::vector<DocumentPiece>> samples)>;

// `docs` packed by PackGreedy (or PackBalanced, square >= 0) into samples
// of `max_tokens` positions (i32[1, max_tokens]), as Dataset says of
// packed documents: the inputs where `want_inputs`, the labels where
// `want_labels`, the starts and target counts always. Ids are in [0,
// vocab) (the caller checks: TokenDocuments::CheckBelow); a position no
// document fills has input 0.
Dataset MakePackedDocuments(std::shared_ptr<const TokenDocuments> docs, int max_tokens, int batch_samples,
                            bool refuse_long, int vocab, bool want_inputs, bool want_labels, double square = -1,
                            const TokenBatches& by = {});

// The dataset of `docs` in the samples `packed` (each a list of pieces
// in the order they fill its `max_tokens` positions), as
// MakePackedDocuments says, read from `docs` as batches want them
// (Dataset::source): a rank holds the samples' pieces and target counts,
// not their positions. Throws ConfigError when `packed` is empty.
Dataset PackedDataset(std::shared_ptr<const TokenDocuments> docs, const std::vector<std::vector<DocumentPiece>>& packed,
                      int max_tokens, int vocab, bool want_inputs, bool want_labels);

// What `baton data stats` prints: the documents, the tokens, the length's
// quantiles and a histogram of lengths in powers of two (bin k holds the
// lengths in [2^k, 2^(k+1)); bin 0 also holds length 0).
struct DocumentStats {
  std::int64_t documents = 0, tokens = 0;
  std::int64_t shortest = 0, longest = 0, median = 0, p90 = 0, p99 = 0;
  double mean = 0;
  std::vector<std::int64_t> bins;  // documents per power-of-two length bin
};
DocumentStats DescribeDocuments(const TokenDocuments& docs);

// Seeded uniform token ids in [0, vocab), for benchmarks: sample i is a
// window of seq_len + 1 tokens of one std::mt19937_64 stream seeded with
// `seed`, split into input and labels like MakeTokenWindows (so a rank that
// asks only for labels gets the same labels). Throws ConfigError for sizes
// < 1.
Dataset MakeSyntheticTokens(std::int64_t samples, int seq_len, int vocab, std::uint64_t seed, bool want_inputs,
                            bool want_labels);

// Refuses token data a model with `vocab` token ids cannot take: throws
// ConfigError naming the dataset, the sample, the position and the id if
// any input token id or label of `data` is outside [0, vocab). Data that is
// not token ids (f32 inputs) is refused as well: only a token dataset has a
// vocabulary to check. A run with a token model calls it on every token
// dataset it holds in memory, before the first step (one read from its
// documents has them checked there: TokenDocuments::CheckBelow).
void CheckTokens(const Dataset& data, int vocab);

// The unigram baseline, in nats per token: the cross-entropy of
// `validation`'s labels under the byte frequencies of `train`'s labels,
// add-one smoothed over `vocab` ids so an id unseen in training costs a
// finite amount:
//   p(t) = (count_train(t) + 1) / (N_train + vocab)
//   H    = -(1 / N_val) * sum over validation labels t of ln p(t)
// A model that learned nothing about context scores about this much.
// REQUIRES: both datasets hold their labels in memory, in [0, vocab)
// (CheckTokens); throws ConfigError otherwise or if either holds no labels.
double UnigramCrossEntropy(const Dataset& train, const Dataset& validation, int vocab);

// One batch: views into loader-owned, preallocated memory, valid until the
// next call to Next().
struct Batch {
  std::int64_t index = 0;                 // batch number within the epoch
  TensorDesc input;                       // the inputs: the dataset's sample with batch_size rows
  int labels_per_sample = 1;
  std::span<const std::byte> inputs;      // (batch_size, ...) as `input` says, empty if not loaded
  std::span<const std::int32_t> labels;   // (batch_size, labels_per_sample), empty if not loaded
  // Packed documents (Dataset::packed): each position's document's first
  // (batch_size, labels_per_sample), and the labels that count in the
  // whole global batch (every replica's slice): the loss is their mean.
  std::span<const std::int32_t> starts;
  std::int64_t targets = 0;
  std::span<const std::int32_t> filled;   // packed: (batch_size), each sample's filled positions (Dataset::targets)

  template <typename T>
  std::span<const T> inputs_as() const {  // REQUIRES: T matches input.dtype
    return {reinterpret_cast<const T*>(inputs.data()), inputs.size() / sizeof(T)};
  }
};

// The samples a packed microbatch runs, given its samples' filled
// positions in order (Batch::filled's run of them): up to its last sample
// with positions, the empty ones before it included (their rows are
// computed, their labels count for nothing); 0: none, the microbatch is not
// run nor sent (a batch by tokens). The executor, the price of a packed step
// and balanced's arrangement all count a microbatch's rows by this rule.
inline int RowsRun(std::span<const std::int32_t> filled) {
  int rows = 0;
  for (std::size_t r = 0; r < filled.size(); ++r) {
    if (filled[r] > 0) rows = static_cast<int>(r) + 1;
  }
  return rows;
}

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
// Throws ConfigError if the dataset's parts disagree with its sizes.
// `slice_begin`, `slice_size` (0: the whole batch): each batch holds only
// positions [slice_begin, slice_begin + slice_size) of the global batch of
// `batch_size` samples (a data-parallel replica's share: the replicas
// together see exactly the batches of one process).
// `arrange` (balanced; a packed dataset read from its documents, else
// ConfigError): each global batch's samples, as gathered, arranged by it
// before the slice is read from them, on the loader's worker while the
// caller trains on the batch before (the arrangement allocates there; each
// rank arranges each batch alike). Not called concurrently by one loader.
std::unique_ptr<BatchLoader> MakeBatchLoader(const Dataset& dataset, int batch_size, bool shuffle,
                                             std::uint64_t seed, int slice_begin = 0, int slice_size = 0,
                                             ArrangeBatch arrange = {});

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
// `metadata` joins the header's "__metadata__" strings (beside "format":
// "pt"), e.g. a checkpoint shard's step. Its file operations go through
// `env` (a run's, so that a test's fake can fail them).
void WriteSafetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {}, const Env& env = Env::Default());

// Reads a safetensors file of F32 tensors. Throws ConfigError naming the file
// for a truncated file, a header length out of range, malformed JSON, a dtype
// other than F32, offsets outside the data, or a shape that does not match
// the byte count. With `metadata`, the header's "__metadata__" strings are
// returned there (a value that is not a string is an error).
std::vector<NamedTensor> ReadSafetensors(const std::string& path,
                                         std::map<std::string, std::string>* metadata = nullptr);

}  // namespace baton

#endif  // BATON_DATA_H_
