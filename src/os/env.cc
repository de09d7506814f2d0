// The OS room's Env (baton/env.h): the process's own, and the fake.
#include "baton/env.h"

#include <sched.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace baton {
namespace {

class ProcessEnv final : public Env {
 public:
  std::optional<std::string> Variable(const std::string& name) const override {
    const char* v = std::getenv(name.c_str());
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  }

  std::string ReadSystemFile(const std::string& path) const override {
    std::ifstream in(path);
    if (!in) return "";
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }

  std::string HostName() const override {
    char name[256] = {};
    if (::gethostname(name, sizeof name - 1) != 0) return "localhost";
    return name;
  }

  std::string AllowedCores() const override {
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
};

class FakeEnv final : public Env {
 public:
  explicit FakeEnv(FakeMachine m) : m_(std::move(m)) {}

  std::optional<std::string> Variable(const std::string& name) const override {
    const auto it = m_.variables.find(name);
    if (it == m_.variables.end()) return std::nullopt;
    return it->second;
  }
  std::string ReadSystemFile(const std::string& path) const override {
    const auto it = m_.files.find(path);
    return it == m_.files.end() ? std::string() : it->second;
  }
  std::string HostName() const override { return m_.host; }
  std::string AllowedCores() const override { return m_.cores; }

 private:
  FakeMachine m_;
};

}  // namespace

const Env& Env::Default() {
  static const ProcessEnv env;
  return env;
}

std::unique_ptr<Env> MakeFakeEnv(FakeMachine machine) { return std::make_unique<FakeEnv>(std::move(machine)); }

}  // namespace baton
