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

// Sharded data parallel's stage (data_parallel.zero, ZeRO's 0 to 3), asked
// by what it shards: the one place the stage's number is compared. 0 every
// replica keeps the whole model state; 1 each keeps its 1/D of the
// optimizer state; 2 also of the gradients (each stage's sum a
// reduce-scatter, REDUCE_GRAD); 3 also of the parameters (gathered by
// UNSHARD for a stage's compute, freed by RESHARD). 2 and 3 run as
// schedule actions.
class ZeroStage {
 public:
  static constexpr int kLast = 3;
  constexpr ZeroStage() = default;
  // REQUIRES: 0 <= stage <= kLast (configs and flags check it: Valid).
  constexpr explicit ZeroStage(int stage) : stage_(stage) {}
  // Whether `stage` names a ZeRO stage (0 to kLast).
  static constexpr bool Valid(int stage) { return stage >= 0 && stage <= kLast; }
  // The number, for messages, files and JSON.
  constexpr int number() const { return stage_; }
  constexpr bool shards_optimizer() const { return stage_ >= 1; }
  constexpr bool shards_gradients() const { return stage_ >= 2; }
  constexpr bool shards_parameters() const { return stage_ >= 3; }
  // Its collectives are the schedule's actions (UNSHARD, RESHARD, REDUCE_GRAD).
  constexpr bool has_actions() const { return shards_gradients(); }
  // After the optimizer step each replica all-gathers its stages' updated
  // parameters apart from the step's sums (ZeRO 2; ZeRO 1's gathers go with
  // its buckets, ZeRO 3 gathers at the next UNSHARD).
  constexpr bool gathers_after_step() const { return shards_gradients() && !shards_parameters(); }
  constexpr bool operator==(const ZeroStage&) const = default;

 private:
  int stage_ = 0;
};

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
