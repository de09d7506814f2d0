#include "measure.h"

#include <algorithm>

#include "baton/host.h"
#include "baton/timing.h"
#include "cores.h"

namespace baton {
namespace {

// The replica group's all-reduce of `floats` floats: the median of 30
// (after 5 unmeasured), collective over the group. Outside any step.
double AllReduceTime(ReplicaGroup& g, std::size_t floats, double timeout_s) {
  std::vector<float> buf(std::max<std::size_t>(floats, 1), 1.0f);
  g.Configure(1, timeout_s);
  std::vector<double> times;
  for (int i = 0; i < 35; ++i) {
    const double start = MonotonicSeconds();
    g.StartAllReduce(0, buf);
    g.Wait(0, {"the all-reduce probe", -1, i, -1});
    if (i >= 5) times.push_back(MonotonicSeconds() - start);
  }
  return Median(times);
}

// The alpha-beta model of the replica group's ring all-reduce, from a small
// and a large sum (each group at once, as in a step); the executor's own
// request table restored after.
void ProbeAllReduce(RunSetup& u, const RunComms& comms, double timeout_s, RankRecord& r) {
  const int replicas = comms.replicas.size();
  if (replicas < 2) return;
  std::size_t largest_stage = 0;
  for (const StagePlan& st : u.rank_plan.local_stages) largest_stage = std::max(largest_stage, st.num_params);
  const double d = replicas;
  const std::size_t big = std::max<std::size_t>(largest_stage, 1 << 18);
  const double small_t = AllReduceTime(comms.replicas, 1, timeout_s);
  const double big_t = AllReduceTime(comms.replicas, big, timeout_s);
  r.allreduce_step_latency_s = small_t / (2 * (d - 1));
  r.allreduce_bandwidth_Bps = 2 * (d - 1) / d * double(big) * sizeof(float) / std::max(big_t - small_t, 1e-9);
  comms.replicas.Configure(u.rank_plan.reduction.requests, timeout_s);
}

// The cost of recording one event: two reads of each clock and a store.
double RecordCostPerEvent() {
  constexpr int kEvents = 100000;
  std::vector<ActionEvent> probe;
  probe.reserve(kEvents);
  const double start = MonotonicSeconds();
  for (int i = 0; i < kEvents; ++i) {
    probe.push_back({ActionKind::kForward, 0, i, MonotonicSeconds(), MonotonicSeconds(),
                     ThreadCpuSeconds() - ThreadCpuSeconds()});
  }
  return (MonotonicSeconds() - start) / kEvents;
}

// Starts each step on an idle device at a barrier (so the ranks' clocks line
// up) and stops the clock when the step's gradients are final: the
// optimizer is not timed. On a GPU the step ends when the device has done
// its work.
class StepClock : public StepObserver {
 public:
  StepClock(Transport& world, RankDevice& device) : world_(world), device_(device) {}
  void StepStarts() override {
    device_.Synchronize();
    world_.Barrier();
    start_ = MonotonicSeconds();
  }
  void GradientsDone() override {
    device_.Synchronize();
    seconds.push_back(MonotonicSeconds() - start_);
  }
  std::vector<double> seconds;

 private:
  Transport& world_;
  RankDevice& device_;
  double start_ = 0;
};

// The recorded steps: the clock of StepClock, and on top every action and
// wait (the executor's recorder), the device's own clock where it has one,
// the CPU time and the gradient sums, one StepRecord per step.
class StepRecorder final : public StepObserver {
 public:
  StepRecorder(Transport& world, RankDevice& device, Executor& exec, int steps)
      : world_(world), device_(device), exec_(exec) {
    events_.reserve(exec.EventsPerStep() * static_cast<std::size_t>(steps));
    records.reserve(static_cast<std::size_t>(steps));
  }
  void StepStarts() override {
    device_.Synchronize();
    world_.Barrier();
    exec_.SetRecorder(&events_);
    start_ = MonotonicSeconds();
    exec_.StartDeviceClock();
    cpu_start_ = ThreadCpuSeconds();
    first_event_ = events_.size();
  }
  void GradientsDone() override {
    const double host_end = MonotonicSeconds();
    // A GPU's compute actions as the device ran them.
    const double end = std::max(host_end, exec_.ApplyDeviceClock(first_event_, start_));
    StepRecord s;
    s.wall = end - start_;
    s.cpu = ThreadCpuSeconds() - cpu_start_;
    const ReductionTimes& red = exec_.reduction_times();
    if (red.total() > 0) {
      s.reduction_start = red.first_start - start_;
      s.reduction_end = red.last_end - start_;
    }
    for (std::size_t e = first_event_; e < events_.size(); ++e) {
      ActionEvent ev = events_[e];
      (IsCompute(ev.kind) ? s.busy : s.waiting) += ev.end - ev.start;
      ev.start -= start_;
      ev.end -= start_;
      s.events.push_back(ev);
    }
    exec_.SetRecorder(nullptr);  // the optimizer is not recorded
    records.push_back(std::move(s));
  }
  std::vector<StepRecord> records;

 private:
  Transport& world_;
  RankDevice& device_;
  Executor& exec_;
  std::vector<ActionEvent> events_;
  double start_ = 0, cpu_start_ = 0;
  std::size_t first_event_ = 0;
};

}  // namespace

RankRecord MeasureRank(RunSetup& u, const RunComms& comms, const BenchOptions& o) {
  Transport& t = comms.world;
  Executor& exec = *u.exec;
  RankRecord r;
  r.rank = t.rank();
  // The hardware's limit first, on rank 0 alone while the others wait.
  // Matrix rows are tokens: samples x sequence (1 for feature vectors).
  if (t.rank() == 0) r.peak_gflops = u.device->GemmGflops(u.plan.model.LinearShapes(), u.plan.rows * u.plan.model.seq);
  t.Barrier();
  // The probe message is one activation crossing the first stage boundary.
  r.message_latency_s = PingPong(comms.pipeline, u.rank_plan.stage_output.front().bytes());
  r.cores = CoreSignature();
  ProbeAllReduce(u, comms, u.plan.wait_timeout_s, r);
  t.Barrier();

  for (int i = 0; i < o.warmup_steps; ++i) exec.TrainStep(u.loader->Next());
  // Unrecorded steps: the baseline that shows what recording costs. The
  // batch is fetched before the clock starts.
  StepClock clock(t, *u.device);
  for (int i = 0; i < o.steps; ++i) exec.TrainStep(u.loader->Next(), &clock);
  r.unrecorded_step_s = Median(clock.seconds);

  // Recorded steps, the host's products timed call by call inside them.
  StepRecorder recorder(t, *u.device, exec, o.steps);
  StartGemmMeter(std::size_t(1) << 22);
  for (int i = 0; i < o.steps; ++i) exec.TrainStep(u.loader->Next(), &recorder);
  GemmTotals gemm = StopGemmMeter();
  r.steps = std::move(recorder.records);
  // One step's calls (every step makes the same), replayed bare.
  gemm.calls.resize(std::min(gemm.calls.size(), gemm.calls.size() / std::size_t(o.steps)));
  r.gemm_flop_per_step = gemm.flops / o.steps;
  r.gemm_inside_s = gemm.seconds / o.steps;
  r.gemm_bare_s = BareGemmSeconds(gemm.calls);
  r.record_cost_per_event_s = RecordCostPerEvent();
  return r;
}

std::vector<RankRecord> GatherRecords(Transport& t, const RankRecord& mine) {
  std::vector<std::string> packed;
  t.GatherStrings(PackRecord(mine), &packed);
  std::vector<RankRecord> all;
  for (const std::string& bytes : packed) all.push_back(UnpackRecord(bytes));
  return all;
}

Profile GradientsOnly(Profile profile) {
  profile.optimizer.clear();
  profile.update.clear();
  profile.clip.clear();
  return profile;
}

}  // namespace baton
