// `baton bench` (src/bench): measured training steps against the simulator's
// prediction from the measured action costs and against the hardware.
#ifndef BATON_BENCH_H_
#define BATON_BENCH_H_

#include <string>
#include <utility>
#include <vector>

#include "baton/config.h"
#include "baton/profile.h"
#include "baton/costs.h"
#include "baton/train.h"

namespace baton {

// ---- `baton bench` ----
struct BenchOptions {
  int warmup_steps = 3;
  int steps = 10;            // measured steps (recorded)
  bool real_data = false;    // false: synthetic data of the model's shapes
  std::string json_path;     // report (rank 0); "" = none
  std::string trace_path;    // Chrome trace of the measured steps, all ranks
  std::string svg_path;      // measured timeline above the simulated one
  bool quiet = false;        // no printed report (sweeps)
  // Packed documents (data.packing, --real-data): each recorded step set
  // against its prediction from this profile (PredictPackedStep); "" = none.
  std::string profile_path;
};

struct BenchRank {
  int rank = 0;
  double wall_s = 0, busy_s = 0, waiting_s = 0, idle_s = 0;  // means per step
  double gflops = 0;  // model FLOPs of the rank's stages / its mean wall time
};

struct BenchReport {
  std::string schedule;
  int ranks = 0, microbatches = 0, chunks = 0, batch_size = 0;
  int warmup_steps = 0, steps = 0;
  double step_time_median_s = 0, step_time_min_s = 0, step_time_max_s = 0;
  std::vector<double> step_times_s;  // each recorded step, in order
  // Packed documents with a profile (BenchOptions::profile_path): each
  // recorded step's prediction from its own microbatches, and the median
  // of measured / predicted over the steps (0: not priced).
  std::vector<double> packed_predicted_s;
  double packed_measured_over_predicted = 0;
  double samples_per_s = 0;
  double tokens_per_s = 0;           // samples_per_s x tokens per sample (the sequence; 1 for feature vectors)
  double bubble_rate = 0;            // measured, the simulator's definition
  double simulated_bubble_rate = 0;  // from measured costs
  double predicted_step_time_s = 0;  // simulator, from measured per-action costs and latency
  // Per stage: the median measured cost of each kind of action (seconds;
  // B's in backward_input with backward_weight 0 where the backward is not
  // split): what the prediction simulated, and what a profile's
  // PriceStage estimates before the run.
  std::vector<Costs> stage_costs;
  double measured_over_predicted = 0;
  double predicted_step_time_mean_costs_s = 0;  // the same from mean costs
  double action_time_spread = 0;     // median over (stage, kind) of (p90 - p10) / median
  double message_latency_s = 0;      // one-way, rank 0 <-> 1, activation-sized message
  double gflops_total = 0;
  double peak_gflops_one_core = 0;   // the model's GEMM shapes (F, I, W products) on one rank's BLAS, same run
  std::string blas_core;             // what computed the peak's products (RankDevice::GemmKernels)
  // What timed the compute actions: "host" (the host's clock), or "device"
  // (a GPU's CUDA events on the compute stream, read once after the step;
  // the step then ends when the GPU has done its work).
  std::string action_clock = "host";
  double gflops_while_busy = 0;      // the model's GEMM FLOPs / compute time (busy), per rank
  double busy_fraction_of_peak = 0;  // gflops_while_busy / peak: the products inside actions against bare SGEMM
  // Cores: the CPUs the ranks may run on, over all hosts; shared when a
  // host runs more ranks than it has. Then the simulator shares them
  // (SimOptions::cores), its costs are the actions' CPU times, and the
  // ranks that compute at once are at most the cores.
  int cores = 0;
  bool cores_shared = false;
  double cpu_outside_actions = 0;    // shared: the most any rank's step CPU time exceeds its actions', a fraction
  // Shared: the share of the cores' time no rank used, measured (1 - the
  // ranks' CPU time in the step / (cores x step time), median over steps)
  // and simulated (1 - the simulated work / (cores x step time)). The
  // bubble rates above count ranks' wall time in actions, which includes
  // waiting for a core.
  double core_idle_rate = 0;
  double simulated_core_idle_rate = 0;
  double fraction_of_peak = 0;       // gflops_total / (min(ranks, cores if shared) x peak)
  double goal_gflops = 0;            // 0.95 (1 - bubble, or core_idle_rate if shared) x min(ranks, cores if shared) x peak
  double record_cost_per_event_s = 0;
  double step_time_unrecorded_s = 0;  // median step time without recording
  // The host's matrix products, call by call (baton/model.h's GEMM meter):
  // their rate inside the recorded steps' actions, the rate of the same
  // calls replayed bare outside any action, and bare time / inside time
  // (1: the products run inside actions as fast as SGEMM alone can).
  double gemm_gflop_per_step = 0;  // the products' FLOPs in one step, all ranks (as the calls counted them)
  double gemm_gflops_inside = 0;
  double gemm_gflops_bare = 0;
  double gemm_inside_over_bare = 0;
  // Data parallelism (replicas > 1): the gradient sums over the replicas.
  int replicas = 1;
  double allreduce_step_latency_s = 0;   // alpha: one step of a ring all-reduce (measured: a 1-float sum / 2 (D - 1))
  double allreduce_bandwidth_Bps = 0;    // beta^-1: bytes a second (measured: a large sum)
  double reduction_s = 0;                // a rank's sums per step, first start to last end (median over steps, mean over ranks)
  double reduction_exposed_s = 0;        // the step's tail: the last sum's end after the last action's (median)
  double reduction_hidden_fraction = 0;  // the sums' time before the step's last action ends, over their whole time
  double predicted_reduction_s = 0;      // the alpha-beta model's time of the largest stage's sums
  // Sharded data parallel (ZeRO 2 and 3), per step, the most over the
  // stages and ranks (medians over the steps): all-gathers of one stage's
  // parameters and reduce-scatters of its gradients; the waits for the
  // gathers at their stages' next actions (a rank's, mean over the ranks);
  // the alpha-beta time of a rank's gathers (the all-reduce's alpha and
  // beta as a ring all-gather's: D - 1 steps of 1/D of the bytes); and the
  // share of that time no action waited for.
  ZeroStage zero;
  int gathers_per_stage = 0, reduce_scatters_per_stage = 0;
  double gather_wait_s = 0, predicted_gather_s = 0, gather_hidden_fraction = 0;
  std::vector<BenchRank> per_rank;
};

// Runs warm-up and measured steps on every rank and reports on rank 0
// (returned there; other ranks get an empty report). Collective.
BenchReport Bench(const TrainConfig& config, const RunComms& comms, const BenchOptions& options);

// The report as JSON (the keys of BenchReport).
std::string BenchReportJson(const BenchReport& report);

// Ranks sharing cores (more processes than CPUs): what a rank costs the
// others beyond its actions depends on how the system schedules the
// processes, so the config's pipeline and up to two others (a zero-bubble
// order of it, and its stages' costs evened out) run `steps` measured
// steps each on every rank of `world` (the config's pipeline ranks, one
// replica), and rank 0 fits `profile`'s shared-core model to their
// median steps (FitSharedCores, baton/price.h). Collective.
void CalibrateSharing(Transport& world, const TrainConfig& config, int steps, Profile& profile);

// The report as `baton bench` prints it: the step, bubble, prediction,
// messages, gradient sums, cores and compute, and a row per rank.
std::string DescribeBenchReport(const BenchReport& report);

// A sweep's reports (label, report) as an SVG bar chart: samples/s, and
// the measured and simulated bubble rates.
std::string SweepSvg(const std::vector<std::pair<std::string, BenchReport>>& rows);

}  // namespace baton

#endif  // BATON_BENCH_H_
