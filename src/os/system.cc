// The machine a rank runs on (baton/system.h).
#include "baton/system.h"

#include <sched.h>
#include <unistd.h>

#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace baton {

std::string HostName() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "localhost";
  return name;
}

std::string AllowedCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return "?";
  std::vector<std::string> parts;
  for (int c = 0; c < CPU_SETSIZE;) {
    if (!CPU_ISSET(c, &set)) {
      ++c;
      continue;
    }
    int e = c;
    while (e + 1 < CPU_SETSIZE && CPU_ISSET(e + 1, &set)) ++e;
    parts.push_back(e == c ? std::to_string(c) : fmt::format("{}-{}", c, e));
    c = e + 1;
  }
  return fmt::format("{}", fmt::join(parts, ","));
}

}  // namespace baton
