// The replicas' side of a rank's step (data parallelism), beside the
// executor: the gradient sums in buckets (ReductionPlan), sharded data
// parallel's shards and windows (ShardingPlan: ZeRO 2 and 3's UNSHARD,
// RESHARD and REDUCE_GRAD), and the optimizer step with the parameters'
// all-gathers that follow it, over one replica group. The executor
// dispatches to it in a line each; what it does was resolved by the plan.
#ifndef BATON_EXECUTOR_REPLICA_SYNC_H_
#define BATON_EXECUTOR_REPLICA_SYNC_H_

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "baton/comm.h"
#include "baton/events.h"
#include "baton/plan.h"
#include "baton/stage_device.h"
#include "stage.h"

namespace baton {

// One step's gradient sums over the replicas (data parallelism), seconds on
// the rank's monotonic clock.
struct ReductionTimes {
  double first_start = 0.0;  // the first bucket's collective started
  double last_end = 0.0;     // the last one was seen to end
  double exposed = 0.0;      // the step waited for them after its last action (not hidden)
  double total() const { return last_end - first_start; }
};

class ReplicaSync {
 public:
  // Over `stages` (the executor's local stages, which it owns) as `plan`
  // lists them: allocates the shards and windows on `device` and, when the
  // plan sums over replicas, takes `group` through the device (a GPU
  // stages collectives). Throws ConfigError if the group's size is not the
  // plan's replica count, or the plan shards on a device without host
  // memory. REQUIRES: plan, stages, device and group outlive it.
  ReplicaSync(const RankPlan& plan, std::vector<std::unique_ptr<Stage>>& stages, RankDevice& device,
              ReplicaGroup* group, double wait_timeout_s);
  ReplicaSync(const ReplicaSync&) = delete;
  ReplicaSync& operator=(const ReplicaSync&) = delete;

  // Records the collectives' starts and the waits for them into `events`
  // (null: not recording).
  void SetRecorder(std::vector<ActionEvent>* events) { events_ = events; }

  // ---- Inside an instruction list (the executor's Run) ----
  // Between actions: moves the collectives in flight along (MPI moves a
  // non-blocking collective only inside its calls). `train`: a training
  // step's list (its gradient sums).
  void Poll(bool train);
  // UNSHARD, RESHARD or REDUCE_GRAD `in` (nothing outside ZeRO 2 and 3).
  void RunShardingAction(const Instruction& in, bool train);
  // Before compute action `in`: its stage's gather waited for; its first
  // gradient writer of the step takes (and zeroes) its gradient window.
  void BeforeCompute(const Instruction& in);
  // The hook for a stage's last backward of the step to start its buckets
  // as it finishes them, when instruction `i` of the step is that
  // backward; else null.
  GradientsReady* BucketHook(std::size_t i, int local, bool train);
  // After instruction `i`: the buckets the plan starts there.
  void AfterAction(std::size_t i, bool train);
  // The list's end: the parameter windows still held are freed (ZeRO 3).
  void EndList();

  // ---- A training step's end ----
  // Starts the sums the plan leaves for after the tied gradients' sum and
  // waits for every stage's.
  void FinishReductions();
  // Every stage's optimizer step (on this replica's part: ZeRO's shard),
  // the other replicas' parts gathered (ZeRO 1 and 2), zeroed gradients.
  void StepOptimizers();
  // After FinishReductions: false if a gradient this rank holds final (under
  // ZeRO its shard of each stage) is a NaN or an infinity.
  bool GradientsFinite();
  // After FinishReductions: the parameters of local stage `local` whose
  // final gradients' norm this rank counts, each gradient counted once in
  // the job, appended to `parts` (indices in the stage). Under ZeRO 2 and 3
  // its shard, under 1 its part of each bucket, under 0 the whole stage on
  // the first replica (every replica holds the same sums), none on the others.
  void CountedParts(int local, std::vector<ParamRange>& parts) const;
  // The sums of the squares of local stage `local`'s final gradients in
  // `ranges` (within its CountedParts), in double: its device's, or under
  // ZeRO 2 and 3 its shard's on the host.
  void GradientSquares(int local, std::span<const ParamRange> ranges, std::span<double> sums);
  // Every gradient the optimizer step reads on this rank times `factor`
  // (train.clip_grad_norm).
  void ScaleGradients(float factor);
  const ReductionTimes& times() const { return times_; }

  // ---- Setup and whole-model copies ----
  // Every local stage's optimizer over this replica's part of its
  // parameters (Executor::SetOptimizers).
  void SetOptimizers(const OptimizerSpec& spec);
  // Every local stage's optimizer: the rate of the next steps.
  void SetLearningRate(double lr);
  // ZeRO 3 outside a step (Executor::HoldWhole, KeepShard).
  void HoldWhole(int local, std::span<float> whole, bool gather);
  void KeepShard(int local);

 private:
  // Per local stage under ZeRO 2 and 3: its resting shards, the windows it
  // holds, and whether its gather is in flight.
  struct Sharded {
    float* parameter_shard = nullptr;  // ZeRO 3
    float* gradient_shard = nullptr;
    int parameter_window = -1, gradient_window = -1;
    bool gathering = false;
    double polled = 0;  // recording: seconds in the gather's tests since it started
  };
  // Starts a stage's buckets as its last backward of the step finishes them.
  struct BucketStarter final : GradientsReady {
    void Ready(std::size_t from) override { sync->StartReduction(local, from); }
    ReplicaSync* sync = nullptr;
    int local = -1;
  };

  bool reducing(bool train) const { return train && group_ != nullptr; }
  float* Window(float* pool, int window) const {
    return pool + static_cast<std::size_t>(window) * plan_.sharding.window_floats;
  }
  // Starts local stage k's buckets that lie in [from, end) of its gradients
  // and have not started, last bucket first.
  void StartReduction(int local, std::size_t from = 0);
  void PollReductions();
  // Points local stage k at what it holds now (its own parameters under
  // ZeRO 2, its parameter window under 3; its gradient window).
  void Rebind(int local);
  void Unshard(const Instruction& in);
  void PollGathers();
  void Reshard(int local);
  void ReduceGrad(int local);
  // Waits for (or, `poll`, tests) the reduce-scatter in gradient window w
  // and keeps this replica's part of the sum in the stage's gradient shard.
  void EndReduce(int w, bool poll);
  void FinishSharded();
  // A stage's gather or gradient window, as the recorder shows it.
  int StageOf(std::size_t local) const { return plan_.local_stages[local].stage; }

  const RankPlan& plan_;
  std::vector<std::unique_ptr<Stage>>& stages_;
  ReplicaGroup* group_ = nullptr;  // null: one replica
  std::vector<ActionEvent>* events_ = nullptr;
  // Buckets: per training instruction, the local stage whose sums start
  // after it (or -1); the buckets in flight are [done_, started_) of
  // order_, in the order they started.
  std::vector<int> start_after_;
  std::vector<int> order_;  // bucket indices in start order (preallocated)
  std::vector<int> next_;   // per local stage: one past its next bucket to start (they start last first)
  std::size_t started_ = 0, done_ = 0;
  ReductionTimes times_;
  BucketStarter starter_;
  // Sharded data parallel.
  std::vector<Sharded> sharded_;
  float* parameter_pool_ = nullptr;
  float* gradient_pool_ = nullptr;
  std::vector<int> reducing_;  // per gradient window: the stage whose reduce-scatter is in flight in it (-1: none)
};

}  // namespace baton

#endif  // BATON_EXECUTOR_REPLICA_SYNC_H_
