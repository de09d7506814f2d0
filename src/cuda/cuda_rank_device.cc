// The CUDA RankDevice: one GPU per rank (the local rank modulo the node's
// devices, so several ranks may share one), one compute stream for all of the
// rank's stages (work handed from one local stage to the next is then in
// order without events), the device ring store, and messages through the
// host-staged transport, and gradient sums over replicas staged the same
// way; the ring stores take their memory from it.
#include <fmt/format.h>

#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "baton/error.h"
#include "baton/stage_device.h"
#include "cuda_rank_device.h"
#include "cuda_layers.h"
#include "cuda_stage_device.h"
#include "cuda_util.h"
#include "device_memory.h"
#include "gemm_rate.h"
#include "staged_replica_group.h"
#include "staged_transport.h"

namespace baton {
namespace {

class CudaRankDevice final : public RankDevice {
 public:
  CudaRankDevice(Transport& t, Precision precision) : t_(t), precision_(precision), memory_(stream_.get()) {}

  bool host_memory() const override { return false; }
  std::unique_ptr<StageDevice> MakeStageDevice() override {
    return cuda::MakeCudaStageDevice(stream_.get(), precision_);
  }
  // The rank's memory, zeroed and copied on the compute stream.
  std::byte* Allocate(std::size_t bytes) override { return memory_.Allocate(bytes); }
  void Copy(std::byte* dst, const std::byte* src, std::size_t bytes) override { memory_.Copy(dst, src, bytes); }
  // The caller may reuse `src` once Upload returns; the stream orders the
  // copy before the kernels that read it. Small copies go from pageable
  // memory (the driver stages them before returning). A large one (a step's
  // inputs) goes through a pinned buffer kept for its destination: the
  // host's threads copy into it in parallel (oneTBB), and the GPU takes it
  // by DMA on the compute stream while the host goes on; the next upload
  // to that destination first waits for that DMA. The driver's own staging
  // of pageable memory copies it in one thread, chunk by chunk, and returns
  // only when the last chunk is staged.
  void Upload(std::byte* dst, const void* src, std::size_t bytes) override {
    if (bytes < kPinnedUploadBytes) {
      BATON_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_.get()));
      return;
    }
    Staging& s = staging_[dst];
    if (s.used) BATON_CUDA_CHECK(cudaEventSynchronize(s.done.get()));
    if (s.pinned.size() < bytes) s.pinned = cuda::PinnedBuffer<std::byte>(bytes);
    std::byte* to = s.pinned.data();
    const auto* from = static_cast<const std::byte*>(src);
    constexpr std::size_t kChunk = std::size_t{4} << 20;
    tbb::parallel_for(std::size_t{0}, (bytes + kChunk - 1) / kChunk, [&](std::size_t c) {
      const std::size_t begin = c * kChunk;
      std::memcpy(to + begin, from + begin, std::min(kChunk, bytes - begin));
    });
    BATON_CUDA_CHECK(cudaMemcpyAsync(dst, to, bytes, cudaMemcpyHostToDevice, stream_.get()));
    s.done.Record(stream_.get());
    s.used = true;
  }
  void ConfigureMessages(const std::vector<std::size_t>& bytes_per_request, double timeout_s) override {
    staged_ = cuda::MakeStagedTransport(t_, bytes_per_request, timeout_s);
  }
  // The staging copy waits (on the GPU) for everything enqueued so far on
  // the compute stream, which includes the kernels that wrote `data`.
  void Isend(int id, const std::byte* data, std::size_t bytes, int peer, int tag) override {
    ready_.Record(stream_.get());
    staged_->Isend(id, data, bytes, peer, tag, ready_.get());
  }
  void Irecv(int id, std::byte* data, std::size_t bytes, int peer, int tag) override {
    staged_->Irecv(id, data, bytes, peer, tag);
  }
  void WaitRecv(int id, const WaitInfo& info) override { staged_->WaitRecv(id, info, stream_.get()); }
  void WaitSend(int id, const WaitInfo& info) override { staged_->WaitSend(id, info); }
  bool Idle(int id) const override { return staged_->Idle(id); }
  void Progress() override { staged_->Progress(); }
  ReplicaGroup& GradientGroup(ReplicaGroup& host, const std::vector<std::size_t>& floats_per_request) override {
    gradient_group_ = cuda::MakeStagedReplicaGroup(host, stream_.get(), floats_per_request);
    return *gradient_group_;
  }
  // cuBLAS in the run's precision, on this rank's stream: no CPU product
  // on a GPU run.
  double GemmGflops(const std::vector<std::pair<int, int>>& shapes, int rows) override {
    return cuda::LinearGflops(stream_.get(), precision_, shapes, rows);
  }
  std::string GemmKernels() const override {
    int device = 0;
    BATON_CUDA_CHECK(cudaGetDevice(&device));
    return fmt::format("cuBLAS {}, {}", EnumName(precision_), cuda::DeviceDescription(device));
  }

  // The clock: timing events recorded on the compute stream, read once
  // after the step.
  bool has_clock() const override { return true; }
  void Synchronize() override { BATON_CUDA_CHECK(cudaStreamSynchronize(stream_.get())); }
  void StartClock(std::size_t marks) override {
    while (clock_.size() < marks + 1) clock_.emplace_back(/*timing=*/true);
    marked_ = 0;
    MarkClock();
  }
  int MarkClock() override {
    if (marked_ >= clock_.size()) {
      throw Error(fmt::format("device clock: mark {} past the {} StartClock made room for", marked_, clock_.size()));
    }
    clock_[marked_].Record(stream_.get());
    return static_cast<int>(marked_++);
  }
  void ReadClock(std::vector<double>* seconds) override {
    seconds->assign(marked_, 0.0);
    if (marked_ == 0) return;
    BATON_CUDA_CHECK(cudaEventSynchronize(clock_[marked_ - 1].get()));
    for (std::size_t i = 1; i < marked_; ++i) {
      float ms = 0;
      BATON_CUDA_CHECK(cudaEventElapsedTime(&ms, clock_[0].get(), clock_[i].get()));
      (*seconds)[i] = 1e-3 * static_cast<double>(ms);
    }
  }

 private:
  Transport& t_;
  Precision precision_;
  cuda::Stream stream_;  // the rank's compute stream
  cuda::Event ready_;
  cuda::DeviceMemory memory_;
  std::unique_ptr<cuda::DeviceTransport> staged_;
  std::unique_ptr<ReplicaGroup> gradient_group_;
  std::vector<cuda::Event> clock_;  // timing events: mark 0 starts the step
  std::size_t marked_ = 0;          // marks recorded since StartClock
  // Upload's pinned buffers, one per destination, each with the event after
  // its last DMA.
  static constexpr std::size_t kPinnedUploadBytes = std::size_t{1} << 20;
  struct Staging {
    cuda::PinnedBuffer<std::byte> pinned;
    cuda::Event done;
    bool used = false;
  };
  std::map<std::byte*, Staging> staging_;
};

}  // namespace

namespace cuda {

std::unique_ptr<RankDevice> MakeCudaRankDevice(Transport& transport, Precision p) {
  const int devices = cuda::DeviceCount();
  if (devices == 0) {
    throw ConfigError(
        fmt::format("device: cuda: rank {} sees no CUDA device (no driver, or none visible: check "
                    "nvidia-smi and CUDA_VISIBLE_DEVICES)",
                    transport.rank()));
  }
  BATON_CUDA_CHECK(cudaSetDevice(transport.node_rank() % devices));
  return std::make_unique<CudaRankDevice>(transport, p);
}

}  // namespace cuda
}  // namespace baton
