// `baton bench`'s analysis: from every rank's record and the run's plan to
// the report. Pure (no MPI, no device, no clock): rank 0 calls it after
// gathering the records, and tests call it on records they make.
#ifndef BATON_BENCH_ANALYZE_H_
#define BATON_BENCH_ANALYZE_H_

#include <string>
#include <vector>

#include "baton/bench.h"
#include "baton/comm.h"
#include "baton/plan.h"
#include "baton/sim.h"
#include "record.h"

namespace baton {

// What the analysis knows besides the records.
struct BenchContext {
  const RunPlan* plan = nullptr;  // the run's (the same on every rank)
  ReplicaLayout layout;           // pipeline ranks x replicas (world rank = pipeline rank x D + replica)
  int warmup_steps = 0;
  std::string blas_core;              // what computed the peak's products (RankDevice::GemmKernels)
  std::string action_clock = "host";  // what timed the compute actions: "host" or "device"
};

struct BenchAnalysis {
  BenchReport report;
  // The simulator's run from the measured median costs (seconds), which
  // report.predicted_step_time_s is the makespan of.
  SimResult predicted;
  std::size_t median_step = 0;  // the measured step of median makespan (for the picture)
};

// REQUIRES: records.size() == context.layout's world size, records[r].rank
// == r, every record with the same number (>= 1) of steps.
BenchAnalysis AnalyzeBench(const BenchContext& context, const std::vector<RankRecord>& records);

}  // namespace baton

#endif  // BATON_BENCH_ANALYZE_H_
