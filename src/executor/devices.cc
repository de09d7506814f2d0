// The rank's device: the host's, or a GPU's from the CUDA backend module.
//
// `baton` links no CUDA library: a CPU run, `baton simulate` and `--help`
// start without them, on machines without them too. device: cuda loads
// libbaton_cuda.so (which links the CUDA runtime and cuBLAS) the first time
// a rank asks for a GPU, from beside the executable (or the file
// BATON_CUDA_MODULE names), and keeps it loaded for the life of the process.
#include <dlfcn.h>
#include <fmt/format.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "baton/error.h"
#include "baton/host.h"
#include "baton/stage_device.h"

namespace baton {
namespace {

constexpr const char* kModule = "libbaton_cuda.so";

using SeamVersionFn = int (*)();
using MakeRankDeviceFn = int (*)(Transport*, int, RankDevice**, std::string*);

struct CudaModule {
  std::string path;
  MakeRankDeviceFn make = nullptr;
};

// Where the module may be: BATON_CUDA_MODULE if set; else beside the
// executable, then in ../lib/baton from it (an installed layout).
std::vector<std::string> ModuleCandidates() {
  if (const char* path = std::getenv("BATON_CUDA_MODULE")) return {path};
  char self[PATH_MAX] = {};
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  const std::filesystem::path dir =
      n > 0 ? std::filesystem::path(std::string(self, static_cast<std::size_t>(n))).parent_path() : ".";
  return {(dir / kModule).string(), (dir / ".." / "lib" / "baton" / kModule).lexically_normal().string()};
}

CudaModule Load() {
  const std::vector<std::string> candidates = ModuleCandidates();
  std::string looked;
  for (const std::string& path : candidates) {
    looked += fmt::format("{}{}", looked.empty() ? "" : ", ", path);
    if (!std::filesystem::exists(path)) continue;
    // RTLD_NOW: a missing CUDA library or symbol is found here, once, and
    // said here, not in the middle of a step.
    void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      throw ConfigError(fmt::format(
          "device: cuda: cannot load the CUDA backend {}: {} (the CUDA runtime and cuBLAS libraries it needs are "
          "not installed, or not on the loader's path: install the CUDA toolkit, or add its lib64 folder to "
          "LD_LIBRARY_PATH)",
          path, ::dlerror()));
    }
    auto seam = reinterpret_cast<SeamVersionFn>(::dlsym(handle, "baton_cuda_module_seam_version"));
    auto make = reinterpret_cast<MakeRankDeviceFn>(::dlsym(handle, "baton_cuda_module_make_rank_device"));
    if (seam == nullptr || make == nullptr) {
      throw ConfigError(fmt::format("device: cuda: {} is not baton's CUDA backend module (it lacks its entry points)",
                                    path));
    }
    if (seam() != kDeviceSeamVersion) {
      throw ConfigError(fmt::format(
          "device: cuda: {} was built for another baton (device seam version {}, this baton's {}): rebuild both",
          path, seam(), kDeviceSeamVersion));
    }
    return {path, make};  // never unloaded: its devices live until the process ends
  }
#ifdef BATON_WITH_CUDA_MODULE
  throw ConfigError(fmt::format(
      "device: cuda: the CUDA backend module {} is missing (looked in {}): it is built beside the baton "
      "executable; copy it there, or name it with BATON_CUDA_MODULE",
      kModule, looked));
#else
  throw ConfigError(fmt::format(
      "device: cuda: this baton was built without the CUDA backend (CMake found no CUDA compiler: put nvcc on "
      "PATH or install the toolkit in /usr/local/cuda, then rebuild); no {} in {}",
      kModule, looked));
#endif
}

const CudaModule& LoadedCudaModule() {
  static const CudaModule module = Load();  // thread-safe, once; a failure throws again next time
  return module;
}

}  // namespace

std::string LoadCudaModule() { return LoadedCudaModule().path; }

std::unique_ptr<RankDevice> MakeRankDevice(Device device, Transport& transport, Precision precision) {
  if (device == Device::kCpu) return MakeHostRankDevice(transport);
  const CudaModule& module = LoadedCudaModule();
  RankDevice* out = nullptr;
  std::string error;
  switch (module.make(&transport, static_cast<int>(precision), &out, &error)) {
    case 0:
      return std::unique_ptr<RankDevice>(out);
    case 1:
      throw ConfigError(error);
    default:
      throw Error(fmt::format("{}: {}", module.path, error));
  }
}

}  // namespace baton
