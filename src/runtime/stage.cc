#include "stage.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "baton/error.h"

namespace baton {

Checkpointing ParseCheckpointing(const std::string& name) {
  if (name == "none") return Checkpointing::kNone;
  if (name == "full") return Checkpointing::kFull;
  if (name == "selective") return Checkpointing::kSelective;
  throw ConfigError(fmt::format("checkpointing '{}' is not one of none, full, selective", name));
}

namespace {

// Features leaving a layer list that `width` features enter.
int OutWidth(const std::vector<LayerSpec>& layers, int width) {
  for (const LayerSpec& l : layers) {
    if (l.type == "linear") width = l.out;
    if (l.type == "residual") width = OutWidth(l.body, width);
  }
  return width;
}

// Parameter count (plus one, so parameter-free layers still weigh something)
// or forward multiply-adds per sample, of a top-level layer.
double LayerWeight(const LayerSpec& l, int width, bool flops) {
  if (l.type == "linear") return flops ? double(width) * l.out : double(width) * l.out + (l.bias ? l.out : 0) + 1;
  if (l.type == "layernorm") return flops ? 5.0 * width : 2.0 * width + 1;
  if (l.type == "residual") {
    double sum = flops ? width : 0;
    for (const LayerSpec& b : l.body) {
      sum += LayerWeight(b, width, flops);
      width = OutWidth({b}, width);
    }
    return sum;
  }
  return flops ? width : 1;  // relu, gelu
}

}  // namespace

std::vector<int> PartitionLayers(const TrainConfig& c, int stages) {
  const auto& layers = c.model.layers;
  const int n = static_cast<int>(layers.size());
  if (stages > n) {
    throw ConfigError(
        fmt::format("{}: pipeline needs {} stages ({} ranks x {} chunks) but the model has only {} "
                    "layers; every stage needs at least one layer",
                    c.source, stages, c.pipeline.ranks, stages / std::max(c.pipeline.ranks, 1), n));
  }
  std::vector<int> bounds(stages + 1, 0);
  if (c.pipeline.partition == "explicit") {
    const auto& counts = c.pipeline.partition_counts;
    if (static_cast<int>(counts.size()) != stages) {
      throw ConfigError(
          fmt::format("{}: pipeline.partition lists {} stages, but the pipeline has {} ({} ranks x {} "
                      "chunks)",
                      c.source, counts.size(), stages, c.pipeline.ranks, stages / c.pipeline.ranks));
    }
    int sum = 0;
    for (int s = 0; s < stages; ++s) {
      if (counts[s] < 1) throw ConfigError(fmt::format("{}: pipeline.partition: stage {} is empty", c.source, s));
      bounds[s] = sum;
      sum += counts[s];
    }
    if (sum != n) {
      throw ConfigError(
          fmt::format("{}: pipeline.partition's counts add up to {} layers, but the model has {}", c.source, sum, n));
    }
    bounds[stages] = n;
    return bounds;
  }
  const bool flops = c.pipeline.balance_by == "flops";
  std::vector<double> prefix(n + 1, 0.0);
  int width = c.model.input;
  for (int i = 0; i < n; ++i) {
    prefix[i + 1] = prefix[i] + LayerWeight(layers[i], width, flops);
    width = OutWidth({layers[i]}, width);
  }
  // best[k][i]: the smallest possible heaviest stage when the first i layers
  // form k stages; cut[k][i] the start of the k-th stage in that split.
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(stages + 1, std::vector<double>(n + 1, kInf));
  std::vector<std::vector<int>> cut(stages + 1, std::vector<int>(n + 1, 0));
  best[0][0] = 0;
  for (int k = 1; k <= stages; ++k) {
    for (int i = k; i <= n; ++i) {
      for (int j = k - 1; j < i; ++j) {
        const double v = std::max(best[k - 1][j], prefix[i] - prefix[j]);
        if (v < best[k][i]) {
          best[k][i] = v;
          cut[k][i] = j;
        }
      }
    }
  }
  bounds[stages] = n;
  for (int k = stages, i = n; k > 0; --k) {
    i = cut[k][i];
    bounds[k - 1] = i;
  }
  return bounds;
}

Stage::Stage(const std::vector<LayerSpec>& model_layers, int model_input, const StageOptions& o,
             std::unique_ptr<StageDevice> device)
    : options_(o), device_(std::move(device)) {
  int width = model_input;
  for (int i = 0; i < o.first_layer; ++i) width = OutWidth({model_layers[i]}, width);
  width_.push_back(width);
  std::uint64_t counter = 0;
  for (int i = o.first_layer; i < o.last_layer; ++i) {
    Flatten({model_layers[i]}, i, "", 0, &counter);
  }
  const int K = static_cast<int>(ops_.size());

  // Parameters: one buffer for the stage, carved into layer views.
  std::size_t total = 0;
  for (const auto& l : layers_) total += l->NumParams();
  params_.assign(total, 0.0f);
  grads_.assign(total, 0.0f);
  std::size_t at = 0;
  for (std::size_t li = 0; li < layers_.size(); ++li) {
    Layer& l = *layers_[li];
    has_params_.push_back(l.NumParams() > 0);
    l.Bind(params_.data() + at, grads_.data() + at);
    for (const ParamInfo& p : l.Params()) {
      std::vector<std::int64_t> shape(p.shape.begin(), p.shape.end());
      named_.push_back({layer_names_[li] + p.name, shape, {params_.data() + at + p.offset, p.size}});
    }
    at += l.NumParams();
  }
  device_->BindParams(params_, grads_);

  // What each microbatch keeps in its slot.
  stored_.assign(K + 1, 0);
  stored_[0] = 1;
  for (int i = 0; i + 1 < K; ++i) {
    const bool layer = ops_[i].layer >= 0;
    const std::string_view type = layer ? layers_[ops_[i].layer]->Type() : "";
    switch (o.checkpointing) {
      case Checkpointing::kNone:
        stored_[i + 1] = 1;
        break;
      case Checkpointing::kFull:
        break;
      case Checkpointing::kSelective:
        stored_[i + 1] = layer && std::find(o.keep.begin(), o.keep.end(), type) != o.keep.end();
        break;
    }
  }
  slot_off_.assign(K + 1, 0);
  std::size_t slot = 0;
  for (int i = 0; i < K; ++i) {
    if (!stored_[i]) continue;
    slot_off_[i] = slot;
    slot += std::size_t(o.rows) * width_[i];
  }
  if (o.is_last) {
    dlogits_off_ = slot;
    slot += std::size_t(o.rows) * width_[K];
  }
  forward_floats_ = slot;
  wgrad_off_.assign(K, 0);
  if (o.split_backward) {
    for (int i = 0; i < K; ++i) {
      if (ops_[i].layer < 0 || layers_[ops_[i].layer]->NumParams() == 0) continue;
      wgrad_off_[i] = slot;
      slot += std::size_t(o.rows) * width_[i + 1];
    }
  }
  slot_floats_ = slot;

  ws_off_.assign(K + 1, 0);
  std::size_t ws = 0;
  for (int i = 0; i <= K; ++i) {
    ws_off_[i] = ws;
    ws += std::size_t(o.rows) * width_[i];
  }
  ws_act_ = device_->Allocate(ws);
  ws_grad_ = device_->Allocate(ws);
  ws_skip_ = device_->Allocate(ws);
}

void Stage::Flatten(const std::vector<LayerSpec>& specs, int top_index, const std::string& prefix, int depth,
                    std::uint64_t* counter) {
  for (std::size_t k = 0; k < specs.size(); ++k) {
    const LayerSpec& spec = specs[k];
    // nn.Sequential names: "{i}." at the top, "{i}.{k}." inside a block.
    const std::string name = depth == 0 ? fmt::format("{}.", top_index) : fmt::format("{}{}.", prefix, k);
    std::vector<int> path = layer_path_stack_;
    path.push_back(depth == 0 ? top_index : static_cast<int>(k));
    if (spec.type == "residual") {
      const int block_in = static_cast<int>(ops_.size());
      if (is_block_input_.size() <= std::size_t(block_in)) is_block_input_.resize(block_in + 1, 0);
      is_block_input_[block_in] = 1;
      const int in_width = width_.back();
      layer_path_stack_ = path;
      Flatten(spec.body, top_index, name, depth + 1, counter);
      layer_path_stack_.pop_back();
      ops_.push_back({-1, block_in});
      width_.push_back(in_width);
      continue;
    }
    layers_.push_back(MakeLayer(spec, width_.back()));
    device_->AddLayer(spec, *layers_.back(), options_.rows);
    layer_names_.push_back(name);
    layer_seed_path_.push_back(path);
    ops_.push_back({static_cast<int>(layers_.size()) - 1, -1});
    width_.push_back(layers_.back()->out_features());
    ++*counter;
  }
  is_block_input_.resize(ops_.size() + 1, 0);
}

void Stage::ZeroGrads() { device_->Zero(device_->grads(), grads_.size()); }

void Stage::Init(std::uint64_t seed) {
  for (std::size_t li = 0; li < layers_.size(); ++li) {
    std::vector<std::uint32_t> words = {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)};
    for (int p : layer_seed_path_[li]) words.push_back(static_cast<std::uint32_t>(p));
    std::seed_seq seq(words.begin(), words.end());
    std::mt19937_64 rng(seq);
    layers_[li]->Init(rng);
  }
}

float* Stage::Act(int i, float* slot) {
  return stored_[i] && slot != nullptr ? slot + slot_off_[i] : ws_act_ + ws_off_[i];
}

void Stage::RunOp(int i, const float* in, float* out, int rows, const float* skip) {
  const Op& op = ops_[i];
  if (op.layer >= 0) {
    device_->Forward(op.layer, in, out, rows);
    return;
  }
  device_->Add(in, skip, out, std::size_t(rows) * width_[i]);
}

void Stage::Forward(float* slot, float* y, std::size_t* written) {
  const int K = static_cast<int>(ops_.size());
  for (int i = 0; i < K; ++i) {
    float* out = i + 1 == K ? y : Act(i + 1, slot);
    RunOp(i, Act(i, slot), out, options_.rows, ops_[i].skip >= 0 ? Act(ops_[i].skip, slot) : nullptr);
    if (i + 1 < K && stored_[i + 1]) *written += std::size_t(options_.rows) * width_[i + 1];
  }
}

void Stage::ForwardLoss(float* slot, const std::int32_t* labels, float grad_scale, std::size_t* written) {
  const int K = static_cast<int>(ops_.size());
  float* logits = ws_act_ + ws_off_[K];
  Forward(slot, logits, written);
  *written += std::size_t(options_.rows) * width_[K];
  device_->CrossEntropy(logits, labels, options_.rows, width_[K], grad_scale, slot + dlogits_off_);
}

void Stage::Recompute(float* slot) {
  if (options_.checkpointing == Checkpointing::kNone) return;
  const int K = static_cast<int>(ops_.size());
  for (int i = 0; i + 1 < K; ++i) {
    if (stored_[i + 1]) continue;
    RunOp(i, Act(i, slot), Act(i + 1, slot), options_.rows, ops_[i].skip >= 0 ? Act(ops_[i].skip, slot) : nullptr);
  }
}

void Stage::Backward(float* slot, const float* dy, float* dx, bool full) {
  Recompute(slot);
  const int K = static_cast<int>(ops_.size());
  const int rows = options_.rows;
  for (int i = 0; i < K; ++i) {
    if (is_block_input_[i]) device_->Zero(ws_skip_ + ws_off_[i], std::size_t(rows) * width_[i]);
  }
  const float* top = options_.is_last ? slot + dlogits_off_ : dy;
  for (int i = K - 1; i >= 0; --i) {
    const float* gout = i + 1 == K ? top : ws_grad_ + ws_off_[i + 1];
    float* gin = i == 0 ? dx : ws_grad_ + ws_off_[i];
    const std::size_t n_in = std::size_t(rows) * width_[i];
    const Op& op = ops_[i];
    if (op.layer < 0) {
      // y = a_i + a_skip: the gradient flows to both unchanged.
      device_->AddInto(gout, ws_skip_ + ws_off_[op.skip], n_in);
      if (gin != nullptr) device_->Copy(gin, gout, n_in);
    } else {
      const float* x = Act(i, slot);
      if (has_params_[op.layer]) {
        if (full) {
          device_->BackwardWeight(op.layer, x, gout, rows);
        } else {
          // W runs later and needs this output gradient: keep it in the slot.
          device_->Copy(slot + wgrad_off_[i], gout, std::size_t(rows) * width_[i + 1]);
        }
      }
      if (gin != nullptr) device_->BackwardInput(op.layer, x, gout, gin, rows);
    }
    if (gin != nullptr && is_block_input_[i]) device_->AddInto(ws_skip_ + ws_off_[i], gin, n_in);
  }
}

void Stage::BackwardWeight(float* slot) {
  Recompute(slot);
  const int K = static_cast<int>(ops_.size());
  for (int i = 0; i < K; ++i) {
    if (ops_[i].layer < 0) continue;
    if (!has_params_[ops_[i].layer]) continue;
    device_->BackwardWeight(ops_[i].layer, Act(i, slot), slot + wgrad_off_[i], options_.rows);
  }
}

void Stage::Evaluate(const float* x, int rows, float* y) {
  const int K = static_cast<int>(ops_.size());
  auto act = [&](int i) -> const float* { return i == 0 ? x : ws_act_ + ws_off_[i]; };
  for (int i = 0; i < K; ++i) {
    float* out = i + 1 == K ? y : ws_act_ + ws_off_[i + 1];
    RunOp(i, act(i), out, rows, ops_[i].skip >= 0 ? act(ops_[i].skip) : nullptr);
  }
}

void Stage::EvaluateLoss(const float* x, int rows, const std::int32_t* labels) {
  const int K = static_cast<int>(ops_.size());
  float* logits = ws_act_ + ws_off_[K];
  Evaluate(x, rows, logits);
  device_->CrossEntropy(logits, labels, rows, width_[K], 1.0f, nullptr);
}

}  // namespace baton
