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
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    out.close();
    if (!out) {
      std::remove(tmp.c_str());
      throw ConfigError(fmt::format("{}: cannot write the file", path));
    }
  }
  fs::rename(tmp, target, ec);
  if (ec) {
    std::remove(tmp.c_str());
    throw ConfigError(fmt::format("{}: cannot move the finished file into place: {}", path, ec.message()));
  }
}

}  // namespace baton
