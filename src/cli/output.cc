#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <fmt/format.h>

#include "baton/error.h"
#include "baton/config.h"
#include "baton/files.h"
#include "commands.h"

namespace baton {

void WriteOutput(const std::string& path, std::string_view content) {
  if (path == "-") {
    std::cout << content;
    std::cout.flush();
    return;
  }
  WriteTextFile(path, content);
}

std::string ExpandPath(std::string_view pattern, std::string_view schedule) {
  std::string out(pattern);
  constexpr std::string_view kKey = "{schedule}";
  for (std::size_t at = out.find(kKey); at != std::string::npos; at = out.find(kKey, at + schedule.size())) {
    out.replace(at, kKey.size(), schedule);
  }
  return out;
}

}  // namespace baton
