// `baton bench`'s measuring part: on every rank, the probes outside the
// steps and the timed steps themselves, run by the executor's own
// TrainStep with an observer on its phases.
#ifndef BATON_BENCH_MEASURE_H_
#define BATON_BENCH_MEASURE_H_

#include "baton/bench.h"
#include "baton/measure_profile.h"
#include "record.h"
#include "setup.h"

namespace baton {

// This rank's record: the device's product rate at the model's shapes (rank
// 0 alone, the others waiting), the message latency between pipeline ranks
// 0 and 1, the replica group's all-reduce (data parallelism), the cost of
// recording one event; then warm-up steps, unrecorded steps (their median)
// and recorded steps (every action and wait, the gradient sums, the CPU
// time, the host's products call by call). Every measured step starts at a
// barrier on an idle device, so the ranks' clocks line up; it ends when the
// step's gradients are final (the optimizer runs outside the clock).
// Collective over the world.
RankRecord MeasureRank(RunSetup& u, const RunComms& comms, const BenchOptions& options);

// `profile` without the optimizer's step (Profile::update and clip): its
// price is then of what MeasureRank times, a step to its final gradients,
// as `baton bench`'s packed prediction and the shared-core fit set it
// against the measured steps.
Profile GradientsOnly(Profile profile);

// Collective over `t`: every rank's record on rank 0 (index = rank), an
// empty list elsewhere.
std::vector<RankRecord> GatherRecords(Transport& t, const RankRecord& mine);

}  // namespace baton

#endif  // BATON_BENCH_MEASURE_H_
