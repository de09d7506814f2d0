// `baton bench`: measured steps with every action timed, compared with the
// simulator's prediction from the measured costs and with the hardware's
// limit (the model's GEMMs on one core, measured in the same run).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "baton/host.h"
#include "baton/error.h"
#include "baton/files.h"
#include "baton/bench.h"
#include "baton/sim.h"
#include "cores.h"
#include "setup.h"

namespace baton {
namespace {

double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double Median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The model's linear shapes (in, out), in order: the hardware reference's GEMMs.
std::vector<std::pair<int, int>> LinearShapes(const ModelDesc& model) {
  std::vector<std::pair<int, int>> shapes;
  for (const OpDesc& op : model.ops) {
    if (op.type == LayerType::kLinear) shapes.push_back({op.in, op.out});
  }
  return shapes;
}

// One-way latency between ranks 0 and 1 for a message of `floats`: half the
// median round trip.
double PingPong(Transport& t, std::size_t bytes) {
  if (t.size() < 2 || t.rank() > 1) return 0.0;
  std::vector<std::byte> buf(std::max<std::size_t>(bytes, 1), std::byte{1});
  const int peer = 1 - t.rank();
  std::vector<double> trips;
  for (int i = 0; i < 60; ++i) {
    const double start = Now();
    if (t.rank() == 0) {
      t.Irecv(1, buf.data(), buf.size(), peer, 99);
      t.Isend(0, buf.data(), buf.size(), peer, 98);
      t.Wait(0, {"SEND (latency probe)", -1, i, peer});
      t.Wait(1, {"RECV (latency probe)", -1, i, peer});
    } else {
      t.Irecv(1, buf.data(), buf.size(), peer, 98);
      t.Wait(1, {"RECV (latency probe)", -1, i, peer});
      t.Isend(0, buf.data(), buf.size(), peer, 99);
      t.Wait(0, {"SEND (latency probe)", -1, i, peer});
    }
    if (i >= 10) trips.push_back(Now() - start);
  }
  return Median(trips) / 2;
}

// The replica group's all-reduce of `floats` floats: the median of 30
// (after 5 unmeasured), collective over the group. Outside any step.
double AllReduceTime(ReplicaGroup& g, std::size_t floats, double timeout_s) {
  std::vector<float> buf(std::max<std::size_t>(floats, 1), 1.0f);
  g.Configure(1, timeout_s);
  std::vector<double> times;
  for (int i = 0; i < 35; ++i) {
    const double start = Now();
    g.StartAllReduce(0, buf);
    g.Wait(0, {"the all-reduce probe", -1, i, -1});
    if (i >= 5) times.push_back(Now() - start);
  }
  return Median(times);
}

// Compute events are named as in the simulator's trace ("F", "I", ...);
// waits by what they wait for.
std::string_view EventName(ActionKind k) {
  if (IsCompute(k)) return KindName(k);
  if (k == ActionKind::kRecvF) return "wait RECV_F";
  if (k == ActionKind::kRecvB) return "wait RECV_B";
  if (k == ActionKind::kReduceGrad) return "wait gradient sums";
  return "wait SEND";
}

// Per rank and step, gathered on rank 0.
struct StepRecord {
  double wall = 0, busy = 0, waiting = 0;
  double reduction_start = 0, reduction_end = 0;  // the gradient sums (ReductionTimes), from the step's start
  double cpu = 0;  // the rank's CPU seconds in the step (actions, waits, messages, sums)
  std::vector<ActionEvent> events;  // times relative to the step's start
};

// Timeline of one step as a SimResult, for the picture (times in ms).
SimResult AsSimResult(const std::string& name, const Schedule& s, const std::vector<const StepRecord*>& ranks) {
  SimResult r;
  r.schedule = name;
  r.ranks = s.ranks;
  r.microbatches = s.microbatches;
  r.chunks = s.chunks();
  r.timeline.resize(s.ranks);
  r.per_rank.resize(s.ranks);
  double busy = 0, max_span = 0;
  for (int k = 0; k < s.ranks; ++k) {
    RankResult& rr = r.per_rank[k];
    rr.rank = k;
    for (int st = 0; st < s.stages; ++st) {
      if (s.stage_rank[st] == k) rr.stages.push_back(st);
    }
    bool first = true;
    for (const ActionEvent& e : ranks[k]->events) {
      if (!IsCompute(e.kind)) continue;
      r.timeline[k].push_back({Action{e.stage, e.kind, e.microbatch}, e.start * 1e3, e.end * 1e3});
      if (first) rr.start = e.start * 1e3;
      first = false;
      rr.end = e.end * 1e3;
      rr.busy += (e.end - e.start) * 1e3;
    }
    rr.span = rr.end - rr.start;
    r.makespan = std::max(r.makespan, rr.end);
    busy += rr.busy;
    max_span = std::max(max_span, rr.span);
  }
  r.bubble_rate = r.makespan > 0 ? 1 - busy / (s.ranks * r.makespan) : 0;
  r.span_bubble_rate = max_span > 0 ? 1 - busy / (s.ranks * max_span) : 0;
  return r;
}

// Two pictures stacked in one SVG: each is a complete <svg> element, nested.
std::string StackSvgs(const std::string& top, const std::string& bottom) {
  auto size = [](const std::string& svg, const char* attr) {
    const std::size_t at = svg.find(std::string(attr) + "=\"");
    return at == std::string::npos ? 0.0 : std::atof(svg.c_str() + at + std::strlen(attr) + 2);
  };
  auto body = [](const std::string& svg) {
    const std::size_t at = svg.find("<svg");
    return at == std::string::npos ? svg : svg.substr(at);
  };
  const double w = std::max(size(top, "width"), size(bottom, "width"));
  const double h1 = size(top, "height"), h2 = size(bottom, "height");
  std::string b = body(bottom);
  b.insert(4, fmt::format(" y=\"{}\"", h1));
  return fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" "
      "height=\"{}\" viewBox=\"0 0 {} {}\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n{}\n{}\n</svg>\n",
      w, h1 + h2, w, h1 + h2, body(top), b);
}

void WriteTrace(const std::string& path, const std::vector<std::vector<StepRecord>>& all, const std::string& name) {
  std::string out = "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  bool first = true;
  auto add = [&](const std::string& e) {
    out += first ? "  " : ",\n  ";
    out += e;
    first = false;
  };
  const int ranks = static_cast<int>(all.size());
  for (int r = 0; r < ranks; ++r) {
    add(fmt::format(R"({{"ph": "M", "pid": {}, "name": "process_name", "args": {{"name": "rank {}"}}}})", r, r));
    add(fmt::format(R"({{"ph": "M", "pid": {}, "name": "process_sort_index", "args": {{"sort_index": {}}}}})", r, r));
  }
  // Steps laid end to end, each starting where the slowest rank ended the last.
  double offset = 0;
  const std::size_t steps = all.empty() ? 0 : all[0].size();
  for (std::size_t k = 0; k < steps; ++k) {
    double longest = 0;
    for (int r = 0; r < ranks; ++r) {
      const StepRecord& s = all[r][k];
      longest = std::max(longest, s.wall);
      for (const ActionEvent& e : s.events) {
        add(fmt::format(R"({{"ph": "X", "pid": {}, "tid": 0, "name": "{}", "cat": "{}", "ts": {:.3f}, "dur": {:.3f}, )"
                        R"("args": {{"stage": {}, "microbatch": {}, "step": {}}}}})",
                        r, EventName(e.kind), IsCompute(e.kind) ? "compute" : "wait", (offset + e.start) * 1e6,
                        (e.end - e.start) * 1e6, e.stage, e.microbatch, k));
      }
    }
    offset += longest;
  }
  out += fmt::format("\n], \"otherData\": {{\"schedule\": {}}}}}\n", nlohmann::json(name).dump());
  WriteTextFile(path, out);
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

BenchReport Bench(const TrainConfig& config, const RunComms& comms, const BenchOptions& o) {
  Transport& t = comms.world;
  TrainConfig c = config;
  c.log.metrics = "";
  c.log.weights = "";
  c.log.progress = false;
  c.data.evaluate = false;
  c.data.validation = false;
  // Synthetic data of the same shapes: no files. Token data stays tokens
  // (fortunes' vocabulary is 256, as synthetic_tokens' default).
  const DatasetKind synthetic = IsTokenDataset(c.data.dataset) ? DatasetKind::kSyntheticTokens : DatasetKind::kSynthetic;
  if (!o.real_data && c.data.dataset != synthetic) {
    c.data.dataset = synthetic;
    c.data.samples = std::max<std::int64_t>(c.train.batch_size, 4096);
  }
  if (o.steps < 1 || o.warmup_steps < 0) throw ConfigError("bench: --steps must be >= 1 and --warmup >= 0");
  RunSetup u;
  SetUpRun(c, comms, u);
  Executor& exec = *u.exec;
  const int replicas = c.data_parallel.size;
  const int rows = u.plan.rows;
  const bool root = t.rank() == 0;

  // The hardware's limit first, on rank 0 alone while the others wait.
  BenchReport report;
  // Matrix rows are tokens: samples x sequence (1 for feature vectors).
  if (root) report.peak_gflops_one_core = u.device->GemmGflops(LinearShapes(u.plan.model), rows * u.plan.model.seq);
  t.Barrier();
  // The probe message is one activation crossing the first stage boundary.
  const double latency = PingPong(comms.pipeline, u.rank_plan.stage_output.front().bytes());
  std::vector<std::string> signatures;
  t.GatherStrings(CoreSignature(), &signatures);

  // Data parallelism: the replica groups' all-reduce, small and large, for
  // the alpha-beta model (each group at once, as in a step).
  double ar_alpha = 0, ar_bandwidth = 0;
  std::size_t largest_stage = 0;
  for (const StagePlan& st : u.rank_plan.local_stages) largest_stage = std::max(largest_stage, st.num_params);
  if (replicas > 1) {
    const double d = replicas;
    const std::size_t big = std::max<std::size_t>(largest_stage, 1 << 18);
    const double small_t = AllReduceTime(comms.replicas, 1, c.pipeline.wait_timeout_s);
    const double big_t = AllReduceTime(comms.replicas, big, c.pipeline.wait_timeout_s);
    ar_alpha = small_t / (2 * (d - 1));
    ar_bandwidth = 2 * (d - 1) / d * double(big) * sizeof(float) / std::max(big_t - small_t, 1e-9);
    // The executor's own request table again.
    comms.replicas.Configure(u.rank_plan.reduction.requests, c.pipeline.wait_timeout_s);
  }
  t.Barrier();

  for (int i = 0; i < o.warmup_steps; ++i) exec.TrainStep(u.loader->Next());

  // Unrecorded steps: the baseline that shows what recording costs.
  // On a GPU a step ends when the device has done its work: the host waits
  // for it (outside steps, for the optimizer's work too, so that each step
  // starts on an idle device).
  RankDevice& device = *u.device;
  std::vector<double> plain;
  for (int i = 0; i < o.steps; ++i) {
    const Batch batch = u.loader->Next();
    device.Synchronize();
    t.Barrier();
    const double start = Now();
    exec.RunStep(batch);
    // The tied gradients' sum and the end of the gradient sums over the
    // replicas belong to the step; the optimizer does not.
    exec.SumTiedGradients();
    exec.FinishReductions();
    device.Synchronize();
    plain.push_back(Now() - start);
    exec.StepOptimizers();  // outside the clock
  }
  // Recorded steps: each starts at a barrier, so rank clocks line up.
  std::vector<ActionEvent> events;
  events.reserve(exec.EventsPerStep() * o.steps);
  std::vector<double> starts, ends, step_cpu;
  std::vector<ReductionTimes> reduction;
  std::vector<std::size_t> event_begin;
  exec.SetRecorder(&events);
  // The products inside the actions, timed call by call (host layers).
  StartGemmMeter(std::size_t(1) << 22);
  for (int i = 0; i < o.steps; ++i) {
    // The batch is fetched before the clock starts: a step is the schedule's
    // work, from a barrier to the rank's last action.
    const Batch batch = u.loader->Next();
    device.Synchronize();
    t.Barrier();
    starts.push_back(Now());
    exec.StartDeviceClock();
    const double cpu_start = Executor::CpuNow();
    event_begin.push_back(events.size());
    exec.RunStep(batch);
    exec.SumTiedGradients();
    exec.FinishReductions();
    const double host_end = Now();
    // A GPU's compute actions as the device ran them; the step ends when
    // the device is done.
    ends.push_back(std::max(host_end, exec.ApplyDeviceClock(event_begin.back(), starts.back())));
    step_cpu.push_back(Executor::CpuNow() - cpu_start);
    reduction.push_back(exec.reduction_times());
    exec.StepOptimizers();
  }
  exec.SetRecorder(nullptr);
  event_begin.push_back(events.size());
  GemmTotals gemm = StopGemmMeter();
  // One step's calls (every step makes the same), replayed bare.
  gemm.calls.resize(std::min(gemm.calls.size(), gemm.calls.size() / std::size_t(o.steps)));
  const double gemm_bare_step = BareGemmSeconds(gemm.calls);

  // The cost of recording one event: two reads of each clock and a store.
  double record_cost = 0;
  {
    std::vector<ActionEvent> probe;
    probe.reserve(100000);
    const double start = Now();
    for (int i = 0; i < 100000; ++i) probe.push_back({ActionKind::kForward, 0, i, Now(), Now(), Executor::CpuNow() - Executor::CpuNow()});
    record_cost = (Now() - start) / 100000;
  }

  // Pack per step: wall, busy, waiting, the sums' start and end, CPU time,
  // events, then the events (6 floats each).
  std::vector<float> mine;
  for (int k = 0; k < o.steps; ++k) {
    double busy = 0, waiting = 0;
    for (std::size_t e = event_begin[k]; e < event_begin[k + 1]; ++e) {
      const double d = events[e].end - events[e].start;
      (IsCompute(events[e].kind) ? busy : waiting) += d;
    }
    mine.push_back(float(ends[k] - starts[k]));
    mine.push_back(float(busy));
    mine.push_back(float(waiting));
    mine.push_back(float(reduction[k].total() > 0 ? reduction[k].first_start - starts[k] : 0.0));
    mine.push_back(float(reduction[k].total() > 0 ? reduction[k].last_end - starts[k] : 0.0));
    mine.push_back(float(step_cpu[k]));
    mine.push_back(float(event_begin[k + 1] - event_begin[k]));
    for (std::size_t e = event_begin[k]; e < event_begin[k + 1]; ++e) {
      const ActionEvent& ev = events[e];
      mine.insert(mine.end(), {float(ev.kind), float(ev.stage), float(ev.microbatch), float(ev.start - starts[k]),
                               float(ev.end - starts[k]), float(ev.cpu)});
    }
  }
  mine.push_back(float(Median(plain)));
  mine.push_back(float(ar_alpha));
  mine.push_back(float(ar_bandwidth / 1e6));  // MB/s: a float holds it
  mine.push_back(float(gemm.flops / o.steps / 1e9));  // GFLOP a step
  mine.push_back(float(gemm.seconds / o.steps));
  mine.push_back(float(gemm_bare_step));
  std::vector<float> all;
  t.GatherToRoot(mine, &all);
  if (!root) return {};

  // Unpack: all[r][k].
  const int p = t.size();
  std::vector<std::vector<StepRecord>> rec(p, std::vector<StepRecord>(o.steps));
  std::vector<double> plain_medians;
  double gemm_gflop = 0, gemm_inside_s = 0, gemm_bare_s = 0;  // per step, summed over ranks
  std::size_t at = 0;
  for (int r = 0; r < p; ++r) {
    for (int k = 0; k < o.steps; ++k) {
      StepRecord& s = rec[r][k];
      s.wall = all[at++];
      s.busy = all[at++];
      s.waiting = all[at++];
      s.reduction_start = all[at++];
      s.reduction_end = all[at++];
      s.cpu = all[at++];
      const int n = static_cast<int>(all[at++]);
      for (int e = 0; e < n; ++e, at += 6) {
        s.events.push_back({static_cast<ActionKind>(int(all[at])), int(all[at + 1]), int(all[at + 2]),
                            all[at + 3], all[at + 4], all[at + 5]});
      }
    }
    plain_medians.push_back(all[at++]);
    if (r == 0) {
      report.allreduce_step_latency_s = all[at];
      report.allreduce_bandwidth_Bps = double(all[at + 1]) * 1e6;
    }
    gemm_gflop += all[at + 2];
    gemm_inside_s += all[at + 3];
    gemm_bare_s += all[at + 4];
    at += 5;
  }
  report.replicas = replicas;
  if (gemm_inside_s > 0 && gemm_bare_s > 0) {
    report.gemm_gflop_per_step = gemm_gflop;
    report.gemm_gflops_inside = gemm_gflop / gemm_inside_s;
    report.gemm_gflops_bare = gemm_gflop / gemm_bare_s;
    report.gemm_inside_over_bare = gemm_bare_s / gemm_inside_s;
  }
  if (replicas > 1) {
    // Hidden: the part of a rank's sums before the step's last action on
    // any rank ends (the pipeline's cool-down); exposed: the rest, which
    // lengthens the step.
    std::vector<double> per_step, exposed_step;
    double total = 0, hidden = 0;
    for (int k = 0; k < o.steps; ++k) {
      double compute_end = 0, sum = 0, tail = 0;
      for (int r = 0; r < p; ++r) {
        for (const ActionEvent& e : rec[r][k].events) {
          if (IsCompute(e.kind)) compute_end = std::max(compute_end, e.end);
        }
      }
      for (int r = 0; r < p; ++r) {
        const StepRecord& sr = rec[r][k];
        const double length = sr.reduction_end - sr.reduction_start;
        sum += length;
        total += length;
        hidden += std::clamp(compute_end - sr.reduction_start, 0.0, length);
        tail = std::max(tail, sr.reduction_end - compute_end);
      }
      per_step.push_back(sum / p);
      exposed_step.push_back(std::max(tail, 0.0));
    }
    report.reduction_s = Median(per_step);
    report.reduction_exposed_s = Median(exposed_step);
    report.reduction_hidden_fraction = total > 0 ? hidden / total : 0;
  }
  report.schedule = u.plan.lowered.name;
  report.ranks = p;
  report.microbatches = u.plan.lowered.microbatches;
  report.chunks = u.plan.lowered.chunks();
  report.batch_size = c.train.batch_size;
  report.warmup_steps = o.warmup_steps;
  report.steps = o.steps;
  report.message_latency_s = latency;
  report.record_cost_per_event_s = record_cost;
  report.step_time_unrecorded_s = *std::max_element(plain_medians.begin(), plain_medians.end());

  std::vector<double> makespans, bubbles;
  for (int k = 0; k < o.steps; ++k) {
    double makespan = 0, busy = 0;
    for (int r = 0; r < p; ++r) {
      makespan = std::max(makespan, rec[r][k].wall);
      busy += rec[r][k].busy;
    }
    makespans.push_back(makespan);
    bubbles.push_back(makespan > 0 ? 1 - busy / (p * makespan) : 0);
  }
  report.step_time_median_s = Median(makespans);
  report.step_time_min_s = *std::min_element(makespans.begin(), makespans.end());
  report.step_time_max_s = *std::max_element(makespans.begin(), makespans.end());
  report.samples_per_s = c.train.batch_size / report.step_time_median_s;
  report.tokens_per_s = report.samples_per_s * u.plan.model.seq;
  report.bubble_rate = Median(bubbles);

  // FLOPs of each stage's linears per step: forward, input and weight gradient.
  std::vector<double> stage_flops(u.plan.lowered.stages);
  {
    for (int s = 0; s < u.plan.lowered.stages; ++s) {
      stage_flops[s] = 3 * u.plan.model.GemmFlopsPerRow(u.plan.bounds[s], u.plan.bounds[s + 1]) *
                       c.train.batch_size * u.plan.model.seq;
    }
  }
  double total_flops = 0;
  for (double f : stage_flops) total_flops += f;
  for (int r = 0; r < p; ++r) {
    BenchRank br;
    br.rank = r;
    std::vector<double> wall, busy, waiting;
    for (int k = 0; k < o.steps; ++k) {
      wall.push_back(rec[r][k].wall);
      busy.push_back(rec[r][k].busy);
      waiting.push_back(rec[r][k].waiting);
    }
    // Means, so that busy + waiting + idle add up to the wall time exactly.
    auto mean = [](const std::vector<double>& v) {
      double sum = 0;
      for (double x : v) sum += x;
      return sum / v.size();
    };
    br.wall_s = mean(wall);
    br.busy_s = mean(busy);
    br.waiting_s = mean(waiting);
    br.idle_s = br.wall_s - br.busy_s - br.waiting_s;
    double flops = 0;
    for (int s = 0; s < u.plan.lowered.stages; ++s) {
      // World rank r is pipeline rank r / D: its stages, on 1/D of the batch.
      if (u.plan.lowered.stage_rank[s] == r / replicas) flops += stage_flops[s] / replicas;
    }
    br.gflops = flops / br.wall_s / 1e9;
    report.per_rank.push_back(br);
  }
  // Ranks sharing cores compute at most on the cores there are.
  const CoreSharing sharing = FindCoreSharing(signatures, u.plan.lowered.ranks, replicas);
  report.cores = sharing.cores;
  report.cores_shared = sharing.shared;
  const int computing = sharing.shared ? std::min(p, sharing.cores) : p;
  report.gflops_total = total_flops / report.step_time_median_s / 1e9;
  report.fraction_of_peak = report.gflops_total / (computing * report.peak_gflops_one_core);
  report.blas_core = u.device->GemmKernels();
  report.action_clock = u.device->has_clock() ? "device" : "host";
  {
    // While computing: over the actions' wall time, or their CPU time where
    // the wall time includes waiting for a core.
    double busy = 0;
    for (int r = 0; r < p; ++r) {
      for (const StepRecord& s : rec[r]) {
        for (const ActionEvent& e : s.events) {
          if (IsCompute(e.kind)) busy += (sharing.shared ? e.cpu : e.end - e.start) / o.steps;
        }
      }
    }
    report.gflops_while_busy = busy > 0 ? total_flops / busy / 1e9 : 0;
    report.busy_fraction_of_peak = report.gflops_while_busy / report.peak_gflops_one_core;
  }
  if (sharing.shared) {
    std::vector<double> idle;
    for (int k = 0; k < o.steps; ++k) {
      double cpu = 0;
      for (int r = 0; r < p; ++r) cpu += rec[r][k].cpu;
      idle.push_back(makespans[k] > 0 ? 1 - cpu / (computing * makespans[k]) : 0);
    }
    report.core_idle_rate = Median(idle);
  }
  // With shared cores the cores' idle share is the bubble that limits the rate.
  report.goal_gflops = 0.95 * (1 - (sharing.shared ? report.core_idle_rate : report.bubble_rate)) * computing *
                       report.peak_gflops_one_core;

  // The simulator, fed the measured median cost of every (stage, kind) and
  // the measured latency, predicts the step time.
  // With ranks sharing cores, an action's wall time includes waiting for a
  // core; the simulator shares them itself, so the cost is the CPU time.
  // The rank's CPU time outside its actions (polling, messages, sums) takes
  // the same cores: it is charged to the rank's actions in proportion.
  std::map<std::pair<int, ActionKind>, std::vector<double>> costs;
  for (int r = 0; r < p; ++r) {
    double scale = 1.0;
    if (sharing.shared) {
      double in_actions = 0, in_steps = 0;
      for (const StepRecord& s : rec[r]) {
        in_steps += s.cpu;
        for (const ActionEvent& e : s.events) {
          if (IsCompute(e.kind)) in_actions += e.cpu;
        }
      }
      if (in_actions > 0) scale = std::max(1.0, in_steps / in_actions);
      report.cpu_outside_actions = std::max(report.cpu_outside_actions, scale - 1.0);
    }
    for (const StepRecord& s : rec[r]) {
      for (const ActionEvent& e : s.events) {
        if (IsCompute(e.kind)) costs[{e.stage, e.kind}].push_back(sharing.shared ? scale * e.cpu : e.end - e.start);
      }
    }
  }
  // Medians as the issue of record; means as well, because on a noisy
  // machine the spread of action times stretches real steps past the sum of
  // typical costs, and the mean-cost prediction shows how much of a gap that is.
  // The gradient sums: the alpha-beta time of each stage's buckets; a tied
  // copy's stage sums at its rank's end.
  std::vector<double> reduce_time;
  std::vector<char> reduce_at_end;
  if (replicas > 1) {
    reduce_time.assign(u.plan.lowered.stages, 0.0);
    reduce_at_end.assign(u.plan.lowered.stages, 0);
    for (int r = 0; r < u.plan.lowered.ranks; ++r) {
      const RankPlan rp = PlanRank(u.plan, r);
      for (std::size_t k = 0; k < rp.local_stages.size(); ++k) {
        const StagePlan& st = rp.local_stages[k];
        reduce_time[st.stage] =
            GradientSumTime(double(st.num_params) * sizeof(float), replicas, u.plan.bucket_cap_bytes,
                            report.allreduce_step_latency_s, report.allreduce_bandwidth_Bps);
        reduce_at_end[st.stage] = rp.reduction.start_after[k] < 0;
        report.predicted_reduction_s = std::max(report.predicted_reduction_s, reduce_time[st.stage]);
      }
    }
  }
  auto costs_from = [&](auto statistic) {
    SimOptions sim;
    sim.comm = latency;
    sim.stage_reduce_time = reduce_time;
    sim.reduce_at_end = reduce_at_end;
    sim.core_pool = sharing.core_pool;
    sim.pool_cores = sharing.pool_cores;
    sim.stage_costs.resize(u.plan.lowered.stages, Costs{0, 0, 0});
    for (auto& [key, v] : costs) {
      Costs& cs = sim.stage_costs[key.first];
      switch (key.second) {
        case ActionKind::kForward:
          cs.forward = statistic(v);
          break;
        case ActionKind::kBackward:
          cs.backward_input = statistic(v);
          break;  // B = I + W with W = 0
        case ActionKind::kBackwardInput:
          cs.backward_input = statistic(v);
          break;
        case ActionKind::kBackwardWeight:
          cs.backward_weight = statistic(v);
          break;
        default:
          break;
      }
    }
    return sim;
  };
  const SimResult predicted = Simulate(u.plan.lowered, costs_from([](const std::vector<double>& v) { return Median(v); }));
  report.predicted_step_time_s = predicted.makespan;
  report.simulated_bubble_rate = predicted.bubble_rate;
  if (sharing.shared) {
    // The simulated pipeline's cores: each pool's, as many as it has ranks at most.
    std::vector<int> ranks_in(sharing.pool_cores.size(), 0);
    for (int pool : sharing.core_pool) ++ranks_in[static_cast<std::size_t>(pool)];
    double cores = 0, work = 0;
    for (std::size_t k = 0; k < ranks_in.size(); ++k) cores += std::min<double>(sharing.pool_cores[k], ranks_in[k]);
    for (const RankResult& rr : predicted.per_rank) work += rr.work;
    report.simulated_core_idle_rate = predicted.makespan > 0 ? 1 - work / (cores * predicted.makespan) : 0;
  }
  report.measured_over_predicted = report.step_time_median_s / predicted.makespan;
  SimOptions mean_costs = costs_from([](const std::vector<double>& v) {
    double sum = 0;
    for (double x : v) sum += x;
    return v.empty() ? 0.0 : sum / v.size();
  });
  mean_costs.record_timeline = false;
  report.predicted_step_time_mean_costs_s = Simulate(u.plan.lowered, mean_costs).makespan;
  {
    std::vector<double> spread;
    for (auto& [key, v] : costs) {
      std::vector<double> sorted = v;
      std::sort(sorted.begin(), sorted.end());
      const double med = Median(v);
      if (med > 0) spread.push_back((sorted[sorted.size() * 9 / 10] - sorted[sorted.size() / 10]) / med);
    }
    report.action_time_spread = Median(spread);
  }

  if (!o.json_path.empty()) WriteTextFile(o.json_path, BenchReportJson(report));
  if (!o.trace_path.empty()) WriteTrace(o.trace_path, rec, report.schedule);
  if (!o.svg_path.empty()) {
    // The median step, measured, above the simulation from measured costs.
    std::vector<std::size_t> order(o.steps);
    for (int k = 0; k < o.steps; ++k) order[k] = k;
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return makespans[a] < makespans[b]; });
    const std::size_t k = order[o.steps / 2];
    // The first replica's pipeline: world rank = pipeline rank x D.
    std::vector<const StepRecord*> step_of_rank;
    for (int r = 0; r < u.plan.lowered.ranks; ++r) step_of_rank.push_back(&rec[r * replicas][k]);
    SimResult measured =
        AsSimResult(fmt::format("{}: measured step {} (ms)", report.schedule, k), u.plan.lowered, step_of_rank);
    SimResult simulated = predicted;
    simulated.schedule = fmt::format("{}: simulated from the measured costs (ms)", report.schedule);
    for (auto& row : simulated.timeline) {
      for (TimedAction& a : row) {
        a.start *= 1e3;
        a.end *= 1e3;
      }
    }
    simulated.makespan *= 1e3;
    for (RankResult& rr : simulated.per_rank) {
      rr.start *= 1e3;
      rr.end *= 1e3;
      rr.busy *= 1e3;
      rr.span *= 1e3;
    }
    std::ostringstream top, bottom;
    const double axis = std::max(measured.makespan, simulated.makespan);
    WriteSvg(measured, top, axis);
    WriteSvg(simulated, bottom, axis);
    WriteTextFile(o.svg_path, StackSvgs(top.str(), bottom.str()));
  }
  return report;
}

}  // namespace baton
