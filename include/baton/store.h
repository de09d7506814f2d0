// The activation ring store: one per stage, allocated once, in whatever
// memory the stage computes on (host or a GPU).
//
// Capacity = the simulator's peak in-flight microbatches for the stage under
// the chosen schedule; microbatch j lives in slot j mod capacity from its
// forward until its last backward (B, or W) releases it. Forward writes what
// backward needs straight into the slot: in place, never a copy of the whole
// buffer and never a reallocation. Writing into a slot whose previous
// microbatch has not been released is an error, never silent corruption.
//
// The store keeps the books (who holds which slot, bytes written and
// copied); the memory and its copies belong to a Memory, so the host and a
// GPU share this one store.
#ifndef BATON_STORE_H_
#define BATON_STORE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace baton {

// Bytes that some device owns: host memory, or a GPU's.
class Memory {
 public:
  virtual ~Memory() = default;
  // `bytes` zeroed bytes, 64-byte aligned, owned by this memory for its
  // lifetime. Setup only: never inside a step.
  virtual std::byte* Allocate(std::size_t bytes) = 0;
  // Copies `bytes` within this memory, ordered after the work enqueued before
  // it (asynchronous on a GPU, which orders it on its compute stream).
  virtual void Copy(std::byte* dst, const std::byte* src, std::size_t bytes) = 0;
};

// Host memory (aligned buffers; memcpy).
class HostMemory final : public Memory {
 public:
  HostMemory();
  ~HostMemory() override;
  HostMemory(const HostMemory&) = delete;
  HostMemory& operator=(const HostMemory&) = delete;
  std::byte* Allocate(std::size_t bytes) override;
  void Copy(std::byte* dst, const std::byte* src, std::size_t bytes) override;

 private:
  struct Block;
  std::vector<std::unique_ptr<Block>> blocks_;
};

class ActivationStore {
 public:
  // Takes capacity x slot_bytes bytes from `memory`, which must outlive the
  // store. A capacity below 1 is taken as 1. `slot_of` (optional): the
  // slot of each microbatch, instead of j mod capacity (sequence slices,
  // whose slices release their slots last first); each in [0, capacity).
  ActivationStore(std::string name, std::size_t slot_bytes, int capacity, Memory& memory,
                  std::vector<int> slot_of = {});
  ActivationStore(const ActivationStore&) = delete;
  ActivationStore& operator=(const ActivationStore&) = delete;
  ActivationStore(ActivationStore&&) = default;

  // Takes slot j mod capacity for microbatch j. Throws Error naming the
  // store, the microbatch and the one still holding the slot if it is taken.
  std::span<std::byte> Acquire(int microbatch);
  // The slot held by microbatch j. Throws Error if j holds none.
  std::span<std::byte> Get(int microbatch);
  // Copies `src` (the memory's own) into microbatch j's slot at `offset`
  // bytes through the memory (counted as bytes copied and written). Throws
  // Error if j holds no slot or the write would overflow it.
  void Write(int microbatch, std::size_t offset, std::span<const std::byte> src);
  // Counts `bytes` written in place into a slot by a layer.
  void CountInPlace(std::size_t bytes) { bytes_written_ += bytes; }
  // Frees microbatch j's slot. Throws Error if j holds none.
  void Release(int microbatch);

  int capacity() const { return capacity_; }
  std::size_t slot_bytes() const { return slot_bytes_; }
  int in_use() const { return in_use_; }
  std::uint64_t bytes_written() const { return bytes_written_; }
  std::uint64_t bytes_copied() const { return bytes_copied_; }
  std::uint64_t writes() const { return writes_; }  // slots acquired
  const std::string& name() const { return name_; }

 private:
  int SlotOf(int microbatch) const {
    return slot_of_.empty() ? microbatch % capacity_ : slot_of_[static_cast<std::size_t>(microbatch)];
  }
  std::span<std::byte> Slot(int slot) const;

  std::string name_;
  std::size_t slot_bytes_;
  int capacity_;
  Memory* memory_;
  std::byte* data_;          // (capacity, slot_bytes), the memory's
  std::vector<int> holder_;  // per slot: microbatch, or -1
  std::vector<int> slot_of_;
  int in_use_ = 0;
  std::uint64_t bytes_written_ = 0, bytes_copied_ = 0, writes_ = 0;
};

}  // namespace baton

#endif  // BATON_STORE_H_
