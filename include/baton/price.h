// Pricing a run: what a plan's step costs in time and memory, from a
// profile (each stage from its layers' profiled costs, baton/profile.h),
// and the fit of the shared-core model to measured steps. Pure: no MPI,
// no device.
#ifndef BATON_PRICE_H_
#define BATON_PRICE_H_

#include <string>
#include <vector>

#include "baton/costs.h"
#include "baton/model.h"
#include "baton/plan.h"
#include "baton/profile.h"
#include "baton/sim.h"

namespace baton {

// A stage's costs with every action `scale` times as long.
Costs Scaled(Costs c, double scale);

// The profile's message latency: measured, or 20 us.
double MessageLatency(const Profile& profile);

// The largest message between two stages of a placement: the activation
// (f32) entering each stage but the first, for `rows` samples.
double LargestMessageBytes(const ModelDesc& model, const std::vector<int>& bounds, int rows);

// One stage of top-level layers [first_layer, last_layer) for one
// microbatch of `shape` (its rows and checkpointing policy), from the
// profiled layers at those rows: F, I and W summed over its layers (B's
// measured total shared out over I and W when the backward is not split);
// what the policy drops is recomputed (each dropped op's forward) inside
// I, and again inside W when W runs apart (as Stage does); and the bytes
// one microbatch keeps in its slot.
struct StagePrice {
  Costs costs;            // recomputation included
  double recompute = 0;   // seconds of it in one backward (I, or B)
  double slot_bytes = 0;  // sliced: one slice's
  double sequence_bytes = 0;  // sliced: a sequence's key/value slot (StagePlan::sequence_bytes)
};
StagePrice PriceStage(const RunPlan& shape, const std::vector<LayerProfile>& layers, int stage, bool split_backward);

// How a run's ranks share the machine's cores, as `baton bench` simulates
// it: p pipeline ranks x D replicas on one host of `cores` CPUs share them
// when p x D > cores (every pipeline rank in pool 0, of cores x p / (p x D)
// cores); else a core each (both empty).
void ShareCores(int ranks, int replicas, int cores, std::vector<int>* core_pool, std::vector<double>* pool_cores);

// The simulator's options for a run's plan from each stage's costs (seconds
// of one microbatch), one message's latency, its bytes over a bandwidth
// (0: free) and the core pools: what `baton bench` predicts a measured step
// with (adding the replicas' gradient sums), and what the profile predicts
// a plan with.
SimOptions CostedSimOptions(std::vector<Costs> stage_costs, double latency, double bandwidth, double message_bytes,
                            std::vector<int> core_pool, std::vector<double> pool_cores);

// The simulator's options for `plan` from the profile: each stage priced
// from its layers, messages and core sharing as profiled.
SimOptions ProfileSimOptions(const RunPlan& plan, const Profile& profile);

// A plan's step predicted from a profile: its stages priced (PriceStage),
// the profile's message costs, the cores shared as the run would share
// them; and each rank's peak memory (PlanMemory's static bytes plus the
// slots live at the simulated peak).
struct ProfilePrediction {
  SimResult sim;
  std::vector<double> peak_bytes;  // per rank
};
ProfilePrediction PredictFromProfile(const RunPlan& plan, const Profile& profile);

// The factor on a profiled action's cost for a run of `ranks` x `replicas`
// processes on the profile's machine: the profile's shared_core_cost where
// they share its cores (ShareCores), else 1.
double SharedCoreCost(const Profile& profile, int ranks, int replicas);

// The shared_core_cost at which PredictFromProfile's steps for `plans`
// (whose ranks share cores) are as far above their `measured_step_s` as
// below, in the mean of log(simulated / measured): the measured step
// itself for one plan. Bisection over [kMinSharedCoreCost,
// kMaxSharedCoreCost] (every step grows with the factor), an end where
// the measured steps lie beyond what either gives.
inline constexpr double kMinSharedCoreCost = 0.5;
inline constexpr double kMaxSharedCoreCost = 4.0;
double FitSharedCoreCost(const std::vector<RunPlan>& plans, const Profile& profile,
                         const std::vector<double>& measured_step_s);

// With three or more calibration runs (their placements apart, so that
// their ranks wait differently): the waiting share and the factor that
// together fit them best, least squares of log(simulated / measured):
// every share of a core in steps of 1 / kSharedWaitingSteps, each with
// the factor FitSharedCoreCost gives at it. With fewer: the profile's
// waiting share and that factor.
struct SharedCoresFit {
  double scale = 1.0;
  double waiting_share = 0.0;
  double squared_error = 0.0;
};
inline constexpr int kSharedWaitingSteps = 20;
SharedCoresFit FitSharedCores(const std::vector<RunPlan>& plans, const Profile& profile,
                              const std::vector<double>& measured_step_s);

}  // namespace baton

#endif  // BATON_PRICE_H_
