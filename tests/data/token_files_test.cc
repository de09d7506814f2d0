// The token files people already have, read as documents: Megatron-LM's
// indexed dataset and llm.c's shards as their own writers lay them out
// (tests/reference/token_files.py writes them with numpy, following
// Megatron's _IndexWriter and llm.c's write_datafile), JSON Lines text and
// the fortunes corpus; every malformed file refused with one error naming
// the file, the byte and the rule; windows over documents; the length
// statistics against their closed forms.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "baton/data.h"
#include "baton/error.h"
#include "support/held_samples.h"
#include "support/test_folder.h"

namespace baton {
namespace {

namespace fs = std::filesystem;
using Doc = std::vector<std::vector<std::int64_t>>;  // a document's sequences

class TokenFiles : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = baton_test::FreshTestFolder("baton_token_files"); }
  void TearDown() override { fs::remove_all(dir_); }

  // Megatron's files at dir_/name.{idx,bin}, by the reference writer.
  std::string Megatron(const std::string& name, const std::string& dtype, const std::vector<Doc>& docs) {
    const fs::path json = dir_ / (name + ".json");
    std::ofstream(json) << nlohmann::json(docs).dump();
    const std::string prefix = (dir_ / name).string();
    Python("megatron '" + prefix + "' " + dtype + " '" + json.string() + "'");
    return prefix;
  }
  std::string Llmc(const std::string& name, const std::vector<std::int64_t>& tokens) {
    const fs::path json = dir_ / (name + ".json");
    std::ofstream(json) << nlohmann::json(tokens).dump();
    const std::string path = (dir_ / (name + ".bin")).string();
    Python("llmc '" + path + "' '" + json.string() + "'");
    return path;
  }
  static void Python(const std::string& args) {
    const std::string command = "/usr/bin/python3 '" BATON_SOURCE_DIR "/tests/reference/token_files.py' " + args;
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
  }
  std::string Write(const std::string& name, const std::string& bytes) {
    const fs::path path = dir_ / name;
    std::ofstream(path, std::ios::binary) << bytes;
    return path.string();
  }
  static std::string Bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  static void Patch(const std::string& path, std::size_t at, const void* value, std::size_t n) {
    std::string b = Bytes(path);
    ASSERT_LE(at + n, b.size());
    std::memcpy(b.data() + at, value, n);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << b;
  }
  static void Cut(const std::string& path, std::size_t size) { fs::resize_file(path, size); }

  fs::path dir_;
};

std::vector<std::int32_t> Tokens(const TokenDocuments& docs, std::int64_t d) {
  std::vector<std::int32_t> out(static_cast<std::size_t>(docs.length(d)));
  docs.Read(d, 0, out);
  return out;
}

// The error `open()` throws, or "" if it opens.
template <typename Open>
std::string Refusal(Open open) {
  try {
    open();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST_F(TokenFiles, MegatronsDocumentsAreTheirSequencesInOrder) {
  const std::vector<Doc> docs = {{{5, 6, 7}, {8}}, {{9, 10}}, {{}, {11, 12, 13, 14}}, {{65535, 0}}};
  for (const std::string dtype : {"uint16", "int32", "int64"}) {
    SCOPED_TRACE(dtype);
    const TokenDocuments d = OpenMegatron(Megatron("m_" + dtype, dtype, docs));
    ASSERT_EQ(d.documents(), 4);
    EXPECT_EQ(d.tokens(), 12);
    EXPECT_EQ(Tokens(d, 0), std::vector<std::int32_t>({5, 6, 7, 8}));
    EXPECT_EQ(Tokens(d, 1), std::vector<std::int32_t>({9, 10}));
    EXPECT_EQ(Tokens(d, 2), std::vector<std::int32_t>({11, 12, 13, 14}));
    EXPECT_EQ(Tokens(d, 3), std::vector<std::int32_t>({65535, 0}));
    // A part of a document that spans its sequences.
    std::vector<std::int32_t> part(2);
    d.Read(0, 2, part);
    EXPECT_EQ(part, std::vector<std::int32_t>({7, 8}));
    EXPECT_EQ(d.token_bytes(), dtype == "uint16" ? 2 : dtype == "int32" ? 4 : 8);
    EXPECT_NO_THROW(d.CheckBelow(65536));
  }
}

TEST_F(TokenFiles, WindowsOverDocumentsAreTheirTokensOneAfterAnother) {
  // Document 1 has no sequence (two equal document indices): no tokens.
  const auto d = std::make_shared<const TokenDocuments>(
      OpenMegatron(Megatron("w", "uint16", {{{1, 2, 3}}, {}, {{4, 5}, {6, 7, 8}}, {{9, 10, 11}}})));
  ASSERT_EQ(d->documents(), 4);
  ASSERT_EQ(d->length(1), 0);
  const Dataset read = MakeDocumentWindows(d, 3, 16, true, true);
  EXPECT_TRUE(read.inputs.empty() && read.labels.empty()) << "read from the documents as batches want them";
  const Dataset windows = baton_test::HeldSamples(read);
  ASSERT_EQ(windows.samples, 3);  // (11 - 1) / 3
  EXPECT_EQ(windows.classes, 16);
  const auto in = windows.inputs_as<std::int32_t>();
  EXPECT_EQ(std::vector<std::int32_t>(in.begin(), in.end()), std::vector<std::int32_t>({1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(windows.labels, std::vector<std::int32_t>({2, 3, 4, 5, 6, 7, 8, 9, 10}));
  EXPECT_NE(Refusal([&] { MakeDocumentWindows(d, 11, 16, true, true); }).find("do not fill one window"),
            std::string::npos);
}

// llm.c writes an end-of-text token before every document: a document
// starts at each one (which stays its first token); tokens before the
// first make one too.
TEST_F(TokenFiles, AnLlmcShardsDocumentsStartAtEachEndOfText) {
  const std::int64_t eot = 50256;
  const TokenDocuments d = OpenLlmc(Llmc("s", {7, 8, eot, 1, 2, 3, eot, eot, 4}), eot);
  ASSERT_EQ(d.documents(), 4);
  EXPECT_EQ(d.tokens(), 9);
  EXPECT_EQ(Tokens(d, 0), std::vector<std::int32_t>({7, 8}));
  EXPECT_EQ(Tokens(d, 1), std::vector<std::int32_t>({50256, 1, 2, 3}));
  EXPECT_EQ(Tokens(d, 2), std::vector<std::int32_t>({50256}));
  EXPECT_EQ(Tokens(d, 3), std::vector<std::int32_t>({50256, 4}));
  EXPECT_EQ(OpenLlmc(Llmc("empty", {}), eot).documents(), 0);
  EXPECT_NE(Refusal([&] { d.CheckBelow(50000); }).find("token id 50256 (document 1, position 0)"), std::string::npos);
}

TEST_F(TokenFiles, JsonLinesAreOneDocumentALineAsBytes) {
  const std::string path = Write("d.jsonl",
                                 "{\"text\": \"ab\\nc\", \"id\": 3}\n"
                                 "\n"
                                 "{\"text\": \"\"}\n"
                                 "{\"text\": \"\\u00e9\"}\n"
                                 "   \n"
                                 "{\"meta\": 1, \"text\": \"z\"}");
  const TokenDocuments d = OpenJsonl(path);
  ASSERT_EQ(d.documents(), 3);  // the blank lines and the empty text skipped
  EXPECT_EQ(Tokens(d, 0), std::vector<std::int32_t>({'a', 'b', '\n', 'c'}));
  EXPECT_EQ(Tokens(d, 1), std::vector<std::int32_t>({0xC3, 0xA9}));  // UTF-8
  EXPECT_EQ(Tokens(d, 2), std::vector<std::int32_t>({'z'}));
  EXPECT_NO_THROW(d.CheckBelow(kByteVocabulary));
}

// One fortune, one document (its bytes, then the separator), so that the
// documents one after another are the split's stream; an entry may hold a
// blank line.
TEST_F(TokenFiles, FortunesDocumentsAreItsEntries) {
  fs::create_directories(dir_ / "fortunes");
  std::ofstream(dir_ / "fortunes/a") << "one\n%\ntwo\n\nlines\n%\nthree\n";
  const TextCorpus corpus = ReadFortuneFolder((dir_ / "fortunes").string());
  const auto docs = std::make_shared<const TokenDocuments>(FortuneDocuments(corpus, "train"));
  const TokenDocuments& d = *docs;
  ASSERT_EQ(d.documents(), 3);
  const auto text = [&](std::int64_t doc) {
    std::string s;
    for (const std::int32_t t : Tokens(d, doc)) s.push_back(static_cast<char>(t));
    return s;
  };
  EXPECT_EQ(text(0), "one\n\n");
  EXPECT_EQ(text(1), "two\n\nlines\n\n");
  EXPECT_EQ(text(2), "three\n\n");
  EXPECT_EQ(d.tokens(), static_cast<std::int64_t>(corpus.train.size()));
  const Dataset windows = baton_test::HeldSamples(MakeDocumentWindows(docs, 4, kByteVocabulary, true, true));
  const Dataset fixed = MakeTokenWindows(corpus.train, 4, "fortunes/train", true, true);
  EXPECT_EQ(windows.samples, fixed.samples);
  EXPECT_EQ(windows.labels, fixed.labels);
}

// Every malformed index or data file: one ConfigError naming the file and
// the byte, before anything of the claimed size is made.
TEST_F(TokenFiles, AMalformedMegatronDatasetIsRefusedNamingTheFileTheByteAndTheRule) {
  const std::vector<Doc> docs = {{{1, 2, 3}}, {{4, 5}}};
  struct Case {
    const char* name;
    std::function<void(const std::string& prefix)> spoil;
    const char* says;
  };
  const std::uint64_t two = 2, huge = std::uint64_t{1} << 60;
  const std::int32_t minus = -1;
  const std::int64_t far = 1000, back = 0;
  const std::uint8_t f32 = 7, nine = 9;
  const std::vector<Case> cases = {
      {"magic", [&](const std::string& p) { Patch(p + ".idx", 0, "NOTMMAP", 7); }, ".idx: byte 0: not a Megatron"},
      {"version", [&](const std::string& p) { Patch(p + ".idx", 9, &two, 8); }, ".idx: byte 9: index version 2"},
      {"float", [&](const std::string& p) { Patch(p + ".idx", 17, &f32, 1); }, ".idx: byte 17: dtype code 7 (float32)"},
      {"dtype", [&](const std::string& p) { Patch(p + ".idx", 17, &nine, 1); }, ".idx: byte 17: unknown dtype code 9"},
      {"claims", [&](const std::string& p) { Patch(p + ".idx", 18, &huge, 8); }, ".idx: byte 18: the header claims"},
      {"short_idx", [&](const std::string& p) { Cut(p + ".idx", 20); }, ".idx: byte 20: the file ends inside the header"},
      {"cut_idx", [&](const std::string& p) { Cut(p + ".idx", Bytes(p + ".idx").size() - 8); }, "the header claims 2 sequences and 3 document indices"},
      {"cut_bin", [&](const std::string& p) { Cut(p + ".bin", 7); }, "sequence 1 (2 tokens of 2 bytes at byte 6"},
      {"length", [&](const std::string& p) { Patch(p + ".idx", 34, &minus, 4); }, ".idx: byte 34: sequence 0 has length -1"},
      {"pointer", [&](const std::string& p) { Patch(p + ".idx", 34 + 8 + 8, &far, 8); }, ".idx: byte 50: sequence 1"},
      {"ascending", [&](const std::string& p) { Patch(p + ".idx", 34 + 8 + 16 + 16, &back, 8); }, "below the one before"},
      {"first", [&](const std::string& p) { Patch(p + ".idx", 34 + 8 + 16, &two, 8); }, "the first document index is 2"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string prefix = Megatron(c.name, "uint16", docs);
    c.spoil(prefix);
    const std::string why = Refusal([&] { OpenMegatron(prefix); });
    EXPECT_NE(why.find(c.says), std::string::npos) << why;
    EXPECT_NE(why.find(prefix), std::string::npos) << why;
  }
  EXPECT_NE(Refusal([&] { OpenMegatron((dir_ / "none").string()); }).find("no such Megatron index file"),
            std::string::npos);
  // A token id past the vocabulary: the data file, its byte, the document.
  const TokenDocuments d = OpenMegatron(Megatron("vocab", "uint16", {{{1, 2}}, {{3, 300}}}));
  const std::string why = Refusal([&] { d.CheckBelow(256); });
  EXPECT_NE(why.find("vocab.bin: byte 6: token id 300 (document 1, position 1)"), std::string::npos) << why;
}

TEST_F(TokenFiles, AMalformedLlmcShardIsRefusedNamingTheFileTheByteAndTheRule) {
  const std::int32_t two = 2, many = 1000, minus = -5;
  struct Case {
    const char* name;
    std::function<void(const std::string& path)> spoil;
    const char* says;
  };
  const std::vector<Case> cases = {
      {"magic", [&](const std::string& p) { Patch(p, 0, "abcd", 4); }, ": byte 0: not an llm.c token shard"},
      {"version", [&](const std::string& p) { Patch(p, 4, &two, 4); }, ": byte 4: shard version 2"},
      {"claims", [&](const std::string& p) { Patch(p, 8, &many, 4); }, ": byte 8: the header claims 1000 tokens"},
      {"negative", [&](const std::string& p) { Patch(p, 8, &minus, 4); }, ": byte 8: a token count of -5"},
      {"trailing", [&](const std::string& p) { std::ofstream(p, std::ios::app | std::ios::binary) << "x"; },
       "the header claims 3 tokens (1030 bytes with the header), but the file holds 1031 bytes"},
      {"short", [&](const std::string& p) { Cut(p, 100); }, ": byte 100: the file ends inside the header"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = Llmc(c.name, {50256, 1, 2});
    c.spoil(path);
    const std::string why = Refusal([&] { OpenLlmc(path, 50256); });
    EXPECT_NE(why.find(c.says), std::string::npos) << why;
    EXPECT_NE(why.find(path), std::string::npos) << why;
  }
}

TEST_F(TokenFiles, AJsonLineThatIsNotADocumentIsRefusedByItsLine) {
  const std::string first = "{\"text\": \"ok\"}\n";
  for (const auto& [line, says] : std::vector<std::pair<std::string, std::string>>{
           {"{\"text\": ", "byte 15: line 2 is not JSON"},
           {"[1, 2]", "byte 15: line 2 is not an object with a string \"text\""},
           {"{\"body\": \"x\"}", "line 2 is not an object with a string \"text\""},
           {"{\"text\": 5}", "line 2 is not an object with a string \"text\""}}) {
    SCOPED_TRACE(line);
    const std::string path = Write("bad.jsonl", first + line + "\n");
    const std::string why = Refusal([&] { OpenJsonl(path); });
    EXPECT_NE(why.find(says), std::string::npos) << why;
    EXPECT_NE(why.find(path), std::string::npos) << why;
  }
}

TEST_F(TokenFiles, AnInputThatCannotBeMappedIsNamed) {
  fs::create_directories(dir_ / "folder");
  EXPECT_NE(Refusal([&] { OpenLlmc((dir_ / "folder").string(), 0); }).find("is not a regular file (a folder)"),
            std::string::npos);
  EXPECT_NE(Refusal([&] { OpenJsonl((dir_ / "missing.jsonl").string()); }).find("no such JSON Lines file"),
            std::string::npos);
}

// Lengths 1..100: the quantiles by nearest rank, the mean, and the
// power-of-two bins (1 | 2-3 | 4-7 | ... | 64-100).
TEST_F(TokenFiles, TheStatisticsAreTheLengthsQuantilesAndPowerOfTwoBins) {
  std::vector<Doc> docs;
  for (int n = 100; n >= 1; --n) docs.push_back({std::vector<std::int64_t>(static_cast<std::size_t>(n), 1)});
  const DocumentStats s = DescribeDocuments(OpenMegatron(Megatron("stats", "uint16", docs)));
  EXPECT_EQ(s.documents, 100);
  EXPECT_EQ(s.tokens, 5050);
  EXPECT_EQ(s.shortest, 1);
  EXPECT_EQ(s.longest, 100);
  EXPECT_EQ(s.median, 50);
  EXPECT_EQ(s.p90, 90);
  EXPECT_EQ(s.p99, 99);
  EXPECT_DOUBLE_EQ(s.mean, 50.5);
  EXPECT_EQ(s.bins, std::vector<std::int64_t>({1, 2, 4, 8, 16, 32, 37}));
}

}  // namespace
}  // namespace baton
