// Fashion-MNIST: the real Debian files, and crafted IDX files (written here
// with zlib) that are broken in one way each.
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "baton/data.h"
#include "baton/error.h"

namespace baton {
namespace {

namespace fs = std::filesystem;

// EXPECT_TRUE(Has(message, part)) prints the whole message when it fails.
::testing::AssertionResult Has(const std::string& message, const std::string& part) {
  if (message.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << part << "\" not in message: \"" << message << "\"";
}

constexpr const char* kRealDir = "/usr/share/datasets/fashion-mnist";

// ---- the real files (Debian package dataset-fashion-mnist) ----

class RealFashionMnist : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(fs::path(kRealDir) / "train-images-idx3-ubyte.gz")) {
      GTEST_SKIP() << kRealDir << " not present: install the Debian package dataset-fashion-mnist";
    }
  }
};

TEST_F(RealFashionMnist, TrainSplitLoads) {
  const Dataset d = LoadFashionMnist(kRealDir, "train", true, true);
  EXPECT_EQ(d.samples, 60000);
  EXPECT_EQ(d.sample, TensorDesc(DType::kF32, {1, 784}));
  EXPECT_EQ(d.labels_per_sample, 1);
  EXPECT_EQ(d.classes, 10);
  const std::span<const float> x = d.inputs_as<float>();
  ASSERT_EQ(x.size(), 60000u * 784u);
  ASSERT_EQ(d.labels.size(), 60000u);

  // Values read with python3's gzip module from train-labels-idx1-ubyte.gz.
  const std::vector<std::int32_t> first_labels = {9, 0, 0, 3, 0, 2, 7, 2, 5, 5};
  EXPECT_EQ(std::vector<std::int32_t>(d.labels.begin(), d.labels.begin() + 10), first_labels);
  EXPECT_EQ(d.labels[0], 9);  // "Ankle boot"

  // The first image's pixels sum to 76247 (python3: sum of bytes 16..800).
  double first_image_sum = 0.0;
  for (int i = 0; i < 784; ++i) first_image_sum += x[i];
  EXPECT_NEAR(first_image_sum, 76247.0 / 255.0, 1e-3);

  const auto [lo, hi] = std::minmax_element(x.begin(), x.end());
  EXPECT_EQ(*lo, 0.0f);
  EXPECT_EQ(*hi, 1.0f);

  std::array<int, 10> histogram{};
  for (std::int32_t y : d.labels) {
    ASSERT_GE(y, 0);
    ASSERT_LE(y, 9);
    ++histogram[y];
  }
  for (int c = 0; c < 10; ++c) EXPECT_EQ(histogram[c], 6000) << "class " << c;
}

TEST_F(RealFashionMnist, TestSplitLoads) {
  const Dataset d = LoadFashionMnist(kRealDir, "test", true, true);
  EXPECT_EQ(d.samples, 10000);
  EXPECT_EQ(d.inputs_as<float>().size(), 10000u * 784u);
  ASSERT_EQ(d.labels.size(), 10000u);
  EXPECT_EQ(d.labels[0], 9);
  std::array<int, 10> histogram{};
  for (std::int32_t y : d.labels) ++histogram[y];
  for (int c = 0; c < 10; ++c) EXPECT_EQ(histogram[c], 1000) << "class " << c;
}

TEST_F(RealFashionMnist, LoadsOnlyThePartsAsked) {
  const Dataset labels_only = LoadFashionMnist(kRealDir, "test", false, true);
  EXPECT_EQ(labels_only.samples, 10000);
  EXPECT_TRUE(labels_only.inputs.empty());
  EXPECT_EQ(labels_only.labels.size(), 10000u);

  const Dataset inputs_only = LoadFashionMnist(kRealDir, "test", true, false);
  EXPECT_EQ(inputs_only.samples, 10000);
  EXPECT_EQ(inputs_only.inputs.size(), 10000u * 784u * sizeof(float));
  EXPECT_TRUE(inputs_only.labels.empty());
}

// ---- crafted files ----

void Put32(std::vector<unsigned char>& out, std::uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<unsigned char>(v >> shift));
}

void WriteGz(const fs::path& path, const std::vector<unsigned char>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  if (!bytes.empty()) {
    ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  }
  ASSERT_EQ(gzclose(f), Z_OK);
}

void WriteRaw(const fs::path& path, const std::vector<unsigned char>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

std::vector<unsigned char> ReadRaw(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<unsigned char>(std::istreambuf_iterator<char>(in), {});
}

// An images file: header (magic, count, rows, cols) and then `pixels`,
// whatever their number.
std::vector<unsigned char> Images(std::uint32_t count, const std::vector<unsigned char>& pixels,
                                  std::uint32_t magic = 0x803, std::uint32_t rows = 28, std::uint32_t cols = 28) {
  std::vector<unsigned char> out;
  Put32(out, magic);
  Put32(out, count);
  Put32(out, rows);
  Put32(out, cols);
  out.insert(out.end(), pixels.begin(), pixels.end());
  return out;
}

std::vector<unsigned char> Labels(std::uint32_t count, const std::vector<unsigned char>& labels,
                                  std::uint32_t magic = 0x801) {
  std::vector<unsigned char> out;
  Put32(out, magic);
  Put32(out, count);
  out.insert(out.end(), labels.begin(), labels.end());
  return out;
}

class CraftedFashionMnist : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("baton_fmnist_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // A valid 3-sample test split: images filled with pixel values 0, 255
    // and 51 (inputs 0, 1, 0.2), labels 7, 0, 9.
    pixels_.assign(3 * 784, 0);
    std::fill(pixels_.begin() + 784, pixels_.begin() + 2 * 784, 255);
    std::fill(pixels_.begin() + 2 * 784, pixels_.end(), 51);
    WriteGz(images(), Images(3, pixels_));
    WriteGz(labels(), Labels(3, {7, 0, 9}));
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path images() const { return dir_ / "t10k-images-idx3-ubyte.gz"; }
  fs::path labels() const { return dir_ / "t10k-labels-idx1-ubyte.gz"; }

  // Loads the crafted test split and returns the ConfigError's message
  // ("" if it loaded).
  std::string LoadError() const {
    try {
      LoadFashionMnist(dir_.string(), "test", true, true);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
  std::vector<unsigned char> pixels_;
};

TEST_F(CraftedFashionMnist, ValidFilesLoadExactly) {
  const Dataset d = LoadFashionMnist(dir_.string(), "test", true, true);
  EXPECT_EQ(d.name, "fashion-mnist/test");
  EXPECT_EQ(d.samples, 3);
  const std::span<const float> x = d.inputs_as<float>();
  ASSERT_EQ(x.size(), 3u * 784u);
  EXPECT_EQ(d.labels, (std::vector<std::int32_t>{7, 0, 9}));
  EXPECT_EQ(x[0], 0.0f);
  EXPECT_EQ(x[783], 0.0f);
  EXPECT_EQ(x[784], 1.0f);
  EXPECT_EQ(x[2 * 784 - 1], 1.0f);
  EXPECT_EQ(x[2 * 784], 51.0f / 255.0f);
  EXPECT_EQ(x.back(), 51.0f / 255.0f);
}

TEST_F(CraftedFashionMnist, MissingFileNamesFileAndPackage) {
  fs::remove(labels());
  const std::string msg = LoadError();
  EXPECT_TRUE(Has(msg, labels().string()));
  EXPECT_TRUE(Has(msg, "not found"));
  EXPECT_TRUE(Has(msg, "dataset-fashion-mnist"));
}

TEST_F(CraftedFashionMnist, MissingDirectory) {
  EXPECT_THROW(LoadFashionMnist((dir_ / "nowhere").string(), "train", true, true), ConfigError);
}

TEST_F(CraftedFashionMnist, UnknownSplit) {
  try {
    LoadFashionMnist(dir_.string(), "validation", true, true);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(Has(std::string(e.what()), "validation"));
    EXPECT_TRUE(Has(std::string(e.what()), "train, test"));
  }
}

TEST_F(CraftedFashionMnist, NotGzip) {
  WriteRaw(images(), Images(3, pixels_));  // the right bytes, uncompressed
  const std::string msg = LoadError();
  EXPECT_TRUE(Has(msg, images().string()));
  EXPECT_TRUE(Has(msg, "not gzip"));
}

TEST_F(CraftedFashionMnist, CorruptGzipStream) {
  std::vector<unsigned char> bytes = ReadRaw(images());
  ASSERT_GT(bytes.size(), 40u);
  for (std::size_t i = 12; i < bytes.size() - 8; ++i) bytes[i] ^= 0x5a;  // keep the gzip header, garble the rest
  WriteRaw(images(), bytes);
  const std::string msg = LoadError();
  EXPECT_TRUE(Has(msg, images().string()));
  EXPECT_TRUE(Has(msg, "corrupt") || Has(msg, "truncated")) << msg;
}

TEST_F(CraftedFashionMnist, GzipStreamCutShort) {
  // A large incompressible-ish payload so the cut lands inside the data.
  std::vector<unsigned char> pixels(3 * 784);
  std::uint32_t x = 1;
  for (auto& p : pixels) p = static_cast<unsigned char>((x = x * 1103515245u + 12345u) >> 24);
  WriteGz(images(), Images(3, pixels));
  std::vector<unsigned char> bytes = ReadRaw(images());
  bytes.resize(bytes.size() / 2);
  WriteRaw(images(), bytes);
  const std::string msg = LoadError();
  EXPECT_TRUE(Has(msg, images().string()));
  EXPECT_TRUE(Has(msg, "truncated"));
}

TEST_F(CraftedFashionMnist, WrongMagicShowsExpectedAndFoundInHex) {
  WriteGz(images(), Images(3, pixels_, /*magic=*/0x801));
  const std::string msg = LoadError();
  EXPECT_TRUE(Has(msg, images().string()));
  EXPECT_TRUE(Has(msg, "magic"));
  EXPECT_TRUE(Has(msg, "expected 0x00000803"));
  EXPECT_TRUE(Has(msg, "found 0x00000801"));
}

TEST_F(CraftedFashionMnist, WrongLabelsMagic) {
  WriteGz(labels(), Labels(3, {7, 0, 9}, /*magic=*/0xdeadbeef));
  const std::string msg = LoadError();
  EXPECT_TRUE(Has(msg, labels().string()));
  EXPECT_TRUE(Has(msg, "expected 0x00000801"));
  EXPECT_TRUE(Has(msg, "found 0xdeadbeef"));
}

TEST_F(CraftedFashionMnist, WrongImageSize) {
  WriteGz(images(), Images(3, pixels_, 0x803, 32, 32));
  const std::string msg = LoadError();
  EXPECT_TRUE(Has(msg, images().string()));
  EXPECT_TRUE(Has(msg, "32x32"));
}

TEST_F(CraftedFashionMnist, TruncatedImages) {
  std::vector<unsigned char> short_pixels(pixels_.begin(), pixels_.end() - 100);
  WriteGz(images(), Images(3, short_pixels));
  const std::string msg = LoadError();
  EXPECT_TRUE(Has(msg, images().string()));
  EXPECT_TRUE(Has(msg, "truncated"));
  EXPECT_TRUE(Has(msg, "promises 2352"));
  EXPECT_TRUE(Has(msg, "only 2252"));
}

TEST_F(CraftedFashionMnist, HugeCountIsTruncatedNotAllocated) {
  // The header claims 4 billion images (3 TB of pixels); the loader must
  // report the short file instead of trying to allocate that much.
  WriteGz(images(), Images(0xffffffffu, pixels_));
  WriteGz(labels(), Labels(0xffffffffu, {7, 0, 9}));
  const std::string msg = LoadError();
  EXPECT_TRUE(Has(msg, "truncated"));
}

TEST_F(CraftedFashionMnist, TruncatedHeader) {
  WriteGz(labels(), {0, 0, 8});
  const std::string msg = LoadError();
  EXPECT_TRUE(Has(msg, labels().string()));
  EXPECT_TRUE(Has(msg, "truncated"));
}

TEST_F(CraftedFashionMnist, EmptyFile) {
  WriteRaw(labels(), {});
  const std::string msg = LoadError();
  EXPECT_TRUE(Has(msg, labels().string()));
  EXPECT_TRUE(Has(msg, "empty"));
}

TEST_F(CraftedFashionMnist, TruncatedLabels) {
  WriteGz(labels(), Labels(3, {7, 0}));
  const std::string msg = LoadError();
  EXPECT_TRUE(Has(msg, labels().string()));
  EXPECT_TRUE(Has(msg, "truncated"));
}

TEST_F(CraftedFashionMnist, CountMismatchNamesBothFiles) {
  WriteGz(labels(), Labels(2, {7, 0}));
  const std::string msg = LoadError();
  EXPECT_TRUE(Has(msg, images().string()));
  EXPECT_TRUE(Has(msg, labels().string()));
  EXPECT_TRUE(Has(msg, "3 images"));
  EXPECT_TRUE(Has(msg, "2 labels"));
}

TEST_F(CraftedFashionMnist, CountMismatchCaughtWithoutLoadingTheOtherPart) {
  WriteGz(labels(), Labels(2, {7, 0}));
  EXPECT_THROW(LoadFashionMnist(dir_.string(), "test", false, true), ConfigError);
  EXPECT_THROW(LoadFashionMnist(dir_.string(), "test", true, false), ConfigError);
}

TEST_F(CraftedFashionMnist, LabelOutOfRange) {
  WriteGz(labels(), Labels(3, {7, 10, 9}));
  const std::string msg = LoadError();
  EXPECT_TRUE(Has(msg, labels().string()));
  EXPECT_TRUE(Has(msg, "label 10 of sample 1"));
  EXPECT_TRUE(Has(msg, "0..9"));
}

}  // namespace
}  // namespace baton
