// The memory plan (PlanMemory, `baton validate`'s per-rank memory lines)
// against what setup really takes: for every rank of a plan, the heap bytes
// that building its executor, initialising its stages and making their
// optimizers leaves live (counted by the malloc hooks of alloc_hooks.h, an
// independent measurement), and the ring stores' own sizes. The executor
// is built on a transport of one process: setup sends no message.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "baton/error.h"
#include "baton/host.h"
#include "baton/comm.h"
#include "baton/config.h"
#include "executor.h"
#include "baton/plan.h"

// Last: the hooks define malloc and posix_memalign after the headers that declare them.
#include "alloc_hooks.h"

namespace baton {
namespace {

struct Case {
  std::string name;
  std::string config;
  std::vector<std::string> overrides;
};

// Bytes of bookkeeping the plan does not count: the executor's bound
// instructions, the stages' parameter names, the layers' objects, the
// ring stores' slot tables. Small against the tensors of these models.
constexpr long long kBookkeepingBytes = 128 * 1024;

// A replica group of `size` members that setup never uses: the executor
// sizes its collectives on it and sends nothing.
class IdleReplicas final : public ReplicaGroup {
 public:
  explicit IdleReplicas(int size) : size_(size) {}
  int rank() const override { return 0; }
  int size() const override { return size_; }
  void Configure(int, double) override {}
  void StartAllReduce(int, std::span<float>) override { Unused(); }
  void StartReduceScatter(int, std::span<float>, std::span<const int>, std::span<const int>) override { Unused(); }
  void StartAllReduce(int, std::span<double>) override { Unused(); }
  void StartReduceScatter(int, std::span<double>, std::span<const int>, std::span<const int>) override { Unused(); }
  void StartAllGather(int, std::span<float>, std::span<const int>, std::span<const int>) override { Unused(); }
  bool Test(int) override { Unused(); }
  void Wait(int, const WaitInfo&) override { Unused(); }
  void Gather(std::span<const float>, std::vector<float>*) override { Unused(); }
  void AllMax(std::span<double>, std::string_view) override { Unused(); }
  void SetTimeoutHook(std::function<void()>) override {}

 private:
  [[noreturn]] static void Unused() { throw Error("setup ran a collective"); }
  int size_;
};

void CheckCase(const Case& c) {
  const TrainConfig config = LoadTrainConfig(BATON_SOURCE_DIR "/" + c.config, c.overrides);
  const RunPlan run = PlanRun(config);
  const std::vector<RankMemory> predicted = PlanMemory(run);
  ASSERT_EQ(predicted.size(), static_cast<std::size_t>(config.pipeline.ranks));
  // A rank of the first replica (the last replica's shards can be a float larger).
  const bool one_stage_per_rank = run.stages() == run.lowered.ranks;
  for (int rank = 0; rank < config.pipeline.ranks; ++rank) {
    SCOPED_TRACE(c.name + ", rank " + std::to_string(rank));
    const RankMemory& mem = predicted[static_cast<std::size_t>(rank)];
    const RankPlan plan = PlanRank(run, rank);
    std::unique_ptr<Transport> transport = MakeSoloTransport();
    std::unique_ptr<RankDevice> device = MakeHostRankDevice(*transport);
    IdleReplicas replicas(run.replicas);

    alloc_hooks::live_bytes = 0;
    alloc_hooks::counting = true;
    auto exec = std::make_unique<Executor>(run.model, plan, config.pipeline.wait_timeout_s, *transport, *device,
                                           run.replicas > 1 ? &replicas : nullptr);
    for (auto& st : exec->stages()) {
      if (!exec->parameters_sharded()) st->Init(config.model.init_seed);  // ZeRO 3: nothing bound between steps
    }
    exec->SetOptimizers(config.train.optimizer);
    alloc_hooks::counting = false;
    const long long measured = alloc_hooks::live_bytes;

    // The tensors are all there, and little else is.
    const auto total = static_cast<long long>(mem.total());
    EXPECT_GE(measured, total) << "the plan counts more than setup allocates";
    EXPECT_LE(measured, total + kBookkeepingBytes) << "setup allocates more than the plan counts";
    std::printf("%s rank %d: predicted %lld bytes, heap after setup %lld (+%lld bookkeeping)\n", c.name.c_str(), rank,
                total, measured, measured - total);

    // The rings exactly: capacity x slot bytes of every local stage's store.
    std::size_t rings = 0;
    for (const auto& store : exec->stores()) rings += store->slot_bytes() * static_cast<std::size_t>(store->capacity());
    EXPECT_EQ(rings, mem.rings);
    // The optimizer state exactly.
    std::size_t optimizer = 0;
    for (auto& st : exec->stages()) {
      for (std::span<float> s : st->device().OptimizerState()) optimizer += s.size_bytes();
    }
    EXPECT_EQ(optimizer, mem.optimizer);
    // The layers' scratch exactly, as the host device reports it.
    std::size_t scratch = 0;
    for (auto& st : exec->stages()) scratch += st->device().ScratchBytes();
    EXPECT_EQ(scratch, mem.layer_scratch);

    // The simulated peak is what is live at the worst moment: never above
    // what is allocated, and equal to it with one stage per rank (its ring
    // is sized by that stage's own peak).
    EXPECT_LE(mem.simulated_peak, static_cast<double>(mem.total()) + 0.5);
    if (one_stage_per_rank) {
      EXPECT_NEAR(mem.simulated_peak, static_cast<double>(mem.total()), 0.5);
    }
    EXPECT_GE(mem.simulated_peak, static_cast<double>(mem.static_bytes()) + static_cast<double>(plan.local_stages[0].slot_bytes) - 0.5);
  }
}

const std::vector<std::string> kGpt = {"data.dataset=synthetic_tokens"};

TEST(MemoryPlan, GptOneF1BSelectiveAdamW) {
  CheckCase({"gpt 1f1b selective adamw", "configs/gpt_fortunes_1f1b.yaml", kGpt});
}

TEST(MemoryPlan, GptZbvNoRecomputation) {
  // Two stages per rank, split backward: W's stashes in the slots.
  std::vector<std::string> o = kGpt;
  o.insert(o.end(), {"pipeline.schedule=zbv", "pipeline.ranks=2", "pipeline.checkpointing=none", "pipeline.keep=[]"});
  CheckCase({"gpt zbv none", "configs/gpt_fortunes_1f1b.yaml", o});
}

TEST(MemoryPlan, GptInterleavedFullUntiedSgd) {
  // The untied head has its own table; the tied one across ranks an inbox.
  std::vector<std::string> o = kGpt;
  o.insert(o.end(), {"pipeline.schedule=interleaved_1f1b", "pipeline.ranks=2", "pipeline.chunks=2",
                     "pipeline.checkpointing=full", "pipeline.keep=[]", "model.tied=false",
                     "train.optimizer={type: sgd, lr: 0.1, momentum: 0.9}"});
  CheckCase({"gpt interleaved full untied sgd", "configs/gpt_fortunes_1f1b.yaml", o});
}

TEST(MemoryPlan, GptTiedAcrossRanks) {
  std::vector<std::string> o = kGpt;
  o.insert(o.end(), {"pipeline.schedule=zb_h1", "pipeline.ranks=3", "train.optimizer={type: sgd, lr: 0.1}"});
  CheckCase({"gpt zb_h1 tied plain sgd", "configs/gpt_fortunes_1f1b.yaml", o});
}

// Placements baton tune picked (uneven, by the placement search): the
// memory it predicted for them is PlanMemory's total (profile_test), which
// setup allocates.
TEST(MemoryPlan, TunedPlacements) {
  std::vector<std::string> o = kGpt;
  o.insert(o.end(), {"pipeline.schedule=zbv", "pipeline.ranks=2", "pipeline.checkpointing=none", "pipeline.keep=[]",
                     "pipeline.layout=E,t|t|t|t,L", "pipeline.microbatches=4"});
  CheckCase({"gpt zbv m4 E,t|t|t|t,L", "configs/gpt_fortunes_1f1b.yaml", o});
  CheckCase({"mlp interleaved_1f1b m8 v2 selective [2,1,3,3]",
             "configs/synthetic_bench.yaml",
             {"pipeline.schedule=interleaved_1f1b", "pipeline.ranks=2", "pipeline.chunks=2",
              "pipeline.microbatches=8", "pipeline.checkpointing=selective", "pipeline.partition=[2,1,3,3]"}});
}

// Sequence slices: ring slots of a slice, the sequences' keys and values
// in their own slots, the gathered slice inputs and labels.
TEST(MemoryPlan, GptSequenceSlices) {
  std::vector<std::string> o = kGpt;
  o.insert(o.end(), {"pipeline.schedule=seq1f1b", "pipeline.seq_slices=4"});
  CheckCase({"gpt seq1f1b 4 slices", "configs/gpt_fortunes_1f1b.yaml", o});
  o = kGpt;
  o.insert(o.end(), {"pipeline.schedule=zb_h1", "pipeline.ranks=2", "pipeline.seq_slices=3",
                     "pipeline.seq_split=compute", "pipeline.checkpointing=full", "pipeline.keep=[]"});
  CheckCase({"gpt zb_h1 3 compute slices full", "configs/gpt_fortunes_1f1b.yaml", o});
}

// Sharded data parallel: the optimizer state's shard (ZeRO 1), the
// gradients' shards and windows (2), the parameters' too (3), on the
// fortunes GPT at 2 x 2 and 1 x 4; and the parameter windows shrinking the
// model state below ZeRO 1's.
TEST(MemoryPlan, GptShardedDataParallel) {
  std::vector<RankMemory> zero1;
  for (int zero : {0, 1, 2, 3}) {
    std::vector<std::string> o = kGpt;
    o.insert(o.end(), {"pipeline.ranks=2", "data_parallel.size=2", "data_parallel.zero=" + std::to_string(zero)});
    CheckCase({"gpt 2x2 zero " + std::to_string(zero), "configs/gpt_fortunes_1f1b.yaml", o});
  }
  std::vector<std::string> o = kGpt;
  o.insert(o.end(), {"pipeline.ranks=1", "pipeline.schedule=interleaved_1f1b", "pipeline.chunks=4",
                     "data_parallel.size=4", "data_parallel.zero=3"});
  CheckCase({"gpt 1x4 interleaved v4 zero 3", "configs/gpt_fortunes_1f1b.yaml", o});
}

// Gradients summed in double: a double per parameter beside each float
// gradient, and the tied head's inbox in doubles (2 ranks, ZeRO 0 and 1).
TEST(MemoryPlan, GptWideGradients) {
  for (int zero : {0, 1}) {
    std::vector<std::string> o = kGpt;
    o.insert(o.end(), {"pipeline.ranks=2", "data_parallel.size=2", "data_parallel.zero=" + std::to_string(zero),
                       "train.grad_accum_dtype=fp64"});
    CheckCase({"gpt 2x2 fp64 zero " + std::to_string(zero), "configs/gpt_fortunes_1f1b.yaml", o});
  }
}

TEST(MemoryPlan, MlpZbH1) {
  CheckCase({"mlp zb_h1", "configs/synthetic_bench.yaml", {"pipeline.schedule=zb_h1", "pipeline.ranks=2"}});
}

}  // namespace
}  // namespace baton
