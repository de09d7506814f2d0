// The host RankDevice: host memory, the ring store of baton/store.h, and the
// host Transport as it is.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "baton/buffer.h"
#include "baton/stage_device.h"
#include "baton/store.h"

namespace baton {
namespace {

class HostRing final : public RingStore {
 public:
  HostRing(std::string name, std::size_t slot_floats, int capacity) : store_(std::move(name), slot_floats, capacity) {}
  float* Acquire(int j) override { return store_.Acquire(j).data(); }
  float* Get(int j) override { return store_.Get(j).data(); }
  void Release(int j) override { store_.Release(j); }
  void Write(int j, std::size_t offset, const float* src, std::size_t floats) override {
    store_.Write(j, offset, {src, floats});
  }
  void CountInPlace(std::size_t floats) override { store_.CountInPlace(floats); }
  int capacity() const override { return store_.capacity(); }
  std::size_t slot_bytes() const override { return store_.slot_bytes(); }
  std::uint64_t bytes_written() const override { return store_.bytes_written(); }
  std::uint64_t bytes_copied() const override { return store_.bytes_copied(); }
  std::uint64_t writes() const override { return store_.writes(); }

 private:
  ActivationStore store_;
};

class HostRankDevice final : public RankDevice {
 public:
  explicit HostRankDevice(Transport& t) : t_(t) {}
  bool host_memory() const override { return true; }
  std::unique_ptr<StageDevice> MakeStageDevice() override { return MakeHostStageDevice(); }
  std::unique_ptr<RingStore> MakeRing(std::string name, std::size_t slot_floats, int capacity) override {
    return std::make_unique<HostRing>(std::move(name), slot_floats, capacity);
  }
  float* Allocate(std::size_t floats) override {
    floats_.emplace_back(floats, 0.0f);
    return floats_.back().data();
  }
  std::int32_t* AllocateLabels(std::size_t count) override {
    labels_.emplace_back(count, 0);
    return labels_.back().data();
  }
  void Upload(float* dst, const float* src, std::size_t floats) override {
    std::memcpy(dst, src, floats * sizeof(float));
  }
  void UploadLabels(std::int32_t* dst, const std::int32_t* src, std::size_t count) override {
    std::memcpy(dst, src, count * sizeof(std::int32_t));
  }
  // The Transport's request table is sized by whoever made it.
  void ConfigureMessages(const std::vector<std::size_t>&, double) override {}
  void Isend(int id, const float* data, std::size_t count, int peer, int tag) override {
    t_.Isend(id, data, count, peer, tag);
  }
  void Irecv(int id, float* data, std::size_t count, int peer, int tag) override {
    t_.Irecv(id, data, count, peer, tag);
  }
  void WaitRecv(int id, const WaitInfo& info) override { t_.Wait(id, info); }
  void WaitSend(int id, const WaitInfo& info) override { t_.Wait(id, info); }
  bool Idle(int id) const override { return t_.Idle(id); }
  void Progress() override {}

 private:
  Transport& t_;
  std::vector<FloatBuffer> floats_;
  std::vector<std::vector<std::int32_t>> labels_;
};

}  // namespace

std::unique_ptr<RankDevice> MakeHostRankDevice(Transport& transport) {
  return std::make_unique<HostRankDevice>(transport);
}

}  // namespace baton
