// The CUDA RankDevice's factory, inside the backend (the module's entry
// point calls it; baton reaches it through MakeRankDevice).
#ifndef BATON_CUDA_CUDA_RANK_DEVICE_H_
#define BATON_CUDA_CUDA_RANK_DEVICE_H_

#include <memory>

#include "baton/choices.h"
#include "baton/comm.h"
#include "baton/stage_device.h"

namespace baton::cuda {

// One GPU (local rank modulo the devices on the node) computing its linear
// layers in `precision`. Throws ConfigError where no device is visible.
std::unique_ptr<RankDevice> MakeCudaRankDevice(Transport& transport, Precision precision);

}  // namespace baton::cuda

#endif  // BATON_CUDA_CUDA_RANK_DEVICE_H_
