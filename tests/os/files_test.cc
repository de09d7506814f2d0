// Files baton writes and reads: a device or a FIFO written through, a link
// followed, inputs read with a cap; untrusted text quoted for messages.
#include "baton/files.h"

#include <fcntl.h>
#include <cerrno>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

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

// Every file operation an output is made of, failed in turn through the
// Env's fake (a full disk, an I/O error, a rename refused): one OutputError
// naming the file and the reason, the old file as it was, and no
// temporary file left beside it.
TEST_F(FilesTest, AnyFailedOperationLeavesTheOldFileAndNothingElse) {
  const fs::path target = dir_ / "weights.bin";
  struct Case {
    FileFault fault;
    std::string says;
  };
  const std::vector<Case> cases = {
      {{"open", "", 0, EACCES}, "cannot create"},
      {{"append", "", 0, ENOSPC}, "cannot write the file: No space left on device"},
      {{"append", "", 1, ENOSPC}, "cannot write the file: No space left on device"},
      {{"sync", "", 0, EIO}, "cannot write the file: Input/output error"},
      {{"close", "", 0, EDQUOT}, "cannot write the file: Disk quota exceeded"},
      {{"rename", "", 0, EXDEV}, "cannot move the finished file into place: Invalid cross-device link"},
  };
  for (const Case& c : cases) {
    WriteTextFile(target.string(), "old");
    FakeMachine m;
    m.file_faults = {c.fault};
    const std::unique_ptr<Env> env = MakeFakeEnv(m);
    try {
      AtomicFile f(target.string(), *env);
      f.Append("new, ");
      f.Append("in two parts");
      f.Commit();
      ADD_FAILURE() << c.fault.op << " #" << c.fault.after << ": no error";
    } catch (const OutputError& e) {
      EXPECT_NE(std::string(e.what()).find(target.string()), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(c.says), std::string::npos) << e.what();
    }
    EXPECT_EQ(ReadAll(target), "old") << c.fault.op;
    std::size_t files = 0;
    for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir_)) ++files;
    EXPECT_EQ(files, 1u) << c.fault.op << " left a file beside the output";
  }
  // The same fake with no fault due writes the file.
  FakeMachine later;
  later.file_faults = {{"append", "", 5, ENOSPC}};
  const std::unique_ptr<Env> later_env = MakeFakeEnv(later);
  AtomicFile f(target.string(), *later_env);
  f.Append("new");
  f.Commit();
  EXPECT_EQ(ReadAll(target), "new");
}

// A lock another process holds is not taken; one the OS refuses is an error.
TEST_F(FilesTest, ALockHeldElsewhereIsNotTakenAndARefusedOneSaysWhy) {
  const std::string lock = (dir_ / ".baton-lock").string();
  FakeMachine held;
  held.file_faults = {{"lock", ".baton-lock", 0, EWOULDBLOCK}};
  const std::unique_ptr<Env> env = MakeFakeEnv(held);
  FileLock l;
  EXPECT_FALSE(l.TryLock(lock, *env));
  EXPECT_FALSE(l.held());
  EXPECT_TRUE(l.TryLock(lock, *env));  // the holder has gone
  EXPECT_TRUE(l.held());
  l.Release(true);
  EXPECT_FALSE(fs::exists(lock));
  FakeMachine refused;
  refused.file_faults = {{"lock", "", 0, EACCES}};
  const std::unique_ptr<Env> refusing = MakeFakeEnv(refused);
  try {
    FileLock r;
    r.TryLock(lock, *refusing);
    ADD_FAILURE() << "no error";
  } catch (const OutputError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot lock the file: Permission denied"), std::string::npos) << e.what();
  }
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
