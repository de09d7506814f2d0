// Documents packed into samples (data.packing: greedy): first-fit in data
// order into the current batch's samples, worked out by hand (and pad's
// one document a sample); long
// documents cut into pieces or refused; the packed dataset's inputs,
// labels, document starts and target counts against the documents' own
// tokens; and the loader's starts and the global batch's target count,
// with shuffling and a replica's slice.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <algorithm>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "baton/data.h"
#include "baton/error.h"
#include "support/held_samples.h"
#include "support/test_folder.h"

namespace baton {
namespace {

namespace fs = std::filesystem;
using Pieces = std::vector<DocumentPiece>;

TEST(PackGreedy, EachDocumentGoesIntoTheFirstSampleOfItsBatchWithRoom) {
  // Positions (length - 1): 5, 6, 3, 2, 4, 1, 7. Budget 8, batches of 2 samples:
  // batch 0: [5, 3] [6, 2]; 4 fits in neither -> batch 1: [4, 1] [7].
  const std::vector<std::int64_t> lengths{6, 7, 4, 3, 5, 2, 8};
  const auto packed = PackGreedy(lengths, 8, 2, false, "docs");
  ASSERT_EQ(packed.size(), 4u);
  EXPECT_EQ(packed[0], (Pieces{{0, 0, 5}, {2, 0, 3}}));
  EXPECT_EQ(packed[1], (Pieces{{1, 0, 6}, {3, 0, 2}}));
  EXPECT_EQ(packed[2], (Pieces{{4, 0, 4}, {5, 0, 1}}));
  EXPECT_EQ(packed[3], (Pieces{{6, 0, 7}}));
}

TEST(PackGreedy, DocumentsWithoutAPositionAreSkipped) {
  const auto packed = PackGreedy(std::vector<std::int64_t>{1, 0, 3, 1}, 4, 1, false, "docs");
  ASSERT_EQ(packed.size(), 1u);
  EXPECT_EQ(packed[0], (Pieces{{2, 0, 2}}));
}

TEST(PackGreedy, ALongDocumentIsCutIntoPiecesOfTheBudgetOrRefused) {
  // 11 positions with a budget of 4: pieces of 4, 4 and 3, each a document of its own.
  const auto packed = PackGreedy(std::vector<std::int64_t>{12, 2}, 4, 4, false, "docs");
  ASSERT_EQ(packed.size(), 3u);
  EXPECT_EQ(packed[0], (Pieces{{0, 0, 4}}));
  EXPECT_EQ(packed[1], (Pieces{{0, 4, 4}}));
  EXPECT_EQ(packed[2], (Pieces{{0, 8, 3}, {1, 0, 1}}));
  try {
    PackGreedy(std::vector<std::int64_t>{3, 12}, 4, 4, true, "docs.jsonl");
    FAIL() << "a long document was packed under refuse";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "docs.jsonl: document 1 has 12 tokens, more than data.max_tokens 4 positions hold "
                 "(data.long_documents: refuse; split cuts it into pieces)");
  }
  EXPECT_THROW(PackGreedy(std::vector<std::int64_t>{3}, 0, 1, false, "docs"), ConfigError);
  EXPECT_THROW(PackGreedy(std::vector<std::int64_t>{3}, 4, 0, false, "docs"), ConfigError);
}

// train.batch_tokens: a batch ends before the piece that would take it
// past the tokens, padded to its slots with empty samples. Positions 6
// each (lengths 7), budget 8, 4 slots, 20 tokens: three documents a batch
// (18; a fourth would make 24), a sample each; the seventh document ends
// in a batch the data ends in, dropped.
TEST(PackGreedy, ByTokensABatchHoldsWholeDocumentsUpToItsTokens) {
  const std::vector<std::int64_t> lengths(7, 7);
  const auto packed = PackGreedy(lengths, 8, 4, false, "docs", {20, 1});
  const std::vector<Pieces> want{{{0, 0, 6}}, {{1, 0, 6}}, {{2, 0, 6}}, {}, {{3, 0, 6}}, {{4, 0, 6}}, {{5, 0, 6}}, {}};
  EXPECT_EQ(packed, want);
  // Two replicas: the i-th sample to replica i mod 2, each one's slots its own first.
  const auto spread = PackGreedy(lengths, 8, 4, false, "docs", {20, 2});
  const std::vector<Pieces> dealt{{{0, 0, 6}}, {{2, 0, 6}}, {{1, 0, 6}}, {}, {{3, 0, 6}}, {{5, 0, 6}}, {{4, 0, 6}}, {}};
  EXPECT_EQ(spread, dealt);
  // Short documents share a sample: 4 + 4 of 10 tokens, then the next batch.
  EXPECT_EQ(PackGreedy(std::vector<std::int64_t>(5, 5), 8, 4, false, "docs", {10, 1}),
            (std::vector<Pieces>{{{0, 0, 4}, {1, 0, 4}}, {}, {}, {}, {{2, 0, 4}, {3, 0, 4}}, {}, {}, {}}));
  // pad by tokens: a piece a sample, as many as the tokens take.
  EXPECT_EQ(PackPadded(std::vector<std::int64_t>(5, 5), 8, false, "docs", 4, {10, 1}),
            (std::vector<Pieces>{{{0, 0, 4}}, {{1, 0, 4}}, {}, {}, {{2, 0, 4}}, {{3, 0, 4}}, {}, {}}));
  try {
    PackGreedy(std::vector<std::int64_t>{7, 7}, 8, 4, false, "docs.jsonl", {20, 1});
    FAIL() << "documents fewer than a batch were packed";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "docs.jsonl: its documents hold fewer positions than one batch of train.batch_tokens 20");
  }
  EXPECT_THROW(PackGreedy(lengths, 8, 4, false, "docs", {7, 1}), ConfigError);
}

// balanced by tokens: greedy's documents a batch, in as many samples.
TEST(PackBalanced, ByTokensTheSameDocumentsInAsManySamples) {
  std::vector<std::int64_t> many;
  for (int d = 0; d < 300; ++d) many.push_back(2 + (d * 37) % 41);
  const auto greedy = PackGreedy(many, 32, 8, false, "docs", {150, 2});
  const auto balanced = PackBalanced(many, 32, 8, false, 0.05, "docs", {150, 2});
  ASSERT_EQ(balanced.size(), greedy.size());
  ASSERT_EQ(greedy.size() % 8, 0u);
  for (std::size_t first = 0; first < greedy.size(); first += 8) {
    Pieces a, b;
    int filled_a = 0, filled_b = 0, tokens = 0;
    for (std::size_t s = first; s < first + 8; ++s) {
      a.insert(a.end(), greedy[s].begin(), greedy[s].end());
      b.insert(b.end(), balanced[s].begin(), balanced[s].end());
      filled_a += !greedy[s].empty();
      filled_b += !balanced[s].empty();
      for (const DocumentPiece& p : greedy[s]) tokens += p.positions;
    }
    auto by_document = [](Pieces& v) {
      std::sort(v.begin(), v.end(), [](auto& x, auto& y) {
        return x.document != y.document ? x.document < y.document : x.begin < y.begin;
      });
    };
    by_document(a);
    by_document(b);
    EXPECT_EQ(a, b) << "batch at " << first;
    EXPECT_EQ(filled_a, filled_b) << "batch at " << first;
    EXPECT_LE(tokens, 150);
    EXPECT_LT(filled_a, 8) << "batch at " << first;  // 150 tokens never fill 8 x 32
  }
}

// pad: each document (or piece) a sample of its own, in data order, the
// rest unfilled; long ones cut as greedy cuts them, or refused.
// A tilt shares the load out unevenly: sample s of k takes
// 1 + tilt (1 - 2s / (k - 1)) of an even share. Twelve pieces of one
// position at tilt 0.5 into 3 samples: 1.5 : 1 : 0.5, six, four and two.
TEST(PackLongestFirst, ATiltGivesTheFirstSamplesMoreAndTheLastLess) {
  std::vector<DocumentPiece> pieces;
  for (std::int64_t d = 0; d < 12; ++d) pieces.push_back({d, 0, 1});
  auto sizes = [](const std::vector<std::vector<DocumentPiece>>& packed) {
    std::vector<std::size_t> n;
    for (const auto& s : packed) n.push_back(s.size());
    return n;
  };
  const auto tilted = PackLongestFirst(pieces, 3, 16, 0.0, 0.5);
  ASSERT_TRUE(tilted);
  EXPECT_EQ(sizes(*tilted), (std::vector<std::size_t>{6, 4, 2}));
  const auto even = PackLongestFirst(pieces, 3, 16, 0.0, 0.0);
  ASSERT_TRUE(even);
  EXPECT_EQ(sizes(*even), (std::vector<std::size_t>{4, 4, 4}));
  // Room still bounds a sample: at most 5 positions, so the first holds 5
  // and the rest go by share (the second's fifth, 5 / 1, before the
  // last's third, 3 / 0.5).
  const auto bounded = PackLongestFirst(pieces, 3, 5, 0.0, 0.5);
  ASSERT_TRUE(bounded);
  EXPECT_EQ(sizes(*bounded), (std::vector<std::size_t>{5, 5, 2}));
  EXPECT_FALSE(PackLongestFirst(pieces, 2, 5, 0.0, 0.5));  // 12 positions do not fit in 2 x 5
  // Each sample's pieces in data order.
  for (const auto& s : *tilted) {
    EXPECT_TRUE(std::is_sorted(s.begin(), s.end(), [](const DocumentPiece& a, const DocumentPiece& b) {
      return a.document < b.document;
    }));
  }
}

TEST(PackPadded, EachPieceIsASampleOfItsOwn) {
  const auto packed = PackPadded(std::vector<std::int64_t>{6, 1, 3, 12}, 4, false, "docs");
  // Positions 5 (pieces 4 and 1), none, 2, 11 (pieces 4, 4 and 3).
  const std::vector<Pieces> want{{{0, 0, 4}}, {{0, 4, 1}}, {{2, 0, 2}}, {{3, 0, 4}}, {{3, 4, 4}}, {{3, 8, 3}}};
  EXPECT_EQ(packed, want);
  EXPECT_THROW(PackPadded(std::vector<std::int64_t>{3, 12}, 4, true, "docs"), ConfigError);
}

// balanced: the batch's documents again, costliest first into the cheapest
// sample with room. Positions 6, 1, 1, 5, 2 in batches of 2 samples of 8,
// a pair costing a position (square 1): greedy's samples cost
// 8 + 38 = 46 and 7 + 29 = 36; balanced's 7 + 37 = 44 and 8 + 30 = 38.
TEST(PackBalanced, TheBatchsDocumentsGoCostliestFirstIntoTheCheapestSample) {
  const std::vector<std::int64_t> lengths{7, 2, 2, 6, 3};
  EXPECT_EQ(PackGreedy(lengths, 8, 2, false, "docs"),
            (std::vector<Pieces>{{{0, 0, 6}, {1, 0, 1}, {2, 0, 1}}, {{3, 0, 5}, {4, 0, 2}}}));
  EXPECT_EQ(PackBalanced(lengths, 8, 2, false, 1.0, "docs"),
            (std::vector<Pieces>{{{0, 0, 6}, {2, 0, 1}}, {{1, 0, 1}, {3, 0, 5}, {4, 0, 2}}}));
  // Every batch holds the same pieces as greedy's, whatever the price.
  std::vector<std::int64_t> many;
  for (int d = 0; d < 300; ++d) many.push_back(2 + (d * 37) % 41);
  for (double square : {0.0, 0.01, 1.0}) {
    const auto greedy = PackGreedy(many, 32, 4, false, "docs");
    const auto balanced = PackBalanced(many, 32, 4, false, square, "docs");
    ASSERT_EQ(balanced.size(), greedy.size());
    for (std::size_t first = 0; first < greedy.size(); first += 4) {
      Pieces a, b;
      for (std::size_t s = first; s < std::min(first + 4, greedy.size()); ++s) {
        a.insert(a.end(), greedy[s].begin(), greedy[s].end());
        b.insert(b.end(), balanced[s].begin(), balanced[s].end());
        int positions = 0;
        for (const DocumentPiece& p : balanced[s]) positions += p.positions;
        EXPECT_LE(positions, 32);
      }
      auto order = [](const DocumentPiece& x, const DocumentPiece& y) {
        return x.document != y.document ? x.document < y.document : x.begin < y.begin;
      };
      std::sort(a.begin(), a.end(), order);
      std::sort(b.begin(), b.end(), order);
      EXPECT_EQ(a, b) << "batch from sample " << first;
    }
  }
}

class PackedDocuments : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = baton_test::FreshTestFolder("baton_packing"); }
  void TearDown() override { fs::remove_all(dir_); }
  // JSON Lines documents (byte tokens).
  std::shared_ptr<const TokenDocuments> Jsonl(const std::vector<std::string>& texts) {
    const fs::path path = dir_ / "docs.jsonl";
    std::ofstream out(path);
    for (const std::string& t : texts) out << "{\"text\": \"" << t << "\"}\n";
    out.close();
    return std::make_shared<const TokenDocuments>(OpenJsonl(path.string()));
  }
  fs::path dir_;
};

TEST_F(PackedDocuments, SamplesHoldTheDocumentsTokensTheirStartsAndIgnoreTheRest) {
  // "abcd" (3 positions), "xy" (1), "hello" (4), budget 6, one sample a batch:
  // sample 0 = abcd + xy (4 positions, 2 unfilled), sample 1 = hello.
  const auto docs = Jsonl({"abcd", "xy", "hello"});
  const Dataset read = MakePackedDocuments(docs, 6, 1, false, kByteVocabulary, true, true);
  // Read from the documents as batches want them: no sample held.
  EXPECT_TRUE(read.inputs.empty() && read.labels.empty() && read.starts.empty());
  EXPECT_TRUE(read.has_inputs() && read.has_labels());
  const Dataset d = baton_test::HeldSamples(read);
  ASSERT_EQ(d.samples, 2);
  EXPECT_TRUE(d.packed());
  EXPECT_EQ(d.sample, (TensorDesc{DType::kI32, {1, 6}}));
  EXPECT_EQ(d.labels_per_sample, 6);
  const std::span<const std::int32_t> in = d.inputs_as<std::int32_t>();
  const std::vector<std::int32_t> inputs(in.begin(), in.end());
  EXPECT_EQ(inputs, (std::vector<std::int32_t>{'a', 'b', 'c', 'x', 0, 0, 'h', 'e', 'l', 'l', 0, 0}));
  const std::int32_t I = kIgnoreLabel;
  EXPECT_EQ(d.labels, (std::vector<std::int32_t>{'b', 'c', 'd', 'y', I, I, 'e', 'l', 'l', 'o', I, I}));
  EXPECT_EQ(d.starts, (std::vector<std::int32_t>{0, 0, 0, 3, 4, 4, 0, 0, 0, 0, 4, 4}));
  EXPECT_EQ(d.targets, (std::vector<std::int32_t>{4, 4}));
  // A rank without the first or last stage still gets the starts and counts.
  const Dataset middle = baton_test::HeldSamples(MakePackedDocuments(docs, 6, 1, false, kByteVocabulary, false, false));
  EXPECT_TRUE(middle.inputs.empty());
  EXPECT_TRUE(middle.labels.empty());
  EXPECT_EQ(middle.starts, d.starts);
  EXPECT_EQ(middle.targets, d.targets);
  // CheckTokens takes the ignored labels of a packed dataset.
  EXPECT_NO_THROW(CheckTokens(d, kByteVocabulary));
}

// pad's samples: one document each, the same tokens, starts and counts as
// greedy gives that document, the rest of the budget unfilled.
TEST_F(PackedDocuments, PaddedSamplesHoldOneDocumentEach) {
  const auto docs = Jsonl({"abcd", "xy", "hello"});
  const Dataset d = baton_test::HeldSamples(
      PackedDataset(docs, PackPadded(docs->lengths(), 6, false, "docs"), 6, kByteVocabulary, true, true));
  ASSERT_EQ(d.samples, 3);
  const std::span<const std::int32_t> in = d.inputs_as<std::int32_t>();
  EXPECT_EQ(std::vector<std::int32_t>(in.begin(), in.end()),
            (std::vector<std::int32_t>{'a', 'b', 'c', 0, 0, 0, 'x', 0, 0, 0, 0, 0, 'h', 'e', 'l', 'l', 0, 0}));
  const std::int32_t I = kIgnoreLabel;
  EXPECT_EQ(d.labels,
            (std::vector<std::int32_t>{'b', 'c', 'd', I, I, I, 'y', I, I, I, I, I, 'e', 'l', 'l', 'o', I, I}));
  EXPECT_EQ(d.starts, (std::vector<std::int32_t>{0, 0, 0, 3, 3, 3, 0, 1, 1, 1, 1, 1, 0, 0, 0, 0, 4, 4}));
  EXPECT_EQ(d.targets, (std::vector<std::int32_t>{3, 1, 4}));
}

TEST_F(PackedDocuments, APieceOfALongDocumentStartsWhereTheLastEnded) {
  // "abcdefgh": 7 positions, budget 3: pieces (a b c -> b c d), (d e f -> e f g), (g -> h).
  const Dataset d =
      baton_test::HeldSamples(MakePackedDocuments(Jsonl({"abcdefgh"}), 3, 1, false, kByteVocabulary, true, true));
  ASSERT_EQ(d.samples, 3);
  const std::span<const std::int32_t> in = d.inputs_as<std::int32_t>();
  EXPECT_EQ(std::vector<std::int32_t>(in.begin(), in.end()),
            (std::vector<std::int32_t>{'a', 'b', 'c', 'd', 'e', 'f', 'g', 0, 0}));
  const std::int32_t I = kIgnoreLabel;
  EXPECT_EQ(d.labels, (std::vector<std::int32_t>{'b', 'c', 'd', 'e', 'f', 'g', 'h', I, I}));
  EXPECT_EQ(d.targets, (std::vector<std::int32_t>{3, 3, 1}));
}

TEST_F(PackedDocuments, TheLoaderHandsOutStartsAndTheGlobalBatchsTargets) {
  std::vector<std::string> texts;
  for (int i = 0; i < 24; ++i) texts.push_back(std::string(static_cast<std::size_t>(2 + (i * 7) % 9), 'a' + i % 26));
  const Dataset d = MakePackedDocuments(Jsonl(texts), 8, 4, false, kByteVocabulary, true, true);
  ASSERT_GE(d.samples, 8);
  for (const bool shuffle : {false, true}) {
    SCOPED_TRACE(shuffle ? "shuffled" : "in order");
    // The whole batch of 4, and a replica's slice of it (positions 2, 3).
    auto whole = MakeBatchLoader(d, 4, shuffle, 7);
    auto slice = MakeBatchLoader(d, 4, shuffle, 7, 2, 2);
    for (int step = 0; step < 2 * whole->batches_per_epoch(); ++step) {
      const Batch a = whole->Next(), b = slice->Next();
      std::int64_t targets = 0;
      for (std::size_t k = 0; k < a.labels.size(); ++k) targets += a.labels[k] != kIgnoreLabel;
      EXPECT_EQ(a.targets, targets) << "batch " << step;
      EXPECT_EQ(b.targets, a.targets) << "a slice's count is the global batch's";
      ASSERT_EQ(a.starts.size(), 4u * 8);
      ASSERT_EQ(b.starts.size(), 2u * 8);
      EXPECT_TRUE(std::equal(b.starts.begin(), b.starts.end(), a.starts.begin() + 2 * 8));
      EXPECT_TRUE(std::equal(b.labels.begin(), b.labels.end(), a.labels.begin() + 2 * 8));
    }
  }
}

}  // namespace
}  // namespace baton
