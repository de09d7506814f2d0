// A rank's bench record through its bytes and back, field by field; bytes
// that are not a record, or are cut short, are refused.
#include "record.h"

#include <gtest/gtest.h>

#include "baton/error.h"

namespace baton {
namespace {

RankRecord Sample() {
  RankRecord r;
  r.rank = 3;
  r.unrecorded_step_s = 0.125;
  r.peak_gflops = 123.456789012345;
  r.message_latency_s = 1.5e-5;
  r.record_cost_per_event_s = 4.2e-8;
  r.allreduce_step_latency_s = 2e-6;
  r.allreduce_bandwidth_Bps = 9.87654321e9;
  r.gemm_flop_per_step = 1.25e9;
  r.gemm_inside_s = 0.01;
  r.gemm_bare_s = 0.009;
  r.cores = "node-7 0,1,2,";
  for (int k = 0; k < 2; ++k) {
    StepRecord s;
    s.wall = 0.1 + k;
    s.busy = 0.07;
    s.waiting = 0.02;
    s.reduction_start = 0.05;
    s.reduction_end = 0.09;
    s.cpu = 0.08;
    s.events.push_back({ActionKind::kForward, 2, k, 0.001, 0.002, 0.0009});
    s.events.push_back({ActionKind::kRecvB, 2, k, 0.003, 0.004, 0.0});
    s.events.push_back({ActionKind::kReduceGrad, -1, -1, 0.05, 0.09, 0.0});
    r.steps.push_back(s);
  }
  return r;
}

TEST(BenchRecord, RoundTripsEveryFieldExactly) {
  const RankRecord in = Sample();
  const RankRecord out = UnpackRecord(PackRecord(in));
  EXPECT_EQ(out.rank, in.rank);
  EXPECT_EQ(out.unrecorded_step_s, in.unrecorded_step_s);
  EXPECT_EQ(out.peak_gflops, in.peak_gflops);  // doubles, not floats: no rounding
  EXPECT_EQ(out.message_latency_s, in.message_latency_s);
  EXPECT_EQ(out.record_cost_per_event_s, in.record_cost_per_event_s);
  EXPECT_EQ(out.allreduce_step_latency_s, in.allreduce_step_latency_s);
  EXPECT_EQ(out.allreduce_bandwidth_Bps, in.allreduce_bandwidth_Bps);
  EXPECT_EQ(out.gemm_flop_per_step, in.gemm_flop_per_step);
  EXPECT_EQ(out.gemm_inside_s, in.gemm_inside_s);
  EXPECT_EQ(out.gemm_bare_s, in.gemm_bare_s);
  EXPECT_EQ(out.cores, in.cores);
  ASSERT_EQ(out.steps.size(), in.steps.size());
  for (std::size_t k = 0; k < in.steps.size(); ++k) {
    const StepRecord &a = in.steps[k], &b = out.steps[k];
    EXPECT_EQ(b.wall, a.wall);
    EXPECT_EQ(b.busy, a.busy);
    EXPECT_EQ(b.waiting, a.waiting);
    EXPECT_EQ(b.reduction_start, a.reduction_start);
    EXPECT_EQ(b.reduction_end, a.reduction_end);
    EXPECT_EQ(b.cpu, a.cpu);
    ASSERT_EQ(b.events.size(), a.events.size());
    for (std::size_t e = 0; e < a.events.size(); ++e) {
      EXPECT_EQ(b.events[e].kind, a.events[e].kind);
      EXPECT_EQ(b.events[e].stage, a.events[e].stage);
      EXPECT_EQ(b.events[e].microbatch, a.events[e].microbatch);
      EXPECT_EQ(b.events[e].start, a.events[e].start);
      EXPECT_EQ(b.events[e].end, a.events[e].end);
      EXPECT_EQ(b.events[e].cpu, a.events[e].cpu);
    }
  }
}

TEST(BenchRecord, RefusesWhatIsNotARecord) {
  const std::string bytes = PackRecord(Sample());
  EXPECT_THROW(UnpackRecord(""), Error);
  EXPECT_THROW(UnpackRecord("not a record at all"), Error);
  EXPECT_THROW(UnpackRecord(std::string_view(bytes).substr(0, bytes.size() - 1)), Error);
  EXPECT_THROW(UnpackRecord(bytes + "x"), Error);
}

}  // namespace
}  // namespace baton
