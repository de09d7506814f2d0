// Error reporting and device queries for the CUDA backend.
#include "cuda_util.h"

#include <fmt/format.h>

#include "baton/error.h"

namespace baton::cuda {

void ThrowCudaError(cudaError_t status, const char* call, const char* file, int line) {
  throw Error(
      fmt::format("{}:{}: {} failed: {} ({})", file, line, call, cudaGetErrorName(status), cudaGetErrorString(status)));
}

void ThrowCublasError(cublasStatus_t status, const char* call, const char* file, int line) {
  throw Error(fmt::format("{}:{}: {} failed: {} ({})", file, line, call, cublasGetStatusName(status),
                          cublasGetStatusString(status)));
}

int DeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" / "no device" error
    return 0;
  }
  return n;
}

std::string DeviceDescription(int index) {
  cudaDeviceProp p{};
  BATON_CUDA_CHECK(cudaGetDeviceProperties(&p, index));
  return fmt::format("{} (sm_{}{}, {:.1f} GiB)", p.name, p.major, p.minor,
                     static_cast<double>(p.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
}

}  // namespace baton::cuda
