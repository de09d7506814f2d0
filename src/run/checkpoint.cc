#include "checkpoint.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "baton/error.h"
#include "baton/files.h"

namespace baton {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Format 2 added the run's identity and settings; format 1 manifests had
// neither, so a run cannot tell whether it owns them.
constexpr const char* kFormat = "baton-checkpoint-2";
constexpr const char* kLockFile = ".baton-lock";
// The step a checkpoint shard names in its safetensors metadata.
constexpr const char* kShardStepKey = "baton.step";


// The step of a folder named "step-" and digits only; -1 for any other name.
std::int64_t StepOf(const std::string& name) {
  if (name.size() <= 5 || name.rfind("step-", 0) != 0 || name.size() > 5 + 18) return -1;
  std::int64_t step = 0;
  for (std::size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

std::uint32_t Crc32OfFile(const std::string& path, std::uint64_t* bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(fmt::format("{}: cannot read the checkpoint shard: {}", path, std::strerror(errno)));
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
  if (in.bad()) throw ConfigError(fmt::format("{}: cannot read the checkpoint shard", path));
  return static_cast<std::uint32_t>(crc);
}

// A step folder under a checkpoint folder, and what its manifest says.
struct StepFolder {
  std::int64_t step = 0;
  std::string name;
  bool complete = false;     // holds a manifest.json
  std::string run_id;        // the manifest's ("" if incomplete or unreadable)
  std::int64_t total = 0;    // the run's length, from the manifest
};

bool Exists(const Env& env, const std::string& path) { return env.KindOf(path) != Env::PathKind::kNone; }

// Every step folder under `dir`, by step.
std::vector<StepFolder> StepFolders(const std::string& dir, const Env& env) {
  std::vector<StepFolder> out;
  if (env.KindOf(dir) != Env::PathKind::kFolder) return out;
  for (const std::string& name : env.ListFolder(dir)) {
    const std::int64_t step = StepOf(name);
    if (step < 0 || env.KindOf(dir + "/" + name) != Env::PathKind::kFolder) continue;
    StepFolder f;
    f.step = step;
    f.name = name;
    const std::string manifest = dir + "/" + name + "/manifest.json";
    f.complete = Exists(env, manifest);
    if (f.complete) {
      try {
        const json m = json::parse(ReadTextFile(manifest, "checkpoint manifest"));
        f.run_id = m.value("run_id", "");
        f.total = m.value("train_steps", std::int64_t{0});
      } catch (const std::exception&) {
        // Unreadable: nobody's; never pruned, and it blocks a new run.
      }
    }
    out.push_back(std::move(f));
  }
  std::sort(out.begin(), out.end(), [](const StepFolder& a, const StepFolder& b) { return a.step < b.step; });
  return out;
}

std::string Describe(const StepFolder& f) {
  if (!f.complete) return f.name + " (unfinished)";
  if (f.run_id.empty()) return f.name + " (no run identity: another baton's, or unreadable)";
  return fmt::format("{} (run {}, step {} of {})", f.name, f.run_id, f.step, f.total);
}

// The settings text as "key.path" -> value, for saying what differs:
// "train.steps" -> "300", "model.layers[2]" -> "{type: relu}".
std::map<std::string, std::string> Flatten(const std::string& yaml) {
  std::map<std::string, std::string> out;
  std::vector<std::pair<int, std::string>> parents;  // (indent, key)
  std::map<std::string, int> items;                  // list items seen under a key
  std::size_t start = 0;
  while (start < yaml.size()) {
    std::size_t end = yaml.find('\n', start);
    if (end == std::string::npos) end = yaml.size();
    const std::string line = yaml.substr(start, end - start);
    start = end + 1;
    const std::size_t first = line.find_first_not_of(' ');
    if (first == std::string::npos) continue;
    const int indent = static_cast<int>(first);
    while (!parents.empty() && parents.back().first >= indent) parents.pop_back();
    std::string prefix;
    for (const auto& [i, k] : parents) prefix += (prefix.empty() ? "" : ".") + k;
    if (line.compare(first, 2, "- ") == 0) {
      // A list item of the innermost key at a smaller indent.
      std::string& base = prefix;
      const int n = items[base]++;
      out[fmt::format("{}[{}]", base, n)] = line.substr(first + 2);
      continue;
    }
    const std::size_t colon = line.find(':', first);
    if (colon == std::string::npos) continue;
    const std::string key = line.substr(first, colon - first);
    std::string value = colon + 1 < line.size() ? line.substr(colon + 1) : "";
    if (!value.empty() && value.front() == ' ') value.erase(0, 1);
    const std::string path = prefix.empty() ? key : prefix + "." + key;
    if (value.empty()) {
      parents.emplace_back(indent, key);
    } else {
      out[path] = value;
    }
  }
  return out;
}

// A run's settings text (MathSettings) without its plan: the pipeline's
// schedule, chunks, partition or layout lines, its microbatches (compared
// on their own) and what it does with a lost rank.
std::string WithoutPlan(const std::string& settings) {
  std::string out;
  std::size_t start = 0;
  while (start < settings.size()) {
    std::size_t end = settings.find('\n', start);
    end = end == std::string::npos ? settings.size() : end + 1;
    const std::string_view line(settings.data() + start, end - start);
    const bool plan = line.rfind("  partition:", 0) == 0 || line.rfind("  layout:", 0) == 0 ||
                      line.rfind("  schedule:", 0) == 0 || line.rfind("  chunks:", 0) == 0 ||
                      line.rfind("  microbatches:", 0) == 0 ||  // compared on their own (Differences)
                      line.rfind("recovery:", 0) == 0;         // written since recovery came: no number
    if (!plan) out.append(line);
    start = end;
  }
  return out;
}

// The manifest's run against this one: what differs, one line each.
std::vector<std::string> Differences(const json& m, const CheckpointRun& run) {
  std::vector<std::string> diffs;
  auto differs = [&](const char* what, const json& theirs, const json& ours) {
    if (theirs != ours) diffs.push_back(fmt::format("{}: checkpoint {}, this run {}", what, theirs.dump(), ours.dump()));
  };
  differs("ranks (of the pipeline)", m["ranks"], run.ranks);
  // The microbatches of a replica, or, where the replica count changed
  // (a run that went on without a lost replica: recovery.on_lost_rank:
  // shrink), those of the global batch: the microbatch's size is the same.
  if (m["microbatches"] != run.microbatches &&
      m.value("microbatches", 0) * m.value("data_parallel", 1) != run.microbatches * run.data_parallel) {
    differs("microbatches", m["microbatches"], run.microbatches);
  }
  // The plan is not compared (the schedule, its chunks, the placement):
  // every one trains the same floats, and the tensors are read by name
  // wherever they were written (a run with adaptive plans checkpoints
  // whatever plan it has moved to).
  if (m.value("config_digest", "") != run.digest &&
      WithoutPlan(m.value("settings", "")) != WithoutPlan(run.settings)) {
    auto theirs = Flatten(m.value("settings", "")), ours = Flatten(run.settings);
    for (auto* settings : {&theirs, &ours}) {
      std::erase_if(*settings, [](const auto& kv) {
        return kv.first.rfind("pipeline.partition", 0) == 0 || kv.first.rfind("pipeline.layout", 0) == 0 ||
               kv.first == "pipeline.schedule" || kv.first == "pipeline.chunks" ||
               kv.first == "pipeline.microbatches" || kv.first.rfind("recovery.", 0) == 0;
      });
    }
    std::vector<std::string> keys;
    for (const auto& [k, v] : theirs) keys.push_back(k);
    for (const auto& [k, v] : ours) {
      if (!theirs.count(k)) keys.push_back(k);
    }
    std::sort(keys.begin(), keys.end());
    bool named = false;
    for (const std::string& k : keys) {
      const auto a = theirs.find(k), b = ours.find(k);
      const std::string va = a == theirs.end() ? "(none)" : a->second, vb = b == ours.end() ? "(none)" : b->second;
      if (va == vb) continue;
      diffs.push_back(fmt::format("{}: checkpoint {}, this run {}", k, va, vb));
      named = true;
    }
    if (!named) diffs.push_back("the settings' digest (model, pipeline, data, optimizer or length) differs");
  }
  return diffs;
}

// Rank 0: the manifest of step `step` from every shard's record, written
// last; then this run's older checkpoints beyond `place.keep`, and its
// unfinished step folders older than the oldest kept, go.
void WriteManifest(const CheckpointPlace& place, const CheckpointRun& run, std::int64_t step,
                   const std::vector<std::string>& records) {
  json manifest;
  manifest["format"] = kFormat;
  manifest["step"] = step;
  manifest["run_id"] = run.run_id;
  manifest["train_steps"] = run.total_steps;
  manifest["config_digest"] = run.digest;
  manifest["settings"] = run.settings;
  manifest["schedule"] = run.schedule;
  manifest["ranks"] = run.ranks;
  manifest["data_parallel"] = run.data_parallel;
  manifest["zero"] = run.zero;
  manifest["chunks"] = run.chunks;
  manifest["microbatches"] = run.microbatches;
  manifest["partition"] = run.partition;
  manifest["shards"] = json::array();
  for (const std::string& r : records) {
    if (!r.empty()) manifest["shards"].push_back(json::parse(r));  // the other replicas write none
  }
  const Env& env = place.env != nullptr ? *place.env : Env::Default();
  WriteTextFile(StepDir(place.dir, step) + "/manifest.json", manifest.dump(2) + "\n", env);
  std::vector<std::int64_t> mine;
  const std::vector<StepFolder> folders = StepFolders(place.dir, env);
  for (const StepFolder& f : folders) {
    if (f.complete && f.run_id == run.run_id) mine.push_back(f.step);
  }
  const auto keep = static_cast<std::size_t>(place.keep);
  for (std::size_t i = 0; i + keep < mine.size(); ++i) env.RemoveAll(StepDir(place.dir, mine[i]));
  const std::int64_t oldest_kept = mine.size() > keep ? mine[mine.size() - keep] : (mine.empty() ? 0 : mine.front());
  for (const StepFolder& f : folders) {
    if (!f.complete && f.step < oldest_kept) env.RemoveAll(StepDir(place.dir, f.step));
  }
}

// This pipeline rank's shard of the manifest's checkpoint in `where`,
// checked against its recorded size and CRC-32, read.
std::vector<NamedTensor> ReadShard(const json& m, const std::string& where, int pipeline_rank, std::string* path,
                                   const Env& env) {
  const json* shard = nullptr;
  for (const json& s : m["shards"]) {
    if (s.value("rank", -1) == pipeline_rank) shard = &s;
  }
  if (shard == nullptr) throw ConfigError(fmt::format("{}: the manifest lists no shard for rank {}", where, pipeline_rank));
  *path = where + "/" + shard->value("file", "");
  if (env.KindOf(*path) != Env::PathKind::kFile) {
    throw ConfigError(fmt::format("{}: the checkpoint shard of pipeline rank {} is missing: the checkpoint is "
                                  "incomplete (resume from another step folder)",
                                  *path, pipeline_rank));
  }
  std::uint64_t bytes = 0;
  const std::uint32_t crc = Crc32OfFile(*path, &bytes);
  const auto want_bytes = shard->value("bytes", std::uint64_t{0});
  const auto want_crc = shard->value("crc32", std::uint32_t{0});
  if (bytes != want_bytes || crc != want_crc) {
    throw ConfigError(fmt::format(
        "{}: the shard has {} bytes and CRC-32 {:08x}, but the manifest records {} and {:08x}: it is damaged", *path,
        bytes, crc, want_bytes, want_crc));
  }
  std::map<std::string, std::string> metadata;
  std::vector<NamedTensor> tensors = ReadSafetensors(*path, &metadata);
  // A shard names its own step (shards written before it did name none).
  const auto own = metadata.find(kShardStepKey);
  const std::string step = std::to_string(m["step"].get<std::int64_t>());
  if (own != metadata.end() && own->second != step) {
    throw ConfigError(fmt::format("{}: the shard is of step {}, but the manifest says step {}: the checkpoint is "
                                  "damaged or edited (resume from another step folder)",
                                  *path, Quote(own->second), step));
  }
  return tensors;
}

json ParseManifest(const std::string& text, const std::string& where) {
  json m;
  try {
    m = json::parse(text);
  } catch (const json::exception& e) {
    throw ConfigError(fmt::format("{}: the checkpoint manifest is not valid JSON: {}", where, JsonError(e.what())));
  }
  if (!m.is_object()) throw ConfigError(fmt::format("{}: not a baton checkpoint manifest", where));
  const std::string format = m.value("format", "");
  if (format == "baton-checkpoint-1") {
    throw ConfigError(fmt::format("{}: a checkpoint of an earlier baton (format 1), which records no run identity "
                                  "or settings; this baton resumes only format 2 checkpoints",
                                  where));
  }
  // Every field a resume reads, of its type: a manifest is read, not trusted.
  auto integer = [&](const char* key) { return m.contains(key) && m[key].is_number_integer(); };
  auto string = [&](const char* key) { return m.contains(key) && m[key].is_string(); };
  bool ok = format == kFormat && integer("step") && integer("ranks") && integer("chunks") && integer("microbatches") &&
            integer("train_steps") && string("run_id") && string("config_digest") && string("settings") &&
            string("schedule") && m.contains("partition") && m["partition"].is_array() && m.contains("shards") &&
            m["shards"].is_array();
  for (const json& p : ok ? m["partition"] : json::array()) ok = ok && p.is_number_integer();
  for (const json& shard : ok ? m["shards"] : json::array()) {
    ok = ok && shard.is_object() && shard.contains("rank") && shard["rank"].is_number_integer() &&
         shard.contains("file") && shard["file"].is_string() && shard.contains("bytes") &&
         shard["bytes"].is_number_unsigned() && shard.contains("crc32") && shard["crc32"].is_number_unsigned();
    // A shard is a file of the step folder itself, named by its rank.
    ok = ok && shard["file"].get<std::string>() == fmt::format("rank-{:05}.safetensors", shard["rank"].get<int>());
  }
  if (!ok) throw ConfigError(fmt::format("{}: not a baton checkpoint manifest ({}), or a damaged one", where, kFormat));
  return m;
}

}  // namespace

std::string StepName(std::int64_t step) { return fmt::format("step-{:08}", step); }
std::string StepDir(const std::string& dir, std::int64_t step) { return dir + "/" + StepName(step); }

std::string MathSettings(const TrainConfig& config) {
  TrainConfig c = config;
  c.source.clear();
  c.checkpoint = {};
  c.log = {};
  // The replicas train the same model on the same batches, and a checkpoint
  // holds the whole optimizer state: another data_parallel resumes it.
  c.data_parallel = {};
  c.data.evaluate = true;
  c.data.validation = true;
  // How long a wait may take, and what an automatic placement was chosen
  // from, change no number (the placement is recorded as the partition).
  c.pipeline.wait_timeout_s = 0;
  c.pipeline.profile.clear();
  c.pipeline.memory_bytes = 0;
  // What the gradients are summed in does (auto's choice follows adapt and
  // recovery, cleared below).
  c.train.grad_accum = WideGradients(c) ? GradAccum::kFP64 : GradAccum::kFP32;
  // Nor does adapting the placement: every placement trains the same floats.
  c.pipeline.adapt = AdaptMode::kOff;
  c.pipeline.adapt_asked = false;
  // Nor what the job does when a rank is lost.
  c.recovery = {};
  // What a non-finite step does changes no finite step: a run stopped by
  // one may resume skipping them.
  c.train.on_nonfinite = OnNonFinite::kStop;
  return DescribeTrainConfig(c);
}

std::string ConfigDigest(const TrainConfig& config) {
  const std::string text = MathSettings(config);
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a, 64 bits
  for (unsigned char ch : text) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return fmt::format("{:016x}", h);
}

CheckpointRun CheckpointRunOf(const TrainConfig& config, const RunPlan& plan, std::int64_t total_steps) {
  CheckpointRun run;
  run.settings = MathSettings(config);
  run.digest = ConfigDigest(config);
  run.schedule = plan.lowered.name;
  run.ranks = plan.lowered.ranks;
  run.chunks = plan.lowered.chunks();
  // A replica's microbatches: under pipeline.adapt: full each replica may
  // run its own share (`plan` is this rank's), and the run's is the even one.
  run.microbatches = config.pipeline.replica_microbatches.empty() ? plan.lowered.microbatches
                                                                  : config.pipeline.microbatches;
  run.partition = plan.bounds;
  run.total_steps = total_steps;
  run.data_parallel = plan.replicas;
  run.zero = plan.zero.number();
  return run;
}

std::string NewRunId() {
  std::random_device random;
  const std::uint64_t id = (std::uint64_t{random()} << 32) ^ random();
  return fmt::format("{:016x}", id);
}

ResumePoint FindResumePoint(const std::string& from, const Env& env) {
  if (env.KindOf(from) != Env::PathKind::kFolder) {
    throw ConfigError(fmt::format("{}: no complete checkpoint to resume from: {}", from,
                                  Exists(env, from) ? "it is a file, not a folder" : "no such folder"));
  }
  ResumePoint p;
  const std::string name = fs::path(from).lexically_normal().filename().string();
  if (Exists(env, from + "/manifest.json") || StepOf(name) >= 0) {
    // A step folder, named: it must be complete.
    p.folder = from;
    if (!Exists(env, from + "/manifest.json")) {
      throw ConfigError(fmt::format("{}: this checkpoint is unfinished (no manifest.json: the run stopped while "
                                    "writing it); resume from its folder's newest complete checkpoint instead",
                                    from));
    }
  } else {
    std::vector<StepFolder> complete;
    for (StepFolder& f : StepFolders(from, env)) {
      if (f.complete) complete.push_back(std::move(f));
    }
    if (complete.empty()) {
      throw ConfigError(fmt::format(
          "{}: no complete checkpoint to resume from (a step-NNNNNNNN folder with a manifest.json)", from));
    }
    p.folder = StepDir(from, complete.back().step);
  }
  p.manifest = ReadTextFile(p.folder + "/manifest.json", "checkpoint manifest");
  const json m = ParseManifest(p.manifest, p.folder);
  p.step = m["step"].get<std::int64_t>();
  // The folder's name is the step its writer gave it.
  const std::int64_t named = StepOf(fs::path(p.folder).lexically_normal().filename().string());
  if (named >= 0 && named != p.step) {
    throw ConfigError(fmt::format("{}: the manifest says step {}, but the folder is {}: the checkpoint is damaged or "
                                  "edited (resume from another step folder)",
                                  p.folder, p.step, StepName(named)));
  }
  p.run_id = m.value("run_id", "");
  return p;
}

std::optional<ResumePoint> NewestCheckpoint(const std::string& dir, const Env& env) {
  for (const StepFolder& f : StepFolders(dir, env)) {
    if (f.complete) return FindResumePoint(dir, env);  // the newest, read and checked
  }
  return std::nullopt;
}

void CheckResumable(const ResumePoint& point, const CheckpointRun& run) {
  const json m = ParseManifest(point.manifest, point.folder);
  const std::vector<std::string> diffs = Differences(m, run);
  if (!diffs.empty()) {
    throw ConfigError(fmt::format("{}: cannot resume: the checkpoint does not match this run:\n  {}\n"
                                  "(a resumed run continues the run that wrote the checkpoint: only the deadline, "
                                  "logging, checkpointing and the replica count may change; to train a finished or "
                                  "different run from these weights, start a new run with model.init.from)",
                                  point.folder, fmt::join(diffs, "\n  ")));
  }
  // The last step's checkpoint resumes to no steps: the run's end (its
  // final weights) from it, as when the first run could not write them.
  if (point.step > run.total_steps) {
    throw ConfigError(fmt::format("{}: cannot resume: the checkpoint is of step {}, but the run has only {} steps",
                                  point.folder, point.step, run.total_steps));
  }
}

CheckpointFolder CheckpointFolder::Claim(const std::string& dir, const std::string& run_id, const ResumePoint* resumed,
                                         bool auto_resume, bool take_over, const Env& env) {
  CheckOutputFolder(dir, "checkpoint.dir");
  CheckpointFolder f;
  f.dir_ = dir;
  f.env_ = &env;
  f.created_ = !Exists(env, dir);
  if (!env.CreateFolders(dir)) {
    throw OutputError(fmt::format("checkpoint.dir: {}: cannot create the folder: {}", dir, std::strerror(errno)));
  }
  try {
    const std::string lock = dir + "/" + kLockFile;
    f.lock_created_ = !Exists(env, lock);
    bool held = f.lock_.TryLock(lock, env);
    if (!held && take_over) {
      // Held by a rank the survivors excluded (paused, not dead): made anew.
      env.Remove(lock);
      held = f.lock_.TryLock(lock, env);
      if (held) {
        f.lock_created_ = true;
        std::fprintf(stderr, "baton: %s: took over the checkpoint folder's lock from a rank the job excluded\n",
                     dir.c_str());
      }
    }
    if (!held) {
      throw ConfigError(fmt::format("checkpoint.dir: {}: another run is writing checkpoints into this folder (it "
                                    "holds {}); give this run another checkpoint.dir",
                                    dir, lock));
    }
    if (auto_resume && resumed == nullptr) {
      // What a stopped run left unfinished was never a checkpoint: kept aside.
      for (const StepFolder& s : StepFolders(dir, env)) {
        if (s.complete) continue;
        std::string target = dir + "/unfinished-" + s.name;
        for (int k = 2; Exists(env, target); ++k) target = fmt::format("{}/unfinished-{}-{}", dir, s.name, k);
        if (!env.Rename(dir + "/" + s.name, target)) {
          throw OutputError(fmt::format("{}/{}: cannot move it aside: {}", dir, s.name, std::strerror(errno)));
        }
        std::fprintf(stderr, "baton: %s: an unfinished checkpoint folder is kept aside: %s -> %s\n", dir.c_str(),
                     s.name.c_str(), fs::path(target).filename().string().c_str());
      }
    }
    std::vector<std::string> others;
    for (const StepFolder& s : StepFolders(dir, env)) {
      if (resumed == nullptr || (s.complete && s.run_id != run_id)) others.push_back(Describe(s));
    }
    if (!others.empty()) {
      const std::size_t shown = std::min<std::size_t>(others.size(), 5);
      throw ConfigError(fmt::format(
          "checkpoint.dir: {}: the folder holds {} checkpoint folder(s) of {}: {}{}; {}", dir, others.size(),
          resumed == nullptr ? "an earlier run" : "another run", fmt::join(others.begin(), others.begin() + shown, ", "),
          others.size() > shown ? ", ..." : "",
          resumed == nullptr ? "continue that run with --resume, or give this run another checkpoint.dir (or move "
                               "them away)"
                             : "give this run another checkpoint.dir (or move them away)"));
    }
  } catch (...) {
    f.Abandon();
    throw;
  }
  return f;
}

void CheckpointFolder::Abandon() {
  if (!lock_.held()) return;
  // Removed while still held: a run that opened it meanwhile finds, once it
  // has the lock, that the path no longer names its file (FileLock).
  lock_.Release(/*remove=*/lock_created_);
  if (created_ && env_->ListFolder(dir_).empty()) env_->RemoveFolder(dir_);
}

std::vector<std::string> CheckpointFolder::SupersedeAfter(std::int64_t step, const std::string& run_id) {
  std::vector<std::string> moved;
  for (const StepFolder& s : StepFolders(dir_, *env_)) {
    if (!s.complete || s.run_id != run_id || s.step <= step) continue;
    std::string target = dir_ + "/superseded-" + s.name;
    for (int k = 2; Exists(*env_, target); ++k) target = fmt::format("{}/superseded-{}-{}", dir_, s.name, k);
    if (!env_->Rename(dir_ + "/" + s.name, target)) {
      throw OutputError(fmt::format("{}/{}: cannot move it aside: {}", dir_, s.name, std::strerror(errno)));
    }
    moved.push_back(fmt::format("{} -> {}", s.name, fs::path(target).filename().string()));
  }
  return moved;
}

void SaveCheckpoint(const CheckpointPlace& place, const CheckpointRun& run, const RunComms& comms, ParamStore& store,
                    std::int64_t step, const std::function<void()>& between) {
  Transport& t = comms.world;
  const Env& env = place.env != nullptr ? *place.env : Env::Default();
  const std::string dir = StepDir(place.dir, step);
  const int pipeline_rank = comms.pipeline.rank();
  const std::string file = fmt::format("rank-{:05}.safetensors", pipeline_rank);
  store.Pull();
  const OptimizerStates state = store.WholeState(comms.replicas);  // a collective of each replica group
  const bool writer = comms.replicas.rank() == 0;                   // the replicas hold the same weights
  std::string record;
  try {
    Agree(t, fmt::format("writing the shards of checkpoint {}", StepName(step)), [&] {
      if (!writer) return;
      if (!env.CreateFolders(dir)) {
        throw OutputError(fmt::format("{}: cannot create the checkpoint folder: {}", dir, std::strerror(errno)));
      }
      WriteSafetensors(dir + "/" + file, store.CheckpointTensors(state), {{kShardStepKey, std::to_string(step)}},
                       env);
      std::uint64_t bytes = 0;
      const std::uint32_t crc = Crc32OfFile(dir + "/" + file, &bytes);
      record = json{{"rank", pipeline_rank}, {"file", file}, {"bytes", bytes}, {"crc32", crc}}.dump();
    });
  } catch (const Error&) {
    // Some rank could not write its shard (a full disk): no manifest will
    // follow, so the shards written are taken back and the folder, once
    // empty, with them; nothing half-written is left in checkpoint.dir.
    if (writer) {
      env.Remove(dir + "/" + file);
      env.RemoveFolder(dir);  // only an empty folder; another rank's shard keeps it until that rank's remove
    }
    throw;
  }
  if (between) between();  // a crash between shards and manifest
  // Every shard is durable: only now may the manifest make the checkpoint
  // real. Only the writers have a record: they gather over their pipeline
  // (P ranks, not the world's N) at its rank 0, world rank 0.
  std::vector<std::string> records;
  if (writer) {
    comms.pipeline.GatherStrings(record, &records,
                                 fmt::format("every rank's shard record of checkpoint {}", StepName(step)));
  }
  store.Settle();
  Agree(t, fmt::format("rank 0 writing the manifest of checkpoint {}", StepName(step)), [&] {
    if (t.rank() == 0) WriteManifest(place, run, step, records);
  });
}

void LoadCheckpoint(const ResumePoint& point, const RunComms& comms, ParamStore& store, const Env& env) {
  Transport& t = comms.world;
  std::string text = point.manifest;
  std::string folder = point.folder;
  t.BroadcastString(&text);
  t.BroadcastString(&folder);
  Agree(t, fmt::format("every rank reading its shard of {}", folder), [&] {
    const json m = ParseManifest(text, folder);
    std::string path;
    std::vector<NamedTensor> saved = ReadShard(m, folder, comms.pipeline.rank(), &path, env);
    // Written by another placement (a run that moved its layers): this
    // rank's tensors by name, from whichever shards hold them.
    const std::vector<NamedTensor> wanted = store.CheckpointTensors({});
    const bool same = saved.size() == wanted.size() &&
                      std::equal(saved.begin(), saved.end(), wanted.begin(),
                                 [](const NamedTensor& a, const NamedTensor& b) { return a.name == b.name; });
    if (!same) {
      std::map<std::string, NamedTensor> by_name;
      for (const json& shard : m["shards"]) {
        std::string other;
        for (NamedTensor& tensor : ReadShard(m, folder, shard.value("rank", -1), &other, env)) {
          by_name.emplace(tensor.name, std::move(tensor));
        }
      }
      saved.clear();
      for (const NamedTensor& w : wanted) {
        auto it = by_name.find(w.name);
        if (it == by_name.end()) {
          throw ConfigError(fmt::format("{}: no shard holds tensor '{}' that pipeline rank {} needs", folder, w.name,
                                        comms.pipeline.rank()));
        }
        saved.push_back(std::move(it->second));
      }
      path = folder + " (its shards, by name)";
    }
    store.Restore(saved, path, m["step"].get<std::int64_t>());
  });
}

}  // namespace baton
