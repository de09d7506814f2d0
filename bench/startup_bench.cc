// How long a process takes to start and end: `baton --help`, `baton simulate
// -s 1f1b -p 2 -m 2`, and, in the same run, a program that does nothing but
// is linked with what baton links (MPI, oneTBB, yaml-cpp, fmt, zlib, and
// OpenBLAS, which baton loads only when it computes), and, where CUDA was
// found, one linked with the CUDA runtime, cuBLAS and cuBLASLt as well (what
// every baton process loaded when it linked the GPU backend). Each command
// runs 40 times (after 3 unmeasured); the median wall time of each and the
// ratio of baton's to the empty program's are printed. Goal: baton under
// 30 ms.
//
//   build/bench/startup_bench [BUILD_DIR]
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "baton/timing.h"

namespace {

// Seconds from fork to the child's exit; its output goes to /dev/null.
double RunOnce(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const double start = baton::MonotonicSeconds();
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::freopen("/dev/null", "w", stdout);
    std::freopen("/dev/null", "w", stderr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  const double seconds = baton::MonotonicSeconds() - start;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "startup_bench: %s exited with %d\n", argv[0].c_str(), WEXITSTATUS(status));
    std::exit(1);
  }
  return seconds;
}

struct Row {
  std::string name;
  double median = 0, min = 0;
};

Row Measure(const std::string& name, const std::vector<std::string>& argv) {
  for (int i = 0; i < 3; ++i) RunOnce(argv);
  std::vector<double> t;
  for (int i = 0; i < 40; ++i) t.push_back(RunOnce(argv));
  return {name, baton::Median(t), *std::min_element(t.begin(), t.end())};
}

}  // namespace

int main(int argc, char** argv) {
  const std::string build = argc > 1 ? argv[1] : BATON_BUILD_DIR;
  std::vector<Row> rows;
  rows.push_back(Measure("empty program linked with MPI, OpenBLAS, oneTBB, yaml-cpp, fmt, zlib",
                         {build + "/bench/startup_reference"}));
  if (::access((build + "/bench/startup_reference_cuda").c_str(), X_OK) == 0) {
    rows.push_back(Measure("the same, also linked with the CUDA runtime, cuBLAS, cuBLASLt",
                           {build + "/bench/startup_reference_cuda"}));
  }
  rows.push_back(Measure("baton --help", {build + "/baton", "--help"}));
  rows.push_back(Measure("baton simulate -s 1f1b -p 2 -m 2", {build + "/baton", "simulate", "-s", "1f1b", "-p", "2", "-m", "2"}));
  const double reference = rows.front().median;
  std::printf("%-72s %10s %10s %8s\n", "process (40 runs)", "median ms", "min ms", "/ empty");
  for (const Row& r : rows) {
    std::printf("%-72s %10.2f %10.2f %8.2f\n", r.name.c_str(), r.median * 1e3, r.min * 1e3, r.median / reference);
  }
  const double worst = std::max(rows[rows.size() - 1].median, rows[rows.size() - 2].median);
  std::printf("baton's slower command: %.2f ms (goal: under 30 ms)\n", worst * 1e3);
  return 0;
}
