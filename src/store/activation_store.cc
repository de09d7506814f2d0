#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <new>

#include "baton/buffer.h"
#include "baton/error.h"
#include "baton/store.h"

namespace baton {

struct HostMemory::Block {
  std::vector<std::byte, AlignedAllocator<std::byte>> bytes;
};

HostMemory::HostMemory() = default;
HostMemory::~HostMemory() = default;

std::byte* HostMemory::Allocate(std::size_t bytes) {
  const std::size_t before = blocks_.size();
  try {
    blocks_.push_back(std::make_unique<Block>());
    blocks_.back()->bytes.assign(bytes, std::byte{0});
  } catch (const std::bad_alloc&) {
    blocks_.resize(before);
    throw ResourceError(fmt::format("out of memory: cannot allocate {} bytes ({:.1f} MiB) of host memory", bytes,
                                    static_cast<double>(bytes) / (1 << 20)));
  }
  return blocks_.back()->bytes.data();
}

void HostMemory::Copy(std::byte* dst, const std::byte* src, std::size_t bytes) { std::memcpy(dst, src, bytes); }

ActivationStore::ActivationStore(std::string name, std::size_t slot_bytes, int capacity, Memory& memory,
                                 std::vector<int> slot_of)
    : name_(std::move(name)),
      slot_bytes_(slot_bytes),
      capacity_(std::max(capacity, 1)),
      memory_(&memory),
      data_(memory.Allocate(slot_bytes * static_cast<std::size_t>(std::max(capacity, 1)))),
      holder_(std::max(capacity, 1), -1),
      slot_of_(std::move(slot_of)) {
  for (int s : slot_of_) {
    if (s < 0 || s >= capacity_) {
      throw Error(fmt::format("{}: a microbatch is given slot {} of a ring of {}", name_, s, capacity_));
    }
  }
}

std::span<std::byte> ActivationStore::Slot(int slot) const {
  return {data_ + static_cast<std::size_t>(slot) * slot_bytes_, slot_bytes_};
}

std::span<std::byte> ActivationStore::Acquire(int microbatch) {
  const int slot = SlotOf(microbatch);
  if (holder_[slot] >= 0) {
    throw Error(fmt::format("{}: microbatch {} needs ring slot {} of {}, but microbatch {} still holds it (not yet "
                            "released by its backward); the ring is too small for this schedule",
                            name_, microbatch, slot, capacity_, holder_[slot]));
  }
  holder_[slot] = microbatch;
  ++in_use_;
  ++writes_;
  return Slot(slot);
}

std::span<std::byte> ActivationStore::Get(int microbatch) {
  const int slot = SlotOf(microbatch);
  if (holder_[slot] != microbatch) {
    throw Error(fmt::format("{}: microbatch {} has no ring slot (slot {} is held by {})", name_, microbatch, slot,
                            holder_[slot] < 0 ? std::string("nobody") : std::to_string(holder_[slot])));
  }
  return Slot(slot);
}

void ActivationStore::Write(int microbatch, std::size_t offset, std::span<const std::byte> src) {
  const std::span<std::byte> slot = Get(microbatch);
  // Written so that a huge offset cannot wrap around and pass the check.
  if (offset > slot.size() || src.size() > slot.size() - offset) {
    throw Error(fmt::format("{}: a write of {} bytes at {} overflows the {}-byte slot", name_, src.size(), offset,
                            slot.size()));
  }
  memory_->Copy(slot.data() + offset, src.data(), src.size());
  bytes_copied_ += src.size();
  bytes_written_ += src.size();
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
