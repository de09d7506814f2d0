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

std::vector<std::string> Split(const std::string& list) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= list.size()) {
    std::size_t comma = list.find(',', start);
    if (comma == std::string::npos) comma = list.size();
    if (comma > start) out.push_back(list.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

std::vector<int> WholeNumbers(const std::string& list, const std::string& what) {
  std::vector<int> out;
  for (const std::string& v : Split(list)) {
    std::size_t used = 0;
    int n = 0;
    try {
      n = std::stoi(v, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != v.size()) throw ConfigError(fmt::format("{}: '{}' is not a whole number", what, v));
    out.push_back(n);
  }
  return out;
}

}  // namespace baton
