// `baton bench`: measured steps with every action timed, compared with the
// simulator's prediction from the measured costs and with the hardware's
// limit (the model's products on one rank, measured in the same run). Four
// parts: measure (measure.h, on every rank), one record per rank gathered
// on rank 0 (record.h), the analysis (analyze.h, pure) and the pictures
// (render.h, the simulator's writers).
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "analyze.h"
#include "baton/bench.h"
#include "baton/error.h"
#include "baton/files.h"
#include "baton/measure_profile.h"
#include "baton/profile_price.h"
#include "baton/timing.h"
#include "baton/train.h"
#include "measure.h"
#include "render.h"
#include "setup.h"

namespace baton {
namespace {

// The config as bench runs it: no metrics, weights, progress or
// evaluation; synthetic data of the same shapes (no files) unless asked for
// the real data. Token data stays tokens (fortunes' vocabulary is 256, as
// synthetic_tokens' default).
TrainConfig BenchConfig(const TrainConfig& config, const BenchOptions& o) {
  if (o.steps < 1 || o.warmup_steps < 0) throw ConfigError("bench: --steps must be >= 1 and --warmup >= 0");
  TrainConfig c = config;
  c.log.metrics = "";
  c.log.weights = "";
  c.log.progress = false;
  c.data.evaluate = false;
  c.data.validation = false;
  c.train.clip_grad_norm = 0;  // its steps are the executor's, unclipped: so is their price
  const DatasetKind synthetic = IsTokenDataset(c.data.dataset) ? DatasetKind::kSyntheticTokens : DatasetKind::kSynthetic;
  if (!o.real_data && c.data.dataset != synthetic) {
    c.data.dataset = synthetic;
    c.data.samples = std::max<std::int64_t>(c.train.batch_size, 4096);
  }
  return c;
}

}  // namespace

std::string BenchReportJson(const BenchReport& b) {
  nlohmann::ordered_json j;
  j["schedule"] = b.schedule;
  j["ranks"] = b.ranks;
  j["microbatches"] = b.microbatches;
  j["chunks"] = b.chunks;
  j["batch_size"] = b.batch_size;
  j["warmup_steps"] = b.warmup_steps;
  j["steps"] = b.steps;
  j["step_time_median_s"] = b.step_time_median_s;
  j["step_time_min_s"] = b.step_time_min_s;
  j["step_time_max_s"] = b.step_time_max_s;
  j["step_times_s"] = b.step_times_s;
  if (!b.packed_predicted_s.empty()) {
    j["packed_predicted_s"] = b.packed_predicted_s;
    j["packed_measured_over_predicted"] = b.packed_measured_over_predicted;
  }
  j["samples_per_s"] = b.samples_per_s;
  j["tokens_per_s"] = b.tokens_per_s;
  j["bubble_rate"] = b.bubble_rate;
  j["simulated_bubble_rate"] = b.simulated_bubble_rate;
  j["predicted_step_time_s"] = b.predicted_step_time_s;
  j["measured_over_predicted"] = b.measured_over_predicted;
  j["predicted_step_time_mean_costs_s"] = b.predicted_step_time_mean_costs_s;
  j["action_time_spread"] = b.action_time_spread;
  j["message_latency_s"] = b.message_latency_s;
  j["cores"] = b.cores;
  j["cores_shared"] = b.cores_shared;
  j["cpu_outside_actions"] = b.cpu_outside_actions;
  j["core_idle_rate"] = b.core_idle_rate;
  j["simulated_core_idle_rate"] = b.simulated_core_idle_rate;
  j["gflops_total"] = b.gflops_total;
  j["peak_gflops_one_core"] = b.peak_gflops_one_core;
  j["blas_core"] = b.blas_core;
  j["action_clock"] = b.action_clock;
  j["gflops_while_busy"] = b.gflops_while_busy;
  j["busy_fraction_of_peak"] = b.busy_fraction_of_peak;
  j["fraction_of_peak"] = b.fraction_of_peak;
  j["goal_gflops"] = b.goal_gflops;
  j["record_cost_per_event_s"] = b.record_cost_per_event_s;
  j["step_time_unrecorded_s"] = b.step_time_unrecorded_s;
  j["gemm_gflop_per_step"] = b.gemm_gflop_per_step;
  j["gemm_gflops_inside"] = b.gemm_gflops_inside;
  j["gemm_gflops_bare"] = b.gemm_gflops_bare;
  j["gemm_inside_over_bare"] = b.gemm_inside_over_bare;
  j["replicas"] = b.replicas;
  if (b.replicas > 1) {
    j["allreduce_step_latency_s"] = b.allreduce_step_latency_s;
    j["allreduce_bandwidth_Bps"] = b.allreduce_bandwidth_Bps;
    j["reduction_s"] = b.reduction_s;
    j["reduction_exposed_s"] = b.reduction_exposed_s;
    j["reduction_hidden_fraction"] = b.reduction_hidden_fraction;
    j["predicted_reduction_s"] = b.predicted_reduction_s;
    j["zero"] = b.zero.number();
    if (b.zero.has_actions()) {
      j["gathers_per_stage"] = b.gathers_per_stage;
      j["reduce_scatters_per_stage"] = b.reduce_scatters_per_stage;
      j["gather_wait_s"] = b.gather_wait_s;
      j["predicted_gather_s"] = b.predicted_gather_s;
      j["gather_hidden_fraction"] = b.gather_hidden_fraction;
    }
  }
  auto& stages = j["stage_costs_s"] = nlohmann::ordered_json::array();
  for (const Costs& c : b.stage_costs) {
    stages.push_back({{"forward", c.forward}, {"backward_input", c.backward_input}, {"backward_weight", c.backward_weight}});
  }
  auto& ranks = j["per_rank"] = nlohmann::ordered_json::array();
  for (const BenchRank& r : b.per_rank) {
    ranks.push_back({{"rank", r.rank},
                     {"wall_s", r.wall_s},
                     {"busy_s", r.busy_s},
                     {"waiting_s", r.waiting_s},
                     {"idle_s", r.idle_s},
                     {"gflops", r.gflops}});
  }
  return j.dump(2) + "\n";
}

// Packed documents: each recorded step against its prediction from the
// profile. The recorded steps follow the warm-up and as many unrecorded
// steps (MeasureRank), in the loaders' order.
void PricePackedSteps(const TrainConfig& c, const RunPlan& plan, const BenchOptions& o, BenchReport& report) {
  std::string source;
  const Profile profile = GradientsOnly(ProfileFor(c, o.profile_path, &source));  // as MeasureRank times a step
  const PackedRunSteps run = PackedSteps(c, plan, o.warmup_steps + o.steps, o.steps);
  std::vector<double> ratios;
  for (std::size_t k = 0; k < run.steps.size(); ++k) {
    const double predicted = PredictPackedStep(plan, profile, run.steps[k]).makespan;
    report.packed_predicted_s.push_back(predicted);
    if (k < report.step_times_s.size() && predicted > 0) ratios.push_back(report.step_times_s[k] / predicted);
  }
  report.packed_measured_over_predicted = Median(ratios);
}

BenchReport Bench(const TrainConfig& config, const RunComms& comms, const BenchOptions& o) {
  const TrainConfig c = BenchConfig(PlaceStages(config, comms.world), o);
  if (c.data.packing != Packing::kNone && !o.real_data) {
    throw ConfigError("bench: packed documents (data.packing) are measured on their own documents: add --real-data");
  }
  if (!o.profile_path.empty() && !RealLengths(c.data.packing)) {
    throw ConfigError("bench --profile: prices packed documents' steps (data.packing: greedy or balanced)");
  }
  if (c.pipeline.adapt != AdaptMode::kOff && c.pipeline.adapt_asked && comms.world.rank() == 0) {
    // Bench holds the plan still to hold it against its prediction.
    std::fprintf(stderr,
                 "baton: bench measures the plan as placed; pipeline.adapt is applied by baton train, whose re-plans are "
                 "printed and written as \"replan\" rows of its metrics file (bench/adapt_check.sh measures them)\n");
  }
  RunSetup u;
  SetupOptions setup;
  setup.training = false;
  setup.extra_outputs = {{"--json", o.json_path}, {"--trace", o.trace_path}, {"--svg", o.svg_path}};
  SetUpRun(c, comms, u, setup);
  const RankRecord mine = MeasureRank(u, comms, o);
  const std::vector<RankRecord> records = GatherRecords(comms.world, mine);
  if (comms.world.rank() != 0) return {};
  BenchContext context;
  context.plan = &u.plan;
  context.layout = {c.pipeline.ranks, c.data_parallel.size};
  context.warmup_steps = o.warmup_steps;
  context.blas_core = u.device->GemmKernels();
  context.action_clock = u.device->has_clock() ? "device" : "host";
  BenchAnalysis analysis = AnalyzeBench(context, records);
  if (!o.profile_path.empty()) PricePackedSteps(c, u.plan, o, analysis.report);
  if (!o.json_path.empty()) WriteTextFile(o.json_path, BenchReportJson(analysis.report));
  if (!o.trace_path.empty()) WriteBenchTrace(o.trace_path, analysis.report.schedule, records);
  if (!o.svg_path.empty()) WriteBenchSvg(o.svg_path, context, analysis, records);
  return analysis.report;
}

}  // namespace baton
