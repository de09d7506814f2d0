// The activation ring store: one per stage, allocated once.
//
// Capacity = the simulator's peak in-flight microbatches for the stage under
// the chosen schedule; microbatch j lives in slot j mod capacity from its
// forward until its last backward (B, or W) releases it. Forward writes what
// backward needs straight into the slot: in place, never a copy of the whole
// buffer and never a reallocation. Writing into a slot whose previous
// microbatch has not been released is an error, never silent corruption.
#ifndef BATON_STORE_H_
#define BATON_STORE_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "baton/buffer.h"

namespace baton {

class ActivationStore {
 public:
  // Allocates capacity x slot_floats floats. REQUIRES: capacity >= 1.
  ActivationStore(std::string name, std::size_t slot_floats, int capacity);
  ActivationStore(const ActivationStore&) = delete;
  ActivationStore& operator=(const ActivationStore&) = delete;
  ActivationStore(ActivationStore&&) = default;

  // Takes slot j mod capacity for microbatch j. Throws Error naming the
  // store, the microbatch and the one still holding the slot if it is taken.
  std::span<float> Acquire(int microbatch);
  // The slot held by microbatch j. Throws Error if j holds none.
  std::span<float> Get(int microbatch);
  // Copies `src` into microbatch j's slot at `offset` floats (counted as bytes
  // copied and written).
  void Write(int microbatch, std::size_t offset, std::span<const float> src);
  // Counts `floats` written in place into microbatch j's slot by a layer.
  void CountInPlace(std::size_t floats) { bytes_written_ += floats * sizeof(float); }
  // Frees microbatch j's slot. Throws Error if j holds none.
  void Release(int microbatch);

  int capacity() const { return capacity_; }
  std::size_t slot_floats() const { return slot_floats_; }
  std::size_t slot_bytes() const { return slot_floats_ * sizeof(float); }
  int in_use() const { return in_use_; }
  std::uint64_t bytes_written() const { return bytes_written_; }
  std::uint64_t bytes_copied() const { return bytes_copied_; }
  std::uint64_t writes() const { return writes_; }  // slots acquired
  const std::string& name() const { return name_; }

 private:
  int SlotOf(int microbatch) const { return microbatch % capacity_; }

  std::string name_;
  std::size_t slot_floats_;
  int capacity_;
  FloatBuffer data_;    // (capacity, slot_floats)
  std::vector<int> holder_;     // per slot: microbatch, or -1
  int in_use_ = 0;
  std::uint64_t bytes_written_ = 0, bytes_copied_ = 0, writes_ = 0;
};

}  // namespace baton

#endif  // BATON_STORE_H_
