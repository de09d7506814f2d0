#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>

#include "baton/config.h"
#include "baton/error.h"

namespace baton {

void WriteTextFile(const std::string& path, std::string_view content) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  std::error_code ec;
  if (target.has_parent_path()) fs::create_directories(target.parent_path(), ec);
  if (ec) throw ConfigError(fmt::format("{}: cannot create the folder: {}", path, ec.message()));
  const std::string tmp = fmt::format("{}.tmp.{}", path, ::getpid());
  // Written in full and flushed to disk before it takes the real name, and
  // the rename made durable, so a crash leaves the old file or the new one.
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  bool ok = f != nullptr;
  if (ok) ok = std::fwrite(content.data(), 1, content.size(), f) == content.size();
  if (ok) ok = std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  if (f != nullptr && std::fclose(f) != 0) ok = false;
  if (!ok) {
    std::remove(tmp.c_str());
    throw ConfigError(fmt::format("{}: cannot write the file", path));
  }
  fs::rename(tmp, target, ec);
  if (ec) {
    std::remove(tmp.c_str());
    throw ConfigError(fmt::format("{}: cannot move the finished file into place: {}", path, ec.message()));
  }
  const std::string folder = target.has_parent_path() ? target.parent_path().string() : ".";
  const int dir = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
}

}  // namespace baton
