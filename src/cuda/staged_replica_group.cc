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
    Request& r = At(id);
    if (r.state != kIdle) throw Error(fmt::format("gradient sums on the GPU: request {} started twice", id));
    if (data.size() > r.pinned.size()) {
      throw Error(fmt::format("gradient sums on the GPU: request {} has {} floats of staging, bucket of {}", id,
                              r.pinned.size(), data.size()));
    }
    r.device = data;
    // The copy waits for everything enqueued so far on the compute stream,
    // which includes the kernels that wrote these gradients.
    r.event.Record(compute_);
    r.event.BlockStream(comm_.get());
    BATON_CUDA_CHECK(cudaMemcpyAsync(r.pinned.data(), data.data(), data.size_bytes(), cudaMemcpyDeviceToHost,
                                     comm_.get()));
    r.event.Record(comm_.get());
    r.state = kDown;
  }

  void StartReduceScatter(int, std::span<float>, std::span<const int>, std::span<const int>) override {
    throw Error("gradient sums on the GPU: ZeRO's reduce-scatter is not built (data_parallel.zero: 0 on cuda)");
  }
  void StartAllGather(int, std::span<float>, std::span<const int>, std::span<const int>) override {
    throw Error("gradient sums on the GPU: ZeRO's all-gather is not built (data_parallel.zero: 0 on cuda)");
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
  void SetTimeoutHook(std::function<void()> hook) override { host_.SetTimeoutHook(std::move(hook)); }

 private:
  enum State { kIdle, kDown, kSum, kUp };
  struct Request {
    PinnedBuffer<float> pinned;
    Event event;
    std::span<float> device;
    State state = kIdle;
  };

  Request& At(int id) {
    if (id < 0 || id >= static_cast<int>(requests_.size())) {
      throw Error(fmt::format("gradient sums on the GPU: request {} out of range [0, {})", id, requests_.size()));
    }
    return requests_[static_cast<std::size_t>(id)];
  }

  // The bucket is in pinned memory: sum it over the replicas there.
  void StartSum(int id, Request& r) {
    host_.StartAllReduce(id, {r.pinned.data(), r.device.size()});
    r.state = kSum;
  }

  // The sum is in pinned memory: copy it back into the bucket.
  void StartUp(Request& r) {
    BATON_CUDA_CHECK(cudaMemcpyAsync(r.device.data(), r.pinned.data(), r.device.size_bytes(), cudaMemcpyHostToDevice,
                                     comm_.get()));
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
