// The ring store (baton/store.h) over a GPU's memory: the same bookkeeping
// as on the host, slots in cudaMalloc'd memory, writes as device-to-device
// copies on a stream.
#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "baton/error.h"
#include "baton/store.h"
#include "device_memory.h"

namespace baton::cuda {
namespace {

// The store with float-sized slots in device memory, copying on its own stream.
class DeviceActivationStore {
 public:
  DeviceActivationStore(std::string name, std::size_t slot_floats, int capacity)
      : memory_(std::make_unique<DeviceMemory>(stream_.get())),
        store_(std::move(name), slot_floats * sizeof(float), capacity, *memory_) {}
  float* Acquire(int j) { return reinterpret_cast<float*>(store_.Acquire(j).data()); }
  float* Get(int j) { return reinterpret_cast<float*>(store_.Get(j).data()); }
  void Release(int j) { store_.Release(j); }
  // Copies on the store's stream, then waits for it so the caller's stream sees the result.
  void Write(int j, std::size_t offset, const float* src, std::size_t floats, cudaStream_t) {
    store_.Write(j, offset * sizeof(float), {reinterpret_cast<const std::byte*>(src), floats * sizeof(float)});
    BATON_CUDA_CHECK(cudaStreamSynchronize(stream_.get()));
  }
  void CountInPlace(std::size_t floats) { store_.CountInPlace(floats * sizeof(float)); }
  int capacity() const { return store_.capacity(); }
  std::size_t slot_floats() const { return store_.slot_bytes() / sizeof(float); }
  int in_use() const { return store_.in_use(); }
  std::uint64_t bytes_written() const { return store_.bytes_written(); }
  std::uint64_t bytes_copied() const { return store_.bytes_copied(); }

 private:
  Stream stream_;
  std::unique_ptr<DeviceMemory> memory_;
  ActivationStore store_;
};

// The whole ring (capacity, slot_floats), copied back to the host (after the
// stream writing it has been synchronised). Slot 0 starts at the ring's base,
// which microbatch `base_holder` (j mod capacity = 0) holds.
std::vector<float> CopyRing(DeviceActivationStore& store, int base_holder) {
  std::vector<float> ring(store.slot_floats() * static_cast<std::size_t>(store.capacity()));
  BATON_CUDA_CHECK(
      cudaMemcpy(ring.data(), store.Get(base_holder), ring.size() * sizeof(float), cudaMemcpyDeviceToHost));
  return ring;
}

// `host` into `dst`, finished before this returns. The store's copies run on
// non-blocking streams, which do not wait for the legacy default stream that
// plain cudaMemcpy and cudaMemset use, so the test's own copies go through
// `stream` as well.
void Upload(float* dst, const std::vector<float>& host, cudaStream_t stream) {
  BATON_CUDA_CHECK(cudaMemcpyAsync(dst, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice, stream));
  BATON_CUDA_CHECK(cudaStreamSynchronize(stream));
}

TEST(DeviceActivationStore, MicrobatchJUsesSlotJModCapacity) {
  if (DeviceCount() == 0) GTEST_SKIP() << "no CUDA device: the device store needs one for its ring";
  DeviceActivationStore store("stage 2 device store", 6, 3);
  EXPECT_EQ(store.capacity(), 3);
  EXPECT_EQ(store.slot_floats(), 6u);
  float* a = store.Acquire(0);
  float* b = store.Acquire(1);
  float* c = store.Acquire(2);
  EXPECT_EQ(b - a, 6);
  EXPECT_EQ(c - a, 12);
  EXPECT_EQ(store.in_use(), 3);
  store.Release(0);
  EXPECT_EQ(store.Acquire(3), a);  // 3 mod 3 = slot 0 again
  store.Release(1);
  EXPECT_EQ(store.Acquire(7), b);  // 7 mod 3 = slot 1
  EXPECT_EQ(store.Get(7), b);
  EXPECT_EQ(store.in_use(), 3);
}

TEST(DeviceActivationStore, AcquiringATakenSlotIsAnErrorNamingBoth) {
  if (DeviceCount() == 0) GTEST_SKIP() << "no CUDA device: the device store needs one for its ring";
  DeviceActivationStore store("rank 1 stage 3 device store", 4, 2);
  store.Acquire(0);
  store.Acquire(1);
  try {
    store.Acquire(2);
    FAIL() << "slot 0 was handed to microbatch 2 while microbatch 0 holds it";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("rank 1 stage 3 device store: microbatch 2 needs ring slot 0 of 2, but microbatch 0 still "
                       "holds it"),
              std::string::npos)
        << msg;
  }
  EXPECT_EQ(store.in_use(), 2);  // the failed Acquire took nothing
}

TEST(DeviceActivationStore, GetAndReleaseOfAnUnheldSlotAreErrors) {
  if (DeviceCount() == 0) GTEST_SKIP() << "no CUDA device: the device store needs one for its ring";
  DeviceActivationStore store("s", 4, 2);
  try {
    store.Get(1);
    FAIL() << "Get of a microbatch that holds no slot";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("s: microbatch 1 has no ring slot (slot 1 is held by nobody)"),
              std::string::npos)
        << e.what();
  }
  store.Acquire(1);
  try {
    store.Get(3);
    FAIL() << "Get of microbatch 3 returned microbatch 1's slot";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("microbatch 3 has no ring slot (slot 1 is held by 1)"), std::string::npos)
        << e.what();
  }
  try {
    store.Release(3);
    FAIL() << "Release of microbatch 3 freed microbatch 1's slot";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("s: microbatch 3 releases ring slot 1, which it does not hold"),
              std::string::npos)
        << e.what();
  }
  store.Release(1);
  EXPECT_THROW(store.Release(1), Error);  // twice
  EXPECT_EQ(store.in_use(), 0);
}

TEST(DeviceActivationStore, WriteCopiesIntoTheRightSlotAtTheOffset) {
  if (DeviceCount() == 0) GTEST_SKIP() << "no CUDA device: the device store needs one for its ring";
  const std::size_t slot = 64;
  const int capacity = 3;
  DeviceActivationStore store("s", slot, capacity);
  Stream stream;
  for (int j = 0; j < capacity; ++j) store.Acquire(j);
  Upload(store.Get(0), std::vector<float>(slot * capacity, 0.0f), stream.get());

  std::vector<float> host(20);
  std::iota(host.begin(), host.end(), 1.0f);
  DeviceBuffer<float> src(host.size());
  Upload(src.data(), host, stream.get());

  // Microbatch 1 -> slot 1, floats [10, 30).
  const std::size_t offset = 10;
  store.Write(1, offset, src.data(), host.size(), stream.get());
  BATON_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
  const std::vector<float> ring = CopyRing(store, 0);
  for (std::size_t i = 0; i < ring.size(); ++i) {
    const std::size_t in_slot1 = i - slot;  // wraps (large) below slot 1
    const float expected =
        (i >= slot && in_slot1 >= offset && in_slot1 < offset + host.size()) ? host[in_slot1 - offset] : 0.0f;
    ASSERT_EQ(ring[i], expected) << "ring float " << i << " (slot " << i / slot << ", float " << i % slot << ")";
  }
}

TEST(DeviceActivationStore, CountsBytesCopiedAndWritten) {
  if (DeviceCount() == 0) GTEST_SKIP() << "no CUDA device: the device store needs one for its ring";
  const std::size_t slot = 1000;
  const int capacity = 15;
  DeviceActivationStore store("s", slot, capacity);
  Stream stream;
  DeviceBuffer<float> src(slot);
  std::vector<float> host(slot);
  std::iota(host.begin(), host.end(), 0.0f);
  Upload(src.data(), host, stream.get());
  for (int j = 0; j < 40; ++j) {
    const std::uint64_t before = store.bytes_copied();
    float* d = store.Acquire(j);
    store.Write(j, 0, src.data(), slot, stream.get());
    EXPECT_EQ(store.bytes_copied() - before, slot * sizeof(float));  // one slot, not the whole ring
    BATON_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
    float last = 0.0f;
    BATON_CUDA_CHECK(cudaMemcpy(&last, d + slot - 1, sizeof(float), cudaMemcpyDeviceToHost));
    EXPECT_EQ(last, float(slot - 1)) << "microbatch " << j;
    store.Release(j);
  }
  EXPECT_EQ(store.bytes_copied(), 40 * slot * sizeof(float));
  EXPECT_EQ(store.bytes_written(), 40 * slot * sizeof(float));

  // A layer's in-place output is written, not copied.
  store.CountInPlace(250);
  EXPECT_EQ(store.bytes_written(), (40 * slot + 250) * sizeof(float));
  EXPECT_EQ(store.bytes_copied(), 40 * slot * sizeof(float));

  // Failed writes count nothing.
  EXPECT_THROW(store.Write(0, 1, src.data(), slot, stream.get()), Error);  // microbatch 0 holds no slot
  store.Acquire(0);
  try {
    store.Write(0, 1, src.data(), slot, stream.get());
    FAIL() << "a write past the end of the slot";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("s: a write of 4000 bytes at 4 overflows the 4000-byte slot"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(store.bytes_copied(), 40 * slot * sizeof(float));
}

}  // namespace
}  // namespace baton::cuda
