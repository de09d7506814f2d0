// The CUDA RankDevice: one GPU per rank (the local rank modulo the node's
// devices, so several ranks may share one), one compute stream for all of the
// rank's stages (work handed from one local stage to the next is then in
// order without events), the device ring store, and messages through the
// host-staged transport.
#include <fmt/format.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "baton/error.h"
#include "baton/stage_device.h"
#include "cuda_layers.h"
#include "cuda_stage_device.h"
#include "cuda_util.h"
#include "device_store.h"
#include "staged_transport.h"

namespace baton {
namespace {

using cuda::DeviceBuffer;

class CudaRing final : public RingStore {
 public:
  CudaRing(std::string name, std::size_t slot_floats, int capacity, cudaStream_t stream)
      : store_(std::move(name), slot_floats, capacity), stream_(stream) {}
  float* Acquire(int j) override {
    ++writes_;
    return store_.Acquire(j);
  }
  float* Get(int j) override { return store_.Get(j); }
  void Release(int j) override { store_.Release(j); }
  void Write(int j, std::size_t offset, const float* src, std::size_t floats) override {
    store_.Write(j, offset, src, floats, stream_);
  }
  void CountInPlace(std::size_t floats) override { store_.CountInPlace(floats); }
  int capacity() const override { return store_.capacity(); }
  std::size_t slot_bytes() const override { return store_.slot_floats() * sizeof(float); }
  std::uint64_t bytes_written() const override { return store_.bytes_written(); }
  std::uint64_t bytes_copied() const override { return store_.bytes_copied(); }
  std::uint64_t writes() const override { return writes_; }

 private:
  cuda::DeviceActivationStore store_;
  cudaStream_t stream_;
  std::uint64_t writes_ = 0;
};

// The rank's index among the ranks of its node, as the launcher tells it.
int LocalRank(int world_rank) {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}) {
    if (const char* v = std::getenv(name)) return std::atoi(v);
  }
  return world_rank;
}

class CudaRankDevice final : public RankDevice {
 public:
  CudaRankDevice(Transport& t, cuda::Precision precision) : t_(t), precision_(precision) {}

  bool host_memory() const override { return false; }
  std::unique_ptr<StageDevice> MakeStageDevice() override {
    return cuda::MakeCudaStageDevice(stream_.get(), precision_);
  }
  std::unique_ptr<RingStore> MakeRing(std::string name, std::size_t slot_floats, int capacity) override {
    return std::make_unique<CudaRing>(std::move(name), slot_floats, capacity, stream_.get());
  }
  float* Allocate(std::size_t floats) override {
    floats_.emplace_back(floats);
    BATON_CUDA_CHECK(cudaMemsetAsync(floats_.back().data(), 0, floats_.back().bytes(), stream_.get()));
    return floats_.back().data();
  }
  std::int32_t* AllocateLabels(std::size_t count) override {
    labels_.emplace_back(count);
    BATON_CUDA_CHECK(cudaMemsetAsync(labels_.back().data(), 0, labels_.back().bytes(), stream_.get()));
    return labels_.back().data();
  }
  // From pageable host memory the driver stages the copy before returning,
  // so the caller may reuse `src` at once; the stream orders it before the
  // kernels that read it.
  void Upload(float* dst, const float* src, std::size_t floats) override {
    BATON_CUDA_CHECK(cudaMemcpyAsync(dst, src, floats * sizeof(float), cudaMemcpyHostToDevice, stream_.get()));
  }
  void UploadLabels(std::int32_t* dst, const std::int32_t* src, std::size_t count) override {
    BATON_CUDA_CHECK(cudaMemcpyAsync(dst, src, count * sizeof(std::int32_t), cudaMemcpyHostToDevice, stream_.get()));
  }
  void ConfigureMessages(const std::vector<std::size_t>& floats_per_request, double timeout_s) override {
    staged_ = cuda::MakeStagedTransport(t_, floats_per_request, timeout_s);
  }
  // The staging copy waits (on the GPU) for everything enqueued so far on
  // the compute stream, which includes the kernels that wrote `data`.
  void Isend(int id, const float* data, std::size_t count, int peer, int tag) override {
    ready_.Record(stream_.get());
    staged_->Isend(id, data, count, peer, tag, ready_.get());
  }
  void Irecv(int id, float* data, std::size_t count, int peer, int tag) override {
    staged_->Irecv(id, data, count, peer, tag);
  }
  void WaitRecv(int id, const WaitInfo& info) override { staged_->WaitRecv(id, info, stream_.get()); }
  void WaitSend(int id, const WaitInfo& info) override { staged_->WaitSend(id, info); }
  bool Idle(int id) const override { return staged_->Idle(id); }
  void Progress() override { staged_->Progress(); }

 private:
  Transport& t_;
  cuda::Precision precision_;
  cuda::Stream stream_;  // the rank's compute stream
  cuda::Event ready_;
  std::vector<DeviceBuffer<float>> floats_;
  std::vector<DeviceBuffer<std::int32_t>> labels_;
  std::unique_ptr<cuda::DeviceTransport> staged_;
};

}  // namespace

std::unique_ptr<RankDevice> MakeCudaRankDevice(Transport& transport, const std::string& precision) {
  const cuda::Precision p = cuda::ParsePrecision(precision);
  const int devices = cuda::DeviceCount();
  if (devices == 0) {
    throw ConfigError(
        fmt::format("device: cuda: rank {} sees no CUDA device (no driver, or none visible: check "
                    "nvidia-smi and CUDA_VISIBLE_DEVICES)",
                    transport.rank()));
  }
  BATON_CUDA_CHECK(cudaSetDevice(LocalRank(transport.rank()) % devices));
  return std::make_unique<CudaRankDevice>(transport, p);
}

}  // namespace baton
