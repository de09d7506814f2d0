// The CUDA backend's foundations: checking macros for CUDA runtime calls,
// kernel launches and cuBLAS calls (a failure throws baton::Error naming the call, file:line and
// the library's own error string; main prints it once and aborts the job),
// and move-only owners of device memory, pinned host memory, streams, events
// and cuBLAS handles. Every allocation happens at setup; nothing here
// allocates after construction.
#ifndef BATON_CUDA_CUDA_UTIL_H_
#define BATON_CUDA_CUDA_UTIL_H_

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <utility>

namespace baton::cuda {

// Throws baton::Error: "file:line: CALL failed: NAME (STRING)".
[[noreturn]] void ThrowCudaError(cudaError_t status, const char* call, const char* file, int line);
[[noreturn]] void ThrowCublasError(cublasStatus_t status, const char* call, const char* file, int line);

#define BATON_CUDA_CHECK(call)                                                      \
  do {                                                                              \
    const cudaError_t baton_cuda_status_ = (call);                                  \
    if (baton_cuda_status_ != cudaSuccess) {                                        \
      ::baton::cuda::ThrowCudaError(baton_cuda_status_, #call, __FILE__, __LINE__); \
    }                                                                               \
  } while (0)

#define BATON_CUBLAS_CHECK(call)                                                        \
  do {                                                                                  \
    const cublasStatus_t baton_cublas_status_ = (call);                                 \
    if (baton_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                                \
      ::baton::cuda::ThrowCublasError(baton_cublas_status_, #call, __FILE__, __LINE__); \
    }                                                                                   \
  } while (0)

// After a kernel launch: a bad launch configuration shows up here.
#define BATON_CUDA_CHECK_LAUNCH() BATON_CUDA_CHECK(cudaGetLastError())

// Number of CUDA devices this process can use; 0 (never an exception) when
// there is no driver or no device, so tests can skip with a message.
int DeviceCount();
// "NVIDIA H100 80GB HBM3 (sm_90, 79.2 GiB)" for device `index`.
std::string DeviceDescription(int index);

// Device memory of `count` elements of T, from cudaMalloc, freed on
// destruction. Never managed memory.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t count) : count_(count) {
    if (count > 0) BATON_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&data_), count * sizeof(T)));
  }
  ~DeviceBuffer() {
    if (data_ != nullptr) cudaFree(data_);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), count_(std::exchange(o.count_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      if (data_ != nullptr) cudaFree(data_);
      data_ = std::exchange(o.data_, nullptr);
      count_ = std::exchange(o.count_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* data() { return data_; }
  const T* data() const { return data_; }
  std::size_t size() const { return count_; }
  std::size_t bytes() const { return count_ * sizeof(T); }

 private:
  T* data_ = nullptr;
  std::size_t count_ = 0;
};

// Page-locked host memory (cudaMallocHost): the staging buffers that device
// data passes through on its way to and from MPI, copied asynchronously.
template <typename T>
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(std::size_t count) : count_(count) {
    if (count > 0) BATON_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&data_), count * sizeof(T)));
  }
  ~PinnedBuffer() {
    if (data_ != nullptr) cudaFreeHost(data_);
  }
  PinnedBuffer(PinnedBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), count_(std::exchange(o.count_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
    if (this != &o) {
      if (data_ != nullptr) cudaFreeHost(data_);
      data_ = std::exchange(o.data_, nullptr);
      count_ = std::exchange(o.count_, 0);
    }
    return *this;
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  T* data() { return data_; }
  const T* data() const { return data_; }
  std::size_t size() const { return count_; }

 private:
  T* data_ = nullptr;
  std::size_t count_ = 0;
};

// A non-blocking stream (does not synchronise with the legacy default stream).
class Stream {
 public:
  Stream() { BATON_CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  ~Stream() {
    if (s_ != nullptr) cudaStreamDestroy(s_);
  }
  Stream(Stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  Stream& operator=(Stream&& o) noexcept {
    if (this != &o) {
      if (s_ != nullptr) cudaStreamDestroy(s_);
      s_ = std::exchange(o.s_, nullptr);
    }
    return *this;
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

// An event for ordering streams (no timing, so recording is cheap), or, with
// timing = true, for measuring elapsed GPU time in benchmarks.
class Event {
 public:
  explicit Event(bool timing = false) {
    BATON_CUDA_CHECK(cudaEventCreateWithFlags(&e_, timing ? cudaEventDefault : cudaEventDisableTiming));
  }
  ~Event() {
    if (e_ != nullptr) cudaEventDestroy(e_);
  }
  Event(Event&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
  Event& operator=(Event&& o) noexcept {
    if (this != &o) {
      if (e_ != nullptr) cudaEventDestroy(e_);
      e_ = std::exchange(o.e_, nullptr);
    }
    return *this;
  }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  cudaEvent_t get() const { return e_; }
  void Record(cudaStream_t stream) { BATON_CUDA_CHECK(cudaEventRecord(e_, stream)); }
  // Makes `stream` wait (on the GPU, not the host) for the last Record.
  void BlockStream(cudaStream_t stream) const { BATON_CUDA_CHECK(cudaStreamWaitEvent(stream, e_, 0)); }
  // Non-blocking: true once the work before the last Record has finished.
  bool Done() const {
    const cudaError_t s = cudaEventQuery(e_);
    if (s == cudaErrorNotReady) return false;
    BATON_CUDA_CHECK(s);
    return true;
  }

 private:
  cudaEvent_t e_ = nullptr;
};

// A cuBLAS handle bound to one stream.
class CublasHandle {
 public:
  explicit CublasHandle(cudaStream_t stream) {
    BATON_CUBLAS_CHECK(cublasCreate(&h_));
    BATON_CUBLAS_CHECK(cublasSetStream(h_, stream));
  }
  ~CublasHandle() {
    if (h_ != nullptr) cublasDestroy(h_);
  }
  CublasHandle(CublasHandle&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  CublasHandle& operator=(CublasHandle&& o) noexcept {
    if (this != &o) {
      if (h_ != nullptr) cublasDestroy(h_);
      h_ = std::exchange(o.h_, nullptr);
    }
    return *this;
  }
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  cublasHandle_t get() const { return h_; }

 private:
  cublasHandle_t h_ = nullptr;
};

}  // namespace baton::cuda

#endif  // BATON_CUDA_CUDA_UTIL_H_
