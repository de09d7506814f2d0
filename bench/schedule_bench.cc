// Schedule library speed: generate, lower, validate and simulate a large
// schedule, reported as actions per second.
#include <benchmark/benchmark.h>

#include "baton/schedule.h"
#include "baton/sim.h"

namespace {

// The whole pipeline a user's `baton simulate` runs for one schedule.
void GenerateLowerValidateSimulate(benchmark::State& state, const char* name) {
  const int p = static_cast<int>(state.range(0));
  const int m = static_cast<int>(state.range(1));
  const int v = static_cast<int>(state.range(2));
  std::size_t actions = 0;
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
  state.counters["compute_actions"] = static_cast<double>(actions);
  state.counters["actions_per_s"] =
      benchmark::Counter(static_cast<double>(actions), benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Interleaved1F1B(benchmark::State& state) { GenerateLowerValidateSimulate(state, "interleaved_1f1b"); }
void BM_1F1B(benchmark::State& state) { GenerateLowerValidateSimulate(state, "1f1b"); }

}  // namespace

BENCHMARK(BM_Interleaved1F1B)->Args({64, 1024, 2})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_1F1B)->Args({64, 1024, 1})->Unit(benchmark::kMillisecond);
