// A StageDevice on a CUDA device: the stage's plan (src/executor/stage.h) run
// with the CUDA layers on one compute stream, parameters and gradients in
// device memory with a host copy for initialisation, weights and
// checkpoints, and the loss totals kept on the device until the host takes
// them, once per step.
#ifndef BATON_CUDA_CUDA_STAGE_DEVICE_H_
#define BATON_CUDA_CUDA_STAGE_DEVICE_H_

#include <memory>

#include "baton/stage_device.h"
#include "cuda_layers.h"

namespace baton::cuda {

// Computes on the current CUDA device, on `stream` (which must outlive the
// device; several stages of one rank share their rank's stream, so that work
// handed from one to the next is ordered without events).
std::unique_ptr<StageDevice> MakeCudaStageDevice(cudaStream_t stream, Precision precision);

}  // namespace baton::cuda

#endif  // BATON_CUDA_CUDA_STAGE_DEVICE_H_
