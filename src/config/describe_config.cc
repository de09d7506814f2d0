// DescribeTrainConfig (baton/config.h): a resolved config as YAML, every
// key with the value in effect (`baton validate` prints it).
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "baton/config.h"

namespace baton {

namespace {

std::vector<std::string> Names(const std::vector<LayerType>& types) {
  std::vector<std::string> out;
  for (LayerType t : types) out.emplace_back(EnumName(t));
  return out;
}

void EmitLayers(YAML::Emitter& e, const std::vector<LayerSpec>& layers) {
  e << YAML::BeginSeq;
  for (const LayerSpec& l : layers) {
    e << YAML::Flow << YAML::BeginMap << YAML::Key << "type" << YAML::Value << std::string(EnumName(l.type));
    if (l.type == LayerType::kLinear) {
      e << YAML::Key << "out" << YAML::Value << l.out << YAML::Key << "bias" << YAML::Value << l.bias;
    }
    if (l.type == LayerType::kLayerNorm) e << YAML::Key << "eps" << YAML::Value << l.eps;
    if (l.type == LayerType::kResidual) {
      e << YAML::Key << "layers" << YAML::Value;
      EmitLayers(e, l.body);
    }
    e << YAML::EndMap;
  }
  e << YAML::EndSeq;
}

// model: the GPT or the layers, the loss and the init.
void EmitModel(YAML::Emitter& e, const TrainConfig& c) {
  e << YAML::Key << "model" << YAML::Value << YAML::BeginMap;
  if (c.model.gpt) {
    const GptSpec& g = c.model.gpt_spec;
    e << YAML::Key << "type" << YAML::Value << "gpt" << YAML::Key << "vocab" << YAML::Value << g.vocab << YAML::Key
      << "seq_len" << YAML::Value << g.seq_len << YAML::Key << "hidden" << YAML::Value << g.hidden << YAML::Key
      << "heads" << YAML::Value << g.heads << YAML::Key << "blocks" << YAML::Value << g.blocks << YAML::Key << "tied"
      << YAML::Value << g.tied << YAML::Key << "eps" << YAML::Value << g.eps;
  } else {
    e << YAML::Key << "input" << YAML::Value << c.model.input;
    e << YAML::Key << "layers" << YAML::Value;
    EmitLayers(e, c.model.layers);
  }
  e << YAML::Key << "loss" << YAML::Value << "cross_entropy";
  e << YAML::Key << "init" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "seed" << YAML::Value
    << c.model.init_seed << YAML::Key << "from" << YAML::Value << c.model.init_from << YAML::EndMap;
  e << YAML::EndMap;
}

// pipeline: schedule, placement, checkpointing, slices, adapt.
void EmitPipeline(YAML::Emitter& e, const TrainConfig& c) {
  const PipelineConfig& p = c.pipeline;
  e << YAML::Key << "pipeline" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "schedule" << YAML::Value << p.schedule << YAML::Key << "ranks" << YAML::Value << p.ranks
    << YAML::Key << "microbatches" << YAML::Value << p.microbatches << YAML::Key << "chunks" << YAML::Value << p.chunks;
  if (p.partition == Partition::kAuto) {
    e << YAML::Key << (c.model.gpt ? "layout" : "partition") << YAML::Value << "auto";
    e << YAML::Key << "profile" << YAML::Value << p.profile << YAML::Key << "memory_bytes" << YAML::Value
      << p.memory_bytes;
  } else if (p.partition == Partition::kLayout) {
    e << YAML::Key << "layout" << YAML::Value << YAML::DoubleQuoted << p.layout.text;
  } else if (p.partition == Partition::kExplicit) {
    e << YAML::Key << "partition" << YAML::Value << YAML::Flow << p.partition_counts;
  } else {
    e << YAML::Key << "partition" << YAML::Value << std::string(EnumName(p.partition));
  }
  e << YAML::Key << "balance_by" << YAML::Value << std::string(EnumName(p.balance_by)) << YAML::Key << "checkpointing"
    << YAML::Value << std::string(EnumName(p.checkpointing)) << YAML::Key << "keep" << YAML::Value << YAML::Flow
    << Names(p.keep) << YAML::Key << "wait_timeout_s"
    << YAML::Value << p.wait_timeout_s;
  if (p.seq_slices > 1) {
    e << YAML::Key << "seq_slices" << YAML::Value << p.seq_slices << YAML::Key << "seq_split" << YAML::Value
      << std::string(EnumName(p.seq_split));
  }
  const bool adapts = p.adapt != AdaptMode::kOff || p.adapt_asked;
  if (adapts) e << YAML::Key << "adapt" << YAML::Value << std::string(EnumName(p.adapt));
  // The profile that prices the plans or balanced packing's arrangement.
  if (p.partition != Partition::kAuto && !p.profile.empty() && (adapts || c.data.packing == Packing::kBalanced)) {
    e << YAML::Key << "profile" << YAML::Value << p.profile;
  }
  e << YAML::EndMap;
}

// data: the dataset and its sample (a window or packed documents).
void EmitData(YAML::Emitter& e, const TrainConfig& c) {
  const DataConfig& d = c.data;
  e << YAML::Key << "data" << YAML::Value << YAML::BeginMap << YAML::Key << "dataset" << YAML::Value
    << std::string(EnumName(d.dataset));
  // A sample's tokens: a window of seq_len, or packed documents' budget.
  auto sequence = [&] {
    if (d.packing == Packing::kNone) {
      e << YAML::Key << "seq_len" << YAML::Value << d.seq_len;
      return;
    }
    e << YAML::Key << "packing" << YAML::Value << std::string(EnumName(d.packing)) << YAML::Key << "max_tokens"
      << YAML::Value << d.seq_len << YAML::Key << "long_documents" << YAML::Value
      << std::string(EnumName(d.long_documents));
  };
  if (d.dataset == DatasetKind::kFashionMnist) {
    e << YAML::Key << "path" << YAML::Value << d.path;
  } else if (d.dataset == DatasetKind::kFortunes) {
    e << YAML::Key << "path" << YAML::Value << d.path;
    sequence();
    e << YAML::Key << "validation" << YAML::Value << d.validation;
  } else if (IsTokenFileDataset(d.dataset)) {
    e << YAML::Key << "path" << YAML::Value << d.path;
    sequence();
    e << YAML::Key << "vocab" << YAML::Value << d.vocab;
    if (d.dataset == DatasetKind::kLlmc) e << YAML::Key << "eot" << YAML::Value << d.eot;
    if (!d.validation_path.empty()) e << YAML::Key << "validation_path" << YAML::Value << d.validation_path;
  } else if (d.dataset == DatasetKind::kSyntheticTokens) {
    e << YAML::Key << "samples" << YAML::Value << d.samples << YAML::Key << "seq_len" << YAML::Value << d.seq_len
      << YAML::Key << "vocab" << YAML::Value << d.vocab;
  } else {
    e << YAML::Key << "samples" << YAML::Value << d.samples << YAML::Key << "features" << YAML::Value << d.features
      << YAML::Key << "classes" << YAML::Value << d.classes;
  }
  e << YAML::Key << "shuffle" << YAML::Value << d.shuffle << YAML::Key << "seed" << YAML::Value << d.seed;
  if (!IsTokenDataset(d.dataset)) e << YAML::Key << "evaluate" << YAML::Value << d.evaluate;
  e << YAML::EndMap;
}

// train: batch, steps, sums and the optimizer.
void EmitTrain(YAML::Emitter& e, const TrainConfig& c) {
  const OptimizerSpec& o = c.train.optimizer;
  e << YAML::Key << "train" << YAML::Value << YAML::BeginMap << YAML::Key << "batch_size" << YAML::Value
    << c.train.batch_size << YAML::Key << "epochs" << YAML::Value << c.train.epochs << YAML::Key << "steps"
    << YAML::Value << c.train.steps << YAML::Key << "on_nonfinite" << YAML::Value
    << std::string(EnumName(c.train.on_nonfinite));
  if (c.train.batch_tokens > 0) e << YAML::Key << "batch_tokens" << YAML::Value << c.train.batch_tokens;
  if (c.train.max_skipped != 10) e << YAML::Key << "max_skipped" << YAML::Value << c.train.max_skipped;
  if (c.train.clip_grad_norm > 0) e << YAML::Key << "clip_grad_norm" << YAML::Value << c.train.clip_grad_norm;
  // Written when set (a run without one keeps its settings text).
  if (const LrSchedule& s = c.train.lr_schedule; s.type != LrDecay::kConstant || s.warmup_steps > 0) {
    e << YAML::Key << "lr_schedule" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "type"
      << YAML::Value << std::string(EnumName(s.type)) << YAML::Key << "warmup_steps" << YAML::Value << s.warmup_steps;
    if (s.type != LrDecay::kConstant) {
      e << YAML::Key << "min_lr" << YAML::Value << s.min_lr << YAML::Key << "decay_steps" << YAML::Value
        << s.decay_steps;
    }
    e << YAML::EndMap;
  }
  // Written when the sums are in double only: fp32's settings text (and a
  // checkpoint's digest of it) stays what it was before the key came.
  if (WideGradients(c)) e << YAML::Key << "grad_accum_dtype" << YAML::Value << "fp64";
  e << YAML::Key << "optimizer" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "type" << YAML::Value
    << std::string(EnumName(o.type)) << YAML::Key << "lr" << YAML::Value << o.lr << YAML::Key << "weight_decay" << YAML::Value
    << o.weight_decay;
  if (o.type == OptimizerType::kSgd) {
    e << YAML::Key << "momentum" << YAML::Value << o.momentum;
  } else {
    e << YAML::Key << "betas" << YAML::Value << YAML::Flow << std::vector<double>{o.beta1, o.beta2} << YAML::Key
      << "eps" << YAML::Value << o.eps;
  }
  e << YAML::EndMap << YAML::EndMap;
}

// data_parallel, checkpoint, recovery, log, device and precision.
void EmitRest(YAML::Emitter& e, const TrainConfig& c) {
  e << YAML::Key << "data_parallel" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "size"
    << YAML::Value << c.data_parallel.size << YAML::Key << "bucket_cap_mb" << YAML::Value
    << c.data_parallel.bucket_cap_mb << YAML::Key << "zero" << YAML::Value << c.data_parallel.zero.number() << YAML::EndMap;
  e << YAML::Key << "checkpoint" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "dir" << YAML::Value
    << c.checkpoint.dir << YAML::Key << "every_steps" << YAML::Value << c.checkpoint.every_steps << YAML::Key << "keep"
    << YAML::Value << c.checkpoint.keep << YAML::Key << "resume" << YAML::Value
    << std::string(EnumName(c.checkpoint.resume)) << YAML::EndMap;
  e << YAML::Key << "recovery" << YAML::Value << YAML::Flow << YAML::BeginMap << YAML::Key << "on_lost_rank"
    << YAML::Value << std::string(EnumName(c.recovery.on_lost_rank));
  if (c.recovery.silent_s != 1.0) e << YAML::Key << "silent_s" << YAML::Value << c.recovery.silent_s;
  if (c.recovery.on_lost_rank == LostRankMode::kReplace &&
      (c.data_parallel.size == 1 || c.data_parallel.zero.shards_optimizer())) {
    e << YAML::Key << "snapshot_every" << YAML::Value
      << (c.recovery.snapshot_every == 0 ? std::string("auto") : std::to_string(c.recovery.snapshot_every));
  }
  e << YAML::EndMap;
  e << YAML::Key << "log" << YAML::Value << YAML::BeginMap << YAML::Key << "every_steps" << YAML::Value
    << c.log.every_steps << YAML::Key << "metrics" << YAML::Value << c.log.metrics << YAML::Key << "weights"
    << YAML::Value << c.log.weights << YAML::Key << "progress" << YAML::Value << c.log.progress;
  if (!c.log.trace.empty()) {
    e << YAML::Key << "trace" << YAML::Value << c.log.trace << YAML::Key << "trace_every" << YAML::Value
      << c.log.trace_every;
  }
  if (c.log.blame) {
    e << YAML::Key << "blame" << YAML::Value << true << YAML::Key << "blame_threshold" << YAML::Value
      << c.log.blame_threshold;
  }
  e << YAML::EndMap;
  e << YAML::Key << "device" << YAML::Value << std::string(EnumName(c.device)) << YAML::Key << "precision"
    << YAML::Value << std::string(EnumName(c.precision));
}

}  // namespace

std::string DescribeTrainConfig(const TrainConfig& c) {
  YAML::Emitter e;
  e << YAML::BeginMap;
  EmitModel(e, c);
  EmitPipeline(e, c);
  EmitData(e, c);
  EmitTrain(e, c);
  EmitRest(e, c);
  e << YAML::EndMap;
  return std::string(e.c_str()) + "\n";
}

}  // namespace baton
