#include "record.h"

#include <fmt/format.h>

#include <cstring>
#include <type_traits>

#include "baton/error.h"

namespace baton {
namespace {

// Appends plain values and strings to a byte string.
class Writer {
 public:
  template <typename T>
  void Put(const T& value) {
    static_assert(std::is_trivially_copyable_v<T>);
    out_.append(reinterpret_cast<const char*>(&value), sizeof(T));
  }
  void PutString(const std::string& s) {
    Put<std::uint64_t>(s.size());
    out_ += s;
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

// Reads them back in the same order; a short read is an Error.
class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  template <typename T>
  T Get() {
    static_assert(std::is_trivially_copyable_v<T>);
    Need(sizeof(T));
    T value;
    std::memcpy(&value, in_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return value;
  }
  std::string GetString() {
    const auto n = static_cast<std::size_t>(Get<std::uint64_t>());
    Need(n);
    std::string s(in_.substr(at_, n));
    at_ += n;
    return s;
  }
  bool done() const { return at_ == in_.size(); }

 private:
  void Need(std::size_t n) const {
    if (in_.size() - at_ < n) {
      throw Error(fmt::format("bench: a rank's record is cut short ({} bytes, needed {} more at byte {})", in_.size(),
                              n, at_));
    }
  }
  std::string_view in_;
  std::size_t at_ = 0;
};

// A record starts with this, so that bytes of anything else are refused.
constexpr std::uint32_t kMagic = 0x42524543;  // "BREC"

}  // namespace

std::string PackRecord(const RankRecord& r) {
  Writer w;
  w.Put(kMagic);
  w.Put<std::int32_t>(r.rank);
  for (double v : {r.unrecorded_step_s, r.peak_gflops, r.message_latency_s, r.record_cost_per_event_s,
                   r.allreduce_step_latency_s, r.allreduce_bandwidth_Bps, r.gemm_flop_per_step, r.gemm_inside_s,
                   r.gemm_bare_s}) {
    w.Put(v);
  }
  w.PutString(r.cores);
  w.Put<std::uint64_t>(r.steps.size());
  for (const StepRecord& s : r.steps) {
    for (double v : {s.wall, s.busy, s.waiting, s.reduction_start, s.reduction_end, s.cpu}) w.Put(v);
    w.Put<std::uint64_t>(s.events.size());
    for (const ActionEvent& e : s.events) {
      w.Put<std::int32_t>(static_cast<std::int32_t>(e.kind));
      w.Put<std::int32_t>(e.stage);
      w.Put<std::int32_t>(e.microbatch);
      w.Put(e.start);
      w.Put(e.end);
      w.Put(e.cpu);
    }
  }
  return w.Take();
}

RankRecord UnpackRecord(std::string_view bytes) {
  Reader in(bytes);
  if (in.Get<std::uint32_t>() != kMagic) throw Error("bench: a rank's record does not start as one");
  RankRecord r;
  r.rank = in.Get<std::int32_t>();
  for (double* v : {&r.unrecorded_step_s, &r.peak_gflops, &r.message_latency_s, &r.record_cost_per_event_s,
                    &r.allreduce_step_latency_s, &r.allreduce_bandwidth_Bps, &r.gemm_flop_per_step, &r.gemm_inside_s,
                    &r.gemm_bare_s}) {
    *v = in.Get<double>();
  }
  r.cores = in.GetString();
  r.steps.resize(static_cast<std::size_t>(in.Get<std::uint64_t>()));
  for (StepRecord& s : r.steps) {
    for (double* v : {&s.wall, &s.busy, &s.waiting, &s.reduction_start, &s.reduction_end, &s.cpu}) *v = in.Get<double>();
    s.events.resize(static_cast<std::size_t>(in.Get<std::uint64_t>()));
    for (ActionEvent& e : s.events) {
      e.kind = static_cast<ActionKind>(in.Get<std::int32_t>());
      e.stage = in.Get<std::int32_t>();
      e.microbatch = in.Get<std::int32_t>();
      e.start = in.Get<double>();
      e.end = in.Get<double>();
      e.cpu = in.Get<double>();
    }
  }
  if (!in.done()) throw Error("bench: a rank's record has bytes past its end");
  return r;
}

}  // namespace baton
