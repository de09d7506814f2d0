// safetensors: round trip, a hand-built file in the reference format, and
// corrupted files that must each give a ConfigError and never crash.
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "baton/data.h"
#include "baton/error.h"

namespace baton {
namespace {

namespace fs = std::filesystem;

::testing::AssertionResult Has(const std::string& message, const std::string& part) {
  if (message.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << part << "\" not in message: \"" << message << "\"";
}

std::string Bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteBytes(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string U64(std::uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}

std::string F32(std::initializer_list<float> values) {
  std::string s;
  for (float v : values) {
    const auto u = std::bit_cast<std::uint32_t>(v);
    for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>(u >> (8 * i)));
  }
  return s;
}

// A file in the layout the reference implementation writes: length, JSON
// header padded with spaces to a multiple of 8, data.
std::string File(std::string header, const std::string& data, bool pad = true) {
  if (pad) header.append((8 - header.size() % 8) % 8, ' ');
  return U64(header.size()) + header + data;
}

bool BitEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

class Safetensors : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("baton_safetensors_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes `bytes` to a file and returns ReadSafetensors' ConfigError
  // message ("" if it read).
  std::string ReadError(const std::string& bytes) {
    const fs::path p = dir_ / "bad.safetensors";
    WriteBytes(p, bytes);
    try {
      ReadSafetensors(p.string());
    } catch (const ConfigError& e) {
      const std::string msg = e.what();
      EXPECT_TRUE(Has(msg, p.string()));
      return msg;
    }
    return "";
  }

  fs::path dir_;
};

std::vector<NamedTensor> Sample() {
  const float nan_payload = std::bit_cast<float>(std::uint32_t{0x7fc12345});
  return {
      {"0.weight", {3, 2}, {1.5f, -2.25f, 0.0f, -0.0f, 1e-40f /* subnormal */, 3.4e38f}},
      {"0.bias", {3}, {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(), nan_payload}},
      {"scalar", {}, {42.0f}},
      {"empty", {0, 5}, {}},
      {"2.weight", {1, 1, 2}, {0.1f, 0.2f}},
  };
}

TEST_F(Safetensors, RoundTripIsBitExact) {
  const std::vector<NamedTensor> in = Sample();
  const fs::path p = dir_ / "model.safetensors";
  WriteSafetensors(p.string(), in);
  const std::vector<NamedTensor> out = ReadSafetensors(p.string());
  ASSERT_EQ(out.size(), in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {  // in the order written
    EXPECT_EQ(out[i].name, in[i].name);
    EXPECT_EQ(out[i].shape, in[i].shape) << in[i].name;
    EXPECT_TRUE(BitEqual(out[i].data, in[i].data)) << in[i].name;
  }
}

TEST_F(Safetensors, WritesTheReferenceLayout) {
  const fs::path p = dir_ / "model.safetensors";
  WriteSafetensors(p.string(), {{"0.weight", {2, 2}, {1, 2, 3, 4}}, {"0.bias", {2}, {5, 6}}});
  const std::string bytes = Bytes(p);
  ASSERT_GE(bytes.size(), 8u);
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= std::uint64_t{static_cast<unsigned char>(bytes[i])} << (8 * i);
  EXPECT_EQ(n % 8, 0u);  // padded so the data is 8-byte aligned
  ASSERT_EQ(bytes.size(), 8 + n + 24);
  const std::string header = bytes.substr(8, n);
  EXPECT_EQ(header.front(), '{');
  EXPECT_TRUE(Has(header, R"("0.weight":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]})"));
  EXPECT_TRUE(Has(header, R"("0.bias":{"dtype":"F32","shape":[2],"data_offsets":[16,24]})"));
  EXPECT_TRUE(Has(header, R"("__metadata__":{"format":"pt"})"));
  EXPECT_EQ(header.find_last_not_of(' '), header.find_last_of('}'));  // only spaces after the JSON
  EXPECT_EQ(bytes.substr(8 + n), F32({1, 2, 3, 4, 5, 6}));
}

TEST_F(Safetensors, ReadsAHandBuiltFile) {
  // What safetensors' Python package writes for {"a": tensor([1.0, -2.5])}.
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  ASSERT_EQ(header.size(), 54u);
  const fs::path p = dir_ / "a.safetensors";
  WriteBytes(p, File(header, F32({1.0f, -2.5f})));
  ASSERT_EQ(Bytes(p).size(), 8u + 56u + 8u);  // padded with 2 spaces
  const std::vector<NamedTensor> t = ReadSafetensors(p.string());
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].name, "a");
  EXPECT_EQ(t[0].shape, (std::vector<std::int64_t>{2}));
  EXPECT_EQ(t[0].data, (std::vector<float>{1.0f, -2.5f}));
}

TEST_F(Safetensors, ReturnsTensorsInDataOrderAndSkipsMetadata) {
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"z":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
      R"("b":{"dtype":"F32","shape":[],"data_offsets":[8,12]},"a":{"dtype":"F32","shape":[1,1],"data_offsets":[4,8]}})";
  const fs::path p = dir_ / "order.safetensors";
  WriteBytes(p, File(header, F32({1, 2, 3}), /*pad=*/false));
  const std::vector<NamedTensor> t = ReadSafetensors(p.string());
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].name, "z");
  EXPECT_EQ(t[1].name, "a");
  EXPECT_EQ(t[2].name, "b");
  EXPECT_EQ(t[1].shape, (std::vector<std::int64_t>{1, 1}));
  EXPECT_TRUE(t[2].shape.empty());
  EXPECT_EQ(t[0].data[0], 1.0f);
  EXPECT_EQ(t[1].data[0], 2.0f);
  EXPECT_EQ(t[2].data[0], 3.0f);
}

TEST_F(Safetensors, EmptyFileOfTensors) {
  const fs::path p = dir_ / "none.safetensors";
  WriteSafetensors(p.string(), {});
  EXPECT_TRUE(ReadSafetensors(p.string()).empty());
}

TEST_F(Safetensors, CreatesFoldersReplacesAtomicallyLeavesNoTemporary) {
  const fs::path p = dir_ / "a" / "b" / "w.safetensors";
  WriteSafetensors(p.string(), {{"x", {1}, {1.0f}}});
  WriteSafetensors(p.string(), {{"y", {2}, {2.0f, 3.0f}}});  // overwrite
  const std::vector<NamedTensor> t = ReadSafetensors(p.string());
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].name, "y");
  int files = 0;
  for (const auto& entry : fs::directory_iterator(p.parent_path())) {
    ++files;
    EXPECT_EQ(entry.path().filename(), "w.safetensors");
  }
  EXPECT_EQ(files, 1);
}

TEST_F(Safetensors, WriteRejectsBadTensorsBeforeTouchingTheFile) {
  const fs::path p = dir_ / "w.safetensors";
  try {
    WriteSafetensors(p.string(), {{"ok", {1}, {1}}, {"w", {2, 3}, {1, 2, 3}}});
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(Has(e.what(), p.string()));
    EXPECT_TRUE(Has(e.what(), "'w'"));
    EXPECT_TRUE(Has(e.what(), "[2, 3]"));
  }
  EXPECT_THROW(WriteSafetensors(p.string(), {{"a", {1}, {1}}, {"a", {1}, {2}}}), ConfigError);
  EXPECT_THROW(WriteSafetensors(p.string(), {{"__metadata__", {1}, {1}}}), ConfigError);
  EXPECT_THROW(WriteSafetensors(p.string(), {{"neg", {-1}, {}}}), ConfigError);
  EXPECT_FALSE(fs::exists(p));
  EXPECT_TRUE(fs::is_empty(dir_));
}

// ---- corrupted files ----

const std::string kGoodHeader = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";

TEST_F(Safetensors, MissingFile) {
  const fs::path p = dir_ / "missing.safetensors";
  try {
    ReadSafetensors(p.string());
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(Has(e.what(), p.string()));
  }
}

TEST_F(Safetensors, TruncatedFile) {
  EXPECT_TRUE(Has(ReadError(""), "truncated"));
  EXPECT_TRUE(Has(ReadError(std::string(5, '\0')), "truncated"));
  // The data is cut short: the offsets now point past the end.
  const std::string good = File(kGoodHeader, F32({1, 2}));
  const std::string msg = ReadError(good.substr(0, good.size() - 1));
  EXPECT_TRUE(Has(msg, "'a'"));
  EXPECT_TRUE(Has(msg, "outside"));
}

TEST_F(Safetensors, HeaderLengthOutOfRange) {
  EXPECT_TRUE(Has(ReadError(U64(std::uint64_t{1} << 63) + "{}"), "header length"));
  EXPECT_TRUE(Has(ReadError(U64(~std::uint64_t{0}) + "{}"), "header length"));
  EXPECT_TRUE(Has(ReadError(U64(3) + "{}"), "header length"));  // one byte past the end
  // Over the 100 MB limit even though the file would be long enough: the
  // check must not depend on allocating the header first.
  const fs::path p = dir_ / "sparse.safetensors";
  {
    std::ofstream out(p, std::ios::binary);
    out << U64(200'000'000) << "{";
  }
  fs::resize_file(p, 8 + 200'000'000);  // sparse, costs no disk
  try {
    ReadSafetensors(p.string());
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(Has(e.what(), "100000000"));
  }
}

TEST_F(Safetensors, BadJson) {
  EXPECT_TRUE(Has(ReadError(File(R"({"a":{"dtype":"F32",)", "")), "not valid JSON"));
  EXPECT_TRUE(Has(ReadError(File("\x01\x02garbage", "")), "not valid JSON"));
  EXPECT_TRUE(Has(ReadError(File("[1,2]", "")), "object"));
  EXPECT_TRUE(Has(ReadError(File(R"({"a":3})", "")), "'a'"));
}

TEST_F(Safetensors, DtypeOtherThanF32) {
  const std::string msg = ReadError(File(R"({"h":{"dtype":"F16","shape":[4],"data_offsets":[0,8]}})", F32({1, 2})));
  EXPECT_TRUE(Has(msg, "'h'"));
  EXPECT_TRUE(Has(msg, "F16"));
  EXPECT_TRUE(Has(msg, "only F32"));
  EXPECT_TRUE(Has(ReadError(File(R"({"h":{"shape":[2],"data_offsets":[0,8]}})", F32({1, 2}))), "dtype"));
}

TEST_F(Safetensors, OffsetsOutOfRange) {
  std::string msg = ReadError(File(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", F32({1, 2})));
  EXPECT_TRUE(Has(msg, "'a'"));
  EXPECT_TRUE(Has(msg, "outside"));
  msg = ReadError(File(R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", F32({1, 2})));
  EXPECT_TRUE(Has(msg, "'a'"));
  msg = ReadError(File(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[18446744073709551615,7]}})", F32({1, 2})));
  EXPECT_TRUE(Has(msg, "'a'"));
  msg = ReadError(File(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", F32({1, 2})));
  EXPECT_TRUE(Has(msg, "'a'"));
  msg = ReadError(File(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", F32({1, 2})));
  EXPECT_TRUE(Has(msg, "data_offsets"));
}

TEST_F(Safetensors, OffsetsMustTileTheBuffer) {
  // Overlap.
  std::string msg = ReadError(File(
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
      F32({1, 2, 3})));
  EXPECT_TRUE(Has(msg, "'b'"));
  EXPECT_TRUE(Has(msg, "overlap"));
  // Gap.
  msg = ReadError(File(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", F32({1, 2})));
  EXPECT_TRUE(Has(msg, "'a'"));
  EXPECT_TRUE(Has(msg, "gap"));
  // Trailing bytes no tensor owns.
  msg = ReadError(File(kGoodHeader, F32({1, 2, 3})));
  EXPECT_TRUE(Has(msg, "cover 8 bytes"));
}

TEST_F(Safetensors, ShapeDoesNotMatchSize) {
  std::string msg = ReadError(File(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", F32({1, 2})));
  EXPECT_TRUE(Has(msg, "'a'"));
  EXPECT_TRUE(Has(msg, "shape [3]"));
  // A product that overflows 64 bits must not wrap around to a match.
  msg = ReadError(File(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,2],"data_offsets":[0,8]}})", F32({1, 2})));
  EXPECT_TRUE(Has(msg, "'a'"));
  msg = ReadError(File(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", F32({1, 2})));
  EXPECT_TRUE(Has(msg, "'a'"));
  msg = ReadError(File(R"({"a":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", F32({1, 2})));
  EXPECT_TRUE(Has(msg, "'a'"));
}

TEST_F(Safetensors, EveryTruncationIsAConfigError) {
  const fs::path good = dir_ / "good.safetensors";
  WriteSafetensors(good.string(), Sample());
  const std::string bytes = Bytes(good);
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_NE(ReadError(bytes.substr(0, n)), "") << "cut at " << n;
  }
}

TEST_F(Safetensors, EveryCorruptedHeaderByteIsHandled) {
  // Each header byte replaced by a few values: the reader may accept the
  // result (a space for a space) but must throw only ConfigError and never
  // read out of bounds (run under ASan to see the second half).
  const fs::path good = dir_ / "good.safetensors";
  WriteSafetensors(good.string(), Sample());
  const std::string bytes = Bytes(good);
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= std::uint64_t{static_cast<unsigned char>(bytes[i])} << (8 * i);
  const fs::path p = dir_ / "fuzz.safetensors";
  int rejected = 0;
  for (std::size_t i = 0; i < 8 + n; ++i) {
    for (char c : {'\0', '9', '-', '"', '{', ']', '\xff'}) {
      std::string b = bytes;
      if (b[i] == c) continue;
      b[i] = c;
      WriteBytes(p, b);
      try {
        const std::vector<NamedTensor> t = ReadSafetensors(p.string());
        for (const NamedTensor& x : t) {
          std::int64_t elements = 1;
          for (std::int64_t d : x.shape) elements *= d;
          EXPECT_EQ(static_cast<std::size_t>(elements), x.data.size()) << x.name;
        }
      } catch (const ConfigError&) {
        ++rejected;
      }
    }
  }
  EXPECT_GT(rejected, 0);
}

}  // namespace
}  // namespace baton
