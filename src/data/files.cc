#include "baton/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "baton/error.h"

namespace baton {
namespace {

namespace fs = std::filesystem;

// Makes a rename durable; best effort (not every filesystem allows it).
void SyncFolder(const fs::path& target) {
  const std::string folder = target.has_parent_path() ? target.parent_path().string() : ".";
  const int dir = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY);
  if (dir < 0) return;
  ::fsync(dir);
  ::close(dir);
}

}  // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)), tmp_(fmt::format("{}.tmp.{}", path_, ::getpid())) {
  const fs::path target(path_);
  std::error_code ec;
  if (target.has_parent_path()) fs::create_directories(target.parent_path(), ec);
  if (ec) throw OutputError(fmt::format("{}: cannot create the folder: {}", path_, ec.message()));
  file_ = std::fopen(tmp_.c_str(), "wb");
  if (file_ == nullptr) throw OutputError(fmt::format("{}: cannot create '{}': {}", path_, tmp_, std::strerror(errno)));
}

AtomicFile::~AtomicFile() {
  if (file_ == nullptr) return;
  std::fclose(file_);
  std::remove(tmp_.c_str());
}

void AtomicFile::Fail(const std::string& what) {
  const int err = errno;
  if (file_ != nullptr) std::fclose(file_);
  file_ = nullptr;
  std::remove(tmp_.c_str());
  throw OutputError(fmt::format("{}: {}{}", path_, what, err != 0 ? fmt::format(": {}", std::strerror(err)) : ""));
}

void AtomicFile::Append(std::span<const std::byte> bytes) {
  if (file_ == nullptr) throw OutputError(fmt::format("{}: written after it was committed", path_));
  if (bytes.empty()) return;  // fwrite's buffer must not be null, even for 0 bytes
  errno = 0;
  if (std::fwrite(bytes.data(), 1, bytes.size(), file_) != bytes.size()) Fail("cannot write the file");
}

void AtomicFile::Commit() {
  if (file_ == nullptr) throw OutputError(fmt::format("{}: committed twice", path_));
  errno = 0;
  // Written in full and flushed to disk before it takes the real name, and
  // the rename made durable, so a crash leaves the old file or the new one.
  if (std::fflush(file_) != 0 || ::fsync(::fileno(file_)) != 0) Fail("cannot write the file");
  const int closed = std::fclose(file_);
  file_ = nullptr;
  if (closed != 0) {
    std::remove(tmp_.c_str());
    throw OutputError(fmt::format("{}: cannot write the file: {}", path_, std::strerror(errno)));
  }
  std::error_code ec;
  fs::rename(tmp_, path_, ec);
  if (ec) {
    std::remove(tmp_.c_str());
    throw OutputError(fmt::format("{}: cannot move the finished file into place: {}", path_, ec.message()));
  }
  SyncFolder(fs::path(path_));
}

void WriteTextFile(const std::string& path, std::string_view content) {
  AtomicFile file(path);
  file.Append(content);
  file.Commit();
}

std::string ReadTextFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(fmt::format("{}: no such config file (or it cannot be read)", path));
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace baton
