#include "blas.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdlib>
#include <string>

#include "baton/error.h"

namespace baton::host_detail {
namespace {

template <typename F>
void Resolve(void* library, const char* name, const std::string& path, F* out) {
  void* symbol = ::dlsym(library, name);
  if (symbol == nullptr) throw Error(fmt::format("{}: OpenBLAS has no {}: {}", path, name, ::dlerror()));
  *out = reinterpret_cast<F>(symbol);
}

Blas Load() {
  // One thread per rank unless the user said otherwise: set while OpenBLAS
  // starts (it reads the variable once, when it loads), then taken back so
  // that what baton starts inherits the user's environment.
  const bool ours = std::getenv("OPENBLAS_NUM_THREADS") == nullptr;
  if (ours) ::setenv("OPENBLAS_NUM_THREADS", "1", 1);
  std::string tried;
  void* library = nullptr;
  std::string path;
  for (const std::string& candidate : {std::string(BATON_OPENBLAS_DIR) + "/libopenblas.so.0",
                                      std::string("libopenblas.so.0")}) {
    library = ::dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library != nullptr) {
      path = candidate;
      break;
    }
    tried += fmt::format("\n  {}: {}", candidate, ::dlerror());
  }
  if (ours) ::unsetenv("OPENBLAS_NUM_THREADS");
  if (library == nullptr) {
    throw Error(fmt::format("cannot load OpenBLAS for the host's matrix products (Debian: libopenblas0-pthread); "
                            "tried:{}",
                            tried));
  }
  Blas blas;
  Resolve(library, "cblas_sgemm", path, &blas.sgemm);
  Resolve(library, "openblas_get_corename", path, &blas.corename);
  Resolve(library, "openblas_get_num_threads", path, &blas.num_threads);
  return blas;  // loaded for the life of the process
}

}  // namespace

const Blas& LoadedBlas() {
  static const Blas blas = Load();
  return blas;
}

}  // namespace baton::host_detail
