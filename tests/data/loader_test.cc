// The double-buffered batch loader (feature and token data), and the synthetic datasets.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <new>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <span>
#include <vector>

#include <gtest/gtest.h>
#include <unistd.h>

#include "baton/buffer.h"
#include "baton/data.h"
#include "baton/error.h"
#include "support/held_samples.h"

// Counts every global operator new while g_counting is set, on any thread, to
// prove that Next() allocates nothing in steady state.
namespace {
std::atomic<bool> g_counting{false};
std::atomic<long> g_allocations{0};
}  // namespace

// The replacements pair malloc with free; GCC cannot see that operator new
// is replaced too and would warn at every delete.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace baton {
namespace {

// A dataset whose values tell where they came from: input (s, j) is
// s * features + j, label s is s (both exact in float / int32).
Dataset Numbered(std::int64_t samples, int features, bool inputs = true, bool labels = true) {
  Dataset d;
  d.name = "numbered";
  d.samples = samples;
  d.sample = {DType::kF32, {1, features}};
  d.classes = static_cast<int>(samples);
  if (inputs) {
    d.inputs.resize(static_cast<std::size_t>(samples * features) * sizeof(float));
    const std::span<float> x = d.inputs_as<float>();
    std::iota(x.begin(), x.end(), 0.0f);
  }
  if (labels) {
    d.labels.resize(static_cast<std::size_t>(samples));
    std::iota(d.labels.begin(), d.labels.end(), 0);
  }
  return d;
}

// Checks that row i of the batch is sample `samples[i]` of Numbered().
void ExpectRows(const Batch& b, const std::vector<std::int64_t>& samples, int features, bool inputs, bool labels) {
  const std::size_t n = samples.size();
  const std::span<const float> x = b.inputs_as<float>();
  ASSERT_EQ(x.size(), inputs ? n * features : 0u);
  ASSERT_EQ(b.labels.size(), labels ? n : 0u);
  EXPECT_EQ(b.input, TensorDesc(DType::kF32, {static_cast<std::int64_t>(n), features}));
  EXPECT_EQ(b.labels_per_sample, 1);
  for (std::size_t i = 0; i < n; ++i) {
    if (labels) {
      EXPECT_EQ(b.labels[i], samples[i]) << "row " << i;
    }
    if (inputs) {
      for (int j = 0; j < features; ++j) {
        ASSERT_EQ(x[i * features + j], static_cast<float>(samples[i] * features + j))
            << "row " << i << " col " << j;
      }
    }
  }
}

std::vector<std::int64_t> Range(std::int64_t begin, std::int64_t end) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(end - begin));
  std::iota(v.begin(), v.end(), begin);
  return v;
}

// The sample numbers of one batch, read from its labels.
std::vector<std::int64_t> SamplesOf(const Batch& b) { return {b.labels.begin(), b.labels.end()}; }

// ---- without shuffle ----

TEST(BatchLoader, InOrderBatchKIsSamplesKBToKPlusOneB) {
  const Dataset d = Numbered(10, 5);  // 3 batches of 3; sample 9 is dropped
  auto loader = MakeBatchLoader(d, 3, /*shuffle=*/false, 0);
  EXPECT_EQ(loader->batches_per_epoch(), 3);
  for (int epoch = 0; epoch < 3; ++epoch) {
    for (std::int64_t k = 0; k < 3; ++k) {
      const Batch b = loader->Next();
      EXPECT_EQ(b.index, k) << "epoch " << epoch;
      ExpectRows(b, Range(3 * k, 3 * k + 3), 5, true, true);
    }
  }
}

TEST(BatchLoader, PartialBatchDropped) {
  const Dataset d = Numbered(7, 2);
  auto loader = MakeBatchLoader(d, 4, false, 0);
  EXPECT_EQ(loader->batches_per_epoch(), 1);
  for (int i = 0; i < 3; ++i) {
    const Batch b = loader->Next();
    EXPECT_EQ(b.index, 0);
    ExpectRows(b, Range(0, 4), 2, true, true);
  }
}

TEST(BatchLoader, BatchOfWholeDataset) {
  const Dataset d = Numbered(6, 3);
  auto loader = MakeBatchLoader(d, 6, false, 0);
  EXPECT_EQ(loader->batches_per_epoch(), 1);
  ExpectRows(loader->Next(), Range(0, 6), 3, true, true);
  ExpectRows(loader->Next(), Range(0, 6), 3, true, true);
}

TEST(BatchLoader, ReturnedBatchStaysValidWhileTheNextIsPrefetched) {
  const Dataset d = Numbered(64, 16);
  auto loader = MakeBatchLoader(d, 8, false, 0);
  for (std::int64_t k = 0; k < 8; ++k) {
    const Batch b = loader->Next();
    // The prefetch of batch k+1 runs now; b must not change under us.
    volatile double sink = 0;
    for (int spin = 0; spin < 20000; ++spin) sink = sink + spin;
    ExpectRows(b, Range(8 * k, 8 * k + 8), 16, true, true);
  }
}

TEST(BatchLoader, LabelsOnly) {
  const Dataset d = Numbered(9, 4, /*inputs=*/false, /*labels=*/true);
  auto loader = MakeBatchLoader(d, 4, false, 0);
  ExpectRows(loader->Next(), Range(0, 4), 4, false, true);
  ExpectRows(loader->Next(), Range(4, 8), 4, false, true);
  ExpectRows(loader->Next(), Range(0, 4), 4, false, true);
}

TEST(BatchLoader, InputsOnly) {
  const Dataset d = Numbered(9, 4, /*inputs=*/true, /*labels=*/false);
  for (bool shuffle : {false, true}) {
    auto loader = MakeBatchLoader(d, 4, shuffle, 3);
    const Batch b = loader->Next();
    EXPECT_TRUE(b.labels.empty());
    ASSERT_EQ(b.inputs_as<float>().size(), 16u);
    ASSERT_EQ(b.inputs.size(), 16u * sizeof(float));
    if (!shuffle) ExpectRows(b, Range(0, 4), 4, true, false);
  }
}

// ---- shuffle ----

// The sample numbers of `epochs` whole epochs, batch after batch.
std::vector<std::int64_t> Order(const Dataset& d, int batch, std::uint64_t seed, int epochs) {
  auto loader = MakeBatchLoader(d, batch, true, seed);
  std::vector<std::int64_t> out;
  for (std::int64_t i = 0; i < epochs * loader->batches_per_epoch(); ++i) {
    const Batch b = loader->Next();
    EXPECT_EQ(b.index, i % loader->batches_per_epoch());
    const std::vector<std::int64_t> s = SamplesOf(b);
    ExpectRows(b, s, static_cast<int>(d.sample_elements()), true, true);  // inputs travel with their label
    out.insert(out.end(), s.begin(), s.end());
  }
  return out;
}

TEST(BatchLoader, ShuffleVisitsEverySampleOncePerEpoch) {
  const Dataset d = Numbered(120, 3);
  const std::vector<std::int64_t> order = Order(d, 10, 42, 3);
  ASSERT_EQ(order.size(), 360u);
  for (int epoch = 0; epoch < 3; ++epoch) {
    std::vector<std::int64_t> e(order.begin() + 120 * epoch, order.begin() + 120 * (epoch + 1));
    EXPECT_NE(e, Range(0, 120)) << "epoch " << epoch << " is not shuffled";
    std::sort(e.begin(), e.end());
    EXPECT_EQ(e, Range(0, 120)) << "epoch " << epoch;
  }
  // Each epoch draws its own permutation.
  EXPECT_FALSE(std::equal(order.begin(), order.begin() + 120, order.begin() + 120));
}

TEST(BatchLoader, ShuffleWithPartialBatchDrawsDistinctSamples) {
  const Dataset d = Numbered(50, 2);
  const std::vector<std::int64_t> order = Order(d, 7, 1, 1);  // 7 batches of 7, one sample dropped
  ASSERT_EQ(order.size(), 49u);
  EXPECT_EQ(std::set<std::int64_t>(order.begin(), order.end()).size(), 49u);
}

TEST(BatchLoader, ShuffleIsTheSameForTheSameSeed) {
  const Dataset d = Numbered(100, 2);
  EXPECT_EQ(Order(d, 10, 7, 2), Order(d, 10, 7, 2));
  EXPECT_NE(Order(d, 10, 7, 2), Order(d, 10, 8, 2));
}

TEST(BatchLoader, ShufflePermutationIsSeedPlusEpoch) {
  // The documented rule: epoch e is std::shuffle(iota, mt19937_64(seed + e)).
  const Dataset d = Numbered(30, 1);
  const std::vector<std::int64_t> order = Order(d, 5, 100, 2);
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::vector<std::int64_t> want(30);
    std::iota(want.begin(), want.end(), 0);
    std::mt19937_64 rng(100 + epoch);
    std::shuffle(want.begin(), want.end(), rng);
    EXPECT_TRUE(std::equal(want.begin(), want.end(), order.begin() + 30 * epoch)) << "epoch " << epoch;
  }
}

TEST(BatchLoader, ShuffledLabelsOnlyMatchShuffledFull) {
  const Dataset full = Numbered(40, 2);
  const Dataset labels_only = Numbered(40, 2, false, true);
  auto a = MakeBatchLoader(full, 8, true, 5);
  auto b = MakeBatchLoader(labels_only, 8, true, 5);
  for (int i = 0; i < 12; ++i) {
    const Batch ba = a->Next();
    const Batch bb = b->Next();
    EXPECT_TRUE(bb.inputs.empty());
    EXPECT_EQ(SamplesOf(ba), SamplesOf(bb)) << "batch " << i;
  }
}

// ---- Seek ----

TEST(BatchLoader, SeekMatchesReadingThrough) {
  const Dataset d = Numbered(60, 2);
  for (bool shuffle : {false, true}) {
    auto through = MakeBatchLoader(d, 6, shuffle, 9);
    std::vector<std::vector<std::int64_t>> seen;  // epochs 0..2, 10 batches each
    for (int i = 0; i < 30; ++i) seen.push_back(SamplesOf(through->Next()));

    auto loader = MakeBatchLoader(d, 6, shuffle, 9);
    loader->Next();
    loader->Seek(2, 3);
    for (int i = 23; i < 30; ++i) {
      const Batch b = loader->Next();
      EXPECT_EQ(b.index, i % 10);
      EXPECT_EQ(SamplesOf(b), seen[i]) << "shuffle " << shuffle << ", batch " << i;
    }
    loader->Seek(0, 0);  // back to the start, crossing into epoch 1
    for (int i = 0; i < 12; ++i) EXPECT_EQ(SamplesOf(loader->Next()), seen[i]) << "shuffle " << shuffle;
    loader->Seek(1, 9);
    EXPECT_EQ(SamplesOf(loader->Next()), seen[19]);
    EXPECT_EQ(SamplesOf(loader->Next()), seen[20]);
  }
}

TEST(BatchLoader, SeekKeepsTheReturnedBatch) {
  const Dataset d = Numbered(20, 2);
  auto loader = MakeBatchLoader(d, 5, false, 0);
  const Batch b = loader->Next();
  loader->Seek(0, 3);
  ExpectRows(b, Range(0, 5), 2, true, true);  // still valid until the next Next()
  ExpectRows(loader->Next(), Range(15, 20), 2, true, true);
}

TEST(BatchLoader, SeekOutOfRange) {
  const Dataset d = Numbered(20, 2);
  auto loader = MakeBatchLoader(d, 5, false, 0);
  EXPECT_THROW(loader->Seek(0, 4), ConfigError);
  EXPECT_THROW(loader->Seek(0, -1), ConfigError);
  EXPECT_THROW(loader->Seek(-1, 0), ConfigError);
  ExpectRows(loader->Next(), Range(0, 5), 2, true, true);  // unchanged by the failed seeks
}

// ---- token data ----

// A token stream whose byte k is k % 251 (every window differs, the shift
// by one is visible), cut into windows of 6.
std::vector<std::uint8_t> CountingTokens(std::size_t n) {
  std::vector<std::uint8_t> t(n);
  for (std::size_t k = 0; k < n; ++k) t[k] = static_cast<std::uint8_t>(k % 251);
  return t;
}

// Checks that row i of a token batch is window samples[i] of seq_len over
// CountingTokens: inputs tokens [w L, w L + L), labels [w L + 1, w L + L + 1).
void ExpectWindows(const Batch& b, const std::vector<std::int64_t>& windows, int seq_len) {
  const std::size_t n = windows.size(), t = static_cast<std::size_t>(seq_len);
  EXPECT_EQ(b.input, TensorDesc(DType::kI32, {static_cast<std::int64_t>(n), seq_len}));
  EXPECT_EQ(b.labels_per_sample, seq_len);
  const std::span<const std::int32_t> x = b.inputs_as<std::int32_t>();
  ASSERT_EQ(x.size(), n * t);
  ASSERT_EQ(b.labels.size(), n * t);
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t k = 0; k < t; ++k) {
      const std::int64_t at = windows[i] * seq_len + static_cast<std::int64_t>(k);
      ASSERT_EQ(x[i * t + k], at % 251) << "row " << i << " position " << k;
      ASSERT_EQ(b.labels[i * t + k], (at + 1) % 251) << "row " << i << " position " << k;
    }
  }
}

// The window numbers of a token batch, from its first input token.
std::vector<std::int64_t> WindowsOf(const Batch& b, int seq_len) {
  std::vector<std::int64_t> out;
  const std::span<const std::int32_t> x = b.inputs_as<std::int32_t>();
  for (std::size_t i = 0; i < x.size(); i += static_cast<std::size_t>(seq_len)) out.push_back(x[i] / seq_len);
  return out;
}

TEST(BatchLoaderTokens, InOrderBatchesAreConsecutiveWindows) {
  const std::vector<std::uint8_t> tokens = CountingTokens(6 * 10 + 1);  // exactly 10 windows of 6
  const Dataset d = MakeTokenWindows(tokens, 6, "counting", true, true);
  ASSERT_EQ(d.samples, 10);
  auto loader = MakeBatchLoader(d, 3, false, 0);
  EXPECT_EQ(loader->batches_per_epoch(), 3);  // window 9 is dropped
  for (int epoch = 0; epoch < 2; ++epoch) {
    for (std::int64_t k = 0; k < 3; ++k) {
      const Batch b = loader->Next();
      EXPECT_EQ(b.index, k);
      ExpectWindows(b, Range(3 * k, 3 * k + 3), 6);
    }
  }
}

TEST(BatchLoaderTokens, ShuffleKeepsEachWindowWithItsLabels) {
  const std::vector<std::uint8_t> tokens = CountingTokens(6 * 40 + 1);  // windows < 251 / 6 apart: unique
  const Dataset d = MakeTokenWindows(tokens, 6, "counting", true, true);
  auto loader = MakeBatchLoader(d, 5, true, 11);
  std::vector<std::int64_t> epoch;
  for (int k = 0; k < 8; ++k) {
    const Batch b = loader->Next();
    const std::vector<std::int64_t> w = WindowsOf(b, 6);
    ExpectWindows(b, w, 6);
    epoch.insert(epoch.end(), w.begin(), w.end());
  }
  // The documented permutation: std::shuffle(iota, mt19937_64(seed + epoch)).
  std::vector<std::int64_t> want(40);
  std::iota(want.begin(), want.end(), 0);
  std::mt19937_64 rng(11);
  std::shuffle(want.begin(), want.end(), rng);
  EXPECT_EQ(epoch, want);
}

TEST(BatchLoaderTokens, SeekMatchesReadingThroughAndLabelsOnlyFollow) {
  const std::vector<std::uint8_t> tokens = CountingTokens(4 * 30 + 3);  // 30 windows of 4, 2 tokens dropped
  const Dataset full = MakeTokenWindows(tokens, 4, "counting", true, true);
  const Dataset labels_only = MakeTokenWindows(tokens, 4, "counting", false, true);
  ASSERT_EQ(full.samples, 30);
  for (bool shuffle : {false, true}) {
    auto through = MakeBatchLoader(full, 6, shuffle, 3);
    std::vector<std::vector<std::int32_t>> seen;  // labels of epochs 0..1, 5 batches each
    for (int i = 0; i < 10; ++i) {
      const Batch b = through->Next();
      seen.emplace_back(b.labels.begin(), b.labels.end());
    }
    auto loader = MakeBatchLoader(labels_only, 6, shuffle, 3);
    loader->Seek(1, 2);
    for (int i = 7; i < 10; ++i) {
      const Batch b = loader->Next();
      EXPECT_TRUE(b.inputs.empty());
      EXPECT_EQ(std::vector<std::int32_t>(b.labels.begin(), b.labels.end()), seen[i]) << "shuffle " << shuffle;
    }
  }
}

TEST(BatchLoaderTokens, NextAllocatesNothing) {
  const Dataset d = MakeSyntheticTokens(64, 16, 256, 2, true, true);
  auto loader = MakeBatchLoader(d, 8, true, 1);
  for (int i = 0; i < 20; ++i) loader->Next();
  g_allocations = 0;
  g_counting = true;
  std::int64_t sum = 0;
  for (int i = 0; i < 50; ++i) sum += loader->Next().labels[0];
  g_counting = false;
  EXPECT_EQ(g_allocations.load(), 0);
  EXPECT_GE(sum, 0);
}

// 40 JSON Lines documents, document d `length(d)` bytes of one letter,
// opened (the file removed: the mapping keeps its pages).
std::shared_ptr<const TokenDocuments> LetterDocuments(const std::string& name, int (*length)(int)) {
  const std::string path = ::testing::TempDir() + "/baton_loader_" + name + "_" + std::to_string(::getpid()) + ".jsonl";
  {
    std::ofstream out(path);
    for (int d = 0; d < 40; ++d) {
      out << "{\"text\": \"" << std::string(static_cast<std::size_t>(length(d)), static_cast<char>('a' + d % 26))
          << "\"}\n";
    }
  }
  auto docs = std::make_shared<const TokenDocuments>(OpenJsonl(path));
  std::remove(path.c_str());
  return docs;
}

// A dataset read from its documents (Dataset::source): the loader cuts
// each sample as its batch wants it, hands out the batches the same
// samples held in memory give (windows and packed, in order and
// shuffled, a replica's slice), and allocates nothing doing it.
TEST(BatchLoaderDocuments, CutsTheSamplesHeldOnesGiveAndAllocatesNothing) {
  const auto docs = LetterDocuments("docs", [](int d) { return 1 + (d * 11) % 23; });
  for (const bool packed : {false, true}) {
    const Dataset read = packed ? MakePackedDocuments(docs, 16, 4, false, kByteVocabulary, true, true)
                                : MakeDocumentWindows(docs, 16, kByteVocabulary, true, true);
    ASSERT_TRUE(read.inputs.empty() && read.labels.empty());
    const Dataset held = baton_test::HeldSamples(read);
    for (const bool shuffle : {false, true}) {
      SCOPED_TRACE(std::string(packed ? "packed" : "windows") + (shuffle ? ", shuffled" : ", in order"));
      auto a = MakeBatchLoader(read, 4, shuffle, 3, 1, 2);
      auto b = MakeBatchLoader(held, 4, shuffle, 3, 1, 2);
      for (std::int64_t k = 0; k < 2 * a->batches_per_epoch() + 1; ++k) {
        const Batch x = a->Next(), y = b->Next();
        ASSERT_EQ(x.inputs.size(), y.inputs.size());
        EXPECT_TRUE(std::equal(x.inputs.begin(), x.inputs.end(), y.inputs.begin())) << "batch " << k;
        EXPECT_TRUE(std::ranges::equal(x.labels, y.labels)) << "batch " << k;
        EXPECT_TRUE(std::ranges::equal(x.starts, y.starts)) << "batch " << k;
        EXPECT_TRUE(std::ranges::equal(x.filled, y.filled)) << "batch " << k;
        EXPECT_EQ(x.targets, y.targets) << "batch " << k;
      }
      g_allocations = 0;
      g_counting = true;
      std::int64_t sum = 0;
      for (int i = 0; i < 30; ++i) sum += a->Next().labels[0];
      g_counting = false;
      EXPECT_EQ(g_allocations.load(), 0);
      EXPECT_NE(sum, 0);
    }
  }
}

// balanced: each global batch arranged as the loader gathers it (here:
// its samples reversed), the slice read from the arranged samples, the
// batch's target count the whole batch's; a seek arranges the batch it
// lands on alike; one arrangement a batch gathered, none before.
TEST(BatchLoaderDocuments, ArrangesEachBatchAsItGathersIt) {
  const auto docs = LetterDocuments("arranged", [](int d) { return 2 + (d * 5) % 13; });
  const Dataset read = MakePackedDocuments(docs, 16, 4, false, kByteVocabulary, true, true);
  const Dataset held = baton_test::HeldSamples(read);
  std::atomic<int> calls{0};  // from the loaders' workers
  auto reverse = [&calls](std::span<std::vector<DocumentPiece>> samples) {
    ++calls;
    std::reverse(samples.begin(), samples.end());
  };
  auto loader = MakeBatchLoader(read, 4, false, 0, 1, 2, reverse);
  ASSERT_GE(loader->batches_per_epoch(), 3);
  for (std::int64_t k = 0; k < loader->batches_per_epoch(); ++k) {
    const Batch b = loader->Next();
    std::int64_t targets = 0;
    for (std::int64_t i = 0; i < 4; ++i) targets += held.targets[static_cast<std::size_t>(4 * k + i)];
    EXPECT_EQ(b.targets, targets) << "batch " << k;
    // Slice positions 1 and 2 of the reversed batch: samples 4k + 2 and 4k + 1.
    for (std::int64_t at = 0; at < 2; ++at) {
      const auto s = static_cast<std::size_t>(4 * k + 2 - at);
      EXPECT_TRUE(std::equal(b.labels.begin() + at * 16, b.labels.begin() + (at + 1) * 16, held.labels.begin() + s * 16))
          << "batch " << k << ", position " << at;
      EXPECT_TRUE(std::equal(b.starts.begin() + at * 16, b.starts.begin() + (at + 1) * 16, held.starts.begin() + s * 16));
      EXPECT_EQ(b.filled[static_cast<std::size_t>(at)], held.targets[s]);
    }
  }
  const std::int64_t batches = loader->batches_per_epoch();
  loader.reset();  // its last prefetch done
  EXPECT_EQ(calls.load(), batches + 1) << "one a batch gathered (the next one's prefetch too)";
  auto again = MakeBatchLoader(read, 4, false, 0, 1, 2, reverse);
  again->Seek(0, 2);
  auto through = MakeBatchLoader(read, 4, false, 0, 1, 2, reverse);
  through->Next();
  through->Next();
  const Batch x = again->Next(), y = through->Next();
  EXPECT_TRUE(std::ranges::equal(x.labels, y.labels));
  EXPECT_TRUE(std::ranges::equal(x.inputs, y.inputs));
  EXPECT_EQ(x.targets, y.targets);
  // Only packed documents read from their files can be arranged.
  EXPECT_THROW(MakeBatchLoader(held, 4, false, 0, 0, 0, reverse), ConfigError);
  EXPECT_THROW(MakeBatchLoader(MakeDocumentWindows(docs, 16, kByteVocabulary, true, true), 4, false, 0, 0, 0, reverse),
               ConfigError);
}

TEST(BatchLoader, RejectsLabelsThatDoNotMatchLabelsPerSample) {
  Dataset d = MakeSyntheticTokens(10, 4, 256, 1, true, true);
  d.labels.pop_back();
  EXPECT_THROW(MakeBatchLoader(d, 2, false, 0), ConfigError);
  d = MakeSyntheticTokens(10, 4, 256, 1, true, true);
  d.labels_per_sample = 1;
  EXPECT_THROW(MakeBatchLoader(d, 2, false, 0), ConfigError);
}

// ---- setup errors ----

TEST(BatchLoader, RejectsBadSizes) {
  const Dataset d = Numbered(10, 2);
  EXPECT_THROW(MakeBatchLoader(d, 0, false, 0), ConfigError);
  EXPECT_THROW(MakeBatchLoader(d, 11, false, 0), ConfigError);
  Dataset bad = d;
  bad.inputs.pop_back();
  EXPECT_THROW(MakeBatchLoader(bad, 2, false, 0), ConfigError);
  bad = d;
  bad.labels.push_back(0);
  EXPECT_THROW(MakeBatchLoader(bad, 2, false, 0), ConfigError);
}

// ---- no allocation in steady state ----

TEST(BatchLoader, NextAllocatesNothing) {
  const Dataset d = Numbered(200, 8);
  for (bool shuffle : {false, true}) {
    auto loader = MakeBatchLoader(d, 16, shuffle, 1);
    for (int i = 0; i < 30; ++i) loader->Next();  // warm up (thread pool, epochs)
    g_allocations = 0;
    g_counting = true;
    double sum = 0;
    for (int i = 0; i < 100; ++i) sum += loader->Next().inputs_as<float>()[0];  // crosses 8 epochs
    g_counting = false;
    EXPECT_EQ(g_allocations.load(), 0) << "shuffle " << shuffle;
    EXPECT_GE(sum, 0.0);
  }
}

// ---- synthetic data ----

TEST(Synthetic, DeterministicAndInRange) {
  const Dataset a = MakeSynthetic(1000, 7, 5, 123, true, true);
  const Dataset b = MakeSynthetic(1000, 7, 5, 123, true, true);
  EXPECT_EQ(a.name, "synthetic");
  EXPECT_EQ(a.samples, 1000);
  EXPECT_EQ(a.sample, TensorDesc(DType::kF32, {1, 7}));
  EXPECT_EQ(a.labels_per_sample, 1);
  EXPECT_EQ(a.classes, 5);
  ASSERT_EQ(a.inputs_as<float>().size(), 7000u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a.inputs.data()) % kBufferAlignment, 0u);
  ASSERT_EQ(a.labels.size(), 1000u);
  EXPECT_EQ(a.inputs, b.inputs);
  EXPECT_EQ(a.labels, b.labels);

  const std::span<const float> x = a.inputs_as<float>();
  const auto [lo, hi] = std::minmax_element(x.begin(), x.end());
  EXPECT_GE(*lo, -1.0f);
  EXPECT_LT(*hi, 1.0f);
  EXPECT_LT(*lo, -0.99f);  // spread over the whole range
  EXPECT_GT(*hi, 0.99f);
  const double mean = std::accumulate(x.begin(), x.end(), 0.0) / x.size();
  EXPECT_NEAR(mean, 0.0, 0.05);

  std::vector<int> histogram(5, 0);
  for (std::int32_t y : a.labels) {
    ASSERT_GE(y, 0);
    ASSERT_LT(y, 5);
    ++histogram[y];
  }
  for (int c = 0; c < 5; ++c) EXPECT_NEAR(histogram[c], 200, 60) << "class " << c;
}

TEST(Synthetic, SeedChangesData) {
  const Dataset a = MakeSynthetic(100, 4, 10, 1, true, true);
  const Dataset b = MakeSynthetic(100, 4, 10, 2, true, true);
  EXPECT_NE(a.inputs, b.inputs);
  EXPECT_NE(a.labels, b.labels);
}

TEST(Synthetic, PartsDoNotDependOnEachOther) {
  const Dataset both = MakeSynthetic(500, 6, 3, 77, true, true);
  const Dataset inputs = MakeSynthetic(500, 6, 3, 77, true, false);
  const Dataset labels = MakeSynthetic(500, 6, 3, 77, false, true);
  EXPECT_TRUE(inputs.labels.empty());
  EXPECT_TRUE(labels.inputs.empty());
  EXPECT_EQ(inputs.samples, 500);
  EXPECT_EQ(labels.samples, 500);
  EXPECT_EQ(both.inputs, inputs.inputs);
  EXPECT_EQ(both.labels, labels.labels);
}

TEST(Synthetic, RejectsBadSizes) {
  EXPECT_THROW(MakeSynthetic(0, 4, 2, 0, true, true), ConfigError);
  EXPECT_THROW(MakeSynthetic(10, 0, 2, 0, true, true), ConfigError);
  EXPECT_THROW(MakeSynthetic(10, 4, 0, 0, true, true), ConfigError);
}

TEST(SyntheticTokens, DeterministicUniformAndShiftedByOne) {
  const Dataset a = MakeSyntheticTokens(400, 8, 16, 9, true, true);
  const Dataset b = MakeSyntheticTokens(400, 8, 16, 9, true, true);
  EXPECT_EQ(a.name, "synthetic_tokens");
  EXPECT_EQ(a.sample, TensorDesc(DType::kI32, {1, 8}));
  EXPECT_EQ(a.labels_per_sample, 8);
  EXPECT_EQ(a.classes, 16);
  EXPECT_EQ(a.inputs, b.inputs);
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_NE(a.labels, MakeSyntheticTokens(400, 8, 16, 10, true, true).labels);
  const std::span<const std::int32_t> x = a.inputs_as<std::int32_t>();
  ASSERT_EQ(x.size(), 3200u);
  ASSERT_EQ(a.labels.size(), 3200u);
  std::vector<int> histogram(16, 0);
  for (std::size_t i = 0; i < 400; ++i) {
    for (std::size_t k = 0; k + 1 < 8; ++k) ASSERT_EQ(a.labels[i * 8 + k], x[i * 8 + k + 1]);
    for (std::size_t k = 0; k < 8; ++k) {
      ASSERT_GE(x[i * 8 + k], 0);
      ASSERT_LT(x[i * 8 + k], 16);
      ++histogram[static_cast<std::size_t>(x[i * 8 + k])];
    }
  }
  for (int t = 0; t < 16; ++t) EXPECT_NEAR(histogram[t], 200, 60) << "token " << t;
  // Each part alone is the same as with the other.
  EXPECT_EQ(MakeSyntheticTokens(400, 8, 16, 9, true, false).inputs, a.inputs);
  EXPECT_EQ(MakeSyntheticTokens(400, 8, 16, 9, false, true).labels, a.labels);
  EXPECT_THROW(MakeSyntheticTokens(0, 8, 16, 9, true, true), ConfigError);
  EXPECT_THROW(MakeSyntheticTokens(4, 0, 16, 9, true, true), ConfigError);
  EXPECT_THROW(MakeSyntheticTokens(4, 8, 0, 9, true, true), ConfigError);
}

}  // namespace
}  // namespace baton
