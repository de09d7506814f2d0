// A profile: what each top-level layer of a config's model costs on one
// device, measured by `baton profile` (src/bench/profile.cc), and the cost
// model that turns it into the simulator's per-stage costs for any cut of
// the model into stages. Pure: reading, writing and checking a profile and
// pricing stages need no MPI and no device.
//
//   baton profile CONFIG ──► Profile (JSON) ──► ProfileCostModel ──► per stage
//                                                F, I, W, B, recomputation
//
// A profile is tied to what it measured: the model's layers at their
// shapes, the device and precision, the machine. Schedules, partitions,
// ranks and microbatch counts are not part of it: it holds each layer at
// several microbatch sizes (rows), so one profile serves every candidate
// `baton tune` tries.
#ifndef BATON_PROFILE_H_
#define BATON_PROFILE_H_

#include <string>
#include <vector>

#include "baton/config.h"
#include "baton/costs.h"
#include "baton/machine.h"
#include "baton/model.h"

namespace baton {

// One top-level layer at one microbatch size, seconds and bytes.
struct LayerProfile {
  double forward = 0;          // F (on the last layer: with the loss)
  double backward_input = 0;   // I
  double backward_weight = 0;  // W
  double backward = 0;         // B (I and W together)
  std::vector<double> op_forward;  // per op of the layer (ModelDesc ops, in order): its forward alone
  double saved_bytes = 0;      // what one microbatch keeps for the backward (no checkpointing, split backward)
  // F, I and W with each sample cut into documents of
  // Profile::document_tokens (packed documents: attention within each
  // only); the costs above are one document a sample. Only where the
  // profile measured them (document_tokens > 0) and the layer attends;
  // else the same as above.
  Costs documents{0, 0, 0};
};

struct ProfileRows {
  int rows = 0;                       // samples per microbatch
  std::vector<LayerProfile> layers;   // per top-level layer
};

// What a profile was measured on; two profiles of the same identity are
// interchangeable.
struct ProfileIdentity {
  std::vector<std::string> layers;  // per top-level layer: what it is ("linear 512->512", ...)
  int seq = 1;                      // tokens per sample
  std::string device;               // cpu, cuda
  std::string precision;
  std::string machine;              // the processor (and GPU) it ran on
  int cores = 0;                    // CPUs the profiling process could use
};

struct Profile {
  static constexpr int kFormat = 3;  // 3: the machine model in its own file
  ProfileIdentity identity;
  std::string config;               // the config it was made from (information only)
  std::vector<ProfileRows> rows;    // ascending rows
  // Between ranks 0 and 1 of the profiling run, when it had two or more;
  // else 0 (not measured).
  double latency_s = 0;
  double bandwidth_Bps = 0;
  // The machine model (baton/machine.h) it is read with: not part of the
  // profile's file, but of the machine's own beside it (ReadProfile reads
  // it where there is one; `baton profile` writes it). Default: factor 1,
  // and a waiting rank takes nothing.
  MachineModel machine;
  double seconds = 0;               // how long profiling took
  int repetitions = 0;              // timed calls per median
  // The documents' length in LayerProfile::documents (kProfileDocuments
  // to a sample); 0: not measured (a device without packed documents).
  int document_tokens = 0;
  // The processes that profiled at once (each the run's rank would be),
  // and whether they were more than the machine's CPUs: then each call is
  // timed by its CPU time, since its wall time includes waiting for a core
  // (the simulator shares the cores itself, as `baton bench` does), and
  // the time each keeps losing to the others' use of its caches is in it.
  int processes = 1;
  bool cpu_clock = false;
  // The optimizer's step, per top-level layer (whatever the rows): its
  // update over the layer's parameters by `optimizer` (the config's
  // train.optimizer: sgd, adamw), and the clip's pass over its gradients
  // (their squares in double, then their scaling). Empty: not measured
  // (an older profile): the step's price leaves the update out. Priced
  // only for a run of the same optimizer.
  std::string optimizer;
  std::vector<double> update, clip;
};

// What `baton profile` cuts a sample into to measure attention's cost per
// document: this many documents of equal length (fewer where the sample
// holds fewer tokens).
inline constexpr int kProfileDocuments = 8;

// What `config`'s model is, on the config's device, on `machine` with
// `cores` CPUs: the identity a profile of it must have.
ProfileIdentity IdentityOf(const TrainConfig& config, const ModelDesc& model, const std::string& machine, int cores);

// The profile as JSON (its machine model left out), and back. ReadProfile
// throws ConfigError for a file that is no profile, is of another format,
// or holds no measurements, naming the file and what is wrong; it reads
// the machine model of the profile's machine from beside it
// (ReadMachineBeside), where there is one.
std::string ProfileJson(const Profile& profile);
Profile ParseProfile(const std::string& json, const std::string& path);
Profile ReadProfile(const std::string& path);

// Refuses (ConfigError) a profile of another model, device, precision or
// machine than `want`, naming the first difference and the file.
void CheckProfile(const Profile& profile, const ProfileIdentity& want, const std::string& path);

// The model's layer costs at `rows` samples a microbatch: the profiled row
// count itself, or linear in the rows between the two nearest (beyond the
// ends: in proportion to the nearest). `exact` says whether it was
// profiled.
std::vector<LayerProfile> LayersAt(const Profile& profile, int rows, bool* exact = nullptr);

}  // namespace baton

#endif  // BATON_PROFILE_H_
