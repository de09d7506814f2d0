// A steady-state training step performs no heap allocation: every buffer is
// sized and allocated at setup. malloc and operator new are counted on this
// thread while steps run (1 rank, so no MPI is involved; local hand-overs
// between the rank's stages, split I/W backwards and recomputation are).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "baton/host.h"
#include "baton/comm.h"
#include "baton/config.h"
#include "baton/data.h"
#include "executor.h"
#include "baton/plan.h"

#include "alloc_hooks.h"

using alloc_hooks::allocations;
using alloc_hooks::counting;

namespace baton {
namespace {

long AllocationsPerStep(const std::string& schedule, const std::string& checkpointing) {
  TrainConfig c = LoadTrainConfig(BATON_SOURCE_DIR "/tests/mpi/tiny.yaml",
                                  {"pipeline.schedule=" + schedule, "pipeline.checkpointing=" + checkpointing,
                                   checkpointing == "selective" ? "pipeline.keep=[linear]" : "pipeline.keep=[]"});
  const RunPlan run = PlanRun(c);
  const RankPlan plan = PlanRank(run, 0);
  std::unique_ptr<Transport> t = MakeSoloTransport();
  std::unique_ptr<RankDevice> device = MakeHostRankDevice(*t);
  Executor exec(run.model, plan, c.pipeline.wait_timeout_s, *t, *device);
  for (auto& st : exec.stages()) {
    st->Init(1);
    st->device().SetOptimizer(c.train.optimizer);
  }
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
