#include "params.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "baton/error.h"

namespace baton {
namespace {

const NamedTensor* Find(const std::vector<NamedTensor>& tensors, const std::string& name) {
  for (const NamedTensor& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

}  // namespace

ParamStore::ParamStore(const RunPlan& run, const RankPlan& rank, Executor& exec)
    : run_(run), rank_(rank), exec_(exec), stages_(exec.stages()) {}

void ParamStore::HoldWhole(bool gather) {
  if (!exec_.parameters_sharded() || !whole_.empty()) return;
  whole_.resize(stages_.size());
  for (std::size_t k = 0; k < stages_.size(); ++k) {
    whole_[k].assign(rank_.local_stages[k].num_params, 0.0f);
    exec_.HoldWhole(static_cast<int>(k), whole_[k], gather);
  }
}

void ParamStore::Initialize(std::uint64_t seed, const OptimizerSpec& optimizer) {
  HoldWhole(false);  // ZeRO 3: every replica draws the whole stages alike, and keeps its shard
  for (auto& st : stages_) st->Init(seed);
  Prepare(optimizer);
}

void ParamStore::Prepare(const OptimizerSpec& optimizer) {
  HoldWhole(false);  // (held already where Initialize drew)
  // ZeRO: this replica's shard only (the whole stage otherwise).
  exec_.SetOptimizers(optimizer);
  Push();
}

void ParamStore::Pull() {
  for (auto& st : stages_) st->device().PullParams();
  HoldWhole(true);
}

void ParamStore::Push() {
  if (!whole_.empty()) {
    for (std::size_t k = 0; k < stages_.size(); ++k) exec_.KeepShard(static_cast<int>(k));
    whole_.clear();
  }
  for (auto& st : stages_) st->device().PushParams();
}

void ParamStore::Settle() {
  if (whole_.empty()) return;
  for (std::size_t k = 0; k < stages_.size(); ++k) stages_[k]->Bind({}, {});
  whole_.clear();
}

void ParamStore::LoadInitial(const std::vector<NamedTensor>& tensors, const std::string& source) {
  const auto tied = run_.model.TiedParams();  // (head, table)
  if (tied) {
    const NamedTensor* h = Find(tensors, tied->first);
    const NamedTensor* e = Find(tensors, tied->second);
    if (h != nullptr && e != nullptr && (h->shape != e->shape || h->data != e->data)) {
      throw ConfigError(fmt::format("{}: tensor '{}' differs from '{}', but model.tied is true (the head is the "
                                    "embedding's table): leave '{}' out of the file, or set model.tied: false",
                                    source, tied->first, tied->second, tied->first));
    }
  }
  // Strict, as PyTorch's load_state_dict: a tensor the model does not have
  // is refused (a misspelt name would otherwise leave a layer at its random
  // initialisation). Hugging Face GPT-2 files carry the attention masks
  // h.N.attn.bias and h.N.attn.masked_bias as buffers, which its own loader
  // ignores too.
  std::set<std::string> known;
  for (const NamedParam& p : run_.model.Params()) known.insert(p.name);
  if (tied) known.insert(tied->first);
  std::vector<std::string> unknown;
  for (const NamedTensor& t : tensors) {
    const bool mask = t.name.rfind("h.", 0) == 0 &&
                      (t.name.ends_with(".attn.bias") || t.name.ends_with(".attn.masked_bias"));
    if (!known.count(t.name) && !mask) unknown.push_back(Quote(t.name));
  }
  if (!unknown.empty()) {
    const std::size_t shown = std::min<std::size_t>(unknown.size(), 5);
    throw ConfigError(fmt::format("{}: model.init.from holds {} tensor(s) this model does not have: {}{} (loading is "
                                  "strict, as PyTorch's load_state_dict: remove them, or check the model's config)",
                                  source, unknown.size(), fmt::join(unknown.begin(), unknown.begin() + shown, ", "),
                                  unknown.size() > shown ? ", ..." : ""));
  }
  HoldWhole(false);  // ZeRO 3: every parameter is written below
  for (auto& st : stages_) {
    for (const Stage::Param& p : st->named_params()) {
      const NamedTensor* found = Find(tensors, p.name);
      if (found == nullptr && tied && tied->first == p.name) found = Find(tensors, tied->second);
      if (found == nullptr) throw ConfigError(fmt::format("{}: model.init.from has no tensor '{}'", source, p.name));
      if (found->shape != p.shape) {
        throw ConfigError(fmt::format("{}: tensor '{}' has shape [{}], but the model needs [{}]", source, found->name,
                                      fmt::join(found->shape, ", "), fmt::join(p.shape, ", ")));
      }
      const auto bad = std::find_if(found->data.begin(), found->data.end(), [](float x) { return !std::isfinite(x); });
      if (bad != found->data.end()) {
        throw ConfigError(fmt::format("{}: tensor '{}' holds {} at index {}: initial weights must be finite", source,
                                      found->name, *bad, bad - found->data.begin()));
      }
      std::copy(found->data.begin(), found->data.end(), p.data.begin());
    }
  }
  Push();
}

std::vector<std::string> ParamStore::StateNames() const {
  return stages_.empty() ? std::vector<std::string>{} : stages_.front()->device().OptimizerStateNames();
}

OptimizerStates ParamStore::WholeState(ReplicaGroup& replicas) {
  const ReductionPlan& red = rank_.reduction;
  OptimizerStates out;
  for (std::size_t k = 0; k < stages_.size(); ++k) {
    const auto state = stages_[k]->device().OptimizerState();
    std::vector<std::vector<float>> whole;
    if (!red.shards_optimizer) {
      for (const auto& buf : state) whole.emplace_back(buf.begin(), buf.end());
      out.push_back(std::move(whole));
      continue;
    }
    // Every shard padded to the largest (the last: shards differ by a float
    // at most), gathered on the first replica, and laid back in place.
    const std::size_t n = rank_.local_stages[k].num_params;
    const std::size_t pad = ShardOf(n, red.replicas - 1, red.replicas).count;
    std::vector<float> mine(pad * state.size(), 0.0f);
    for (std::size_t s = 0; s < state.size(); ++s) std::copy(state[s].begin(), state[s].end(), mine.begin() + s * pad);
    std::vector<float> all;
    replicas.Gather(mine, &all);
    if (rank_.reduction.replica == 0) {
      for (std::size_t s = 0; s < state.size(); ++s) {
        std::vector<float> buf(n);
        for (int i = 0; i < red.replicas; ++i) {
          const Shard shard = ShardOf(n, i, red.replicas);
          const auto from = all.begin() + static_cast<std::ptrdiff_t>((static_cast<std::size_t>(i) * state.size() + s) * pad);
          std::copy(from, from + static_cast<std::ptrdiff_t>(shard.count), buf.begin() + static_cast<std::ptrdiff_t>(shard.begin));
        }
        whole.push_back(std::move(buf));
      }
    }
    out.push_back(std::move(whole));
  }
  return out;
}

std::vector<NamedTensor> ParamStore::CheckpointTensors(const OptimizerStates& state) const {
  std::vector<NamedTensor> out;
  const std::vector<std::string> names = StateNames();
  for (std::size_t k = 0; k < stages_.size(); ++k) {
    const Stage& st = *stages_[k];
    const float* base = stages_[k]->params().data();
    for (const Stage::Param& p : st.named_params()) {
      out.push_back({p.name, p.shape, {p.data.begin(), p.data.end()}});
      const auto offset = static_cast<std::size_t>(p.data.data() - base);
      for (std::size_t s = 0; s < names.size(); ++s) {
        NamedTensor nt{p.name + "." + names[s], p.shape, {}};
        if (k < state.size() && s < state[k].size()) {
          const float* from = state[k][s].data() + offset;
          nt.data.assign(from, from + p.data.size());
        }
        out.push_back(std::move(nt));
      }
    }
  }
  return out;
}

void ParamStore::Restore(const std::vector<NamedTensor>& saved, const std::string& source, std::int64_t step) {
  const std::vector<NamedTensor> wanted = CheckpointTensors({});
  if (saved.size() != wanted.size()) {
    throw ConfigError(fmt::format("{}: {} tensors, but this rank's stages need {}", source, saved.size(), wanted.size()));
  }
  const ReductionPlan& red = rank_.reduction;
  HoldWhole(false);  // ZeRO 3: every parameter is written below
  std::size_t at = 0;
  for (std::size_t k = 0; k < stages_.size(); ++k) {
    Stage& st = *stages_[k];
    const float* base = st.params().data();
    auto state = st.device().OptimizerState();
    // The part of the stage's parameters this replica's optimizer state covers.
    const std::size_t lo = red.shard_begin[k], hi = lo + red.shard_count[k];
    for (const Stage::Param& p : st.named_params()) {
      const auto offset = static_cast<std::size_t>(p.data.data() - base);
      for (std::size_t s = 0; s <= state.size(); ++s, ++at) {
        const NamedTensor& got = saved[at];
        if (got.name != wanted[at].name || got.shape != wanted[at].shape) {
          throw ConfigError(fmt::format("{}: tensor {} is '{}' [{}], expected '{}' [{}]", source, at, got.name,
                                        fmt::join(got.shape, ", "), wanted[at].name, fmt::join(wanted[at].shape, ", ")));
        }
        if (s == 0) {
          std::copy(got.data.begin(), got.data.end(), p.data.data());
          continue;
        }
        const std::size_t from = std::max(offset, lo), to = std::min(offset + p.data.size(), hi);
        for (std::size_t i = from; i < to; ++i) state[s - 1][i - lo] = got.data[i - offset];
      }
    }
    st.device().set_optimizer_steps(step);
  }
  Push();
}

void ParamStore::ForEachOwn(const std::function<void(std::string name, std::vector<std::int64_t> shape,
                                                    std::span<const float> data)>& each) const {
  const std::vector<std::string> names = StateNames();
  for (std::size_t k = 0; k < stages_.size(); ++k) {
    Stage& st = *stages_[k];
    for (const Stage::Param& p : st.named_params()) each(p.name, p.shape, p.data);
    const auto state = st.device().OptimizerState();
    for (std::size_t s = 0; s < state.size(); ++s) {
      each(fmt::format("stage.{}.{}", k, s < names.size() ? names[s] : std::to_string(s)),
           {static_cast<std::int64_t>(state[s].size())}, state[s]);
    }
  }
}

std::vector<NamedTensor> ParamStore::OwnTensorsToFill() const {
  std::vector<NamedTensor> out;
  ForEachOwn([&](std::string name, std::vector<std::int64_t> shape, std::span<const float> data) {
    out.push_back({std::move(name), std::move(shape), std::vector<float>(data.size())});
  });
  return out;
}

std::vector<float> ParamStore::OwnFloats() const {
  std::size_t n = 0;
  ForEachOwn([&](const std::string&, const std::vector<std::int64_t>&, std::span<const float> data) { n += data.size(); });
  std::vector<float> out;
  out.reserve(n);
  ForEachOwn([&](const std::string&, const std::vector<std::int64_t>&, std::span<const float> data) {
    out.insert(out.end(), data.begin(), data.end());
  });
  return out;
}

void ParamStore::RestoreOwn(const std::vector<NamedTensor>& own, const std::string& source, std::int64_t step) {
  HoldWhole(false);  // ZeRO 3: every parameter is written below (whole, as OwnFloats gives them)
  // The names and sizes of this rank's own tensors (not their floats).
  std::vector<std::pair<std::string, std::size_t>> wanted;
  ForEachOwn([&](std::string name, const std::vector<std::int64_t>&, std::span<const float> data) {
    wanted.emplace_back(std::move(name), data.size());
  });
  if (own.size() != wanted.size()) {
    throw ConfigError(fmt::format("{}: {} tensors, but this rank's state has {}", source, own.size(), wanted.size()));
  }
  for (std::size_t i = 0; i < own.size(); ++i) {
    if (own[i].name != wanted[i].first || own[i].data.size() != wanted[i].second) {
      throw ConfigError(fmt::format("{}: tensor {} is '{}' of {} floats, expected '{}' of {}", source, i, own[i].name,
                                    own[i].data.size(), wanted[i].first, wanted[i].second));
    }
  }
  std::size_t at = 0;
  for (auto& st : stages_) {
    for (const Stage::Param& p : st->named_params()) {
      std::copy(own[at].data.begin(), own[at].data.end(), p.data.data());
      ++at;
    }
    auto state = st->device().OptimizerState();
    for (std::size_t s = 0; s < state.size(); ++s, ++at) {
      std::copy(own[at].data.begin(), own[at].data.end(), state[s].data());
    }
    st->device().set_optimizer_steps(step);
  }
  Push();
}

std::vector<float> ParamStore::LocalFloats() const {
  std::vector<float> out;
  for (const auto& st : stages_) out.insert(out.end(), st->params().begin(), st->params().end());
  return out;
}

void SaveWeights(const std::string& path, Transport& pipeline, const RunPlan& run, const ParamStore& store,
                 const Env& env) {
  std::vector<float> all;
  pipeline.GatherToRoot(store.LocalFloats(), &all);
  if (pipeline.rank() != 0) return;
  // Each rank sent its stages' parameters in stage order, and a stage's are
  // contiguous in the model's: the whole model's parameters, in place.
  const ModelDesc& model = run.model;
  std::vector<float> whole(model.num_params);
  std::size_t at = 0;
  for (int r = 0; r < pipeline.size(); ++r) {
    for (int s = 0; s < run.stages(); ++s) {
      if (run.lowered.stage_rank[s] != r) continue;
      const std::size_t first = model.ops[static_cast<std::size_t>(model.OpRange(run.bounds[s], run.bounds[s + 1]).first)].param_offset;
      const std::size_t n = run.StageParams(s);
      std::copy(all.begin() + static_cast<std::ptrdiff_t>(at), all.begin() + static_cast<std::ptrdiff_t>(at + n),
                whole.begin() + static_cast<std::ptrdiff_t>(first));
      at += n;
    }
  }
  std::vector<NamedTensor> tensors;
  for (NamedParam& p : model.Params()) {
    const auto from = whole.begin() + static_cast<std::ptrdiff_t>(p.offset);
    tensors.push_back({std::move(p.name), std::move(p.shape), {from, from + static_cast<std::ptrdiff_t>(p.size)}});
  }
  WriteSafetensors(path, tensors, {}, env);
}

}  // namespace baton
