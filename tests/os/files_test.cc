// Files baton writes and reads: a device or a FIFO written through, a link
// followed, inputs read with a cap; untrusted text quoted for messages.
#include "baton/files.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "baton/error.h"
#include "support/test_folder.h"

namespace baton {
namespace {

namespace fs = std::filesystem;

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class FilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = baton_test::FreshTestFolder("baton_files");
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(FilesTest, AFifoIsWrittenThroughNotReplaced) {
  const fs::path fifo = dir_ / "out.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  // Nobody reads it: refused at once rather than waited on forever.
  EXPECT_THROW(WriteTextFile(fifo.string(), "lost"), OutputError);
  // A reader (opened first, without waiting for a writer) gets the bytes.
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  WriteTextFile(fifo.string(), "hello");
  char got[16] = {};
  EXPECT_EQ(::read(reader, got, sizeof got), 5);
  ::close(reader);
  EXPECT_EQ(std::string(got), "hello");
  EXPECT_TRUE(fs::is_fifo(fifo));
  EXPECT_NO_THROW(WriteTextFile("/dev/null", "discarded"));
  EXPECT_TRUE(fs::is_character_file("/dev/null"));
  EXPECT_THROW(WriteTextFile("/dev/full", "no room"), OutputError);
}

TEST_F(FilesTest, ALinkIsFollowedAndAFolderRefused) {
  WriteTextFile((dir_ / "target.txt").string(), "old");
  fs::create_symlink(dir_ / "target.txt", dir_ / "link.txt");
  WriteTextFile((dir_ / "link.txt").string(), "new");
  EXPECT_TRUE(fs::is_symlink(dir_ / "link.txt"));
  EXPECT_EQ(ReadAll(dir_ / "target.txt"), "new");
  try {
    WriteTextFile(dir_.string(), "x");
    FAIL() << "wrote over a folder";
  } catch (const OutputError& e) {
    EXPECT_NE(std::string(e.what()).find("is a folder, not a file"), std::string::npos);
  }
}

TEST_F(FilesTest, ReadingSaysWhatIsWrongAndStopsAtTheCap) {
  auto error = [](const std::string& path, std::size_t cap = kMaxTextFileBytes) {
    try {
      ReadTextFile(path, "config file", cap);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error((dir_ / "none").string()).find("no such config file"), std::string::npos);
  EXPECT_NE(error(dir_.string()).find("is a folder, not a config file"), std::string::npos);
  WriteTextFile((dir_ / "big").string(), std::string(3 << 20, 'x'));
  EXPECT_NE(error((dir_ / "big").string(), 1 << 20).find("the config file is 3145728 bytes; baton reads at most 1 MiB"),
            std::string::npos);
  // A device has no size to ask: read up to the cap and refused there.
  EXPECT_NE(error("/dev/zero", 1 << 20).find("is over 1 MiB"), std::string::npos);
  EXPECT_EQ(ReadTextFile((dir_ / "big").string()).size(), 3u << 20);
}

TEST_F(FilesTest, OutputChecksCreateNothing) {
  EXPECT_NO_THROW(CheckOutputFile((dir_ / "a/b/c.txt").string(), "log.weights"));
  EXPECT_NO_THROW(CheckOutputFolder((dir_ / "ck/x").string(), "checkpoint.dir"));
  EXPECT_FALSE(fs::exists(dir_ / "a"));
  EXPECT_FALSE(fs::exists(dir_ / "ck"));
  EXPECT_NO_THROW(CheckOutputFile("/dev/null", "log.metrics"));
}

TEST_F(FilesTest, AFileIdIsTheFileHoweverItIsSpelt) {
  WriteTextFile((dir_ / "f").string(), "x");
  EXPECT_EQ(IdOf((dir_ / "f").string()), IdOf((dir_ / "." / "f").string()));
  EXPECT_EQ(IdOf((dir_ / "new").string()), IdOf((dir_ / "sub/../new").string()));
  EXPECT_FALSE(IdOf((dir_ / "f").string()) == IdOf((dir_ / "g").string()));
}

TEST(Quote, EscapesWhatATerminalWouldObeyAndCutsTheRest) {
  EXPECT_EQ(Quote("1F0"), "'1F0'");
  EXPECT_EQ(Quote("\x1b[31mred"), "'\\x1b[31mred'");
  EXPECT_EQ(Quote(std::string(100, 'a'), 4), "'aaaa'... (96 more bytes)");
  EXPECT_EQ(ForTerminal("line\x1b[2J\nnext\ttab"), "line\\x1b[2J\nnext\ttab");
  const std::string cut = ForTerminal(std::string(5000, 'z') + "\nshort", 100);
  EXPECT_EQ(cut, std::string(100, 'z') + "... (4900 more bytes)\nshort");
}

}  // namespace
}  // namespace baton
