// One training step, single process: samples per second on the synthetic
// config, the activation store's bytes copied per microbatch against its slot
// size, and the executor's own cost per action with trivially cheap layers.
#include <benchmark/benchmark.h>

#include <memory>

#include "baton/host.h"
#include "baton/comm.h"
#include "baton/config.h"
#include "baton/data.h"
#include "baton/schedule.h"
#include "baton/sim.h"
#include "executor.h"
#include "baton/plan.h"

namespace {

struct Harness {
  baton::TrainConfig config;
  baton::RunPlan run;
  baton::RankPlan plan;
  std::unique_ptr<baton::Transport> transport = baton::MakeSoloTransport();
  std::unique_ptr<baton::RankDevice> device = baton::MakeHostRankDevice(*transport);
  std::unique_ptr<baton::Executor> exec;
  baton::Dataset data;
  baton::Batch batch;

  explicit Harness(baton::TrainConfig c) : config(std::move(c)) {
    config.pipeline.ranks = 1;
    run = baton::PlanRun(config);
    plan = baton::PlanRank(run, 0);
    exec = std::make_unique<baton::Executor>(run.model, plan, config.pipeline.wait_timeout_s, *transport, *device);
    for (auto& st : exec->stages()) st->Init(0);
    data = baton::MakeSynthetic(config.train.batch_size, config.data.features, config.data.classes, 1, true, true);
    batch.input = data.sample.WithRows(config.train.batch_size);
    batch.inputs = data.inputs;
    batch.labels = data.labels;
  }
  void Step() {
    exec->RunStep(batch);
    for (auto& st : exec->stages()) st->ZeroGrads();
  }
};

void BM_TrainStepSynthetic(benchmark::State& state) {
  Harness h(baton::LoadTrainConfig(BATON_SOURCE_DIR "/configs/synthetic_bench.yaml",
                                   {"pipeline.ranks=1", "pipeline.schedule=1f1b"}));
  for (auto _ : state) h.Step();
  const baton::ActivationStore& store = *h.exec->stores().front();
  state.counters["samples_per_s"] =
      benchmark::Counter(h.config.train.batch_size, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["copied_B_per_microbatch"] = double(store.bytes_copied()) / double(store.writes());
  state.counters["written_B_per_microbatch"] = double(store.bytes_written()) / double(store.writes());
  state.counters["slot_B"] = double(store.slot_bytes());
}

// Layers of one feature and one sample per microbatch: what remains is the
// executor's dispatch, the store and the bookkeeping of each action.
void BM_ExecutorOverheadPerAction(benchmark::State& state, const char* schedule) {
  std::string yaml = R"(
model:
  layers: [{type: linear, out: 2}, {type: relu}, {type: linear, out: 2}, {type: relu}]
pipeline: {schedule: SCHEDULE, ranks: 1, microbatches: 64}
data: {dataset: synthetic, samples: 64, features: 1, classes: 2}
train: {batch_size: 64, steps: 1}
)";
  yaml.replace(yaml.find("SCHEDULE"), 8, schedule);
  Harness h(baton::ParseTrainConfig(yaml, "overhead"));
  std::size_t actions = h.run.lowered.CountActions();
  for (auto _ : state) h.Step();
  // Seconds per action (printed with SI prefixes: 1.5u = 1.5 microseconds).
  state.counters["s_per_action"] =
      benchmark::Counter(double(actions), benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
  state.counters["actions"] = double(actions);
}

}  // namespace

BENCHMARK(BM_TrainStepSynthetic)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_ExecutorOverheadPerAction, 1f1b, "1f1b")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_ExecutorOverheadPerAction, zbv, "zbv")->Unit(benchmark::kMicrosecond);
