#include "checkpoint.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "baton/error.h"
#include "baton/files.h"

namespace baton {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kFormat = "baton-checkpoint-1";

std::string StepDir(const std::string& dir, std::int64_t step) { return fmt::format("{}/step-{:08}", dir, step); }

std::uint32_t Crc32OfFile(const std::string& path, std::uint64_t* bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("{}: cannot read the checkpoint shard", path));
  std::vector<char> buf(1 << 20);
  uLong crc = crc32(0L, Z_NULL, 0);
  *bytes = 0;
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const std::streamsize got = in.gcount();
    if (got <= 0) break;
    crc = crc32(crc, reinterpret_cast<const Bytef*>(buf.data()), static_cast<uInt>(got));
    *bytes += static_cast<std::uint64_t>(got);
  }
  return static_cast<std::uint32_t>(crc);
}

// Every local stage's whole optimizer state, in OptimizerStateNames order:
// the device's own, or under ZeRO the replicas' shards gathered (a
// collective of the replica group; the first replica gets them, the others
// an empty list).
std::vector<std::vector<std::vector<float>>> WholeOptimizerState(const RunComms& comms, RunSetup& u) {
  std::vector<std::vector<std::vector<float>>> out;
  const ReductionPlan& red = u.rank_plan.reduction;
  auto& stages = u.exec->stages();
  for (std::size_t k = 0; k < stages.size(); ++k) {
    Stage& st = *stages[k];
    const auto state = st.device().OptimizerState();
    std::vector<std::vector<float>> whole;
    if (!red.zero) {
      for (const auto& buf : state) whole.emplace_back(buf.begin(), buf.end());
      out.push_back(std::move(whole));
      continue;
    }
    // Shard i is [n i / D, n (i + 1) / D): at most ceil(n / D) floats, padded to that.
    const std::size_t n = st.params().size(), D = static_cast<std::size_t>(red.replicas);
    const std::size_t pad = (n + D - 1) / D;
    std::vector<float> mine(pad * state.size(), 0.0f);
    for (std::size_t s = 0; s < state.size(); ++s) std::copy(state[s].begin(), state[s].end(), mine.begin() + s * pad);
    std::vector<float> all;
    comms.replicas.Gather(mine, &all);
    if (u.replica == 0) {
      for (std::size_t s = 0; s < state.size(); ++s) {
        std::vector<float> buf(n);
        for (std::size_t i = 0; i < D; ++i) {
          const std::size_t lo = n * i / D, hi = n * (i + 1) / D;
          const auto from = all.begin() + static_cast<std::ptrdiff_t>(i * pad * state.size() + s * pad);
          std::copy(from, from + static_cast<std::ptrdiff_t>(hi - lo), buf.begin() + static_cast<std::ptrdiff_t>(lo));
        }
        whole.push_back(std::move(buf));
      }
    }
    out.push_back(std::move(whole));
  }
  return out;
}

// The tensors of this rank's shard, in a fixed order: each parameter, then
// its optimizer state ("{name}.exp_avg", ...). `state`: WholeOptimizerState.
std::vector<NamedTensor> ShardTensors(RunSetup& u, const std::vector<std::vector<std::vector<float>>>& state) {
  std::vector<NamedTensor> out;
  auto& stages = u.exec->stages();
  for (std::size_t k = 0; k < stages.size(); ++k) {
    Stage& st = *stages[k];
    st.device().PullParams();
    const float* base = st.params().data();
    const auto names = st.device().OptimizerStateNames();
    for (const Stage::Param& p : st.named_params()) {
      out.push_back({p.name, p.shape, {p.data.begin(), p.data.end()}});
      const std::size_t offset = static_cast<std::size_t>(p.data.data() - base);
      for (std::size_t s = 0; s < names.size(); ++s) {
        NamedTensor nt{p.name + "." + names[s], p.shape, {}};
        if (s < state[k].size()) {
          const float* from = state[k][s].data() + offset;
          nt.data.assign(from, from + p.data.size());
        }
        out.push_back(std::move(nt));
      }
    }
  }
  return out;
}

std::vector<std::int64_t> CompleteSteps(const std::string& dir) {
  std::vector<std::int64_t> steps;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return steps;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step-", 0) != 0 || !fs::exists(entry.path() / "manifest.json")) continue;
    try {
      steps.push_back(std::stoll(name.substr(5)));
    } catch (const std::exception&) {
    }
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

}  // namespace

std::string ConfigDigest(const TrainConfig& config) {
  TrainConfig c = config;
  c.source.clear();
  c.train.steps = 0;
  c.train.epochs = 1;
  c.checkpoint = {};
  c.log = {};
  // The replicas train the same model on the same batches, and a checkpoint
  // holds the whole optimizer state: another data_parallel resumes it.
  c.data_parallel = {};
  c.data.evaluate = true;
  const std::string text = DescribeTrainConfig(c);
  // FNV-1a, 64 bits.
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char ch : text) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return fmt::format("{:016x}", h);
}

void SaveCheckpoint(const TrainConfig& c, const RunComms& comms, RunSetup& u, std::int64_t step) {
  Transport& t = comms.world;
  const std::string dir = StepDir(c.checkpoint.dir, step);
  const int pipeline_rank = comms.pipeline.rank();
  const std::string file = fmt::format("rank-{:05}.safetensors", pipeline_rank);
  const auto state = WholeOptimizerState(comms, u);  // a collective of each replica group
  const bool writer = u.replica == 0;               // the replicas hold the same weights
  std::string record;
  Agree(t, [&] {
    if (!writer) return;
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) throw OutputError(fmt::format("{}: cannot create the checkpoint folder: {}", dir, ec.message()));
    WriteSafetensors(dir + "/" + file, ShardTensors(u, state));
    std::uint64_t bytes = 0;
    const std::uint32_t crc = Crc32OfFile(dir + "/" + file, &bytes);
    record = json{{"rank", pipeline_rank}, {"file", file}, {"bytes", bytes}, {"crc32", crc}}.dump();
  });
  MaybeInjectFault(u.fault, u.world_rank, step, "checkpoint");  // a crash between shards and manifest
  // Every shard is durable: only now may the manifest make the checkpoint real.
  std::vector<std::string> records;
  t.GatherStrings(record, &records);
  Agree(t, [&] {
    if (t.rank() != 0) return;
    json manifest;
    manifest["format"] = kFormat;
    manifest["step"] = step;
    manifest["config_digest"] = ConfigDigest(c);
    manifest["schedule"] = u.plan.lowered.name;
    manifest["ranks"] = comms.pipeline.size();
    manifest["data_parallel"] = comms.replicas.size();
    manifest["zero"] = u.rank_plan.reduction.zero ? 1 : 0;
    manifest["chunks"] = u.plan.lowered.chunks();
    manifest["microbatches"] = u.plan.lowered.microbatches;
    manifest["partition"] = u.plan.bounds;
    manifest["shards"] = json::array();
    for (const std::string& r : records) {
      if (!r.empty()) manifest["shards"].push_back(json::parse(r));  // the other replicas write none
    }
    WriteTextFile(dir + "/manifest.json", manifest.dump(2) + "\n");
    // Keep the newest `keep` complete checkpoints; drop older and abandoned ones.
    const std::vector<std::int64_t> done = CompleteSteps(c.checkpoint.dir);
    const std::size_t keep = static_cast<std::size_t>(c.checkpoint.keep);
    std::error_code ec;
    for (std::size_t i = 0; i + keep < done.size(); ++i) fs::remove_all(StepDir(c.checkpoint.dir, done[i]), ec);
    const std::int64_t oldest_kept = done.size() > keep ? done[done.size() - keep] : (done.empty() ? 0 : done.front());
    for (const auto& entry : fs::directory_iterator(c.checkpoint.dir, ec)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("step-", 0) != 0 || fs::exists(entry.path() / "manifest.json")) continue;
      try {
        if (std::stoll(name.substr(5)) < oldest_kept) fs::remove_all(entry.path(), ec);
      } catch (const std::exception&) {
      }
    }
  });
}

std::int64_t LoadCheckpoint(const TrainConfig& c, const RunComms& comms, RunSetup& u, const std::string& dir) {
  Transport& t = comms.world;
  const int pipeline_rank = comms.pipeline.rank();
  // Rank 0 finds the newest complete checkpoint and shares its manifest.
  std::string text;
  Agree(t, [&] {
    if (t.rank() != 0) return;
    const std::vector<std::int64_t> done = CompleteSteps(dir);
    if (done.empty()) {
      throw ConfigError(
          fmt::format("{}: no complete checkpoint to resume from (a step-NNNNNNNN folder with a manifest.json)", dir));
    }
    text = ReadTextFile(StepDir(dir, done.back()) + "/manifest.json");
  });
  t.BroadcastString(&text);
  std::int64_t step = 0;
  Agree(t, [&] {
    json m;
    try {
      m = json::parse(text);
    } catch (const json::exception& e) {
      throw ConfigError(fmt::format("{}: the checkpoint manifest is not valid JSON: {}", dir, e.what()));
    }
    if (m.value("format", "") != kFormat) throw ConfigError(fmt::format("{}: not a baton checkpoint manifest", dir));
    step = m["step"].get<std::int64_t>();
    const std::string where = StepDir(dir, step);
    std::vector<std::string> diffs;
    auto differs = [&](const char* what, const json& theirs, const json& ours) {
      if (theirs != ours)
        diffs.push_back(fmt::format("{}: checkpoint {}, this run {}", what, theirs.dump(), ours.dump()));
    };
    differs("ranks (of the pipeline)", m["ranks"], comms.pipeline.size());
    differs("schedule", m["schedule"], u.plan.lowered.name);
    differs("chunks", m["chunks"], u.plan.lowered.chunks());
    differs("microbatches", m["microbatches"], u.plan.lowered.microbatches);
    differs("partition (first layer of each stage)", m["partition"], u.plan.bounds);
    differs("config digest (model, pipeline, data or optimizer settings)", m["config_digest"], ConfigDigest(c));
    if (!diffs.empty()) {
      throw ConfigError(fmt::format("{}: cannot resume: the checkpoint does not match this run:\n  {}", where,
                                    fmt::join(diffs, "\n  ")));
    }
    const json* shard = nullptr;
    for (const json& s : m["shards"]) {
      if (s["rank"] == pipeline_rank) shard = &s;
    }
    if (shard == nullptr)
      throw ConfigError(fmt::format("{}: the manifest lists no shard for rank {}", where, pipeline_rank));
    const std::string path = where + "/" + (*shard)["file"].get<std::string>();
    std::uint64_t bytes = 0;
    const std::uint32_t crc = Crc32OfFile(path, &bytes);
    if (bytes != (*shard)["bytes"].get<std::uint64_t>() || crc != (*shard)["crc32"].get<std::uint32_t>()) {
      throw ConfigError(fmt::format(
          "{}: the shard has {} bytes and CRC-32 {:08x}, but the manifest records {} "
          "and {:08x}: it is damaged",
          path, bytes, crc, (*shard)["bytes"].get<std::uint64_t>(), (*shard)["crc32"].get<std::uint32_t>()));
    }
    const std::vector<NamedTensor> saved = ReadSafetensors(path);
    // Names, shapes and sizes to fill (the state's values are not needed).
    std::vector<std::vector<std::vector<float>>> no_state(u.exec->stages().size());
    const std::vector<NamedTensor> wanted = ShardTensors(u, no_state);
    if (saved.size() != wanted.size()) {
      throw ConfigError(
          fmt::format("{}: {} tensors, but this rank's stages need {}", path, saved.size(), wanted.size()));
    }
    const ReductionPlan& red = u.rank_plan.reduction;
    auto& stages = u.exec->stages();
    std::size_t at = 0;
    for (std::size_t k = 0; k < stages.size(); ++k) {
      Stage& st = *stages[k];
      const float* base = st.params().data();
      auto state = st.device().OptimizerState();
      // The part of the stage's parameters this replica's optimizer state covers.
      const std::size_t lo = red.shard_begin[k], hi = lo + red.shard_count[k];
      for (const Stage::Param& p : st.named_params()) {
        const std::size_t offset = static_cast<std::size_t>(p.data.data() - base);
        for (std::size_t s = 0; s <= state.size(); ++s, ++at) {
          const NamedTensor& got = saved[at];
          if (got.name != wanted[at].name || got.shape != wanted[at].shape) {
            throw ConfigError(fmt::format("{}: tensor {} is '{}' [{}], expected '{}' [{}]", path, at, got.name,
                                          fmt::join(got.shape, ", "), wanted[at].name,
                                          fmt::join(wanted[at].shape, ", ")));
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
      st.device().PushParams();
    }
    const std::int64_t per_epoch = u.loader->batches_per_epoch();
    u.loader->Seek(step / per_epoch, step % per_epoch);
  });
  return step;
}

}  // namespace baton
