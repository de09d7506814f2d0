// Running a command from a test and reading what it left: shared by the
// tests that run `mpirun baton ...` as a child process.
#ifndef BATON_TESTS_SUPPORT_JOB_H_
#define BATON_TESTS_SUPPORT_JOB_H_

#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace baton_test {

// A finished command: its exit code (-1 if it did not exit), what it printed
// (when the command wrote it to a log the caller reads) and how long it took.
struct JobResult {
  int code = -1;
  std::string output;  // stdout and stderr together
  double seconds = 0;
};

// Runs `command` through the shell; its exit code, -1 if killed by a signal.
inline int Shell(const std::string& command) {
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

inline std::string ReadAll(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Runs `command`, which writes its output to `log`; timed.
inline JobResult RunJob(const std::string& command, const std::filesystem::path& log) {
  const auto start = std::chrono::steady_clock::now();
  JobResult r;
  r.code = Shell(command);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.output = ReadAll(log);
  return r;
}

inline void WriteFile(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

// How many times `needle` occurs in `text`.
inline std::size_t Count(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (std::size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + needle.size())) ++n;
  return n;
}

}  // namespace baton_test

#endif  // BATON_TESTS_SUPPORT_JOB_H_
