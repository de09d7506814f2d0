// The machine model: how ranks that outnumber a node's cores share them.
//
// Two parameters, one value (SharedCores, baton/costs.h), fitted and not measured: while
// ranks share cores, every action costs `action_cost` times its profiled
// cost (what a rank spends outside its actions, polling, yielding and
// sending, and the caches the ranks share), and a rank waiting for a
// message takes `waiting_share` of a core from the ranks computing beside
// it. The fit is empirical: `baton profile` under mpirun with more
// processes than CPUs measures two or three short runs of the config's own
// pipeline and fits both to their steps (FitSharedCores, baton/price.h).
// Two or three runs do not identify the two apart (a larger factor and a
// smaller share can fit the same steps; two profiles of one config have
// fitted 0.90x with 90% and 1.78x with 45%), and the probe of one waiting
// rank beside one computing rank reads 0-3% of a core. It predicts runs
// like the ones it was fitted to; it serves only ranks that outnumber
// cores, and applies nowhere else (ShareCores).
//
// It belongs to a machine, not to a model: `baton profile` stores it apart
// from the layer profile, in a file beside it named after the machine
// (MachineFileName), and a profile read on that machine reads it too.
#ifndef BATON_MACHINE_H_
#define BATON_MACHINE_H_

#include <optional>
#include <string>
#include <vector>

#include "baton/costs.h"
#include "baton/files.h"

namespace baton {

// A machine's model as `baton profile` stores it.
struct MachineModel {
  static constexpr int kFormat = 1;
  std::string machine;  // the processor (and GPU), as profiles name it
  int cores = 0;        // its CPUs
  SharedCores shared;   // as fitted (or, not calibrated: factor 1 and the probe's share)
  double probed_waiting_share = 0.0;  // the probe's reading (one waiting rank beside one computing)
  // The runs the model was fitted to, each with its measured median step
  // and the steps the simulator gives it from the profile before the fit
  // (factor 1, the probe's share) and after; empty when not calibrated.
  struct Calibration {
    std::string run;  // schedule, microbatches, chunks, policy and placement
    double measured_step_s = 0;
    double unfitted_step_s = 0;
    double fitted_step_s = 0;
  };
  std::vector<Calibration> calibration;
};

// The model of a machine `machine` with `cores` CPUs as JSON, and back
// (ConfigError naming the file and what is wrong).
std::string MachineJson(const MachineModel& model);
MachineModel ParseMachine(const std::string& json, const std::string& path);

// The machine model's file for a profile at `profile_path` on `machine`
// with `cores` CPUs: beside it, "machine-<name>-<cores>cpus.json" (the
// name's letters and digits, the rest as '-').
std::string MachineFileName(const std::string& profile_path, const std::string& machine, int cores);

// Whether a file's name is a machine model's ("machine-*cpus.json").
bool IsMachineFileName(const std::string& file_name);
// Every machine model's file beside the profile at `profile_path` (its
// folder's "machine-*cpus.json"): inputs of whatever reads the profile.
std::vector<std::string> MachineFilesBeside(const std::string& profile_path);
// A profile `path` read as the input `key` ("--profile",
// "pipeline.profile"), and those machine models' files beside it, into
// `files` (none if `path` is empty).
void AddProfileInputs(CommandFiles& files, const std::string& key, const std::string& path);

// The model in that file, if there is one; a file of another machine or a
// damaged one is a ConfigError.
std::optional<MachineModel> ReadMachineBeside(const std::string& profile_path, const std::string& machine, int cores);

}  // namespace baton

#endif  // BATON_MACHINE_H_
