// A program that does nothing, linked with the libraries `baton` links (and,
// built as startup_reference_cuda, with the CUDA runtime and cuBLAS too):
// startup_bench's reference for what loading them costs. Each library's
// symbol is referenced so that the linker keeps it.
#include <cblas.h>
#include <fmt/format.h>
#include <mpi.h>
#include <tbb/global_control.h>
#include <yaml-cpp/yaml.h>
#include <zlib.h>
#ifdef BATON_REFERENCE_CUDA
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#endif

volatile const void* keep[] = {
    reinterpret_cast<const void*>(&MPI_Initialized), reinterpret_cast<const void*>(&cblas_sgemm),
    reinterpret_cast<const void*>(&zlibVersion),
    reinterpret_cast<const void*>(&tbb::global_control::active_value),
#ifdef BATON_REFERENCE_CUDA
    reinterpret_cast<const void*>(&cudaGetDeviceCount), reinterpret_cast<const void*>(&cublasCreate_v2),
    reinterpret_cast<const void*>(&cublasLtCreate),
#endif
};

int main(int argc, char**) {
  // Never true: keeps yaml-cpp and fmt referenced without running them.
  if (argc > 1000) {
    YAML::Node n = YAML::Load("a: 1");
    fmt::print("{}\n", n["a"].as<int>());
  }
  return 0;
}
