// The parameters of a rank's stages and their optimizer state, under
// PyTorch's names: the one owner that knows where a named tensor lies (which
// stage, which floats: the model description's ranges), when the host copies
// are current (Pull, Push), and which part of the optimizer state this
// replica keeps (ZeRO's shard, ShardOf). Initialisation, model.init.from,
// checkpoints and the final weights go through it, never through a stage's
// device.
#ifndef BATON_TRAIN_PARAMS_H_
#define BATON_TRAIN_PARAMS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "baton/comm.h"
#include "baton/data.h"
#include "baton/plan.h"
#include "executor.h"
#include "stage.h"

namespace baton {

// Every local stage's whole optimizer state: [local stage][buffer] floats,
// buffers in the optimizer's StateNames() order.
using OptimizerStates = std::vector<std::vector<std::vector<float>>>;

class ParamStore {
 public:
  // REQUIRES: `exec` runs `rank` of `run`; all outlive the store.
  ParamStore(const RunPlan& run, const RankPlan& rank, Executor& exec);

  // PyTorch's default init, each op from its own stream (the weights do not
  // depend on the partition); an optimizer per stage over this replica's
  // shard; then the parameters to the device.
  void Initialize(std::uint64_t seed, const OptimizerSpec& optimizer);
  // As Initialize without the draws (the parameters left as allocated):
  // for a store whose every parameter and optimizer state Restore writes
  // next (a plan change), so nothing is drawn only to be overwritten.
  void Prepare(const OptimizerSpec& optimizer);
  // Device -> host copies of the parameters and optimizer state (no-op on
  // the host), and back. Never inside a step. Under ZeRO 3 (the
  // parameters rest as shards) Pull gathers each stage's whole parameters
  // into host copies (a collective over the replica group: every replica
  // pulls), and Push keeps this replica's shard of them and drops them;
  // Settle drops them unchanged (after reading: checkpoints, weights).
  void Pull();
  void Push();
  void Settle();

  // model.init.from: every local parameter from the tensor of its name,
  // shapes checked. A head tied to the embedding is its table: a file
  // without the head's tensor gives it the table (Hugging Face's tied GPT-2
  // files leave lm_head.weight out), and one whose head differs from its
  // table is refused, since the copies would train apart. Throws
  // ConfigError naming `source`. Pushes.
  void LoadInitial(const std::vector<NamedTensor>& tensors, const std::string& source);

  // The optimizer state's names (PyTorch's: "exp_avg", ...).
  std::vector<std::string> StateNames() const;
  // Collective over the replica group under ZeRO (each replica keeps its
  // shard; the first gets them all, the others an empty list); without
  // ZeRO, this rank's own. Pull first.
  OptimizerStates WholeState(ReplicaGroup& replicas);
  // The tensors of a checkpoint shard, in a fixed order: each parameter,
  // then its optimizer state ("{name}.exp_avg", ...) from `state` (empty
  // tensors where `state` has none). Pull first.
  std::vector<NamedTensor> CheckpointTensors(const OptimizerStates& state) const;
  // Restores a checkpoint shard read from `source`: the parameters, and
  // this replica's shard of the optimizer state, after `step` steps; then
  // pushes. Throws ConfigError for a tensor out of order or of another
  // shape.
  void Restore(const std::vector<NamedTensor>& saved, const std::string& source, std::int64_t step);

  // This rank's own part of its stages' state, what no other rank holds
  // under ZeRO, as tensors in a fixed order: each parameter whole (under
  // ZeRO 3 gathered), then each local stage's optimizer state as this
  // replica keeps it (its shard under ZeRO 1-3; all of it otherwise), one
  // tensor a buffer named "stage.K.NAME". What a snapshot on another rank
  // holds (recovery.on_lost_rank: replace).
  // Its floats one after another in one buffer (Pull first): a snapshot's
  // one copy (Unflatten into OwnTensorsToFill gives the tensors back).
  std::vector<float> OwnFloats() const;
  // Its tensors' names and sizes, zero, without a Pull (a new rank's, to
  // receive its state into).
  std::vector<NamedTensor> OwnTensorsToFill() const;
  // Its tensors (from `source`, for errors) back, after `step` steps; then
  // pushes. ConfigError for a tensor of another name or size.
  void RestoreOwn(const std::vector<NamedTensor>& own, const std::string& source, std::int64_t step);

  // The local stages' parameters, in stage order (host copies; Pull first):
  // what the final weights gather from every rank.
  std::vector<float> LocalFloats() const;

 private:
  // ZeRO 3: every local stage's whole parameters in host copies, gathered
  // from the replicas or left for the caller to write (Executor::HoldWhole).
  void HoldWhole(bool gather);
  // Each tensor of this rank's own part in order: its name, shape and floats.
  void ForEachOwn(const std::function<void(std::string name, std::vector<std::int64_t> shape,
                                           std::span<const float> data)>& each) const;

  const RunPlan& run_;
  const RankPlan& rank_;
  Executor& exec_;
  std::vector<std::unique_ptr<Stage>>& stages_;
  std::vector<FloatBuffer> whole_;  // ZeRO 3, while held: per local stage
};

// Rank 0 of `pipeline` writes every stage's parameters as one safetensors
// file at `path`, in the model's order with PyTorch's names; every rank of
// the pipeline sends its own (collective over `pipeline`). Pull first. The
// file's operations go through `env` (the run's).
void SaveWeights(const std::string& path, Transport& pipeline, const RunPlan& run, const ParamStore& store,
                 const Env& env = Env::Default());

}  // namespace baton

#endif  // BATON_TRAIN_PARAMS_H_
