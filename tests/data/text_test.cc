// Text as byte tokens: the fortune-format reader on a folder written here,
// next-token windows, the token-id check, the unigram baseline, and the real
// corpus of Debian's fortunes package when it is installed.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "baton/data.h"
#include "baton/error.h"

namespace baton {
namespace {

namespace fs = std::filesystem;

std::vector<std::uint8_t> Bytes(const std::string& s) { return {s.begin(), s.end()}; }

std::string ErrorOf(auto&& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

void Write(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

// A fortune folder: file "a" with three entries (and an empty one between
// two '%' lines), file "b" with nine more (a leading '%', the last entry
// without its newline), an index "a.dat" full of '%' lines, a link "a.u8"
// to "a" and a sub-folder, which the reader must all skip.
class FortuneFolder : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("baton_fortunes_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "sub");
    // Written in reverse name order: the reader sorts by name.
    std::string b = "%\n";
    for (int k = 3; k <= 10; ++k) {
      b += 'e';
      b += std::to_string(k);
      b += "\n%\n";
    }
    b += "last";
    Write(dir_ / "b", b);
    Write(dir_ / "a", "one\n%\ntwo\nlines\n%\n%\nthree\n%\n");
    Write(dir_ / "a.dat", "%\nnot\n%\ntext\n%\n");
    Write(dir_ / "sub" / "c", "hidden\n%\n");
    fs::create_symlink("a", dir_ / "a.u8");
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Entries 0..11 in order: "one\n" "two\nlines\n" "three\n" "e3\n".."e10\n"
  // "last\n"; entry 9 ("e9\n") is the validation split's only one.
  static std::string Train() {
    std::string t = "one\n\ntwo\nlines\n\nthree\n\n";
    for (int k = 3; k <= 10; ++k) {
      if (k == 9) continue;
      t += 'e';
      t += std::to_string(k);
      t += "\n\n";
    }
    return t + "last\n\n";
  }

  fs::path dir_;
};

TEST_F(FortuneFolder, EntriesSeparatorsAndSplit) {
  const TextCorpus c = ReadFortuneFolder(dir_.string());
  EXPECT_EQ(c.files, 2);  // a, b: not a.dat, a.u8 or sub/c
  EXPECT_EQ(c.entries, 12);
  EXPECT_EQ(c.train_entries, 11);
  EXPECT_EQ(c.validation_entries, 1);
  // one\n two\nlines\n three\n = 20, e3..e9 = 7 x 3, e10\n = 4, last\n = 5
  EXPECT_EQ(c.bytes, 20 + 21 + 4 + 5);
  EXPECT_EQ(std::string(c.train.begin(), c.train.end()), Train());
  EXPECT_EQ(std::string(c.validation.begin(), c.validation.end()), "e9\n\n");
  EXPECT_EQ(static_cast<std::int64_t>(c.train.size() + c.validation.size()), c.bytes + c.entries);
}

TEST_F(FortuneFolder, ReadingIsDeterministic) {
  const TextCorpus a = ReadFortuneFolder(dir_.string());
  const TextCorpus b = ReadFortuneFolder(dir_.string());
  EXPECT_EQ(a.train, b.train);
  EXPECT_EQ(a.validation, b.validation);
  const Dataset x = LoadFortunes(dir_.string(), "train", 4, true, true);
  const Dataset y = LoadFortunes(dir_.string(), "train", 4, true, true);
  EXPECT_EQ(x.inputs, y.inputs);
  EXPECT_EQ(x.labels, y.labels);
}

TEST_F(FortuneFolder, WindowsAreTheStreamAndLabelsAreShiftedByOne) {
  const std::string train = Train();  // 58 bytes: 50 of entries, 8 separators
  ASSERT_EQ(train.size(), 58u);
  const Dataset d = LoadFortunes(dir_.string(), "train", 4, true, true);
  EXPECT_EQ(d.name, "fortunes/train");
  EXPECT_EQ(d.samples, 14);  // (58 - 1) / 4; a 15th window would need byte 60
  EXPECT_EQ(d.sample, TensorDesc(DType::kI32, {1, 4}));
  EXPECT_EQ(d.labels_per_sample, 4);
  EXPECT_EQ(d.classes, 256);
  const std::span<const std::int32_t> x = d.inputs_as<std::int32_t>();
  ASSERT_EQ(x.size(), 56u);
  ASSERT_EQ(d.labels.size(), 56u);
  for (std::size_t i = 0; i < 56; ++i) {
    EXPECT_EQ(x[i], static_cast<unsigned char>(train[i])) << i;
    EXPECT_EQ(d.labels[i], static_cast<unsigned char>(train[i + 1])) << i;
  }
  // Sample 1 is "two\n" ("\ntwo" shifted): inputs bytes 4..7, labels 5..8.
  EXPECT_EQ(std::string(x.begin() + 4, x.begin() + 8), "\ntwo");
  EXPECT_EQ(std::string(d.labels.begin() + 4, d.labels.begin() + 8), "two\n");

  // The validation split, "e9\n\n", holds one window of 3 and none of 4.
  const Dataset v = LoadFortunes(dir_.string(), "validation", 3, true, true);
  EXPECT_EQ(v.samples, 1);
  EXPECT_EQ(std::string(v.inputs_as<std::int32_t>().begin(), v.inputs_as<std::int32_t>().end()), "e9\n");
  EXPECT_EQ(std::string(v.labels.begin(), v.labels.end()), "9\n\n");
  const std::string msg = ErrorOf([&] { LoadFortunes(dir_.string(), "validation", 4, true, true); });
  EXPECT_NE(msg.find("fortunes/validation: 4 tokens do not fill one window of seq_len + 1 = 5 tokens"),
            std::string::npos)
      << msg;
}

TEST_F(FortuneFolder, PartsLoadAlone) {
  const Dataset both = LoadFortunes(dir_.string(), "train", 5, true, true);
  const Dataset inputs = LoadFortunes(dir_.string(), "train", 5, true, false);
  const Dataset labels = LoadFortunes(dir_.string(), "train", 5, false, true);
  EXPECT_EQ(inputs.samples, both.samples);
  EXPECT_EQ(labels.samples, both.samples);
  EXPECT_EQ(inputs.inputs, both.inputs);
  EXPECT_TRUE(inputs.labels.empty());
  EXPECT_EQ(labels.labels, both.labels);
  EXPECT_TRUE(labels.inputs.empty());
}

TEST_F(FortuneFolder, Errors) {
  std::string msg = ErrorOf([&] { ReadFortuneFolder((dir_ / "missing").string()); });
  EXPECT_NE(msg.find("not found"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Debian package fortunes"), std::string::npos) << msg;
  msg = ErrorOf([&] { LoadFortunes(dir_.string(), "test", 4, true, true); });
  EXPECT_NE(msg.find("unknown split 'test' (allowed: train, validation)"), std::string::npos) << msg;
  msg = ErrorOf([&] { LoadFortunes(dir_.string(), "train", 0, true, true); });
  EXPECT_NE(msg.find("seq_len must be at least 1, got 0"), std::string::npos) << msg;
  // Only separators, index files and links: no entries.
  const fs::path empty = dir_ / "sub" / "empty";
  fs::create_directories(empty);
  Write(empty / "x", "%\n%\n");
  Write(empty / "x.dat", "data\n");
  msg = ErrorOf([&] { ReadFortuneFolder(empty.string()); });
  EXPECT_NE(msg.find("holds no entries in 1 text files"), std::string::npos) << msg;
}

TEST(TokenWindows, CountAndTail) {
  const std::vector<std::uint8_t> t = Bytes("abcdefghij");  // 10 tokens
  EXPECT_EQ(MakeTokenWindows(t, 3, "t", true, true).samples, 3);  // (10 - 1) / 3: "abcd" "defg" "ghij"
  EXPECT_EQ(MakeTokenWindows(t, 4, "t", true, true).samples, 2);  // "abcde" "efghi"; "j" dropped
  EXPECT_EQ(MakeTokenWindows(t, 9, "t", true, true).samples, 1);
  EXPECT_EQ(MakeTokenWindows(t, 1, "t", true, true).samples, 9);
  EXPECT_THROW(MakeTokenWindows(t, 10, "t", true, true), ConfigError);
  EXPECT_THROW(MakeTokenWindows({}, 1, "t", true, true), ConfigError);
  const Dataset d = MakeTokenWindows(t, 3, "t", true, true);
  EXPECT_EQ(std::string(d.labels.begin(), d.labels.end()), "bcdefghij");
  const std::span<const std::int32_t> x = d.inputs_as<std::int32_t>();
  EXPECT_EQ(std::string(x.begin(), x.end()), "abcdefghi");
}

// ---- CheckTokens ----

TEST(CheckTokens, AcceptsIdsInsideTheVocabulary) {
  const Dataset d = MakeTokenWindows(Bytes("hello, world"), 4, "text", true, true);
  EXPECT_NO_THROW(CheckTokens(d, 256));
  EXPECT_NO_THROW(CheckTokens(d, 'w' + 1));  // 'w' (119) is the largest byte
  EXPECT_NO_THROW(CheckTokens(MakeSyntheticTokens(50, 8, 7, 1, true, true), 7));
}

TEST(CheckTokens, RefusesAnIdOutsideTheVocabularyNamingWhere) {
  const Dataset d = MakeTokenWindows(Bytes("hello, world"), 4, "text", true, true);
  // 'w' (119) is input 7: sample 1, position 3; labels reach it one earlier.
  std::string msg = ErrorOf([&] { CheckTokens(d, 119); });
  EXPECT_NE(msg.find("dataset 'text': input token id 119 (sample 1, position 3) is outside the model's vocabulary "
                     "of 119 (ids must be in 0..118)"),
            std::string::npos)
      << msg;
  const Dataset labels_only = MakeTokenWindows(Bytes("hello, world"), 4, "text", false, true);
  msg = ErrorOf([&] { CheckTokens(labels_only, 119); });
  EXPECT_NE(msg.find("label token id 119 (sample 1, position 2)"), std::string::npos) << msg;
  Dataset negative = d;
  negative.labels[5] = -1;
  msg = ErrorOf([&] { CheckTokens(negative, 256); });
  EXPECT_NE(msg.find("label token id -1 (sample 1, position 1)"), std::string::npos) << msg;
}

TEST(CheckTokens, RefusesFeatureData) {
  const std::string msg = ErrorOf([] { CheckTokens(MakeSynthetic(4, 3, 2, 1, true, true), 256); });
  EXPECT_NE(msg.find("dataset 'synthetic' holds f32[1, 3] inputs, not token ids"), std::string::npos) << msg;
}

// ---- the unigram baseline ----

TEST(UnigramCrossEntropy, MatchesAHandComputation) {
  // Train labels 1 1 2 1 (tokens 0 1 1 2 1, two windows of 2): with add-one
  // smoothing over 4 ids, p = (1, 4, 2, 1) / 8. Validation labels 0 1
  // (tokens 3 0 1): H = -(ln 1/8 + ln 4/8) / 2 = ln 16 / 2 = 2 ln 2.
  const Dataset train = MakeTokenWindows(std::vector<std::uint8_t>{0, 1, 1, 2, 1}, 2, "train", false, true);
  const Dataset validation = MakeTokenWindows(std::vector<std::uint8_t>{3, 0, 1}, 2, "validation", false, true);
  ASSERT_EQ(train.labels, (std::vector<std::int32_t>{1, 1, 2, 1}));
  ASSERT_EQ(validation.labels, (std::vector<std::int32_t>{0, 1}));
  EXPECT_NEAR(UnigramCrossEntropy(train, validation, 4), 2 * std::log(2.0), 1e-12);
  // Scored on itself, a uniform corpus of 4 ids costs ln 4 (smoothing adds
  // one to every count alike).
  const Dataset uniform = MakeTokenWindows(std::vector<std::uint8_t>{3, 0, 1, 2, 3}, 4, "u", false, true);
  EXPECT_NEAR(UnigramCrossEntropy(uniform, uniform, 4), std::log(4.0), 1e-12);
}

TEST(UnigramCrossEntropy, Errors) {
  const Dataset d = MakeTokenWindows(Bytes("abc"), 2, "abc", true, true);
  const Dataset no_labels = MakeTokenWindows(Bytes("abc"), 2, "abc", true, false);
  EXPECT_NE(ErrorOf([&] { UnigramCrossEntropy(d, d, 'c'); }).find("token id 99 outside 0..98"), std::string::npos);
  EXPECT_NE(ErrorOf([&] { UnigramCrossEntropy(d, no_labels, 256); }).find("holds no labels"), std::string::npos);
}

// ---- the real corpus (Debian's fortunes) ----

constexpr const char* kRealDir = "/usr/share/games/fortunes";

class RealFortunes : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::is_directory(kRealDir)) {
      GTEST_SKIP() << kRealDir << " not present: install the Debian package fortunes";
    }
  }
};

TEST_F(RealFortunes, SplitVocabularyAndWindows) {
  const TextCorpus c = ReadFortuneFolder(kRealDir);
  EXPECT_GT(c.files, 10);
  EXPECT_GT(c.entries, 10000);
  // Every 10th entry: entries 9, 19, 29, ...
  EXPECT_EQ(c.validation_entries, c.entries / 10);
  EXPECT_EQ(c.train_entries + c.validation_entries, c.entries);
  const double validation_fraction =
      static_cast<double>(c.validation.size()) / static_cast<double>(c.train.size() + c.validation.size());
  EXPECT_GT(validation_fraction, 0.08);
  EXPECT_LT(validation_fraction, 0.12);

  const Dataset train = LoadFortunes(kRealDir, "train", 128, true, true);
  const Dataset validation = LoadFortunes(kRealDir, "validation", 128, true, true);
  EXPECT_EQ(train.samples, static_cast<std::int64_t>((c.train.size() - 1) / 128));
  EXPECT_EQ(validation.samples, static_cast<std::int64_t>((c.validation.size() - 1) / 128));
  EXPECT_EQ(train.sample, TensorDesc(DType::kI32, {1, 128}));
  EXPECT_NO_THROW(CheckTokens(train, kByteVocabulary));
  EXPECT_NO_THROW(CheckTokens(validation, kByteVocabulary));
  // English text: no id reaches the vocabulary's top half except in UTF-8
  // sequences; the largest id used is below 256 and above 'z'.
  const std::int32_t top = *std::max_element(train.labels.begin(), train.labels.end());
  EXPECT_LT(top, kByteVocabulary);
  EXPECT_GT(top, 'z');

  const double unigram = UnigramCrossEntropy(train, validation, kByteVocabulary);
  // Byte unigrams of English text carry about 4.4 bits, about 3 nats.
  EXPECT_GT(unigram, 2.5);
  EXPECT_LT(unigram, 3.5);
  std::cout << "fortunes: " << c.files << " files, " << c.entries << " entries (" << c.train_entries << " train, "
            << c.validation_entries << " validation), " << c.bytes << " bytes; seq_len 128: " << train.samples
            << " train windows, " << validation.samples << " validation windows; unigram baseline " << unigram
            << " nats/token\n";
}

}  // namespace
}  // namespace baton
