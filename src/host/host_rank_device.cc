// The host RankDevice: host memory and the host Transport as it is.
#include <cstring>
#include <memory>
#include <vector>

#include "baton/host.h"
#include "baton/stage_device.h"
#include "baton/store.h"

namespace baton {
namespace {

class HostRankDevice final : public RankDevice {
 public:
  explicit HostRankDevice(Transport& t) : t_(t) {}
  bool host_memory() const override { return true; }
  std::unique_ptr<StageDevice> MakeStageDevice() override { return MakeHostStageDevice(); }
  std::byte* Allocate(std::size_t bytes) override { return memory_.Allocate(bytes); }
  void Copy(std::byte* dst, const std::byte* src, std::size_t bytes) override { memory_.Copy(dst, src, bytes); }
  void Upload(std::byte* dst, const void* src, std::size_t bytes) override { std::memcpy(dst, src, bytes); }
  // The Transport's request table is sized by whoever made it.
  void ConfigureMessages(const std::vector<std::size_t>&, double) override {}
  void Isend(int id, const std::byte* data, std::size_t bytes, int peer, int tag) override {
    t_.Isend(id, data, bytes, peer, tag);
  }
  void Irecv(int id, std::byte* data, std::size_t bytes, int peer, int tag) override {
    t_.Irecv(id, data, bytes, peer, tag);
  }
  void WaitRecv(int id, const WaitInfo& info) override { t_.Wait(id, info); }
  void WaitSend(int id, const WaitInfo& info) override { t_.Wait(id, info); }
  bool Idle(int id) const override { return t_.Idle(id); }
  void Progress() override {}
  ReplicaGroup& GradientGroup(ReplicaGroup& host, const std::vector<std::size_t>&) override { return host; }
  double GemmGflops(const std::vector<std::pair<int, int>>& shapes, int rows) override {
    return HostGemmGflops(shapes, rows);
  }
  std::string GemmKernels() const override { return HostBlasCore(); }
  // The host computes as it goes: nothing to wait for, and no clock but the
  // host's.
  bool has_clock() const override { return false; }
  void Synchronize() override {}
  void StartClock(std::size_t) override {}
  int MarkClock() override { return -1; }
  void ReadClock(std::vector<double>* seconds) override { seconds->clear(); }

 private:
  Transport& t_;
  HostMemory memory_;
};

}  // namespace

std::unique_ptr<RankDevice> MakeHostRankDevice(Transport& transport) {
  return std::make_unique<HostRankDevice>(transport);
}

}  // namespace baton
