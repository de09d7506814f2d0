// A build without the CUDA backend (CMake found no CUDA compiler, or
// BATON_CUDA=OFF): `device: cuda` is refused with the reason.
#include "baton/error.h"
#include "baton/stage_device.h"

namespace baton {

std::unique_ptr<RankDevice> MakeCudaRankDevice(Transport&, Precision) {
  throw ConfigError(
      "device: cuda: this baton was built without the CUDA backend (CMake found no CUDA compiler: put nvcc on PATH "
      "or install the toolkit in /usr/local/cuda, then rebuild)");
}

}  // namespace baton
