// The training config: the pipeline, train, data parallel, checkpoint,
// recovery and log sections, and the checks across sections (the data and
// model sections: data_config.cc, model_config.cc).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <fstream>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <sstream>

#include "baton/config.h"
#include "baton/error.h"
#include "baton/files.h"
#include "sections.h"
#include "yaml_reader.h"

namespace baton {

std::string OneOf(YamlMap& map, std::string_view key, std::string fallback, const std::vector<std::string>& allowed) {
  std::string v = map.Get<std::string>(key, fallback);
  if (std::find(allowed.begin(), allowed.end(), v) == allowed.end()) {
    map.Fail(map.Node(key), key, fmt::format("{} is not one of: {}", Quote(v), fmt::join(allowed, ", ")));
  }
  return v;
}

namespace {

std::string_view Trim(std::string_view s) {
  const auto space = [](char ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> Split(std::string_view s, char separator) {
  std::vector<std::string_view> out;
  for (std::size_t start = 0;;) {
    const std::size_t end = s.find(separator, start);
    out.push_back(s.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
    if (end == std::string_view::npos) return out;
    start = end + 1;
  }
}

// pipeline.layout's symbols.
enum class LayoutSymbol : std::uint8_t { kEmbedding, kBlock, kLoss };

// Reads pipeline.layout (see PipelineLayout) for a GPT of `gpt.blocks`
// blocks. Every refusal names the key's file:line:column, the stage, the
// token and the rule; the stage count waits for the schedule
// (PartitionLayers).
PipelineLayout ReadLayout(YamlMap& pipe, const GptSpec& gpt) {
  PipelineLayout out;
  out.text = pipe.Get<std::string>("layout", "");
  const YAML::Node node = pipe.Node("layout");
  out.where = pipe.Locate(node, pipe.KeyPath("layout"));
  auto fail = [&](std::size_t stage, std::string_view token, std::string_view rule) {
    pipe.Fail(node, "layout", fmt::format("stage {}, token '{}': {} (layout \"{}\")", stage, token, rule, out.text));
  };
  const std::vector<std::string_view> stages = Split(out.text, '|');
  const std::size_t last = stages.size() - 1;
  long long blocks = 0;  // t's so far; a count may be up to INT_MAX
  bool embedding = false, loss = false;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    const std::vector<std::string_view> tokens = Split(stages[s], ',');
    if (tokens.size() == 1 && Trim(tokens[0]).empty()) {
      fail(s, "", "the stage is empty: every stage holds at least one of E, t, L");
    }
    LayoutStage stage;
    for (std::size_t k = 0; k < tokens.size(); ++k) {
      const std::string_view token = Trim(tokens[k]);
      if (token.empty()) fail(s, token, "an empty symbol (a stray ','?): a stage lists E, t or L, comma-separated");
      const std::size_t star = token.find('*');
      const std::string_view name = Trim(token.substr(0, star));
      int count = 1;
      if (star != std::string_view::npos) {
        const std::string_view n = Trim(token.substr(star + 1));
        const auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), count);
        if (n.empty() || ec != std::errc() || end != n.data() + n.size() || count < 1) {
          fail(s, token,
               fmt::format("bad repetition count '{}': *N repeats a symbol N times, N a whole number >= 1", n));
        }
      }
      LayoutSymbol symbol = LayoutSymbol::kEmbedding;
      if (name == "E") {
        symbol = LayoutSymbol::kEmbedding;
      } else if (name == "t") {
        symbol = LayoutSymbol::kBlock;
      } else if (name == "L") {
        symbol = LayoutSymbol::kLoss;
      } else {
        fail(s, token,
             fmt::format("unknown symbol '{}': a stage lists E (the embedding), t (a transformer block) and L (the "
                         "loss end), each optionally repeated as *N",
                         name));
      }
      const bool first = s == 0 && k == 0, final = s == last && k + 1 == tokens.size();
      if (first && symbol != LayoutSymbol::kEmbedding) {
        fail(s, token, "stage 0 must start with E (the embedding), where the token ids enter");
      }
      switch (symbol) {
        case LayoutSymbol::kEmbedding:
          if (embedding || count > 1) {
            fail(s, token, "E (the embedding) appears more than once: it is one part, first in stage 0");
          }
          if (!first) fail(s, token, "E (the embedding) must come first in stage 0, where the token ids enter");
          embedding = stage.embedding = true;
          break;
        case LayoutSymbol::kBlock:
          blocks += count;
          if (blocks > gpt.blocks) {
            fail(s, token,
                 fmt::format("the layout's t's reach {} here, but model.blocks is {}: every block exactly once", blocks,
                             gpt.blocks));
          }
          stage.blocks += count;
          break;
        case LayoutSymbol::kLoss:
          if (loss || count > 1) {
            fail(s, token, "L (the loss end) appears more than once: it is one part, last in the last stage");
          }
          if (!final) {
            fail(s, token,
                 fmt::format("L (the loss end) must come last in the last stage (stage {}), where the labels are",
                             last));
          }
          loss = stage.loss = true;
          break;
      }
      if (final && symbol != LayoutSymbol::kLoss) {
        fail(s, token,
             fmt::format("the last stage (stage {}) must end with L (the loss end), where the labels are", last));
      }
    }
    out.stages.push_back(stage);
  }
  if (blocks != gpt.blocks) {
    pipe.Fail(node, "layout",
              fmt::format("the stages hold {} t's (transformer blocks), but model.blocks is {}: every block exactly "
                          "once (layout \"{}\")",
                          blocks, gpt.blocks, out.text));
  }
  return out;
}

}  // namespace

namespace {
constexpr std::array<Partition, 4> kPartitions = {Partition::kBalanced, Partition::kExplicit, Partition::kLayout,
                                                  Partition::kAuto};
constexpr std::array<BalanceBy, 2> kBalanceBys = {BalanceBy::kParams, BalanceBy::kFlops};
constexpr std::array<DatasetKind, 7> kDatasets = {DatasetKind::kFashionMnist, DatasetKind::kSynthetic,
                                                   DatasetKind::kFortunes,     DatasetKind::kSyntheticTokens,
                                                   DatasetKind::kMegatron,     DatasetKind::kLlmc,
                                                   DatasetKind::kJsonl};
}  // namespace

std::string_view EnumName(Partition v) {
  return v == Partition::kBalanced ? "balanced" : v == Partition::kExplicit ? "explicit" : v == Partition::kLayout ? "layout" : "auto";
}
std::string_view EnumName(BalanceBy v) { return v == BalanceBy::kParams ? "params" : "flops"; }
std::string_view EnumName(DatasetKind v) {
  switch (v) {
    case DatasetKind::kFashionMnist:
      return "fashion_mnist";
    case DatasetKind::kSynthetic:
      return "synthetic";
    case DatasetKind::kFortunes:
      return "fortunes";
    case DatasetKind::kSyntheticTokens:
      return "synthetic_tokens";
    case DatasetKind::kMegatron:
      return "megatron";
    case DatasetKind::kLlmc:
      return "llmc";
    case DatasetKind::kJsonl:
      return "jsonl";
  }
  return "synthetic_tokens";
}
std::span<const Partition> EnumValues(Partition) { return kPartitions; }
std::span<const BalanceBy> EnumValues(BalanceBy) { return kBalanceBys; }
std::span<const DatasetKind> EnumValues(DatasetKind) { return kDatasets; }
std::string_view EnumName(OnNonFinite v) { return v == OnNonFinite::kStop ? "stop" : "skip"; }
std::string_view EnumName(ResumeMode v) { return v == ResumeMode::kNever ? "never" : "auto"; }
std::string_view EnumName(AdaptMode v) { return v == AdaptMode::kOff ? "off" : v == AdaptMode::kOn ? "on" : "full"; }
std::span<const AdaptMode> EnumValues(AdaptMode) {
  static constexpr std::array<AdaptMode, 3> kValues = {AdaptMode::kOff, AdaptMode::kOn, AdaptMode::kFull};
  return kValues;
}
std::string_view EnumName(LostRankMode v) {
  return v == LostRankMode::kStop ? "stop" : v == LostRankMode::kShrink ? "shrink" : "replace";
}
std::span<const LostRankMode> EnumValues(LostRankMode) {
  static constexpr std::array<LostRankMode, 3> kValues = {LostRankMode::kStop, LostRankMode::kShrink,
                                                          LostRankMode::kReplace};
  return kValues;
}
std::string_view EnumName(GradAccum v) {
  return v == GradAccum::kAuto ? "auto" : v == GradAccum::kFP32 ? "fp32" : "fp64";
}
std::string_view EnumName(Packing v) {
  return v == Packing::kNone ? "none" : v == Packing::kGreedy ? "greedy" : v == Packing::kBalanced ? "balanced" : "pad";
}
std::span<const Packing> EnumValues(Packing) {
  static constexpr std::array<Packing, 4> kValues = {Packing::kNone, Packing::kGreedy, Packing::kBalanced,
                                                     Packing::kPad};
  return kValues;
}
std::string_view EnumName(LongDocuments v) { return v == LongDocuments::kSplit ? "split" : "refuse"; }
std::span<const LongDocuments> EnumValues(LongDocuments) {
  static constexpr std::array<LongDocuments, 2> kValues = {LongDocuments::kSplit, LongDocuments::kRefuse};
  return kValues;
}
std::span<const GradAccum> EnumValues(GradAccum) {
  static constexpr std::array<GradAccum, 3> kValues = {GradAccum::kAuto, GradAccum::kFP32, GradAccum::kFP64};
  return kValues;
}
std::span<const ResumeMode> EnumValues(ResumeMode) {
  static constexpr std::array<ResumeMode, 2> kValues = {ResumeMode::kNever, ResumeMode::kAuto};
  return kValues;
}
std::span<const OnNonFinite> EnumValues(OnNonFinite) {
  static constexpr std::array<OnNonFinite, 2> kValues = {OnNonFinite::kStop, OnNonFinite::kSkip};
  return kValues;
}

namespace {

// --set overrides applied to the document; returns their key paths (list
// indices in a --set path, "model.layers.0.out", are written [0]).
std::shared_ptr<std::set<std::string>> ApplyOverrides(YAML::Node& root, const std::vector<std::string>& overrides,
                                                      const std::string& source) {
  auto overridden = std::make_shared<std::set<std::string>>();
  for (const std::string& o : overrides) {
    // List indices in a --set path ("model.layers.0.out") are written [0] in key paths.
    std::string path = ApplyOverride(root, o, source), key_path;
    std::size_t start = 0;
    while (start <= path.size()) {
      std::size_t dot = path.find('.', start);
      if (dot == std::string::npos) dot = path.size();
      const std::string part = path.substr(start, dot - start);
      const bool index = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
      key_path += index ? "[" + part + "]" : (key_path.empty() ? "" : ".") + part;
      start = dot + 1;
    }
    overridden->insert(key_path);
  }
  return overridden;
}

// pipeline.partition (balanced, or a list of layer counts) and
// pipeline.layout (a GPT's stages), which contradict each other.
void ReadPartition(YamlMap& pipe, TrainConfig& c) {
  YAML::Node partition = pipe.Node("partition");
  if (partition.IsDefined() && partition.IsSequence()) {
    c.pipeline.partition = Partition::kExplicit;
    for (const YAML::Node& n : partition) {
      int v = 0;
      try {
        v = n.as<int>();
      } catch (const YAML::Exception&) {
        pipe.Fail(n, "partition", fmt::format("expected a layer count, got {}", Quote(n.Scalar())));
      }
      if (v < 1) pipe.Fail(n, "partition", fmt::format("every stage needs at least one layer, got {}", v));
      c.pipeline.partition_counts.push_back(v);
    }
  } else {
    // The words "balanced" and "auto" (an MLP's placement searched at
    // start-up): an explicit partition is written as its list.
    const std::string word = OneOf(pipe, "partition", "balanced", {"balanced", "auto"});
    c.pipeline.partition = word == "auto" ? Partition::kAuto : Partition::kBalanced;
    if (word == "auto" && c.model.gpt) {
      pipe.Fail(partition, "partition", "a GPT is placed by its parts: write pipeline.layout: auto");
    }
  }
  if (pipe.Has("layout") && pipe.Node("layout").IsScalar() && pipe.Node("layout").Scalar() == "auto") {
    if (!c.model.gpt) {
      pipe.Fail(pipe.Node("layout"), "layout",
                "is for GPT models (model: {type: gpt, ...}); an MLP's placement is searched with pipeline.partition: "
                "auto");
    }
    if (pipe.Has("partition")) {
      pipe.Fail(pipe.Node("layout"), "layout", "contradicts pipeline.partition: both choose each stage's layers; give one");
    }
    pipe.Get<std::string>("layout", "");  // read
    c.pipeline.partition = Partition::kAuto;
  } else if (pipe.Has("layout")) {
    if (!c.model.gpt) {
      pipe.Fail(pipe.Node("layout"), "layout",
                "is for GPT models (model: {type: gpt, ...}); cut an MLP from model.layers with pipeline.partition: "
                "balanced, or a list of layer counts per stage");
    }
    if (pipe.Has("partition")) {
      std::vector<std::string> items;
      for (const YAML::Node& n : partition) items.push_back(n.Scalar());
      pipe.Fail(pipe.Node("layout"), "layout",
                fmt::format("contradicts pipeline.partition {} ({}): both choose each stage's layers; give one",
                            partition.IsSequence() ? fmt::format("[{}]", fmt::join(items, ", ")) : partition.Scalar(),
                            pipe.Locate(partition, pipe.KeyPath("partition"))));
    }
    c.pipeline.partition = Partition::kLayout;
    c.pipeline.layout = ReadLayout(pipe, c.model.gpt_spec);
  }
}

// pipeline.keep: the layer types selective checkpointing keeps.
void ReadKeep(YamlMap& pipe, TrainConfig& c) {
  for (const std::string& t : pipe.Get<std::vector<std::string>>("keep", {})) {
    const std::optional<LayerType> type = ParseEnum<LayerType>(t);
    if (!type || *type == LayerType::kResidual) {
      std::vector<std::string_view> layers;  // every layer type; a residual add is not a layer
      for (LayerType l : EnumValues(LayerType{})) {
        if (l != LayerType::kResidual) layers.push_back(EnumName(l));
      }
      pipe.Fail(pipe.Node("keep"), "keep",
                fmt::format("{} is not a layer type ({})", Quote(t), fmt::join(layers, ", ")));
    }
    c.pipeline.keep.push_back(*type);
  }
  // Selective without a list: SelectiveKeep's default.
  if (c.pipeline.checkpointing == Checkpointing::kSelective && !pipe.Has("keep")) {
    c.pipeline.keep = SelectiveKeep(c);
  }
  if (!c.pipeline.keep.empty() && c.pipeline.checkpointing != Checkpointing::kSelective) {
    pipe.Fail(pipe.Node("keep"), "keep", "only applies with checkpointing: selective");
  }
}

// pipeline.seq_slices and seq_split: a GPT's sequences in slices, for a
// schedule that runs them.
void ReadSlices(YamlMap& pipe, TrainConfig& c) {
  c.pipeline.seq_slices = pipe.GetInt("seq_slices", 1, 1, kMaxInt);
  c.pipeline.seq_split = Choice(pipe, "seq_split", c.pipeline.seq_split);
  const int k = c.pipeline.seq_slices;
  if (k == 1) {
    if (pipe.Has("seq_split")) pipe.Fail(pipe.Node("seq_split"), "seq_split", "only applies with pipeline.seq_slices > 1");
    return;
  }
  const YAML::Node node = pipe.Node("seq_slices");
  if (!c.model.gpt) {
    pipe.Fail(node, "seq_slices", "slices a GPT's sequences (model: {type: gpt, ...}); this model has none");
  }
  const int seq = c.model.seq;
  if (k > seq) pipe.Fail(node, "seq_slices", fmt::format("{} slices of a sequence of {} tokens: at most one a token", k, seq));
  if (c.pipeline.seq_split == SeqSplit::kEven && seq % k != 0) {
    pipe.Fail(node, "seq_slices",
              fmt::format("{} does not divide the sequence length {}: an even split needs equal slices (or write "
                          "pipeline.seq_split: compute)",
                          k, seq));
  }
  const GeneratorEntry* g = FindGenerator(c.pipeline.schedule);
  if (g != nullptr && !g->traits.slices) {
    std::vector<std::string> sliced;
    for (const GeneratorEntry& e : Generators()) {
      if (e.traits.slices) sliced.emplace_back(e.name);
    }
    const GeneratorEntry* form = SlicedFormOf(g->name);
    pipe.Fail(node, "seq_slices",
              fmt::format("{} does not run sequence slices; the schedules that do: {}{}", g->title,
                          fmt::join(sliced, ", "),
                          form != nullptr ? fmt::format(" ({} over slices is {})", g->title, form->name) : ""));
  }
}

void ReadPipeline(YamlMap& top, TrainConfig& c) {
  YamlMap pipe = top.Map("pipeline");
  c.pipeline.schedule = pipe.Get<std::string>("schedule", c.pipeline.schedule);
  c.pipeline.ranks = pipe.GetInt("ranks", c.pipeline.ranks, 1, kMaxInt);
  c.pipeline.microbatches = pipe.GetInt("microbatches", c.pipeline.microbatches, 1, kMaxInt);
  c.pipeline.chunks = pipe.GetInt("chunks", c.pipeline.chunks, 0, kMaxInt);
  ReadPartition(pipe, c);
  c.pipeline.balance_by = Choice(pipe, "balance_by", c.pipeline.balance_by);
  c.pipeline.checkpointing = Choice(pipe, "checkpointing", c.pipeline.checkpointing);
  ReadKeep(pipe, c);
  c.pipeline.wait_timeout_s = pipe.GetNumber("wait_timeout_s", c.pipeline.wait_timeout_s, 1e-3, 1e7);
  c.pipeline.profile = pipe.Get<std::string>("profile", "");
  c.pipeline.memory_bytes = pipe.GetNumber("memory_bytes", 0.0, 0.0, 1e18);
  ReadSlices(pipe, c);
  c.pipeline.adapt = Choice(pipe, "adapt", c.pipeline.adapt);
  c.pipeline.adapt_asked = pipe.Has("adapt");
  if (c.pipeline.partition != Partition::kAuto) {
    for (const char* key : {"profile", "memory_bytes"}) {
      // A profile prices the adaptive plans too, which are on unless set
      // off, and balanced packing's arrangement of each step.
      const bool adapting = c.pipeline.adapt != AdaptMode::kOff || !c.pipeline.adapt_asked;
      const bool prices = adapting || c.data.packing == Packing::kBalanced;
      if (pipe.Has(key) && !(prices && std::string_view(key) == "profile")) {
        pipe.Fail(pipe.Node(key), key,
                  "only applies with an automatic placement (pipeline.partition: auto, or pipeline.layout: auto), "
                  "adaptive plans (pipeline.adapt: on) or balanced packing (data.packing: balanced)");
      }
    }
  }
  pipe.Finish();
}

void ReadTrain(YamlMap& top, const YAML::Node& root, TrainConfig& c) {
  YamlMap train = top.Map("train");
  c.train.batch_size = train.GetInt("batch_size", c.train.batch_size, 1, kMaxInt);
  c.train.epochs = train.GetInt("epochs", c.train.epochs, 1, kMaxInt);
  c.train.steps = train.Get<long long>("steps", 0);
  if (c.train.steps < 0) train.Fail(train.Node("steps"), "steps", "must be >= 0 (0 = run the epochs)");
  if (c.train.batch_size % c.pipeline.microbatches != 0) {
    // Said of pipeline.microbatches, where the count is chosen.
    top.Map("pipeline").Fail(root["pipeline"]["microbatches"], "microbatches",
              fmt::format("{} microbatches do not divide train.batch_size {}: every microbatch must hold the same "
                          "number of samples",
                          c.pipeline.microbatches, c.train.batch_size));
  }
  c.train.batch_tokens = train.Get<long long>("batch_tokens", 0);
  if (train.Has("batch_tokens")) {
    if (c.data.packing == Packing::kNone) {
      train.Fail(train.Node("batch_tokens"), "batch_tokens",
                 "counts the tokens of packed documents: set data.packing (greedy, balanced or pad), or use "
                 "train.batch_size alone");
    }
    const std::int64_t budget = c.data.seq_len;  // data.max_tokens
    if (c.train.batch_tokens < budget) {
      train.Fail(train.Node("batch_tokens"), "batch_tokens",
                 fmt::format("must be at least data.max_tokens {} (one full microbatch), got {}", budget,
                             c.train.batch_tokens));
    }
    if (c.train.batch_tokens > budget * c.train.batch_size) {
      train.Fail(train.Node("batch_tokens"), "batch_tokens",
                 fmt::format("{} tokens do not fit in train.batch_size {} samples of data.max_tokens {} ({} "
                             "positions): raise batch_size, the step's most samples",
                             c.train.batch_tokens, c.train.batch_size, budget, budget * c.train.batch_size));
    }
  }
  ReadOptimizer(train, c.train.optimizer);
  ReadLrSchedule(train, c, c.train.lr_schedule);
  c.train.clip_grad_norm = train.GetNumber("clip_grad_norm", 0.0, 0.0, std::numeric_limits<double>::max());
  c.train.on_nonfinite = Choice(train, "on_nonfinite", c.train.on_nonfinite);
  if (train.Has("max_skipped") && c.train.on_nonfinite != OnNonFinite::kSkip) {
    train.Fail(train.Node("max_skipped"), "max_skipped", "only applies with train.on_nonfinite: skip");
  }
  c.train.max_skipped = train.GetInt("max_skipped", 10, 0, kMaxInt);
  c.train.grad_accum = Choice(train, "grad_accum_dtype", c.train.grad_accum);
  train.Finish();

}

// train.batch_tokens: what a step of a varying microbatch count cannot
// run with yet.
void CheckBatchTokens(YamlMap& top, const YAML::Node& root, const TrainConfig& c) {
  YamlMap train = top.Map("train");
  const YAML::Node at = root["train"]["batch_tokens"];
  if (c.pipeline.adapt == AdaptMode::kFull) {
    train.Fail(at, "batch_tokens",
               "is not built with pipeline.adapt: full (it re-splits a fixed microbatch count between the "
               "replicas): use pipeline.adapt on or off, or train.batch_size alone");
  }
  if (c.recovery.on_lost_rank != LostRankMode::kStop) {
    train.Fail(at, "batch_tokens",
               fmt::format("is not built with recovery.on_lost_rank: {} (a step's samples are laid out for the "
                           "replicas it started with): use stop, or train.batch_size alone",
                           EnumName(c.recovery.on_lost_rank)));
  }
  if (c.data.shuffle) {
    train.Fail(at, "batch_tokens",
               "takes each step's documents in data order, and data.shuffle shuffles the samples between the "
               "steps: set data.shuffle: false");
  }
}

void ReadDataParallel(YamlMap& top, const YAML::Node& root, TrainConfig& c) {
  YamlMap dp = top.Map("data_parallel");
  c.data_parallel.size = dp.GetInt("size", 1, 1, kMaxInt);
  c.data_parallel.bucket_cap_mb =
      dp.GetNumber("bucket_cap_mb", c.data_parallel.bucket_cap_mb, 1.0 / (1024 * 1024), 2047.0);
  c.data_parallel.zero = ZeroStage(dp.GetInt("zero", 0, 0, ZeroStage::kLast));
  if (c.train.batch_size % (c.data_parallel.size * c.pipeline.microbatches) != 0) {
    dp.Fail(dp.Has("size") ? dp.Node("size") : root["train"]["batch_size"], "size",
            fmt::format("{} replicas x {} microbatches do not divide train.batch_size {}: every replica takes the "
                        "same share of the global batch, in microbatches of the same size",
                        c.data_parallel.size, c.pipeline.microbatches, c.train.batch_size));
  }
  dp.Finish();

}

void ReadCheckpoint(YamlMap& top, TrainConfig& c) {
  YamlMap ckpt = top.Map("checkpoint");
  c.checkpoint.dir = ckpt.Get<std::string>("dir", "");
  c.checkpoint.every_steps = ckpt.Get<long long>("every_steps", 0);
  if (c.checkpoint.every_steps < 0) ckpt.Fail(ckpt.Node("every_steps"), "every_steps", "must be >= 0");
  c.checkpoint.keep = ckpt.GetInt("keep", 1, 1, kMaxInt);
  c.checkpoint.resume = Choice(ckpt, "resume", c.checkpoint.resume);
  if (c.checkpoint.resume == ResumeMode::kAuto && c.checkpoint.dir.empty()) {
    ckpt.Fail(ckpt.Node("resume"), "resume", "auto needs checkpoint.dir, the folder to resume from");
  }
  // Either half alone would silently write nothing.
  if (c.checkpoint.every_steps > 0 && c.checkpoint.dir.empty()) {
    ckpt.Fail(ckpt.Node("every_steps"), "every_steps", "needs checkpoint.dir, the folder to write checkpoints in");
  }
  if (!c.checkpoint.dir.empty() && c.checkpoint.every_steps == 0) {
    ckpt.Fail(ckpt.Node("dir"), "dir", "needs checkpoint.every_steps > 0, how often to write a checkpoint");
  }
  ckpt.Finish();

}

// recovery.silent_s: the silence that makes a rank lost.
void ReadSilence(YamlMap& rec, TrainConfig& c) {
  c.recovery.silent_s = rec.Get<double>("silent_s", c.recovery.silent_s);
  if (c.recovery.silent_s != 0 && !(c.recovery.silent_s >= 0.5)) {
    rec.Fail(rec.Node("silent_s"), "silent_s",
             "must be 0 (only a closed connection is a loss) or at least 0.5 s (5 of the watch's heartbeats, 0.1 s "
             "apart)");
  }
}

// recovery: what the job does when a rank is lost. shrink drops the
// replicas that lost one; the others hold every stage's whole state.
void ReadRecovery(YamlMap& top, const YAML::Node& root, TrainConfig& c) {
  YamlMap rec = top.Map("recovery");
  c.recovery.on_lost_rank = Choice(rec, "on_lost_rank", c.recovery.on_lost_rank);
  const LostRankMode mode = c.recovery.on_lost_rank;
  if (mode != LostRankMode::kStop) {
    const YAML::Node at = root["recovery"]["on_lost_rank"];
    const std::string name(EnumName(mode));
    if (mode == LostRankMode::kShrink && c.data_parallel.size < 2) {
      rec.Fail(at, "on_lost_rank",
               "shrink goes on without the replicas that lost a rank, and needs data_parallel.size >= 2 (a pure "
               "pipeline cannot go on without one of its stages): use replace (a neighbour's snapshot) or stop");
    }
    if (mode == LostRankMode::kReplace && c.data_parallel.size < 2 && c.pipeline.ranks < 2) {
      rec.Fail(at, "on_lost_rank",
               "replace rebuilds a lost rank's state from another replica or, in a pure pipeline, from the next "
               "rank's snapshot of it, and a one-rank job has neither: use stop");
    }
    if (mode == LostRankMode::kShrink && c.data_parallel.zero.shards_optimizer()) {
      rec.Fail(at, "on_lost_rank",
               fmt::format("shrink needs every replica to hold its stages' whole state, and ZeRO stage {} shards it "
                           "(the replicas left would lack the lost one's shards): use data_parallel.zero 0, replace "
                           "(each shard's snapshot on another replica), or stop",
                           c.data_parallel.zero.number()));
    }
    if (c.pipeline.adapt != AdaptMode::kOff) {
      rec.Fail(at, "on_lost_rank",
               fmt::format("{} with pipeline.adapt: {} is not built yet: use one of them", name,
                           EnumName(c.pipeline.adapt)));
    }
    if (c.device != Device::kCpu) {
      rec.Fail(at, "on_lost_rank", name + " runs on the CPU only so far (device: cpu)");
    }
    if (mode == LostRankMode::kReplace && c.pipeline.partition == Partition::kAuto) {
      rec.Fail(at, "on_lost_rank",
               "replace starts new ranks on the run's placement, and an automatic one (pipeline.partition: auto) is "
               "not passed to them yet: give the placement (pipeline.partition as a list of layer counts, or pipeline.layout)");
    }
  }
  ReadSilence(rec, c);
  if (rec.Has("snapshot_every")) {
    const std::string word = rec.Get<std::string>("snapshot_every", "auto");
    int every = 0;
    if (word != "auto") {
      const auto [end, ec] = std::from_chars(word.data(), word.data() + word.size(), every);
      if (ec != std::errc() || end != word.data() + word.size() || every < 1) {
        rec.Fail(rec.Node("snapshot_every"), "snapshot_every",
                 "must be auto or a whole number of steps >= 1 (how often each rank's state is copied to the next "
                 "rank)");
      }
    }
    c.recovery.snapshot_every = every;
    if (mode != LostRankMode::kReplace || (c.data_parallel.size > 1 && !c.data_parallel.zero.shards_optimizer())) {
      rec.Fail(rec.Node("snapshot_every"), "snapshot_every",
               "applies to recovery.on_lost_rank: replace in a pure pipeline (data_parallel.size 1) or under ZeRO "
               "1-3, where a lost rank's state comes from a snapshot on another rank; with replicas under ZeRO 0 it "
               "comes from another replica");
    }
  }
  if (mode == LostRankMode::kShrink) {
    const YAML::Node at = root["recovery"]["on_lost_rank"];
    // The replicas left share the global batch's microbatches (of the same
    // size) equally, however many are left.
    const int global = c.pipeline.microbatches * c.data_parallel.size;
    for (int left = 1; left < c.data_parallel.size; ++left) {
      if (global % left != 0) {
        rec.Fail(at, "on_lost_rank",
                 fmt::format("shrink shares the global batch's {} microbatches ({} x {} replicas) among the "
                             "replicas left, and {} cannot share them equally: pick pipeline.microbatches so that "
                             "every replica count below data_parallel.size divides {}",
                             global, c.pipeline.microbatches, c.data_parallel.size, left, global));
      }
    }
  }
  rec.Finish();
}

void ReadLog(YamlMap& top, TrainConfig& c) {
  YamlMap log = top.Map("log");
  c.log.every_steps = log.Get<long long>("every_steps", c.log.every_steps);
  if (c.log.every_steps < 0) log.Fail(log.Node("every_steps"), "every_steps", "must be >= 0 (0 = off)");
  c.log.metrics = log.Get<std::string>("metrics", c.log.metrics);
  c.log.weights = log.Get<std::string>("weights", c.log.weights);
  c.log.progress = log.Get("progress", c.log.progress);
  c.log.trace = log.Get<std::string>("trace", c.log.trace);
  c.log.trace_every = log.Get<long long>("trace_every", c.log.trace_every);
  if (c.log.trace_every < 1) log.Fail(log.Node("trace_every"), "trace_every", "must be >= 1 (every Nth step traced)");
  if (log.Has("trace_every") && c.log.trace.empty()) {
    log.Fail(log.Node("trace_every"), "trace_every", "only applies with log.trace (the trace file's path)");
  }
  c.log.blame = log.Get("blame", c.log.blame);
  c.log.blame_threshold = log.Get<double>("blame_threshold", c.log.blame_threshold);
  if (!(c.log.blame_threshold > 0 && c.log.blame_threshold <= 10)) {
    log.Fail(log.Node("blame_threshold"), "blame_threshold",
             "must be above 0 and at most 10 (a share of the step's price: 0.1 names steps 10% late)");
  }
  if (log.Has("blame_threshold") && !c.log.blame) {
    log.Fail(log.Node("blame_threshold"), "blame_threshold", "only applies with log.blame: true");
  }
  log.Finish();

}

}  // namespace

TrainConfig ParseTrainConfig(const std::string& yaml_text, const std::string& source,
                             const std::vector<std::string>& overrides) {
  YAML::Node root = LoadYamlText(yaml_text, source);
  if (root.IsNull() && overrides.empty()) throw EmptyConfig(source);
  YamlMap top(root, source, "", ApplyOverrides(root, overrides, source));
  TrainConfig c;
  c.source = source;
  ReadData(top, c);
  ReadModel(top, c);
  ReadPipeline(top, c);
  ReadTrain(top, root, c);
  ReadDataParallel(top, root, c);
  ReadCheckpoint(top, c);
  ReadLog(top, c);
  c.device = Choice(top, "device", c.device);
  c.precision = Choice(top, "precision", c.precision);
  ReadRecovery(top, root, c);
  if (c.pipeline.seq_slices > 1 && c.device == Device::kCuda) {
    top.Map("pipeline").Fail(root["pipeline"]["seq_slices"], "seq_slices",
                             "sequence slices run on the CPU layers only so far (device: cpu)");
  }
  if (c.log.blame && c.device == Device::kCuda) {
    top.Map("log").Fail(root["log"]["blame"], "blame",
                        "names late steps on the CPU only so far (device: cpu): it reads each action's CPU time, "
                        "not the GPU's");
  }
  if (c.data_parallel.zero.shards_gradients() && c.device == Device::kCuda) {
    top.Map("data_parallel")
        .Fail(root["data_parallel"]["zero"], "zero",
              fmt::format("ZeRO stage {} runs on the CPU only so far (device: cpu); on a GPU use stage 0 or 1",
                          c.data_parallel.zero.number()));
  }
  if (!c.pipeline.adapt_asked && AdaptsByDefault(c)) c.pipeline.adapt = AdaptMode::kOn;
  if (c.pipeline.adapt == AdaptMode::kOff && !c.pipeline.profile.empty() && c.pipeline.partition != Partition::kAuto &&
      c.data.packing != Packing::kBalanced) {
    top.Map("pipeline").Fail(root["pipeline"]["profile"], "profile",
                             "only applies with an automatic placement (pipeline.partition: auto, or pipeline.layout: "
                             "auto), adaptive plans (pipeline.adapt: on) or balanced packing (data.packing: balanced), "
                             "and this run's plan cannot change");
  }
  if (c.pipeline.adapt != AdaptMode::kOff) {
    // A placement moves between steps (SwapPlan): a generated schedule's,
    // every replica's pipeline the same way.
    YamlMap pipe = top.Map("pipeline");
    const std::string name(EnumName(c.pipeline.adapt));
    if (FindGenerator(c.pipeline.schedule) == nullptr) {
      pipe.Fail(root["pipeline"]["adapt"], "adapt",
                fmt::format("{} re-plans a generated schedule's placement, and {} is a schedule file: use off, or "
                            "one of the generators",
                            name, c.pipeline.schedule));
    }
    if (c.pipeline.adapt == AdaptMode::kFull && c.data_parallel.size < 2) {
      pipe.Fail(root["pipeline"]["adapt"], "adapt",
                "full also re-splits the microbatches between replicas, and needs data_parallel.size >= 2: use on");
    }
    if (c.pipeline.adapt == AdaptMode::kFull && c.data_parallel.zero.number() >= 2) {
      pipe.Fail(root["pipeline"]["adapt"], "adapt",
                fmt::format("full with data_parallel.zero {} is not built yet (its gathers and reduce-scatters "
                            "follow each replica's schedule): use on, or ZeRO 0 or 1",
                            c.data_parallel.zero.number()));
    }
  }
  if (c.train.batch_tokens > 0) CheckBatchTokens(top, root, c);
  if (WideGradients(c)) {
    // Said of the key when set, else of what chose it (auto).
    const bool asked = c.train.grad_accum == GradAccum::kFP64;
    const char* why = asked ? "" : " (auto chose it for pipeline.adapt: full or recovery.on_lost_rank: shrink)";
    if (c.device != Device::kCpu) {
      top.Map("train").Fail(root["train"]["grad_accum_dtype"], "grad_accum_dtype",
                            fmt::format("fp64{} sums gradients on the CPU only (device: cpu): use fp32", why));
    }
    if (c.data_parallel.zero.shards_gradients()) {
      top.Map("train").Fail(root["train"]["grad_accum_dtype"], "grad_accum_dtype",
                            fmt::format("fp64{} is not built for data_parallel.zero {} (its gradient windows are "
                                        "floats): use fp32, or ZeRO 0 or 1",
                                        why, c.data_parallel.zero.number()));
    }
  }
  if (c.precision != Precision::kFP32 && c.device != Device::kCuda) {
    top.Fail(top.Node("precision"), "precision",
             std::string(EnumName(c.precision)) + " needs device: cuda (the CPU layers compute in fp32)");
  }
  top.Finish();
  return c;
}

TrainConfig ReplicaConfig(const TrainConfig& config, int replica) {
  TrainConfig c = config;
  const std::vector<int>& split = config.pipeline.replica_microbatches;
  if (!split.empty()) c.pipeline.microbatches = split.at(static_cast<std::size_t>(replica));
  return c;
}

int MicrobatchesBefore(const TrainConfig& c, int replica) {
  const std::vector<int>& split = c.pipeline.replica_microbatches;
  if (split.empty()) return replica * c.pipeline.microbatches;
  int before = 0;
  for (int r = 0; r < replica; ++r) before += split.at(static_cast<std::size_t>(r));
  return before;
}

bool WideGradients(const TrainConfig& c) {
  switch (c.train.grad_accum) {
    case GradAccum::kFP32:
      return false;
    case GradAccum::kFP64:
      return true;
    default:
      // Packed documents too, where double sums are built (the CPU, ZeRO 0
      // or 1): greedy and balanced then differ only inside a microbatch.
      return c.pipeline.adapt == AdaptMode::kFull || c.recovery.on_lost_rank == LostRankMode::kShrink ||
             (c.data.packing != Packing::kNone && c.device == Device::kCpu &&
              !c.data_parallel.zero.shards_gradients());
  }
}

bool AdaptsByDefault(const TrainConfig& c) {
  return c.pipeline.ranks > 1 && c.device == Device::kCpu && FindGenerator(c.pipeline.schedule) != nullptr &&
         c.recovery.on_lost_rank == LostRankMode::kStop;
}

TrainConfig LoadTrainConfig(const std::string& path, const std::vector<std::string>& overrides) {
  return ParseTrainConfig(ReadTextFile(path), path, overrides);
}

std::vector<LayerType> SelectiveKeep(const TrainConfig& config) {
  // The outputs of the layers whose recomputation costs matrix products
  // (linear and attention: Megatron-LM's selective recomputation keeps
  // them too); the cheap element-wise parts are recomputed.
  if (!config.pipeline.keep.empty()) return config.pipeline.keep;
  return {LayerType::kLinear, LayerType::kAttention};
}

}  // namespace baton
