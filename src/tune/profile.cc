// A profile's identity, its JSON, its checks, and its layers at any
// microbatch size. See baton/profile.h.
#include "baton/profile.h"

#include <fmt/format.h>

#include <optional>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "baton/error.h"
#include "baton/files.h"

namespace baton {
namespace {

// One op as a profile names it: its type and shape.
std::string OpText(const OpDesc& op) {
  std::string text = fmt::format("{} {}->{}", EnumName(op.type), op.in, op.out);
  if (op.heads > 0) text += fmt::format(" heads {}", op.heads);
  if (op.vocab > 0) text += fmt::format(" vocab {}", op.vocab);
  if (op.type == LayerType::kLinear && !op.bias) text += " no bias";
  return text;
}

nlohmann::ordered_json LayerJson(const LayerProfile& l, bool documents) {
  nlohmann::ordered_json j = {{"forward_s", l.forward},       {"backward_input_s", l.backward_input},
                              {"backward_weight_s", l.backward_weight}, {"backward_s", l.backward},
                              {"op_forward_s", l.op_forward}, {"saved_bytes", l.saved_bytes}};
  if (documents) {
    j["documents_forward_s"] = l.documents.forward;
    j["documents_backward_input_s"] = l.documents.backward_input;
    j["documents_backward_weight_s"] = l.documents.backward_weight;
  }
  return j;
}

}  // namespace

ProfileIdentity IdentityOf(const TrainConfig& config, const ModelDesc& model, const std::string& machine, int cores) {
  ProfileIdentity id;
  for (int t = 0; t < model.top_layers(); ++t) {
    const auto [first, last] = model.OpRange(t, t + 1);
    std::string text;
    for (int i = first; i < last; ++i) text += (i > first ? ", " : "") + OpText(model.ops[static_cast<std::size_t>(i)]);
    id.layers.push_back(text);
  }
  id.seq = model.seq;
  id.device = std::string(EnumName(config.device));
  id.precision = std::string(EnumName(config.precision));
  id.machine = machine;
  id.cores = cores;
  return id;
}

std::string ProfileJson(const Profile& p) {
  nlohmann::ordered_json j;
  j["format"] = Profile::kFormat;
  j["config"] = p.config;
  j["device"] = p.identity.device;
  j["precision"] = p.identity.precision;
  j["machine"] = p.identity.machine;
  j["cores"] = p.identity.cores;
  j["seq"] = p.identity.seq;
  j["layers"] = p.identity.layers;
  j["latency_s"] = p.latency_s;
  j["bandwidth_Bps"] = p.bandwidth_Bps;
  j["seconds"] = p.seconds;
  j["processes"] = p.processes;
  j["clock"] = p.cpu_clock ? "cpu" : "wall";
  j["repetitions"] = p.repetitions;
  if (p.document_tokens > 0) j["document_tokens"] = p.document_tokens;
  if (!p.update.empty()) {
    j["optimizer"] = p.optimizer;
    j["update_s"] = p.update;
    j["clip_s"] = p.clip;
  }
  auto& rows = j["rows"] = nlohmann::ordered_json::array();
  for (const ProfileRows& r : p.rows) {
    nlohmann::ordered_json e;
    e["rows"] = r.rows;
    auto& layers = e["layers"] = nlohmann::ordered_json::array();
    for (const LayerProfile& l : r.layers) layers.push_back(LayerJson(l, p.document_tokens > 0));
    rows.push_back(std::move(e));
  }
  return j.dump(1) + "\n";
}

namespace {

// The optimizer's step (Profile::update, clip), where the file has it:
// one update and one clip time a layer, none negative. REQUIRES: the
// layers read.
void ReadUpdate(const nlohmann::json& j, const std::string& path, Profile& p) {
  if (!j.contains("update_s")) return;
  p.optimizer = j.at("optimizer").get<std::string>();
  p.update = j.at("update_s").get<std::vector<double>>();
  p.clip = j.at("clip_s").get<std::vector<double>>();
  if (p.update.size() != p.identity.layers.size() || p.clip.size() != p.update.size()) {
    throw ConfigError(fmt::format("{}: the profile's optimizer step has {} update and {} clip times for {} layers: the "
                                  "file is damaged",
                                  path, p.update.size(), p.clip.size(), p.identity.layers.size()));
  }
  for (std::size_t t = 0; t < p.update.size(); ++t) {
    if (!(p.update[t] >= 0) || !(p.clip[t] >= 0)) {
      throw ConfigError(fmt::format("{}: layer {}'s update or clip time is negative: the file is damaged", path, t));
    }
  }
}

}  // namespace

Profile ParseProfile(const std::string& text, const std::string& path) {
  Profile p;
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    if (!j.is_object() || !j.contains("format")) {
      throw ConfigError(fmt::format("{}: not a baton profile (no \"format\"; made by `baton profile CONFIG`)", path));
    }
    if (j["format"].get<int>() != Profile::kFormat) {
      throw ConfigError(fmt::format("{}: a profile of format {}, but this baton reads format {}: profile again",
                                    path, j["format"].get<int>(), Profile::kFormat));
    }
    p.config = j.value("config", "");
    p.identity.device = j.at("device").get<std::string>();
    p.identity.precision = j.at("precision").get<std::string>();
    p.identity.machine = j.at("machine").get<std::string>();
    p.identity.cores = j.at("cores").get<int>();
    p.identity.seq = j.at("seq").get<int>();
    p.identity.layers = j.at("layers").get<std::vector<std::string>>();
    p.latency_s = j.value("latency_s", 0.0);
    p.bandwidth_Bps = j.value("bandwidth_Bps", 0.0);
    p.seconds = j.value("seconds", 0.0);
    p.processes = j.value("processes", 1);
    const std::string clock = j.value("clock", std::string("wall"));
    if (clock != "wall" && clock != "cpu") {
      throw ConfigError(fmt::format("{}: clock \"{}\": a profile's clock is \"wall\" or \"cpu\"", path, clock));
    }
    p.cpu_clock = clock == "cpu";
    if (p.processes < 1) throw ConfigError(fmt::format("{}: processes {}: must be >= 1", path, p.processes));
    p.repetitions = j.value("repetitions", 0);
    p.document_tokens = j.value("document_tokens", 0);
    if (p.document_tokens < 0 || p.document_tokens > p.identity.seq) {
      throw ConfigError(fmt::format("{}: document_tokens {}: must be in [0, seq {}]", path, p.document_tokens,
                                    p.identity.seq));
    }
    ReadUpdate(j, path, p);
    for (const auto& e : j.at("rows")) {
      ProfileRows r;
      r.rows = e.at("rows").get<int>();
      for (const auto& l : e.at("layers")) {
        LayerProfile lp;
        lp.forward = l.at("forward_s").get<double>();
        lp.backward_input = l.at("backward_input_s").get<double>();
        lp.backward_weight = l.at("backward_weight_s").get<double>();
        lp.backward = l.at("backward_s").get<double>();
        lp.op_forward = l.at("op_forward_s").get<std::vector<double>>();
        lp.saved_bytes = l.at("saved_bytes").get<double>();
        if (p.document_tokens > 0) {
          lp.documents = {l.at("documents_forward_s").get<double>(), l.at("documents_backward_input_s").get<double>(),
                          l.at("documents_backward_weight_s").get<double>()};
        }
        r.layers.push_back(std::move(lp));
      }
      p.rows.push_back(std::move(r));
    }
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(fmt::format("{}: not a baton profile: {}", path, JsonError(e.what())));
  }
  if (p.rows.empty() || p.identity.layers.empty()) {
    throw ConfigError(fmt::format("{}: the profile holds no measurements (no rows or no layers): profile again", path));
  }
  for (const ProfileRows& r : p.rows) {
    if (r.rows < 1 || r.layers.size() != p.identity.layers.size()) {
      throw ConfigError(fmt::format("{}: the profile at {} rows has {} layers for {} named: the file is damaged", path,
                                    r.rows, r.layers.size(), p.identity.layers.size()));
    }
  }
  std::sort(p.rows.begin(), p.rows.end(), [](const ProfileRows& a, const ProfileRows& b) { return a.rows < b.rows; });
  return p;
}

Profile ReadProfile(const std::string& path) {
  Profile p = ParseProfile(ReadTextFile(path, "profile"), path);
  if (std::optional<MachineModel> m = ReadMachineBeside(path, p.identity.machine, p.identity.cores)) p.machine = *m;
  return p;
}

void CheckProfile(const Profile& p, const ProfileIdentity& want, const std::string& path) {
  auto refuse = [&](const std::string& what) {
    throw ConfigError(fmt::format("{}: the profile does not match this run: {}; profile this config again "
                                  "(baton profile CONFIG --out {})",
                                  path, what, path));
  };
  const ProfileIdentity& have = p.identity;
  if (have.layers.size() != want.layers.size()) {
    refuse(fmt::format("it has {} top-level layers, the model {}", have.layers.size(), want.layers.size()));
  }
  for (std::size_t t = 0; t < want.layers.size(); ++t) {
    if (have.layers[t] != want.layers[t]) {
      refuse(fmt::format("layer {} is \"{}\" in the profile, \"{}\" in the model", t, have.layers[t], want.layers[t]));
    }
  }
  if (have.seq != want.seq) refuse(fmt::format("sequence {} in the profile, {} in the config", have.seq, want.seq));
  if (have.device != want.device) refuse(fmt::format("device {} in the profile, {} here", have.device, want.device));
  if (have.precision != want.precision) {
    refuse(fmt::format("precision {} in the profile, {} here", have.precision, want.precision));
  }
  if (have.machine != want.machine) {
    refuse(fmt::format("measured on \"{}\", this is \"{}\"", have.machine, want.machine));
  }
  if (have.cores != want.cores) refuse(fmt::format("measured with {} CPUs, {} here", have.cores, want.cores));
}

std::vector<LayerProfile> LayersAt(const Profile& p, int rows, bool* exact) {
  // The nearest profiled row counts below and above.
  const ProfileRows* lo = nullptr;
  const ProfileRows* hi = nullptr;
  for (const ProfileRows& r : p.rows) {
    if (r.rows <= rows) lo = &r;
    if (r.rows >= rows && hi == nullptr) hi = &r;
  }
  if (exact != nullptr) *exact = lo != nullptr && lo->rows == rows;
  if (lo != nullptr && lo->rows == rows) return lo->layers;
  // Outside the profiled range: in proportion to the nearest.
  double wa = 0, wb = 0;
  const ProfileRows* a = lo;
  const ProfileRows* b = hi;
  if (a == nullptr) {
    a = b;
    wa = double(rows) / b->rows;
  } else if (b == nullptr) {
    wa = double(rows) / a->rows;
    b = a;
  } else {
    const double f = double(rows - a->rows) / (b->rows - a->rows);
    wa = 1 - f;
    wb = f;
  }
  auto mix = [&](double x, double y) { return wa * x + wb * y; };
  std::vector<LayerProfile> out = a->layers;
  for (std::size_t t = 0; t < out.size(); ++t) {
    const LayerProfile& y = b->layers[t];
    LayerProfile& l = out[t];
    l.forward = mix(l.forward, y.forward);
    l.backward_input = mix(l.backward_input, y.backward_input);
    l.backward_weight = mix(l.backward_weight, y.backward_weight);
    l.backward = mix(l.backward, y.backward);
    for (std::size_t i = 0; i < l.op_forward.size(); ++i) l.op_forward[i] = mix(l.op_forward[i], y.op_forward[i]);
    l.saved_bytes = mix(l.saved_bytes, y.saved_bytes);
    l.documents = {mix(l.documents.forward, y.documents.forward),
                   mix(l.documents.backward_input, y.documents.backward_input),
                   mix(l.documents.backward_weight, y.documents.backward_weight)};
  }
  return out;
}

}  // namespace baton
