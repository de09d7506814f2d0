// A steady-state training step performs no heap allocation: every buffer is
// sized and allocated at setup. malloc and operator new are counted on this
// thread while steps run (1 rank, so no MPI is involved; local hand-overs
// between the rank's stages, split I/W backwards and recomputation are).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <algorithm>
#include <string>
#include <vector>
#include <unistd.h>
#include <new>

#include "baton/host.h"
#include "baton/comm.h"
#include "baton/config.h"
#include "baton/data.h"
#include "baton/events.h"
#include "executor.h"
#include "baton/plan.h"

#include "alloc_hooks.h"
#include "support/held_samples.h"

using alloc_hooks::allocations;
using alloc_hooks::counting;

namespace baton {
namespace {

// `c`'s plan on one rank: its executor, stages initialised, optimizer set.
struct OneRank {
  explicit OneRank(const TrainConfig& c) : run(PlanRun(c)), plan(PlanRank(run, 0)) {
    t = MakeSoloTransport();
    device = MakeHostRankDevice(*t);
    exec = std::make_unique<Executor>(run.model, plan, c.pipeline.wait_timeout_s, *t, *device);
    for (auto& st : exec->stages()) {
      st->Init(1);
      st->device().SetOptimizer(c.train.optimizer);
    }
  }
  RunPlan run;
  RankPlan plan;
  std::unique_ptr<Transport> t;
  std::unique_ptr<RankDevice> device;
  std::unique_ptr<Executor> exec;
};

long AllocationsPerStep(const std::string& schedule, const std::string& checkpointing) {
  TrainConfig c = LoadTrainConfig(BATON_SOURCE_DIR "/tests/mpi/tiny.yaml",
                                  {"pipeline.schedule=" + schedule, "pipeline.checkpointing=" + checkpointing,
                                   checkpointing == "selective" ? "pipeline.keep=[linear]" : "pipeline.keep=[]"});
  OneRank one(c);
  Executor& exec = *one.exec;
  const Dataset data = MakeSynthetic(64, c.data.features, c.data.classes, 5, true, true);
  Batch batch;
  batch.input = data.sample.WithRows(c.train.batch_size);
  batch.inputs = {data.inputs.data(), batch.input.bytes()};
  batch.labels = {data.labels.data(), std::size_t(c.train.batch_size)};
  auto step = [&] { exec.TrainStep(batch); };
  step();  // warm-up: first-touch of lazily created state
  allocations = 0;
  counting = true;
  for (int i = 0; i < 3; ++i) step();
  counting = false;
  return allocations;
}

TEST(NoAllocation, SteadyStateStepsAllocateNothing) {
  // zbv on one rank: two stages with a local hand-over and split I/W.
  for (const char* schedule : {"1f1b", "zbv", "interleaved_1f1b", "zb_h1"}) {
    for (const char* policy : {"none", "full", "selective"}) {
      EXPECT_EQ(AllocationsPerStep(schedule, policy), 0) << schedule << " " << policy;
    }
  }
}

void* volatile g_escape;  // keeps the compiler from eliding the allocations below

// Packed documents: a GPT on JSON Lines (64 documents of 2 to 31 bytes)
// packed greedily into samples of 16 positions, 8 a batch, `sets` on top;
// its config, dataset and batches.
struct PackedRun {
  TrainConfig config;
  Dataset data;
  std::vector<Batch> batches;
};
PackedRun PackedBatches(std::vector<std::string> sets, std::int64_t batch_tokens = 0) {
  const std::string path = ::testing::TempDir() + "/baton_no_alloc_docs_" + std::to_string(::getpid()) + ".jsonl";
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    for (int d = 0; d < 64; ++d) std::fprintf(f, "{\"text\": \"%.*s\"}\n", 2 + (d * 7) % 30, "abcdefghijklmnopqrstuvwxyzabcdefgh");
    std::fclose(f);
  }
  sets.insert(sets.end(), {"data={dataset: jsonl, path: " + path + ", packing: greedy, max_tokens: 16}",
                           "model.seq_len=16", "model.vocab=256", "train.batch_size=8"});
  PackedRun run{LoadTrainConfig(BATON_SOURCE_DIR "/tests/mpi/tiny_gpt.yaml", sets), {}, {}};
  run.data = baton_test::HeldSamples(MakePackedDocuments(std::make_shared<const TokenDocuments>(OpenJsonl(path)), 16,
                                                         8, false, 256, true, true, -1, {batch_tokens, 1}));
  std::remove(path.c_str());
  const Dataset& data = run.data;
  for (std::int64_t first = 0; first + 8 <= data.samples; first += 8) {
    Batch b;
    b.input = data.sample.WithRows(8);
    b.inputs = {data.inputs.data() + first * data.sample_bytes(), b.input.bytes()};
    b.labels = {data.labels.data() + first * 16, std::size_t(8 * 16)};
    b.starts = {data.starts.data() + first * 16, std::size_t(8 * 16)};
    b.filled = {data.targets.data() + first, std::size_t(8)};
    for (int k = 0; k < 8; ++k) b.targets += data.targets[static_cast<std::size_t>(first + k)];
    run.batches.push_back(b);
  }
  return run;
}

// Each microbatch at its own length, rows gathered where a microbatch
// holds two samples; by tokens, the step's empty microbatches not run:
// nothing allocated either.
long PackedAllocationsPerStep(const std::string& schedule, int microbatches, std::int64_t batch_tokens = 0) {
  const PackedRun run = PackedBatches(
      {"pipeline.schedule=" + schedule, "pipeline.microbatches=" + std::to_string(microbatches)}, batch_tokens);
  OneRank one(run.config);
  Executor& exec = *one.exec;
  const std::vector<Batch>& batches = run.batches;
  EXPECT_GE(batches.size(), 3u);
  std::size_t next = 0;
  auto step = [&] { exec.TrainStep(batches[next++ % batches.size()]); };
  step();
  allocations = 0;
  counting = true;
  for (int i = 0; i < 3; ++i) step();
  counting = false;
  return allocations;
}

TEST(NoAllocation, PackedStepsAtTheirOwnLengthsAllocateNothing) {
  for (const char* schedule : {"1f1b", "zbv", "interleaved_1f1b"}) {
    for (int microbatches : {8, 4}) {
      EXPECT_EQ(PackedAllocationsPerStep(schedule, microbatches), 0) << schedule << " " << microbatches;
      EXPECT_EQ(PackedAllocationsPerStep(schedule, microbatches, 60), 0) << schedule << " " << microbatches
                                                                         << " by tokens";
    }
  }
}

// Sequence slices of packed samples (seq1f1b, 4 slices of 4 positions, a
// sample a microbatch): a slice runs up to its sequence's length and one
// past it not at all, so a step's forwards are each sequence's slices up
// to its filled positions (counted by the executor's recorder), and some
// step has fewer than every slice; nothing allocated.
TEST(NoAllocation, PackedSlicesRunUpToTheirSequencesLength) {
  const PackedRun run = PackedBatches({"pipeline.schedule=seq1f1b", "pipeline.seq_slices=4", "pipeline.microbatches=8"});
  OneRank one(run.config);
  Executor& exec = *one.exec;
  std::vector<ActionEvent> events;
  events.reserve(4096);
  exec.SetRecorder(&events);
  bool skipped = false;
  for (const Batch& b : run.batches) {
    events.clear();
    exec.TrainStep(b);
    long want = 0;
    for (const std::int32_t filled : b.filled) want += (filled + 3) / 4;
    const long forwards = std::count_if(events.begin(), events.end(),
                                        [](const ActionEvent& e) { return e.kind == ActionKind::kForward; });
    EXPECT_EQ(forwards, want);
    skipped = skipped || want < 8 * 4;
  }
  EXPECT_TRUE(skipped) << "no sequence ended before its last slice: nothing was tested";
  exec.SetRecorder(nullptr);
  allocations = 0;
  counting = true;
  for (int i = 0; i < 3; ++i) exec.TrainStep(run.batches[static_cast<std::size_t>(i) % run.batches.size()]);
  counting = false;
  EXPECT_EQ(allocations, 0);
}

TEST(NoAllocation, TheCounterSeesAllocations) {
  counting = true;
  allocations = 0;
  void* p = std::malloc(64);
  g_escape = p;
  auto* v = new std::vector<float>(100);
  g_escape = v;
  counting = false;
  delete v;
  std::free(p);
  EXPECT_GE(allocations, 3);  // malloc, new, the vector's buffer
}

}  // namespace
}  // namespace baton
