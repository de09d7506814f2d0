#include "baton/store.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "baton/error.h"

namespace baton {

ActivationStore::ActivationStore(std::string name, std::size_t slot_floats, int capacity)
    : name_(std::move(name)), slot_floats_(slot_floats), capacity_(std::max(capacity, 1)),
      data_(slot_floats * static_cast<std::size_t>(std::max(capacity, 1))), holder_(std::max(capacity, 1), -1) {}

std::span<float> ActivationStore::Acquire(int microbatch) {
  const int slot = SlotOf(microbatch);
  if (holder_[slot] >= 0) {
    throw Error(fmt::format("{}: microbatch {} needs ring slot {} of {}, but microbatch {} still holds it (not yet "
                            "released by its backward); the ring is too small for this schedule",
                            name_, microbatch, slot, capacity_, holder_[slot]));
  }
  holder_[slot] = microbatch;
  ++in_use_;
  ++writes_;
  return {data_.data() + static_cast<std::size_t>(slot) * slot_floats_, slot_floats_};
}

std::span<float> ActivationStore::Get(int microbatch) {
  const int slot = SlotOf(microbatch);
  if (holder_[slot] != microbatch) {
    throw Error(fmt::format("{}: microbatch {} has no ring slot (slot {} is held by {})", name_, microbatch, slot,
                            holder_[slot] < 0 ? std::string("nobody") : std::to_string(holder_[slot])));
  }
  return {data_.data() + static_cast<std::size_t>(slot) * slot_floats_, slot_floats_};
}

void ActivationStore::Write(int microbatch, std::size_t offset, std::span<const float> src) {
  std::span<float> slot = Get(microbatch);
  if (offset + src.size() > slot.size()) {
    throw Error(fmt::format("{}: a write of {} floats at {} overflows the {}-float slot", name_, src.size(), offset,
                            slot.size()));
  }
  std::memcpy(slot.data() + offset, src.data(), src.size_bytes());
  bytes_copied_ += src.size_bytes();
  bytes_written_ += src.size_bytes();
}

void ActivationStore::Release(int microbatch) {
  const int slot = SlotOf(microbatch);
  if (holder_[slot] != microbatch) {
    throw Error(fmt::format("{}: microbatch {} releases ring slot {}, which it does not hold", name_, microbatch, slot));
  }
  holder_[slot] = -1;
  --in_use_;
}

}  // namespace baton
