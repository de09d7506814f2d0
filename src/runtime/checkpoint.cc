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

// The tensors of this rank's shard, in a fixed order.
std::vector<NamedTensor> ShardTensors(RunSetup& u) {
  std::vector<NamedTensor> out;
  auto& stages = u.exec->stages();
  for (std::size_t k = 0; k < stages.size(); ++k) {
    Stage& st = *stages[k];
    st.device().PullParams();
    const float* base = st.params().data();
    const auto state = st.device().OptimizerState();
    const auto names = st.device().OptimizerStateNames();
    for (const Stage::Param& p : st.named_params()) {
      out.push_back({p.name, p.shape, {p.data.begin(), p.data.end()}});
      const std::size_t offset = static_cast<std::size_t>(p.data.data() - base);
      for (std::size_t s = 0; s < state.size(); ++s) {
        const float* from = state[s].data() + offset;
        out.push_back({p.name + "." + names[s], p.shape, {from, from + p.data.size()}});
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

void SaveCheckpoint(const TrainConfig& c, Transport& t, RunSetup& u, std::int64_t step) {
  const std::string dir = StepDir(c.checkpoint.dir, step);
  const std::string file = fmt::format("rank-{:05}.safetensors", t.rank());
  std::string record;
  Agree(t, [&] {
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) throw OutputError(fmt::format("{}: cannot create the checkpoint folder: {}", dir, ec.message()));
    WriteSafetensors(dir + "/" + file, ShardTensors(u));
    std::uint64_t bytes = 0;
    const std::uint32_t crc = Crc32OfFile(dir + "/" + file, &bytes);
    record = json{{"rank", t.rank()}, {"file", file}, {"bytes", bytes}, {"crc32", crc}}.dump();
  });
  MaybeInjectFault(u.fault, t.rank(), step, "checkpoint");  // a crash between shards and manifest
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
    manifest["ranks"] = t.size();
    manifest["chunks"] = u.plan.lowered.chunks();
    manifest["microbatches"] = u.plan.lowered.microbatches;
    manifest["partition"] = u.plan.bounds;
    manifest["shards"] = json::array();
    for (const std::string& r : records) manifest["shards"].push_back(json::parse(r));
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

std::int64_t LoadCheckpoint(const TrainConfig& c, Transport& t, RunSetup& u, const std::string& dir) {
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
    differs("ranks", m["ranks"], t.size());
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
      if (s["rank"] == t.rank()) shard = &s;
    }
    if (shard == nullptr)
      throw ConfigError(fmt::format("{}: the manifest lists no shard for rank {}", where, t.rank()));
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
    std::vector<NamedTensor> wanted = ShardTensors(u);  // names, shapes and sizes to fill
    if (saved.size() != wanted.size()) {
      throw ConfigError(
          fmt::format("{}: {} tensors, but this rank's stages need {}", path, saved.size(), wanted.size()));
    }
    auto& stages = u.exec->stages();
    std::size_t at = 0;
    for (std::size_t k = 0; k < stages.size(); ++k) {
      Stage& st = *stages[k];
      const float* base = st.params().data();
      auto state = st.device().OptimizerState();
      for (const Stage::Param& p : st.named_params()) {
        const std::size_t offset = static_cast<std::size_t>(p.data.data() - base);
        for (std::size_t s = 0; s <= state.size(); ++s, ++at) {
          const NamedTensor& got = saved[at];
          if (got.name != wanted[at].name || got.shape != wanted[at].shape) {
            throw ConfigError(fmt::format("{}: tensor {} is '{}' [{}], expected '{}' [{}]", path, at, got.name,
                                          fmt::join(got.shape, ", "), wanted[at].name,
                                          fmt::join(wanted[at].shape, ", ")));
          }
          float* to = s == 0 ? p.data.data() : state[s - 1].data() + offset;
          std::copy(got.data.begin(), got.data.end(), to);
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
