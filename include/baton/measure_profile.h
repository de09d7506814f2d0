// Measuring a profile (src/measure, the library baton_measure, below both
// training, whose automatic placement measures a profile at a run's start,
// and the bench): each top-level layer of a config's
// model timed alone on the configured device, and the messages between
// ranks 0 and 1. The profile itself, its file and its use are pure
// (baton/profile.h).
#ifndef BATON_MEASURE_PROFILE_H_
#define BATON_MEASURE_PROFILE_H_

#include <string>
#include <vector>

#include "baton/comm.h"
#include "baton/config.h"
#include "baton/plan.h"
#include "baton/placement.h"
#include "baton/profile_price.h"
#include "baton/tune_config.h"
#include "baton/profile.h"

namespace baton {

struct ProfileOptions {
  std::vector<int> rows;  // samples per microbatch; empty: those of DefaultMicrobatches
  int warmup = 2;         // untimed calls before each round's samples of a cost
  int repetitions = 7;    // timed samples a median, at least (more, up to 10x, until they take 20 ms), taken in
                          // five rounds over every layer; a sample is one call, or a run of calls of at least
                          // 0.2 ms together (its time over its calls)
};

// Collective over `world`: ranks 0 and 1 time messages (with two ranks or
// more); rank 0 alone then times every top-level layer at every row count:
// F (with the loss on the last), I, W and B through the executor's Stage as
// a one-layer stage without checkpointing, each op's forward alone, and
// what a microbatch keeps. The whole profile on rank 0.
Profile MeasureProfile(const TrainConfig& config, Transport& world, const ProfileOptions& options);

// The profile at `path` checked against the config and this machine, or
// (empty path) one measured now in this process; `source` says which.
Profile ProfileFor(const TrainConfig& config, const std::string& path, std::string* source);

// One-way time between ranks 0 and 1 of `t` for a message of `bytes`: half
// the median round trip on ranks 0 and 1 (0 on the others, which return
// at once).
double PingPong(Transport& t, std::size_t bytes);

// This machine, as profiles name it: the processor's model name (and the
// GPU, for device: cuda), and its online CPUs.
std::string MachineName();
int MachineCores();
ProfileIdentity ThisMachineIdentity(const TrainConfig& config, const ModelDesc& model);

// The profile as a table, for `baton profile`.
std::string DescribeProfile(const Profile& profile);

}  // namespace baton

#endif  // BATON_MEASURE_PROFILE_H_
