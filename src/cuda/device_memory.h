// A GPU's memory as a baton::Memory (baton/store.h): cudaMalloc'd blocks
// (never managed memory), zeroed and copied on one stream, so the ring store
// keeps a GPU's slots with the same bookkeeping as the host's.
#ifndef BATON_CUDA_DEVICE_MEMORY_H_
#define BATON_CUDA_DEVICE_MEMORY_H_

#include <cstddef>
#include <vector>

#include "baton/store.h"
#include "cuda_util.h"

namespace baton::cuda {

class DeviceMemory final : public Memory {
 public:
  // Zeroes and copies on `stream`, which must outlive this memory.
  explicit DeviceMemory(cudaStream_t stream) : stream_(stream) {}

  // cudaMalloc (256-byte aligned), zeroed on the stream.
  std::byte* Allocate(std::size_t bytes) override {
    blocks_.emplace_back(bytes);
    if (bytes > 0) BATON_CUDA_CHECK(cudaMemsetAsync(blocks_.back().data(), 0, bytes, stream_));
    return blocks_.back().data();
  }
  // Device to device on the stream: ordered after the kernels queued before
  // it that wrote `src`, before those queued after it that read `dst`.
  void Copy(std::byte* dst, const std::byte* src, std::size_t bytes) override {
    BATON_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
  }

 private:
  cudaStream_t stream_;
  std::vector<DeviceBuffer<std::byte>> blocks_;
};

}  // namespace baton::cuda

#endif  // BATON_CUDA_DEVICE_MEMORY_H_
