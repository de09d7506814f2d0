#include "baton/store.h"

#include <gtest/gtest.h>

#include <limits>
#include <numeric>
#include <span>
#include <vector>

#include "baton/error.h"

namespace baton {
namespace {

// The store keeps bytes; these tests count floats.
std::span<float> Floats(std::span<std::byte> slot) {
  return {reinterpret_cast<float*>(slot.data()), slot.size() / sizeof(float)};
}
std::span<const std::byte> Bytes(const std::vector<float>& v) { return std::as_bytes(std::span<const float>(v)); }

TEST(ActivationStore, MicrobatchJUsesSlotJModCapacity) {
  HostMemory memory;
  ActivationStore store("stage 2 store", 6 * sizeof(float), 3, memory);
  EXPECT_EQ(store.capacity(), 3);
  std::span<float> a = Floats(store.Acquire(0));
  std::span<float> b = Floats(store.Acquire(1));
  EXPECT_EQ(b.data() - a.data(), 6);
  store.Release(0);
  std::span<float> d = Floats(store.Acquire(3));  // 3 mod 3 = slot 0 again
  EXPECT_EQ(d.data(), a.data());
  EXPECT_EQ(store.in_use(), 2);
}

TEST(ActivationStore, WritingIntoAnUnreleasedSlotIsAnErrorNamingBoth) {
  HostMemory memory;
  ActivationStore store("rank 1 stage 3 activation store", 4 * sizeof(float), 2, memory);
  store.Acquire(0);
  store.Acquire(1);
  try {
    store.Acquire(2);
    FAIL() << "slot 0 was overwritten";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("rank 1 stage 3 activation store: microbatch 2 needs ring slot 0 of 2, but microbatch 0 still "
                       "holds it"),
              std::string::npos)
        << msg;
  }
  EXPECT_THROW(store.Release(2), Error);
  EXPECT_THROW(store.Get(2), Error);
}

TEST(ActivationStore, AWriteCopiesOneSlotNotTheWholeRing) {
  const std::size_t slot = 1000;
  const int capacity = 15;
  HostMemory memory;
  ActivationStore store("s", slot * sizeof(float), capacity, memory);
  std::vector<float> src(slot);
  std::iota(src.begin(), src.end(), 0.0f);
  for (int j = 0; j < 40; ++j) {
    const std::uint64_t before = store.bytes_copied();
    store.Acquire(j);
    store.Write(j, 0, Bytes(src));
    EXPECT_EQ(store.bytes_copied() - before, slot * sizeof(float));  // = the slot's size
    EXPECT_EQ(Floats(store.Get(j))[slot - 1], float(slot - 1));
    store.Release(j);
  }
  EXPECT_EQ(store.bytes_written(), 40 * slot * sizeof(float));
  EXPECT_EQ(store.writes(), 40u);
  EXPECT_THROW(store.Write(0, 1, Bytes(src)), Error);  // microbatch 0 holds no slot
  store.Acquire(0);
  EXPECT_THROW(store.Write(0, 1, Bytes(src)), Error);  // overflow
  // An offset so large that offset + size wraps around is refused, not written.
  EXPECT_THROW(store.Write(0, std::numeric_limits<std::size_t>::max() - 2, Bytes(src)), Error);
}

}  // namespace
}  // namespace baton
