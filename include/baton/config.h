// Configuration files (YAML, strict). Every key is known, every value typed
// and range-checked; an error names file:line:column, the key path, the
// value and the rule, and is thrown as ConfigError before anything runs.
#ifndef BATON_CONFIG_H_
#define BATON_CONFIG_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "baton/choices.h"
#include "baton/model.h"
#include "baton/named_enum.h"
#include "baton/sim.h"
#include "baton/slices.h"

namespace baton {

// ---- Config choices, parsed once (spelled in configs as EnumName gives) ----
// Checkpointing, Device and Precision: baton/choices.h.
// explicit: pipeline.partition lists layer counts; layout: pipeline.layout
// lists each stage's parts of a GPT.
// kAuto: searched at start-up from a profile (pipeline.partition: auto, or
// a GPT's pipeline.layout: auto), then explicit or a layout.
enum class Partition : std::uint8_t { kBalanced, kExplicit, kLayout, kAuto };
enum class BalanceBy : std::uint8_t { kParams, kFlops };
// fortunes and synthetic_tokens are byte-token datasets (IsTokenDataset).
enum class DatasetKind : std::uint8_t {
  kFashionMnist,
  kSynthetic,
  kFortunes,
  kSyntheticTokens,
  kMegatron,  // Megatron-LM's indexed dataset (.bin/.idx), data.path its prefix
  kLlmc,      // llm.c's token shard
  kJsonl,     // JSON Lines text, a document a line, as byte tokens
};
// A step whose loss or gradients are not finite: the run stops there, or the
// step's update is skipped (the parameters and optimizer state unchanged).
enum class OnNonFinite : std::uint8_t { kStop, kSkip };
// checkpoint.resume: never (start from scratch unless told --resume), or
// auto (from this run's newest complete checkpoint in checkpoint.dir when
// there is one, from scratch when there is none: a requeued job's script
// needs no edit).
enum class ResumeMode : std::uint8_t { kNever, kAuto };
// pipeline.adapt: off, on (the plan follows the ranks' measured speed:
// layers move off a rank that slows, and back when it recovers), or full
// (on, and with replicas the microbatches are re-split between them too).
enum class AdaptMode : std::uint8_t { kOff, kOn, kFull };
// recovery.on_lost_rank: stop (the job ends: resume it from its last
// checkpoint), shrink (it goes on without the replicas that lost a rank,
// with the same global batch, the interrupted step redone), or replace
// (new processes take the lost ranks' places, their state from a whole
// replica, the interrupted step redone: the same floats as without the
// loss).
enum class LostRankMode : std::uint8_t { kStop, kShrink, kReplace };
// train.grad_accum_dtype (DeepSpeed's name): what a step's gradients are
// summed in, over its microbatches and over the replicas. fp32: in the
// gradients' own floats. fp64: each backward's float gradients are added
// into doubles and the replicas sum doubles, so the sum does not depend on
// how the microbatches are split between replicas (pipeline.adapt: full,
// recovery.on_lost_rank: shrink) beyond a double's last bits; the
// optimizer gets them rounded to float. auto: fp64 where the split can
// change (those two) and with packed documents (ZeRO 0 or 1), fp32
// elsewhere.
enum class GradAccum : std::uint8_t { kAuto, kFP32, kFP64 };
// data.packing: none (each sample a fixed window of the token stream), or
// greedy (whole documents first-fit into samples of data.max_tokens
// positions, attention and positions restarting at each: PackGreedy).
// balanced: the same documents a batch, packed so that its costliest
// sample costs least (PackBalanced). pad: one document (or piece) a
// sample, padded to data.max_tokens and every position computed, as a
// pipeline of one fixed shape runs documents (PackPadded): the baseline.
enum class Packing : std::uint8_t { kNone, kGreedy, kBalanced, kPad };
// data.long_documents: a document longer than data.max_tokens is cut into
// pieces (split) or refused.
enum class LongDocuments : std::uint8_t { kSplit, kRefuse };
std::string_view EnumName(Partition v);      // balanced, explicit, layout, auto
std::string_view EnumName(BalanceBy v);      // params, flops
std::string_view EnumName(DatasetKind v);    // fashion_mnist, synthetic, fortunes, synthetic_tokens, megatron, llmc, jsonl
std::string_view EnumName(OnNonFinite v);    // stop, skip
std::string_view EnumName(ResumeMode v);     // never, auto
std::string_view EnumName(AdaptMode v);      // off, on
std::string_view EnumName(LostRankMode v);   // stop, shrink, replace
std::string_view EnumName(GradAccum v);      // auto, fp32, fp64
std::string_view EnumName(Packing v);        // none, greedy, balanced, pad
std::string_view EnumName(LongDocuments v);  // split, refuse
std::span<const Packing> EnumValues(Packing);
std::span<const LongDocuments> EnumValues(LongDocuments);
std::span<const GradAccum> EnumValues(GradAccum);
std::span<const Partition> EnumValues(Partition);
std::span<const BalanceBy> EnumValues(BalanceBy);
std::span<const DatasetKind> EnumValues(DatasetKind);
std::span<const OnNonFinite> EnumValues(OnNonFinite);
std::span<const ResumeMode> EnumValues(ResumeMode);
std::span<const AdaptMode> EnumValues(AdaptMode);
std::span<const LostRankMode> EnumValues(LostRankMode);
// Whether microbatches take their real lengths (greedy, balanced): the
// runtime computes and sends only the positions documents fill, and the
// simulator prices each step by them. none and pad are one fixed shape.
inline bool RealLengths(Packing p) { return p == Packing::kGreedy || p == Packing::kBalanced; }

// What `baton simulate` runs. Keys of the YAML file (all optional):
//   schedule: 1f1b            # generator name or CSV schedule file
//   ranks: 4                  # p
//   microbatches: 8           # m
//   chunks: 0                 # v; 0 = the generator's default
//   costs: {forward: 1, backward_input: 1, backward_weight: 1}   # per rank
//   stage_costs: [{forward: .., backward_input: .., backward_weight: ..}, ...]
//   comm: {latency: 0, bandwidth: 0, message_bytes: 0}
//   memory: {weight_ratio: 0.5, microbatch_bytes: 0}
//   compare: [gpipe, 1f1b, ...]   # simulate several schedules side by side
//   output: {json: PATH, trace: PATH, svg: PATH}   # "{schedule}" in a path
//                                                   # is replaced by the name
struct SimulateConfig {
  std::string schedule = "1f1b";
  int ranks = 4;
  int microbatches = 8;
  int chunks = 0;
  // Sequence slices for the schedules that take them (every generator but
  // 1f1b): k, the split, the tokens a sequence has (the cuts fall
  // between them; 0 = 1024 a slice), and the shares of a sequence's
  // compute and activations that grow with the keys a token attends to
  // (SliceSequence); and the share of a whole microbatch's activations that
  // is its sequence's keys and values, kept in one place while any of its
  // slices is live (MemoryModel::sequence_share; the slices hold the rest).
  int seq_slices = 1;
  SeqSplit seq_split = SeqSplit::kEven;
  int seq_len = 0;
  double attention_cost_share = 0.0;
  double attention_memory_share = 0.0;
  double kv_memory_share = 0.0;
  SimOptions options;
  double cores = 0;  // > 0: every rank shares this many cores (SimOptions::cores); 0: a core each
  // Sharded data parallel (section `sharding`): ZeRO stage 2 or 3 places
  // its actions in a generated schedule (AddShardingActions; 0: none, and
  // a file's own are priced as given); every stage's gather and
  // reduce-scatter time and gathered bytes (SimOptions::shards).
  struct Sharding {
    ZeroStage zero;
    double gather_time = 0.0, reduce_scatter_time = 0.0, gathered_bytes = 0.0;
    bool priced() const { return gather_time > 0.0 || reduce_scatter_time > 0.0 || gathered_bytes > 0.0; }
  } sharding;
  std::vector<std::string> compare;
  std::string json_path;
  std::string trace_path;
  std::string svg_path;
};

// Reads a simulate config. Throws ConfigError.
SimulateConfig LoadSimulateConfig(const std::string& path);

// ---- Training runs: `baton train CONFIG` ----
// Sections model, pipeline, data, train, checkpoint, log; see configs/ and
// docs/guide/train.md for every key. Defaults are given below.

struct ModelConfig {
  int input = 0;                  // input features; 0 = the dataset's (1 for token ids)
  std::vector<LayerSpec> layers;  // the layer list (nn.Sequential order; a GPT's, expanded)
  bool gpt = false;               // model: {type: gpt, ...}: `layers` is GptLayers(gpt_spec)
  GptSpec gpt_spec;
  int seq = 1;                    // tokens per sample (a GPT's seq_len; 1 for MLPs)
  std::uint64_t init_seed = 0;    // per-layer init streams derive from it
  std::string init_from;          // optional safetensors file with all weights
};

// pipeline.layout, Megatron-LM's pipeline_model_parallel_layout for a GPT:
// "E,t*3|t*4|t*4|t*3,L" lists the stages in stage order, separated by '|';
// a stage lists symbols, each optionally repeated (*N): E the embedding
// (token embedding and position table), t one transformer block, L the loss
// end (final layernorm and LM head). Parsed and checked once: E exactly
// once, first in stage 0; L exactly once, last in the last stage; model.blocks
// t's; no stage empty. So a stage is fully described by the three fields
// below. The stage count is checked against ranks x chunks where the
// schedule is known (PartitionLayers).
struct LayoutStage {
  bool embedding = false;  // E: starts with the embedding (stage 0 only)
  int blocks = 0;          // t: transformer blocks, after the embedding
  bool loss = false;       // L: ends with the loss end (the last stage only)

  bool operator==(const LayoutStage&) const = default;
};
struct PipelineLayout {
  std::string text;                 // as written, for the resolved config
  std::string where;                // "file:line:column" of the key (or the --set), for later errors
  std::vector<LayoutStage> stages;  // in stage order
};

struct PipelineConfig {
  std::string schedule = "1f1b";      // generator or CSV schedule file
  int ranks = 1;                      // must equal the MPI world size
  int microbatches = 1;               // each replica's (with replicas, unless replica_microbatches)
  // Each replica's microbatches where they differ (pipeline.adapt: full
  // re-splits them; the rows of a microbatch stay): empty, `microbatches`
  // each. Set by a plan change, never read from a config.
  std::vector<int> replica_microbatches;
  int chunks = 0;                     // 0 = the schedule's own
  Partition partition = Partition::kBalanced;
  BalanceBy balance_by = BalanceBy::kParams;
  std::vector<int> partition_counts;  // layers per stage, if explicit
  PipelineLayout layout;              // the stages' parts of a GPT, if layout
  Checkpointing checkpointing = Checkpointing::kNone;
  std::vector<LayerType> keep;        // selective: layer types whose outputs are kept
  double wait_timeout_s = 300.0;      // deadline of every blocking wait
  // Automatic placement (kAuto): the profile to place from ("" = profile
  // at start-up), and the per-rank memory the placement must fit (0 = any).
  std::string profile;
  double memory_bytes = 0;
  // Adaptive plans (on): each rank's speed measured from its actions'
  // times, and the plan changed between steps when the simulator, priced
  // from `profile` (or one measured at the first slowdown), says that pays.
  // A config that does not set it gets on wherever a plan can change
  // (AdaptsByDefault), off elsewhere; `adapt_asked`: the config set it.
  AdaptMode adapt = AdaptMode::kOff;
  bool adapt_asked = false;
  // Sequence slices (Seq1F1B): each microbatch's sequence cut into this
  // many slices, each a unit of the schedule (a GPT only; any generator
  // but 1f1b, whose sliced form is seq1f1b), where the cuts fall (slices.h).
  int seq_slices = 1;
  SeqSplit seq_split = SeqSplit::kEven;
};

// Inputs and labels per dataset:
//   fashion_mnist     f32[784] pixels, a class 0..9                 (path)
//   synthetic         f32[features], a class in [0, classes)        (samples, features, classes)
//   fortunes          i32[seq_len] byte tokens, seq_len next tokens (path, seq_len, validation)
//   synthetic_tokens  i32[seq_len] uniform ids in [0, vocab), seq_len next tokens (samples, seq_len, vocab)
// Keys of another dataset are refused. For token datasets `features` is
// seq_len and `classes` the vocabulary, so the model's input and output
// widths are checked against them as for the others.
struct DataConfig {
  DatasetKind dataset = DatasetKind::kFashionMnist;
  std::string path = "/usr/share/datasets/fashion-mnist";  // fortunes: /usr/share/games/fortunes
  bool shuffle = false;
  std::int64_t samples = 4096;  // synthetic, synthetic_tokens
  int features = 784;           // synthetic
  int classes = 10;             // synthetic
  int seq_len = 0;              // token datasets: tokens per sample (required, >= 1)
  int vocab = 256;              // synthetic_tokens, megatron (required), llmc (50257); fortunes, jsonl: 256
  std::int64_t eot = 50256;     // llmc: the end-of-text token that starts each document
  // megatron, llmc, jsonl: a dataset of the same kind evaluated at epoch
  // ends (validation loss); "" = none.
  std::string validation_path;
  std::uint64_t seed = 1;       // synthetic data / shuffling
  bool evaluate = true;         // test accuracy at epoch ends (fashion_mnist)
  bool validation = true;       // validation loss at epoch ends (fortunes)
  // Documents packed into samples (fortunes, megatron, llmc, jsonl): a
  // sample's positions are data.max_tokens, which seq_len then is.
  Packing packing = Packing::kNone;
  LongDocuments long_documents = LongDocuments::kSplit;
};

// The token datasets read from files people bring (megatron, llmc, jsonl).
inline bool IsTokenFileDataset(DatasetKind kind) {
  return kind == DatasetKind::kMegatron || kind == DatasetKind::kLlmc || kind == DatasetKind::kJsonl;
}
// True for the token datasets (fortunes, synthetic_tokens, and the files
// people bring: megatron, llmc, jsonl).
inline bool IsTokenDataset(DatasetKind kind) {
  return kind == DatasetKind::kFortunes || kind == DatasetKind::kSyntheticTokens || IsTokenFileDataset(kind);
}

struct TrainLoopConfig {
  int batch_size = 64;
  // Packed documents: a step's documents by tokens (0: by samples). Each
  // step takes whole documents (pieces of long ones) in data order while
  // their positions stay within batch_tokens and they still pack into
  // batch_size samples of data.max_tokens; the step then runs as many
  // microbatches as its samples fill (at most pipeline.microbatches a
  // replica), the rest of the batch_size slots empty and never computed.
  std::int64_t batch_tokens = 0;
  int epochs = 1;                // used when steps == 0
  std::int64_t steps = 0;        // > 0: stop after this many steps
  OptimizerSpec optimizer;
  LrSchedule lr_schedule;                          // each step's rate (baton/model.h); default: optimizer.lr
  // > 0: every step's gradients scaled by min(1, X / (norm + 1e-6)) before
  // the optimizer step (PyTorch's clip_grad_norm_), the norm over every
  // parameter of every stage and replica, a tied head's once, summed in
  // double; 0: off.
  double clip_grad_norm = 0;
  OnNonFinite on_nonfinite = OnNonFinite::kStop;  // a step with a non-finite loss or gradient
  // on_nonfinite: skip: more steps skipped in a row than this stop the run
  // (as stop would, with its exit and message).
  std::int64_t max_skipped = 10;
  GradAccum grad_accum = GradAccum::kAuto;         // train.grad_accum_dtype (WideGradients)
};

// D replicas of the pipeline, their gradients summed (data parallelism).
// The job has pipeline.ranks x size ranks; world rank w is pipeline rank
// w / size of replica w % size (ReplicaLayout, baton/comm.h).
struct DataParallelConfig {
  int size = 1;               // D; train.batch_size is the global batch, each replica takes 1/D of it
  double bucket_cap_mb = 25;  // gradients are summed in buckets of at most this many MiB (PyTorch DDP's default)
  ZeroStage zero;             // ZeRO stage (choices.h): 0 every replica keeps the whole model state; 1 each keeps 1/D of the optimizer state, 2 also of the gradients, 3 also of the parameters (CPU)
  // The stage in effect: none with one replica (nothing to shard over).
  ZeroStage in_effect() const { return size > 1 ? zero : ZeroStage(); }
};

struct CheckpointConfig {
  std::string dir;         // empty = no checkpoints
  std::int64_t every_steps = 0;
  int keep = 1;
  ResumeMode resume = ResumeMode::kNever;
};

struct RecoveryConfig {
  LostRankMode on_lost_rank = LostRankMode::kStop;
  // replace in a pure pipeline (data_parallel.size 1) or under ZeRO 1-3:
  // each rank's own state is copied to another rank (the next pipeline
  // rank, or the next replica) every `snapshot_every` steps, 0 = auto
  // (chosen from the copy's measured price: at most 5% of the step).
  int snapshot_every = 0;
  // The lost-rank watch: a rank its neighbours hear nothing from for this
  // long is lost (0: only a closed connection is; a loss of its node then
  // waits for the deadline).
  double silent_s = 1.0;
};

struct LogConfig {
  std::int64_t every_steps = 10;  // 0 = no per-step metrics
  std::string metrics = "out/metrics.jsonl";
  std::string weights = "out/weights.safetensors";  // final weights; empty = none
  bool progress = true;
  // A Chrome trace of every trace_every-th step's actions on every rank
  // ("": none; src/run/run_trace.h).
  std::string trace;
  std::int64_t trace_every = 100;
  // Which rank, link or data made a step late (src/adapt/blame.h): a
  // "late" row for each step later than its price by more than
  // blame_threshold (a share of the step).
  bool blame = false;
  double blame_threshold = 0.1;
};

struct TrainConfig {
  std::string source;  // config file name, for messages
  ModelConfig model;
  PipelineConfig pipeline;
  DataConfig data;
  TrainLoopConfig train;
  DataParallelConfig data_parallel;
  CheckpointConfig checkpoint;
  RecoveryConfig recovery;
  LogConfig log;
  Device device = Device::kCpu;             // where every rank's stages compute
  Precision precision = Precision::kFP32;  // linear layers' products (bf16, tf32: cuda only)
};

// Parses a training config from YAML text, applying `overrides` ("a.b=value",
// value in YAML syntax; list items by index: model.layers.0.out=128) first.
// Strict: unknown keys (with did-you-mean), duplicates, wrong types and bad
// values are ConfigErrors naming file:line:column (or the --set) and the rule.
TrainConfig ParseTrainConfig(const std::string& yaml_text, const std::string& source,
                             const std::vector<std::string>& overrides = {});
// Reads the file and parses it.
TrainConfig LoadTrainConfig(const std::string& path, const std::vector<std::string>& overrides = {});

// Whether a config that leaves pipeline.adapt unset adapts: a pipeline of
// two ranks or more, a generated schedule, on the CPU (the measure is the
// actions' CPU time), without recovery.on_lost_rank: shrink or replace.
bool AdaptsByDefault(const TrainConfig& config);

// Whether the run sums its gradients in double (train.grad_accum_dtype:
// fp64, or auto with pipeline.adapt: full or recovery.on_lost_rank: shrink,
// or with packed documents on the CPU under ZeRO 0 or 1).
bool WideGradients(const TrainConfig& config);

// `config` as replica `replica` runs it: pipeline.microbatches its own
// (pipeline.replica_microbatches, where they differ).
TrainConfig ReplicaConfig(const TrainConfig& config, int replica);
// The global batch's microbatches before replica `replica`'s: its rows
// start at this times a microbatch's rows.
int MicrobatchesBefore(const TrainConfig& config, int replica);

// The resolved settings, as YAML, for `baton validate`.
std::string DescribeTrainConfig(const TrainConfig& config);

// Selective checkpointing's list of kept layer types: pipeline.keep, or
// (empty) the default: the outputs of linear and attention layers.
std::vector<LayerType> SelectiveKeep(const TrainConfig& config);

}  // namespace baton

#endif  // BATON_CONFIG_H_
