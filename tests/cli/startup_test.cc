// baton starts without the CUDA libraries and without OpenBLAS: the
// executable needs neither (its NEEDED entries, as readelf lists them), its
// planning commands load neither (the dynamic loader's own trace,
// LD_DEBUG=libs), and it runs them with the CUDA toolkit's folder hidden (a
// private mount namespace with an empty folder mounted over it, as on a
// node without CUDA). A run with device: cuda there names what is missing.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;

constexpr const char* kCudaFolder = "/usr/local/cuda";

struct Result {
  int code = -1;
  std::string output;
};

// Runs `command` with sh, stdout and stderr together.
Result Shell(const std::string& command) {
  const fs::path log = fs::path(::testing::TempDir()) / ("baton_startup_" + std::to_string(::getpid()) + ".txt");
  const int status = std::system((command + " > '" + log.string() + "' 2>&1").c_str());
  std::ifstream in(log);
  Result r{WIFEXITED(status) ? WEXITSTATUS(status) : -1,
           std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>())};
  fs::remove(log);
  return r;
}

std::string Quoted(const std::string& s) { return "'" + s + "'"; }

// `command` in a private mount namespace where the CUDA folder is empty.
// Skips the test where this process may not make one (no CAP_SYS_ADMIN).
Result WithoutCuda(const std::string& command) {
  if (!fs::exists(kCudaFolder)) return Shell(command);  // nothing to hide here
  const Result probe = Shell(std::string("unshare --mount --propagation private true"));
  if (probe.code != 0) return {-2, "cannot make a mount namespace here: " + probe.output};
  return Shell(std::string("unshare --mount --propagation private -- sh -c ") +
             Quoted(std::string("mount -t tmpfs tmpfs ") + kCudaFolder + " && " + command));
}

const std::string kBaton = Quoted(BATON_BINARY);

TEST(Startup, TheExecutableNeedsNoCudaOrBlasLibrary) {
  const Result r = Shell("readelf -d " + kBaton);
  ASSERT_EQ(r.code, 0) << r.output;
  std::vector<std::string> needed;
  for (std::size_t at = r.output.find("Shared library: ["); at != std::string::npos;
       at = r.output.find("Shared library: [", at + 1)) {
    const std::size_t begin = at + 17;
    needed.push_back(r.output.substr(begin, r.output.find(']', begin) - begin));
  }
  ASSERT_FALSE(needed.empty()) << r.output;
  for (const std::string& lib : needed) {
    for (const char* banned : {"cuda", "cublas", "nvidia", "openblas", "gfortran"}) {
      EXPECT_EQ(lib.find(banned), std::string::npos) << "baton needs " << lib;
    }
  }
}

TEST(Startup, PlanningCommandsLoadNeitherCudaNorBlas) {
  for (const std::string& args :
       {std::string("--help"), std::string("simulate -s 1f1b -p 2 -m 2"),
        "validate " + Quoted(BATON_SOURCE_DIR "/tests/mpi/tiny.yaml") + " --set pipeline.ranks=2"}) {
    const Result r = Shell("LD_DEBUG=libs " + kBaton + " " + args);
    EXPECT_EQ(r.code, 0) << args << "\n" << r.output;
    for (const char* library : {"libopenblas", "libcudart", "libcublas"}) {
      EXPECT_EQ(r.output.find(library), std::string::npos) << args << " loaded " << library;
    }
  }
}

TEST(Startup, RunsWithTheCudaFolderHidden) {
  const Result r = WithoutCuda(kBaton + " --help && " + kBaton + " simulate -s 1f1b -p 2 -m 2 && " + kBaton +
                               " validate " + Quoted(BATON_SOURCE_DIR "/tests/mpi/tiny.yaml"));
  if (r.code == -2) GTEST_SKIP() << r.output;
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("makespan 9"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("is valid"), std::string::npos) << r.output;
}

#ifdef BATON_HAVE_CUDA
// The module is there but the CUDA runtime it needs is not: one error that
// names the module, the library the loader could not find and the advice.
TEST(Startup, DeviceCudaWithTheCudaFolderHiddenNamesWhatIsMissing) {
  if (!fs::exists(kCudaFolder)) GTEST_SKIP() << "no " << kCudaFolder << " to hide";
  const fs::path dir = fs::path(::testing::TempDir()) / ("baton_startup_cuda_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const Result r = WithoutCuda("cd " + Quoted(dir.string()) +
                               " && OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 60 " +
                               Quoted(BATON_MPIEXEC) +
                               " -np 1 " + kBaton + " train " + Quoted(BATON_SOURCE_DIR "/tests/mpi/tiny.yaml") +
                               " --set device=cuda");
  fs::remove_all(dir);
  if (r.code == -2) GTEST_SKIP() << r.output;
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("device: cuda: cannot load the CUDA backend"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("libbaton_cuda.so"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("libcudart"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("LD_LIBRARY_PATH"), std::string::npos) << r.output;
}
#endif

}  // namespace
