#include "device_store.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "baton/error.h"

namespace baton::cuda {

DeviceActivationStore::DeviceActivationStore(std::string name, std::size_t slot_floats, int capacity)
    : name_(std::move(name)),
      slot_floats_(slot_floats),
      capacity_(std::max(capacity, 1)),
      data_(slot_floats * static_cast<std::size_t>(std::max(capacity, 1))),
      holder_(std::max(capacity, 1), -1) {}

float* DeviceActivationStore::Acquire(int microbatch) {
  const int slot = SlotOf(microbatch);
  if (holder_[slot] >= 0) {
    throw Error(
        fmt::format("{}: microbatch {} needs ring slot {} of {}, but microbatch {} still holds it (not yet "
                    "released by its backward); the ring is too small for this schedule",
                    name_, microbatch, slot, capacity_, holder_[slot]));
  }
  holder_[slot] = microbatch;
  ++in_use_;
  return data_.data() + static_cast<std::size_t>(slot) * slot_floats_;
}

float* DeviceActivationStore::Get(int microbatch) {
  const int slot = SlotOf(microbatch);
  if (holder_[slot] != microbatch) {
    throw Error(fmt::format("{}: microbatch {} has no ring slot (slot {} is held by {})", name_, microbatch, slot,
                            holder_[slot] < 0 ? std::string("nobody") : std::to_string(holder_[slot])));
  }
  return data_.data() + static_cast<std::size_t>(slot) * slot_floats_;
}

void DeviceActivationStore::Write(int microbatch, std::size_t offset, const float* src, std::size_t floats,
                                  cudaStream_t stream) {
  float* slot = Get(microbatch);
  // Written so that a huge offset cannot wrap around and pass the check.
  if (offset > slot_floats_ || floats > slot_floats_ - offset) {
    throw Error(
        fmt::format("{}: a write of {} floats at {} overflows the {}-float slot", name_, floats, offset, slot_floats_));
  }
  const std::size_t bytes = floats * sizeof(float);
  BATON_CUDA_CHECK(cudaMemcpyAsync(slot + offset, src, bytes, cudaMemcpyDeviceToDevice, stream));
  bytes_copied_ += bytes;
  bytes_written_ += bytes;
}

void DeviceActivationStore::Release(int microbatch) {
  const int slot = SlotOf(microbatch);
  if (holder_[slot] != microbatch) {
    throw Error(
        fmt::format("{}: microbatch {} releases ring slot {}, which it does not hold", name_, microbatch, slot));
  }
  holder_[slot] = -1;
  --in_use_;
}

}  // namespace baton::cuda
