// Typed views: what a tensor is (element type and shape) and where it lives.
//
// Layer inputs and outputs, ring-slot entries and messages are described by
// a TensorDesc and passed as a View (a pointer plus its TensorDesc) — never
// as a bare float pointer and a row count — so that integer token ids,
// 2-byte BF16 activations and a sequence axis fit without touching the
// runtime. Dimension 0 is always the sample axis (one microbatch's rows);
// the last is the feature axis. Views own nothing and never copy.
#ifndef BATON_VIEW_H_
#define BATON_VIEW_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

#include "baton/named_enum.h"

namespace baton {

enum class DType : std::uint8_t { kF32, kBF16, kI32 };
inline constexpr std::array<DType, 3> kDTypes = {DType::kF32, DType::kBF16, DType::kI32};
inline std::string_view EnumName(DType dtype) {  // "f32", "bf16", "i32"
  return dtype == DType::kF32 ? "f32" : dtype == DType::kBF16 ? "bf16" : "i32";
}
inline std::span<const DType> EnumValues(DType) { return kDTypes; }
// Bytes of one element.
constexpr std::size_t SizeOf(DType dtype) { return dtype == DType::kBF16 ? 2 : 4; }

// Up to four dimensions, row-major. Dimension 0 is the samples. Small on
// purpose (views are made and passed for every op of every action): each
// dimension is below 2^31, the product is 64-bit.
struct Shape {
  static constexpr int kMaxRank = 4;
  std::array<std::int32_t, kMaxRank> dims{};
  std::int32_t rank = 0;

  Shape() = default;
  // REQUIRES: at most kMaxRank dimensions, each in [0, 2^31).
  Shape(std::initializer_list<std::int64_t> d) : rank(static_cast<std::int32_t>(d.size())) {
    std::size_t i = 0;
    for (std::int64_t v : d) dims[i++] = static_cast<std::int32_t>(v);
  }
  std::int64_t operator[](int i) const { return dims[static_cast<std::size_t>(i)]; }
  std::int64_t elements() const { return rank == 0 ? 0 : std::int64_t{dims[0]} * per_sample(); }
  // Elements per sample: the product of dimensions 1..rank-1.
  std::int64_t per_sample() const {
    std::int64_t n = 1;
    for (int i = 1; i < rank; ++i) n *= dims[static_cast<std::size_t>(i)];
    return n;
  }
  std::int64_t last() const { return rank > 0 ? dims[static_cast<std::size_t>(rank - 1)] : 1; }
  friend bool operator==(const Shape& a, const Shape& b) = default;
};

// An element type and a shape: one tensor, wherever it lives.
struct TensorDesc {
  Shape shape;
  DType dtype = DType::kF32;

  TensorDesc() = default;
  TensorDesc(DType d, Shape s) : shape(s), dtype(d) {}

  std::size_t bytes() const { return static_cast<std::size_t>(shape.elements()) * SizeOf(dtype); }
  std::int64_t elements() const { return shape.elements(); }
  // The same tensor with `rows` samples (dimension 0).
  TensorDesc WithRows(std::int64_t rows) const {
    TensorDesc t = *this;
    t.shape.dims[0] = static_cast<std::int32_t>(rows);
    return t;
  }
  // The same sequence tensor with `tokens` tokens a sample (dimension 1):
  // a slice of each sample's sequence. REQUIRES: rank >= 2.
  TensorDesc WithTokens(std::int64_t tokens) const {
    TensorDesc t = *this;
    t.shape.dims[1] = static_cast<std::int32_t>(tokens);
    return t;
  }
  // Rows of the matrix a per-row kernel sees: the product of every dimension
  // but the last (multiplied, not divided: kernels ask for it on every call).
  std::int64_t matrix_rows() const {
    std::int64_t n = 1;
    for (int i = 0; i + 1 < shape.rank; ++i) n *= shape.dims[static_cast<std::size_t>(i)];
    return n;
  }
  friend bool operator==(const TensorDesc&, const TensorDesc&) = default;
};
// "f32[16, 784]"
inline std::string ToString(const TensorDesc& desc) {
  std::string out(EnumName(desc.dtype));
  out += '[';
  for (int i = 0; i < desc.shape.rank; ++i) out += (i ? ", " : "") + std::to_string(desc.shape[i]);
  return out + ']';
}

// A tensor's memory: a pointer (host or device, as the holder knows) and
// what is there.
struct ConstView;
struct View {
  std::byte* data = nullptr;
  TensorDesc desc;

  template <typename T>
  T* as() const {
    return reinterpret_cast<T*>(data);
  }
  std::size_t bytes() const { return desc.bytes(); }
};

struct ConstView {
  const std::byte* data = nullptr;
  TensorDesc desc;

  ConstView() = default;
  ConstView(const std::byte* d, TensorDesc t) : data(d), desc(t) {}
  ConstView(const View& v) : data(v.data), desc(v.desc) {}  // NOLINT: a view may always be read
  template <typename T>
  const T* as() const {
    return reinterpret_cast<const T*>(data);
  }
  std::size_t bytes() const { return desc.bytes(); }
};

// F32 (n) over `data`: parameters, gradients and other flat float buffers.
inline View FloatView(float* data, std::size_t n) {
  return {reinterpret_cast<std::byte*>(data), {DType::kF32, {static_cast<std::int64_t>(n)}}};
}
inline ConstView FloatView(const float* data, std::size_t n) {
  return {reinterpret_cast<const std::byte*>(data), {DType::kF32, {static_cast<std::int64_t>(n)}}};
}

// A label that counts for nothing (PyTorch's ignore_index): no loss, no
// gradient; a packed sample's positions past its last document.
inline constexpr std::int32_t kIgnoreLabel = -100;

// A call's part of each sample's sequence (sequence slices, resolved by
// the plan for each unit): tokens [begin, end) of it, its views shaped for
// those tokens; and the sequence's key/value slot and, while the sequence
// runs backward, their gradients' slot (a stage's slots, or an attention
// layer's part of them; null for none). begin = end = 0: whole sequences.
//
// Packed documents (data.packing): `starts`, per sample of the call, per
// token of its whole sequence (samples x T), the position of the first
// token of that token's document: attention does not cross documents, and
// positions restart at each. Null: one document a sample. `length`: a
// packed microbatch's real length (its longest sample's filled positions).
// A whole sequence's call computes the first `length` tokens of T, its
// views shaped for them; a slice's [begin, end) ends at `length` at the
// latest (the executor skips a slice past it), and its sequence's last
// slice is the one that ends there. `starts` keeps its stride of T. 0: all
// T.
struct SequencePart {
  int begin = 0, end = 0;
  std::byte* keys_values = nullptr;
  std::byte* gradients = nullptr;
  const std::int32_t* starts = nullptr;
  int length = 0;
  bool whole() const { return end == 0; }
  int tokens() const { return end - begin; }
};

}  // namespace baton

#endif  // BATON_VIEW_H_
