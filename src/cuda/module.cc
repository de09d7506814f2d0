// The CUDA backend as the module `baton` loads for device: cuda
// (libbaton_cuda.so; the loader is src/executor/devices.cc). Its one entry
// point is C, and it lets no exception out: an error comes back as its
// kind and text, which the executable throws as its own.
#include <exception>
#include <memory>
#include <string>

#include "baton/error.h"
#include "baton/stage_device.h"
#include "cuda_rank_device.h"

extern "C" {

// The seam this module was built against (kDeviceSeamVersion).
__attribute__((visibility("default"))) int baton_cuda_module_seam_version() { return baton::kDeviceSeamVersion; }

// A CUDA RankDevice for this rank into *out (the caller owns it) and 0; or
// 1 (a ConfigError: no device, say) or 2 (another error) with *error set.
__attribute__((visibility("default"))) int baton_cuda_module_make_rank_device(baton::Transport* transport,
                                                                             int precision, baton::RankDevice** out,
                                                                             std::string* error) {
  try {
    *out = baton::cuda::MakeCudaRankDevice(*transport, static_cast<baton::Precision>(precision)).release();
    return 0;
  } catch (const baton::ConfigError& e) {
    *error = e.what();
    return 1;
  } catch (const std::exception& e) {
    *error = e.what();
    return 2;
  }
}

}  // extern "C"
