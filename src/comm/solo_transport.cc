#include <cstdlib>
#include <limits>

#include <fmt/format.h>

#include "baton/comm.h"
#include "baton/error.h"

namespace baton {
namespace {

class SoloTransport final : public Transport {
 public:
  void Configure(int, double) override {}
  int rank() const override { return 0; }
  int node_rank() const override { return 0; }
  int size() const override { return 1; }
  void Isend(int, const void*, std::size_t, int peer, int) override { NoPeer("send to", peer); }
  void Irecv(int, void*, std::size_t, int peer, int) override { NoPeer("receive from", peer); }
  void Wait(int, const WaitInfo&) override {}
  bool Idle(int) const override { return true; }
  void ReduceSum(std::span<double>) override {}
  void GatherToRoot(std::span<const float> mine, std::vector<float>* out) override {
    out->assign(mine.begin(), mine.end());
  }
  void GatherStrings(const std::string& mine, std::vector<std::string>* out, std::string_view) override {
    *out = {mine};
  }
  void BroadcastString(std::string*, std::string_view) override {}
  void ScatterStrings(const std::vector<std::string>& parts, std::string* mine, std::string_view) override {
    *mine = parts.at(0);
  }
  int AllMax(int value, std::string_view) override { return value; }
  void StartAllMax(int value) override { started_ = value; }
  int EndAllMax(std::string_view) override { return started_; }
  void SetTimeoutHook(std::function<void()>) override {}
  void Barrier() override {}
  [[noreturn]] void Abort(int code) override { std::_Exit(code); }
  int max_tag() const override { return std::numeric_limits<int>::max(); }

 private:
  [[noreturn]] static void NoPeer(const char* what, int peer) {
    throw Error(fmt::format("a one-rank job cannot {} rank {}", what, peer));
  }
  int started_ = 0;
};

// One replica: the sums of one are the values themselves.
class SoloReplicaGroup final : public ReplicaGroup {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void Configure(int, double) override {}
  void StartAllReduce(int, std::span<float>) override {}
  void StartReduceScatter(int, std::span<float>, std::span<const int>, std::span<const int>) override {}
  void StartAllReduce(int, std::span<double>) override {}
  void StartReduceScatter(int, std::span<double>, std::span<const int>, std::span<const int>) override {}
  void StartAllGather(int, std::span<float>, std::span<const int>, std::span<const int>) override {}
  bool Test(int) override { return true; }
  void Wait(int, const WaitInfo&) override {}
  void Gather(std::span<const float> mine, std::vector<float>* out) override { out->assign(mine.begin(), mine.end()); }
  void AllMax(std::span<double>, std::string_view) override {}
  void SetTimeoutHook(std::function<void()>) override {}
};

}  // namespace

std::unique_ptr<Transport> MakeSoloTransport() { return std::make_unique<SoloTransport>(); }
std::unique_ptr<ReplicaGroup> MakeSoloReplicaGroup() { return std::make_unique<SoloReplicaGroup>(); }

}  // namespace baton
