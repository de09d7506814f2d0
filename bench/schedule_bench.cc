// Schedule library speed: generate, lower, validate and simulate a large
// schedule, reported as actions per second; and the tuner's search,
// reported as candidates per second. Each also counts the page faults of an
// iteration (see main for why memory the library frees is kept).
#include <benchmark/benchmark.h>
#include <sys/resource.h>


#include <string>
#include <string_view>

#include "baton/heap.h"
#include "baton/schedule.h"
#include "baton/sim.h"
#include "baton/tune.h"

namespace {

// Minor page faults of this process so far: first touches of fresh pages.
long PageFaults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// The whole pipeline a user's `baton simulate` runs for one schedule.
void GenerateLowerValidateSimulate(benchmark::State& state, const char* name) {
  const int p = static_cast<int>(state.range(0));
  const int m = static_cast<int>(state.range(1));
  const int v = static_cast<int>(state.range(2));
  std::size_t actions = 0;
  const long faults = PageFaults();
  for (auto _ : state) {
    baton::Schedule s = baton::Generate(name, p, m, v);
    baton::Schedule lowered = baton::Lower(s);
    baton::Validate(lowered);
    baton::SimOptions options;
    options.record_timeline = false;
    baton::SimResult r = baton::Simulate(lowered, options);
    benchmark::DoNotOptimize(r.makespan);
    actions = s.CountActions();
  }
  state.counters["page_faults"] =
      benchmark::Counter(static_cast<double>(PageFaults() - faults), benchmark::Counter::kAvgIterations);
  state.counters["compute_actions"] = static_cast<double>(actions);
  state.counters["actions_per_s"] =
      benchmark::Counter(static_cast<double>(actions), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Interleaved1F1B(benchmark::State& state) { GenerateLowerValidateSimulate(state, "interleaved_1f1b"); }
void BM_1F1B(benchmark::State& state) { GenerateLowerValidateSimulate(state, "1f1b"); }

// The tuner over every schedule, 12 microbatch counts, 4 chunk counts, 3
// checkpointing policies and 4 memory limits for 8 ranks and a 96-layer
// model (per layer and sample: F 1, I 1, W 0.8, 1 MiB of activations;
// 64 MiB of static state per layer); about 1,300 candidates.
void BM_Tune(benchmark::State& state) {
  constexpr int kRanks = 8, kLayers = 96, kBatch = 1024;
  constexpr double kMiB = 1024.0 * 1024.0;
  baton::TuneSpace space;
  space.ranks = kRanks;
  space.schedules = baton::GeneratorNames();
  space.microbatches = {8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512};
  space.chunks = {1, 2, 3, 4};
  space.checkpointing = {baton::Checkpointing::kNone, baton::Checkpointing::kSelective, baton::Checkpointing::kFull};
  space.memory_limits = {0.0, baton::kMemoryLimitFromBudget, 8.0, 16.0};
  auto model = [&](const baton::Candidate& c) {
    baton::CandidateCosts k;
    const int stages = kRanks * c.chunks;
    if (kLayers % stages != 0 || kBatch % c.microbatches != 0) {
      k.invalid = "does not divide";
      return k;
    }
    const double layers = kLayers / stages, samples = static_cast<double>(kBatch) / c.microbatches;
    const double keep = c.checkpointing == "none" ? 1.0 : c.checkpointing == "selective" ? 0.4 : 1.0 / 8;
    const double redo = c.checkpointing == "none" ? 0.0 : c.checkpointing == "selective" ? 0.3 : 1.0;
    baton::Costs stage{layers * samples + 0.05, layers * samples + 0.05, 0.8 * layers * samples + 0.05};
    stage.forward_backward = 0.85 * (stage.forward + stage.Backward());
    stage.backward_input += redo * layers * samples;  // recomputation lengthens I, B and F&B
    *stage.forward_backward += redo * layers * samples;
    k.price.compute.stages.assign(stages, stage);
    k.price.memory.stage_bytes.assign(stages, keep * layers * samples * kMiB);
    k.price.memory.rank_static_bytes.assign(kRanks, kLayers / kRanks * 64 * kMiB);
    k.price.messages.latency = 0.02;
    return k;
  };
  baton::TuneOptions options;
  options.memory_bytes = 60e9;
  std::size_t candidates = 0, simulated = 0;
  const long faults = PageFaults();
  for (auto _ : state) {
    const baton::TuneReport report = baton::Tune(space, model, options);
    benchmark::DoNotOptimize(report.Best());
    candidates = report.ranked.size();
    simulated = report.simulated;
  }
  state.counters["page_faults"] =
      benchmark::Counter(static_cast<double>(PageFaults() - faults), benchmark::Counter::kAvgIterations);
  state.counters["candidates"] = static_cast<double>(candidates);
  state.counters["simulated"] = static_cast<double>(simulated);
  state.counters["candidates_per_s"] =
      benchmark::Counter(static_cast<double>(candidates), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["simulated_per_s"] =
      benchmark::Counter(static_cast<double>(simulated), benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

BENCHMARK(BM_Interleaved1F1B)->Args({64, 1024, 2})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_1F1B)->Args({64, 1024, 1})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Tune)->Unit(benchmark::kMillisecond);

// Freed memory is kept (baton/heap.h), as baton's own main keeps it, so
// that an iteration measures the library's work and not the kernel's page
// faults; page_faults shows what is left. --return_freed_memory measures
// with glibc's defaults.
int main(int argc, char** argv) {
  bool keep_freed_memory = true;
  int kept_args = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--return_freed_memory") {
      keep_freed_memory = false;
    } else {
      argv[kept_args++] = argv[i];
    }
  }
  argc = kept_args;
  if (keep_freed_memory) baton::KeepFreedMemory();
  benchmark::AddCustomContext("freed_memory", keep_freed_memory ? "kept" : "returned (glibc's defaults)");
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
