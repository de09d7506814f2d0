#include "staged_replica_group.h"

#include <fmt/format.h>

#include "baton/error.h"

namespace baton::cuda {
namespace {

class StagedReplicaGroup final : public ReplicaGroup {
 public:
  StagedReplicaGroup(ReplicaGroup& host, cudaStream_t compute, const std::vector<std::size_t>& floats_per_request)
      : host_(host), compute_(compute) {
    requests_.resize(floats_per_request.size());
    for (std::size_t id = 0; id < floats_per_request.size(); ++id) {
      requests_[id].pinned = PinnedBuffer<float>(floats_per_request[id]);
    }
  }

  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }

  void Configure(int max_requests, double timeout_s) override {
    if (max_requests > static_cast<int>(requests_.size())) {
      throw Error(fmt::format("gradient sums on the GPU: {} requests configured, but staging for {}", max_requests,
                              requests_.size()));
    }
    host_.Configure(max_requests, timeout_s);
  }

  void StartAllReduce(int id, std::span<float> data) override {
    Start(id, kAllReduce, data, {}, {}, {0, data.size()}, {0, data.size()});
  }

  // The whole bucket down, the sum scattered on the host, this member's part up.
  void StartReduceScatter(int id, std::span<float> data, std::span<const int> counts,
                          std::span<const int> displs) override {
    const Part mine = Mine(counts, displs);
    Start(id, kReduceScatter, data, counts, displs, {0, data.size()}, mine);
  }

  // Gradients in double are the host's (the config refuses fp64 on cuda).
  void StartAllReduce(int, std::span<double>) override {
    throw Error("gradient sums in double run on the CPU only (train.grad_accum_dtype: fp64 needs device: cpu)");
  }
  void StartReduceScatter(int, std::span<double>, std::span<const int>, std::span<const int>) override {
    throw Error("gradient sums in double run on the CPU only (train.grad_accum_dtype: fp64 needs device: cpu)");
  }

  // This member's part down (the optimizer's kernels wrote it), every part
  // gathered on the host, the whole bucket up.
  void StartAllGather(int id, std::span<float> data, std::span<const int> counts,
                      std::span<const int> displs) override {
    const Part mine = Mine(counts, displs);
    Start(id, kAllGather, data, counts, displs, mine, {0, data.size()});
  }

  bool Test(int id) override {
    Request& r = At(id);
    if (r.state == kDown && r.event.Done()) StartSum(id, r);
    if (r.state == kSum && host_.Test(id)) StartUp(r);
    if (r.state == kUp && r.event.Done()) r.state = kIdle;
    return r.state == kIdle;
  }

  void Wait(int id, const WaitInfo& info) override {
    Request& r = At(id);
    if (r.state == kDown) {
      BATON_CUDA_CHECK(cudaEventSynchronize(r.event.get()));
      StartSum(id, r);
    }
    if (r.state == kSum) {
      host_.Wait(id, info);
      StartUp(r);
    }
    // The compute stream's next kernels (the optimizer's) wait on the GPU.
    if (r.state == kUp) r.event.BlockStream(compute_);
    r.state = kIdle;
  }

  void Gather(std::span<const float> mine, std::vector<float>* out) override { host_.Gather(mine, out); }
  void AllMax(std::span<double> data, std::string_view what) override { host_.AllMax(data, what); }
  void SetTimeoutHook(std::function<void()> hook) override { host_.SetTimeoutHook(std::move(hook)); }

 private:
  enum State { kIdle, kDown, kSum, kUp };
  enum Kind { kAllReduce, kReduceScatter, kAllGather };
  struct Part {
    std::size_t offset = 0, count = 0;  // floats from the bucket's start
  };
  struct Request {
    PinnedBuffer<float> pinned;
    Event event;
    std::span<float> device;
    Kind kind = kAllReduce;
    std::span<const int> counts, displs;
    Part up;  // what comes back to the device
    State state = kIdle;
  };

  Request& At(int id) {
    if (id < 0 || id >= static_cast<int>(requests_.size())) {
      throw Error(fmt::format("gradient sums on the GPU: request {} out of range [0, {})", id, requests_.size()));
    }
    return requests_[static_cast<std::size_t>(id)];
  }

  Part Mine(std::span<const int> counts, std::span<const int> displs) const {
    const auto me = static_cast<std::size_t>(host_.rank());
    if (counts.size() != static_cast<std::size_t>(host_.size()) || displs.size() != counts.size()) {
      throw Error(fmt::format("gradient sums on the GPU: {} parts for {} replicas", counts.size(), host_.size()));
    }
    return {static_cast<std::size_t>(displs[me]), static_cast<std::size_t>(counts[me])};
  }

  // Copies `down` of the bucket into pinned memory once the compute stream's
  // work so far (which wrote it) is done.
  void Start(int id, Kind kind, std::span<float> data, std::span<const int> counts, std::span<const int> displs,
             Part down, Part up) {
    Request& r = At(id);
    if (r.state != kIdle) throw Error(fmt::format("gradient sums on the GPU: request {} started twice", id));
    if (data.size() > r.pinned.size()) {
      throw Error(fmt::format("gradient sums on the GPU: request {} has {} floats of staging, bucket of {}", id,
                              r.pinned.size(), data.size()));
    }
    r.device = data;
    r.kind = kind;
    r.counts = counts;
    r.displs = displs;
    r.up = up;
    r.event.Record(compute_);
    r.event.BlockStream(comm_.get());
    BATON_CUDA_CHECK(cudaMemcpyAsync(r.pinned.data() + down.offset, data.data() + down.offset,
                                     down.count * sizeof(float), cudaMemcpyDeviceToHost, comm_.get()));
    r.event.Record(comm_.get());
    r.state = kDown;
  }

  // The input is in pinned memory: the collective runs there.
  void StartSum(int id, Request& r) {
    const std::span<float> pinned(r.pinned.data(), r.device.size());
    switch (r.kind) {
      case kAllReduce:
        host_.StartAllReduce(id, pinned);
        break;
      case kReduceScatter:
        host_.StartReduceScatter(id, pinned, r.counts, r.displs);
        break;
      case kAllGather:
        host_.StartAllGather(id, pinned, r.counts, r.displs);
        break;
    }
    r.state = kSum;
  }

  // The result is in pinned memory: copy its part back into the bucket.
  void StartUp(Request& r) {
    BATON_CUDA_CHECK(cudaMemcpyAsync(r.device.data() + r.up.offset, r.pinned.data() + r.up.offset,
                                     r.up.count * sizeof(float), cudaMemcpyHostToDevice, comm_.get()));
    r.event.Record(comm_.get());
    r.state = kUp;
  }

  ReplicaGroup& host_;
  cudaStream_t compute_;
  Stream comm_;
  std::vector<Request> requests_;
};

}  // namespace

std::unique_ptr<ReplicaGroup> MakeStagedReplicaGroup(ReplicaGroup& host, cudaStream_t compute,
                                                     const std::vector<std::size_t>& floats_per_request) {
  return std::make_unique<StagedReplicaGroup>(host, compute, floats_per_request);
}

}  // namespace baton::cuda
