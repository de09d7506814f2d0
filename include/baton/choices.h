// Choices a run makes that several rooms switch on: what a microbatch keeps
// for its backward, where the stages compute, in which precision, and how a
// sequence is cut into slices. Named
// enums (named_enum.h), spelled as configs spell them, defined here whole so
// that the pure rooms (the tuner, the plan) and the device seams use them
// without the config library.
#ifndef BATON_CHOICES_H_
#define BATON_CHOICES_H_

#include <array>
#include <cstdint>
#include <span>
#include <string_view>

#include "baton/named_enum.h"

namespace baton {

// What a microbatch keeps for its backward: none (every layer's input), full
// (the stage input; the rest is recomputed), selective (the stage input and
// the outputs of the layer types in pipeline.keep).
enum class Checkpointing : std::uint8_t { kNone, kFull, kSelective };
// Where every rank's stages compute.
enum class Device : std::uint8_t { kCpu, kCuda };
// The linear layers' products: fp32; bf16 operands with fp32 accumulation;
// tf32 (cuBLAS's fast FP32). bf16 and tf32 are for device: cuda.
enum class Precision : std::uint8_t { kFP32, kBF16, kTF32 };
// Where a sequence's slices are cut (slices.h): equal token counts, or
// about equal compute.
enum class SeqSplit : std::uint8_t { kEven, kCompute };

// Declared before any is defined: the comparisons below must already see
// every enum as named (named_enum.h's operator== is constrained on it).
inline std::string_view EnumName(Checkpointing v);  // none, full, selective
inline std::string_view EnumName(Device v);         // cpu, cuda
inline std::string_view EnumName(Precision v);      // fp32, bf16, tf32
inline std::string_view EnumName(SeqSplit v);       // even, compute
inline std::span<const Checkpointing> EnumValues(Checkpointing);
inline std::span<const Device> EnumValues(Device);
inline std::span<const Precision> EnumValues(Precision);
inline std::span<const SeqSplit> EnumValues(SeqSplit);

inline std::string_view EnumName(Checkpointing v) {
  return v == Checkpointing::kNone ? "none" : v == Checkpointing::kFull ? "full" : "selective";
}
inline std::string_view EnumName(Device v) { return v == Device::kCpu ? "cpu" : "cuda"; }
inline std::string_view EnumName(SeqSplit v) { return v == SeqSplit::kEven ? "even" : "compute"; }
inline std::string_view EnumName(Precision v) {
  return v == Precision::kFP32 ? "fp32" : v == Precision::kBF16 ? "bf16" : "tf32";
}

inline std::span<const Checkpointing> EnumValues(Checkpointing) {
  static constexpr std::array<Checkpointing, 3> kValues = {Checkpointing::kNone, Checkpointing::kFull,
                                                           Checkpointing::kSelective};
  return kValues;
}
inline std::span<const Device> EnumValues(Device) {
  static constexpr std::array<Device, 2> kValues = {Device::kCpu, Device::kCuda};
  return kValues;
}
inline std::span<const Precision> EnumValues(Precision) {
  static constexpr std::array<Precision, 3> kValues = {Precision::kFP32, Precision::kBF16, Precision::kTF32};
  return kValues;
}
inline std::span<const SeqSplit> EnumValues(SeqSplit) {
  static constexpr std::array<SeqSplit, 2> kValues = {SeqSplit::kEven, SeqSplit::kCompute};
  return kValues;
}

}  // namespace baton

#endif  // BATON_CHOICES_H_
