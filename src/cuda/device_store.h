// The activation ring store in device memory: the same contract as
// baton::ActivationStore (baton/store.h) — capacity from the simulator,
// microbatch j in slot j mod capacity from its forward until its last
// backward releases it, writing into a taken slot is an error — with the
// slots allocated once by cudaMalloc (never managed memory). Layers write
// their outputs straight into the slot (in place); Write() copies device to
// device on a stream, asynchronously.
#ifndef BATON_CUDA_DEVICE_STORE_H_
#define BATON_CUDA_DEVICE_STORE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda_util.h"

namespace baton::cuda {

class DeviceActivationStore {
 public:
  // Allocates capacity x slot_floats floats on the current device.
  // REQUIRES: capacity >= 1.
  DeviceActivationStore(std::string name, std::size_t slot_floats, int capacity);
  DeviceActivationStore(DeviceActivationStore&&) = default;

  // Takes slot j mod capacity for microbatch j and returns its device
  // address. Throws Error naming the store, the microbatch and the holder if
  // the slot is taken.
  float* Acquire(int microbatch);
  // The slot held by microbatch j. Throws Error if j holds none.
  float* Get(int microbatch);
  // Copies `floats` floats from device address `src` into microbatch j's
  // slot at `offset`, on `stream` (cudaMemcpyAsync device to device).
  void Write(int microbatch, std::size_t offset, const float* src, std::size_t floats, cudaStream_t stream);
  // Counts floats written in place into a slot by a layer.
  void CountInPlace(std::size_t floats) { bytes_written_ += floats * sizeof(float); }
  void Release(int microbatch);

  int capacity() const { return capacity_; }
  std::size_t slot_floats() const { return slot_floats_; }
  int in_use() const { return in_use_; }
  std::uint64_t bytes_written() const { return bytes_written_; }
  std::uint64_t bytes_copied() const { return bytes_copied_; }
  const std::string& name() const { return name_; }

 private:
  int SlotOf(int microbatch) const { return microbatch % capacity_; }

  std::string name_;
  std::size_t slot_floats_;
  int capacity_;
  DeviceBuffer<float> data_;  // (capacity, slot_floats)
  std::vector<int> holder_;   // per slot: microbatch, or -1
  int in_use_ = 0;
  std::uint64_t bytes_written_ = 0, bytes_copied_ = 0;
};

}  // namespace baton::cuda

#endif  // BATON_CUDA_DEVICE_STORE_H_
