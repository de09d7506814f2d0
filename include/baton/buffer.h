// Aligned buffers.
#ifndef BATON_BUFFER_H_
#define BATON_BUFFER_H_

#include <cstddef>
#include <new>
#include <vector>

namespace baton {

// Every buffer a layer computes on starts on a 64-byte boundary. Besides
// speed, this makes results reproducible: vectorised kernels split a product
// differently depending on where its operands start, and the heap's
// alignment varies from run to run, so without it two runs of the same
// config could differ in the last bits.
inline constexpr std::size_t kBufferAlignment = 64;

template <typename T>
struct AlignedAllocator {
  using value_type = T;
  AlignedAllocator() = default;
  template <typename U>
  AlignedAllocator(const AlignedAllocator<U>&) {}
  T* allocate(std::size_t n) {
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t{kBufferAlignment}));
  }
  void deallocate(T* p, std::size_t) { ::operator delete(p, std::align_val_t{kBufferAlignment}); }
  template <typename U>
  bool operator==(const AlignedAllocator<U>&) const { return true; }
};

// A float buffer aligned for the kernels (see kBufferAlignment).
using FloatBuffer = std::vector<float, AlignedAllocator<float>>;
// Bytes of any element type, aligned the same way (a dataset's inputs, a
// batch's inputs: f32 features or i32 token ids).
using ByteBuffer = std::vector<std::byte, AlignedAllocator<std::byte>>;

}  // namespace baton

#endif  // BATON_BUFFER_H_
