// The machine model's file (baton/machine.h).
#include "baton/machine.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "baton/error.h"
#include "baton/files.h"

namespace baton {

std::string MachineJson(const MachineModel& m) {
  nlohmann::ordered_json j;
  j["format"] = MachineModel::kFormat;
  j["machine"] = m.machine;
  j["cores"] = m.cores;
  j["action_cost"] = m.shared.action_cost;
  j["waiting_share"] = m.shared.waiting_share;
  j["probed_waiting_share"] = m.probed_waiting_share;
  auto& runs = j["calibration"] = nlohmann::ordered_json::array();
  for (const MachineModel::Calibration& c : m.calibration) {
    runs.push_back({{"run", c.run},
                    {"measured_step_s", c.measured_step_s},
                    {"unfitted_step_s", c.unfitted_step_s},
                    {"fitted_step_s", c.fitted_step_s}});
  }
  return j.dump(1) + "\n";
}

MachineModel ParseMachine(const std::string& text, const std::string& path) {
  MachineModel m;
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    if (!j.is_object() || !j.contains("format")) {
      throw ConfigError(fmt::format("{}: not a baton machine model (no \"format\"; made by `baton profile`)", path));
    }
    if (j["format"].get<int>() != MachineModel::kFormat) {
      throw ConfigError(fmt::format("{}: a machine model of format {}, but this baton reads format {}: profile again",
                                    path, j["format"].get<int>(), MachineModel::kFormat));
    }
    m.machine = j.at("machine").get<std::string>();
    m.cores = j.at("cores").get<int>();
    m.shared.action_cost = j.at("action_cost").get<double>();
    m.shared.waiting_share = j.at("waiting_share").get<double>();
    m.probed_waiting_share = j.value("probed_waiting_share", m.shared.waiting_share);
    for (const nlohmann::json& c : j.value("calibration", nlohmann::json::array())) {
      m.calibration.push_back(MachineModel::Calibration{c.at("run").get<std::string>(),
                                                        c.at("measured_step_s").get<double>(),
                                                        c.value("unfitted_step_s", 0.0), c.value("fitted_step_s", 0.0)});
    }
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(fmt::format("{}: not a baton machine model: {}", path, JsonError(e.what())));
  }
  if (!(m.shared.action_cost > 0) || !std::isfinite(m.shared.action_cost)) {
    throw ConfigError(fmt::format("{}: action_cost {}: must be a number > 0", path, m.shared.action_cost));
  }
  if (!(m.shared.waiting_share >= 0 && m.shared.waiting_share <= 1)) {
    throw ConfigError(fmt::format("{}: waiting_share {}: must be in [0, 1]", path, m.shared.waiting_share));
  }
  return m;
}

bool IsMachineFileName(const std::string& name) {
  constexpr std::string_view kStart = "machine-", kEnd = "cpus.json";
  return name.size() > kStart.size() + kEnd.size() && name.rfind(kStart, 0) == 0 &&
         name.compare(name.size() - kEnd.size(), kEnd.size(), kEnd) == 0;
}

std::vector<std::string> MachineFilesBeside(const std::string& profile_path) {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  const fs::path folder = fs::path(profile_path).parent_path();
  std::error_code ec;
  for (fs::directory_iterator it(folder.empty() ? fs::path(".") : folder, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (IsMachineFileName(name)) out.push_back((folder / name).string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

void AddProfileInputs(CommandFiles& files, const std::string& key, const std::string& path) {
  if (path.empty()) return;
  files.inputs.push_back({key, path});
  for (const std::string& m : MachineFilesBeside(path)) files.inputs.push_back({"the machine model beside " + key, m});
}

std::string MachineFileName(const std::string& profile_path, const std::string& machine, int cores) {
  std::string name;
  for (const char c : machine) {
    const bool word = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (word) {
      name += c;
    } else if (!name.empty() && name.back() != '-') {
      name += '-';
    }
  }
  while (!name.empty() && name.back() == '-') name.pop_back();
  const std::filesystem::path beside = std::filesystem::path(profile_path).parent_path();
  return (beside / fmt::format("machine-{}-{}cpus.json", name.empty() ? "unnamed" : name, cores)).string();
}

std::optional<MachineModel> ReadMachineBeside(const std::string& profile_path, const std::string& machine, int cores) {
  const std::string path = MachineFileName(profile_path, machine, cores);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  MachineModel m = ParseMachine(ReadTextFile(path, "machine model"), path);
  if (m.machine != machine || m.cores != cores) {
    throw ConfigError(fmt::format("{}: the model of \"{}\" with {} CPUs, but its profile was measured on \"{}\" with {}",
                                  path, m.machine, m.cores, machine, cores));
  }
  return m;
}

}  // namespace baton
