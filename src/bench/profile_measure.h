// `baton profile`'s measuring part: each top-level layer of a config's
// model timed alone on the configured device, and the messages between
// ranks 0 and 1. The profile itself, its file and its use are pure
// (baton/profile.h).
#ifndef BATON_BENCH_PROFILE_MEASURE_H_
#define BATON_BENCH_PROFILE_MEASURE_H_

#include <string>
#include <vector>

#include "baton/comm.h"
#include "baton/config.h"
#include "baton/plan.h"
#include "baton/profile.h"

namespace baton {

struct ProfileOptions {
  std::vector<int> rows;  // samples per microbatch; empty: those of DefaultMicrobatches
  int warmup = 2;         // untimed calls before each median
  int repetitions = 7;    // timed calls a median, at least (more, up to 10x, until they take 20 ms)
};

// Collective over `world`: ranks 0 and 1 time messages (with two ranks or
// more); rank 0 alone then times every top-level layer at every row count:
// F (with the loss on the last), I, W and B through the executor's Stage as
// a one-layer stage without checkpointing, each op's forward alone, and
// what a microbatch keeps. The whole profile on rank 0.
Profile MeasureProfile(const TrainConfig& config, Transport& world, const ProfileOptions& options);

// This machine, as profiles name it: the processor's model name (and the
// GPU, for device: cuda), and its online CPUs.
std::string MachineName();
int MachineCores();
ProfileIdentity ThisMachineIdentity(const TrainConfig& config, const ModelDesc& model);

// The profile as a table, for `baton profile`.
std::string DescribeProfile(const Profile& profile);

}  // namespace baton

#endif  // BATON_BENCH_PROFILE_MEASURE_H_
