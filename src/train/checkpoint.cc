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

CheckpointRun CheckpointRunOf(const TrainConfig& config, const RunPlan& plan) {
  CheckpointRun run;
  run.digest = ConfigDigest(config);
  run.schedule = plan.lowered.name;
  run.ranks = plan.lowered.ranks;
  run.chunks = plan.lowered.chunks();
  run.microbatches = plan.lowered.microbatches;
  run.partition = plan.bounds;
  run.data_parallel = plan.replicas;
  run.zero = plan.zero;
  return run;
}

namespace {

// Rank 0: the manifest of step `step` from every shard's record, written
// last; then the older and abandoned checkpoints beyond `place.keep` go.
void WriteManifest(const CheckpointPlace& place, const CheckpointRun& run, std::int64_t step,
                   const std::vector<std::string>& records) {
  json manifest;
  manifest["format"] = kFormat;
  manifest["step"] = step;
  manifest["config_digest"] = run.digest;
  manifest["schedule"] = run.schedule;
  manifest["ranks"] = run.ranks;
  manifest["data_parallel"] = run.data_parallel;
  manifest["zero"] = run.zero ? 1 : 0;
  manifest["chunks"] = run.chunks;
  manifest["microbatches"] = run.microbatches;
  manifest["partition"] = run.partition;
  manifest["shards"] = json::array();
  for (const std::string& r : records) {
    if (!r.empty()) manifest["shards"].push_back(json::parse(r));  // the other replicas write none
  }
  WriteTextFile(StepDir(place.dir, step) + "/manifest.json", manifest.dump(2) + "\n");
  // Keep the newest `keep` complete checkpoints; drop older and abandoned ones.
  const std::vector<std::int64_t> done = CompleteSteps(place.dir);
  const auto keep = static_cast<std::size_t>(place.keep);
  std::error_code ec;
  for (std::size_t i = 0; i + keep < done.size(); ++i) fs::remove_all(StepDir(place.dir, done[i]), ec);
  const std::int64_t oldest_kept = done.size() > keep ? done[done.size() - keep] : (done.empty() ? 0 : done.front());
  for (const auto& entry : fs::directory_iterator(place.dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step-", 0) != 0 || fs::exists(entry.path() / "manifest.json")) continue;
    try {
      if (std::stoll(name.substr(5)) < oldest_kept) fs::remove_all(entry.path(), ec);
    } catch (const std::exception&) {
    }
  }
}

// The manifest's run against this one: what differs, one line each.
std::vector<std::string> Differences(const json& m, const CheckpointRun& run) {
  std::vector<std::string> diffs;
  auto differs = [&](const char* what, const json& theirs, const json& ours) {
    if (theirs != ours) diffs.push_back(fmt::format("{}: checkpoint {}, this run {}", what, theirs.dump(), ours.dump()));
  };
  differs("ranks (of the pipeline)", m["ranks"], run.ranks);
  differs("schedule", m["schedule"], run.schedule);
  differs("chunks", m["chunks"], run.chunks);
  differs("microbatches", m["microbatches"], run.microbatches);
  differs("partition (first layer of each stage)", m["partition"], run.partition);
  differs("config digest (model, pipeline, data or optimizer settings)", m["config_digest"], run.digest);
  return diffs;
}

// This pipeline rank's shard of the manifest's checkpoint under `dir`,
// checked against its recorded size and CRC-32, read.
std::vector<NamedTensor> ReadShard(const json& m, const std::string& where, int pipeline_rank, std::string* path) {
  const json* shard = nullptr;
  for (const json& s : m["shards"]) {
    if (s["rank"] == pipeline_rank) shard = &s;
  }
  if (shard == nullptr) throw ConfigError(fmt::format("{}: the manifest lists no shard for rank {}", where, pipeline_rank));
  *path = where + "/" + (*shard)["file"].get<std::string>();
  std::uint64_t bytes = 0;
  const std::uint32_t crc = Crc32OfFile(*path, &bytes);
  if (bytes != (*shard)["bytes"].get<std::uint64_t>() || crc != (*shard)["crc32"].get<std::uint32_t>()) {
    throw ConfigError(fmt::format(
        "{}: the shard has {} bytes and CRC-32 {:08x}, but the manifest records {} "
        "and {:08x}: it is damaged",
        *path, bytes, crc, (*shard)["bytes"].get<std::uint64_t>(), (*shard)["crc32"].get<std::uint32_t>()));
  }
  return ReadSafetensors(*path);
}

}  // namespace

void SaveCheckpoint(const CheckpointPlace& place, const CheckpointRun& run, const RunComms& comms, ParamStore& store,
                    std::int64_t step, const std::function<void()>& between) {
  Transport& t = comms.world;
  const std::string dir = StepDir(place.dir, step);
  const int pipeline_rank = comms.pipeline.rank();
  const std::string file = fmt::format("rank-{:05}.safetensors", pipeline_rank);
  store.Pull();
  const OptimizerStates state = store.WholeState(comms.replicas);  // a collective of each replica group
  const bool writer = comms.replicas.rank() == 0;                   // the replicas hold the same weights
  std::string record;
  Agree(t, [&] {
    if (!writer) return;
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (ec) throw OutputError(fmt::format("{}: cannot create the checkpoint folder: {}", dir, ec.message()));
    WriteSafetensors(dir + "/" + file, store.CheckpointTensors(state));
    std::uint64_t bytes = 0;
    const std::uint32_t crc = Crc32OfFile(dir + "/" + file, &bytes);
    record = json{{"rank", pipeline_rank}, {"file", file}, {"bytes", bytes}, {"crc32", crc}}.dump();
  });
  if (between) between();  // a crash between shards and manifest
  // Every shard is durable: only now may the manifest make the checkpoint real.
  std::vector<std::string> records;
  t.GatherStrings(record, &records);
  Agree(t, [&] {
    if (t.rank() == 0) WriteManifest(place, run, step, records);
  });
}

std::int64_t LoadCheckpoint(const std::string& dir, const CheckpointRun& run, const RunComms& comms,
                            ParamStore& store) {
  Transport& t = comms.world;
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
    const std::vector<std::string> diffs = Differences(m, run);
    if (!diffs.empty()) {
      throw ConfigError(fmt::format("{}: cannot resume: the checkpoint does not match this run:\n  {}", where,
                                    fmt::join(diffs, "\n  ")));
    }
    std::string path;
    const std::vector<NamedTensor> saved = ReadShard(m, where, comms.pipeline.rank(), &path);
    store.Restore(saved, path, step);
  });
  return step;
}

}  // namespace baton
