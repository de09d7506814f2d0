#include "yaml_reader.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>

#include "baton/error.h"
#include "baton/files.h"

namespace baton {
namespace {

std::size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diag = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string_view NodeKind(const YAML::Node& n) {
  if (n.IsMap()) return "a mapping";
  if (n.IsSequence()) return "a list";
  if (n.IsNull()) return "nothing";
  return "a scalar";
}

}  // namespace

YAML::Node LoadYamlFile(const std::string& path) { return LoadYamlText(ReadTextFile(path), path); }

ConfigError EmptyConfig(const std::string& source) {
  return ConfigError(fmt::format("{}: the config file is empty (or holds only comments): a config is a mapping of "
                                 "sections (see configs/)",
                                 source));
}

YAML::Node LoadYamlText(const std::string& text, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    throw ConfigError(fmt::format("{}:{}:{}: not valid YAML: {}", source, e.mark.line + 1, e.mark.column + 1, e.msg));
  }
  // The settings are a mapping of sections; say so before any key is looked up.
  if (!root.IsNull() && !root.IsMap()) {
    throw ConfigError(fmt::format("{}:{}:{}: the config must be a mapping of sections (model:, pipeline:, ...), "
                                  "but it is {}",
                                  source, root.Mark().line + 1, root.Mark().column + 1, NodeKind(root)));
  }
  return root;
}

std::string ApplyOverride(YAML::Node& root, const std::string& assignment, const std::string& source) {
  const std::size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw ConfigError(fmt::format("--set {}: expected key.path=value", assignment));
  }
  const std::string path = assignment.substr(0, eq);
  // "key=" would read as YAML's null, which is the key's default: a path
  // emptied on purpose would fall back to a default file and overwrite it.
  if (assignment.find_first_not_of(" \t", eq + 1) == std::string::npos) {
    throw ConfigError(fmt::format("--set {}: no value after '=': give one, or --set '{}=\"\"' for an empty one (a "
                                  "path left empty writes nothing)",
                                  assignment, path));
  }
  YAML::Node value;
  try {
    value = YAML::Load(assignment.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    throw ConfigError(fmt::format("--set {}: the value is not valid YAML: {}", assignment, e.msg));
  }
  // null and ~ are YAML's null too: as "key=", the default taken in silence.
  if (value.IsNull()) {
    throw ConfigError(fmt::format("--set {}: '{}' is YAML's null, which stands for the key's default: give a value, "
                                  "leave the --set out for the default, or --set '{}=\"\"' for an empty one",
                                  assignment, assignment.substr(eq + 1), path));
  }
  std::vector<std::string> keys;
  for (std::size_t start = 0;;) {
    const std::size_t dot = path.find('.', start);
    keys.push_back(path.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  if (root.IsNull() || !root.IsDefined()) root = YAML::Node(YAML::NodeType::Map);
  YAML::Node cur = root;
  for (std::size_t k = 0; k < keys.size(); ++k) {
    const std::string& key = keys[k];
    if (key.empty()) throw ConfigError(fmt::format("--set {}: empty key in the path", assignment));
    const bool last = k + 1 == keys.size();
    if (cur.IsSequence()) {
      std::size_t index = 0;
      auto [ptr, ec] = std::from_chars(key.data(), key.data() + key.size(), index);
      if (ec != std::errc() || ptr != key.data() + key.size() || index >= cur.size()) {
        throw ConfigError(fmt::format("--set {}: '{}' is not an index of the list at that point ({} items)", assignment,
                                      key, cur.size()));
      }
      if (last) {
        cur[index] = value;
        return path;
      }
      YAML::Node next = cur[index];
      cur.reset(next);
      continue;
    }
    if (!cur.IsMap() && !cur.IsNull()) {
      throw ConfigError(
          fmt::format("--set {}: cannot set key '{}' inside a value that is not a mapping", assignment, key));
    }
    if (last) {
      cur[key] = value;
      return path;
    }
    if (!cur[key] || cur[key].IsNull()) cur[key] = YAML::Node(YAML::NodeType::Map);
    YAML::Node next = cur[key];
    cur.reset(next);
  }
  (void)source;
  return path;
}

YamlMap::YamlMap(YAML::Node node, std::string file, std::string path,
                 std::shared_ptr<const std::set<std::string>> overridden)
    : node_(std::move(node)), file_(std::move(file)), path_(std::move(path)), overridden_(std::move(overridden)) {
  if (node_.IsNull() || !node_.IsDefined()) {
    node_ = YAML::Node(YAML::NodeType::Map);
    return;
  }
  if (!node_.IsMap()) {
    throw ConfigError(fmt::format("{}: {} must be a mapping of keys to values, got {}", Where(node_),
                                  path_.empty() ? "the file" : path_, NodeKind(node_)));
  }
  std::set<std::string, std::less<>> seen;
  for (auto it = node_.begin(); it != node_.end(); ++it) {
    const std::string key = it->first.Scalar();
    if (!seen.insert(key).second) {
      throw ConfigError(fmt::format("{}: duplicate key {}: each key may appear once", Locate(it->first, KeyPath(key)),
                                    Quote(KeyPath(key))));
    }
  }
}

std::string YamlMap::Where(const YAML::Node& node) const {
  const YAML::Mark mark = node.Mark();
  if (mark.is_null()) return fmt::format("{} (set on the command line)", file_);
  return fmt::format("{}:{}:{}", file_, mark.line + 1, mark.column + 1);
}

std::string YamlMap::KeyPath(std::string_view key) const {
  return path_.empty() ? std::string(key) : fmt::format("{}.{}", path_, key);
}

std::string YamlMap::Locate(const YAML::Node& node, const std::string& path) const {
  if (overridden_ != nullptr) {
    // The value, or a mapping around it, came from --set.
    for (const std::string& o : *overridden_) {
      if (path == o || path.rfind(o + ".", 0) == 0 || path.rfind(o + "[", 0) == 0) {
        return fmt::format("{} (--set {})", file_, o);
      }
    }
  }
  return Where(node);
}

void YamlMap::Fail(const YAML::Node& node, std::string_view key, const std::string& why) const {
  const std::string path = KeyPath(key);
  throw ConfigError(fmt::format("{}: {}: {}", Locate(node, path), path, why));
}

YAML::Node YamlMap::Lookup(std::string_view key) {
  known_.emplace(key);
  for (auto it = node_.begin(); it != node_.end(); ++it) {
    if (it->first.Scalar() == key) return it->second;
  }
  return YAML::Node();
}

bool YamlMap::Has(std::string_view key) {
  YAML::Node n = Lookup(key);
  return n.IsDefined() && !n.IsNull();
}

template <>
std::optional<std::string> YamlMap::Optional<std::string>(std::string_view key) {
  YAML::Node n = Lookup(key);
  if (!n.IsDefined() || n.IsNull()) return std::nullopt;
  if (!n.IsScalar()) Fail(n, key, fmt::format("expected a string, got {}", NodeKind(n)));
  return n.Scalar();
}

template <>
std::optional<long long> YamlMap::Optional<long long>(std::string_view key) {
  YAML::Node n = Lookup(key);
  if (!n.IsDefined() || n.IsNull()) return std::nullopt;
  if (!n.IsScalar()) Fail(n, key, fmt::format("expected an integer, got {}", NodeKind(n)));
  const std::string& s = n.Scalar();
  long long v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec == std::errc::result_out_of_range && ptr == s.data() + s.size()) {
    Fail(n, key, fmt::format("{} is out of range for an integer (at most {})", Quote(s),
                             std::numeric_limits<long long>::max()));
  }
  if (ec != std::errc() || ptr != s.data() + s.size()) {
    Fail(n, key, fmt::format("expected an integer, got {}", Quote(s)));
  }
  return v;
}

template <>
std::optional<int> YamlMap::Optional<int>(std::string_view key) {
  YAML::Node n = Lookup(key);
  std::optional<long long> v = Optional<long long>(key);
  if (v && (*v < std::numeric_limits<int>::min() || *v > std::numeric_limits<int>::max())) {
    Fail(n, key, fmt::format("{} is out of range for an integer", *v));
  }
  if (!v) return std::nullopt;
  return static_cast<int>(*v);
}

template <>
std::optional<double> YamlMap::Optional<double>(std::string_view key) {
  YAML::Node n = Lookup(key);
  if (!n.IsDefined() || n.IsNull()) return std::nullopt;
  if (!n.IsScalar()) Fail(n, key, fmt::format("expected a number, got {}", NodeKind(n)));
  const std::string& s = n.Scalar();
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v)) {
    Fail(n, key, fmt::format("expected a finite number, got {}", Quote(s)));
  }
  return v;
}

template <>
std::optional<bool> YamlMap::Optional<bool>(std::string_view key) {
  YAML::Node n = Lookup(key);
  if (!n.IsDefined() || n.IsNull()) return std::nullopt;
  const std::string s = n.IsScalar() ? n.Scalar() : "";
  if (s == "true" || s == "True") return true;
  if (s == "false" || s == "False") return false;
  Fail(n, key, fmt::format("expected true or false, got {}", Quote(s)));
}

template <>
std::optional<std::vector<std::string>> YamlMap::Optional<std::vector<std::string>>(std::string_view key) {
  YAML::Node n = Lookup(key);
  if (!n.IsDefined() || n.IsNull()) return std::nullopt;
  if (!n.IsSequence()) Fail(n, key, fmt::format("expected a list of strings, got {}", NodeKind(n)));
  std::vector<std::string> out;
  for (const YAML::Node& item : n) {
    if (!item.IsScalar()) Fail(item, key, fmt::format("expected a list of strings, but an item is {}", NodeKind(item)));
    out.push_back(item.Scalar());
  }
  return out;
}

int YamlMap::GetInt(std::string_view key, int fallback, int min, int max) {
  const int v = Get(key, fallback);
  if (v < min || v > max) {
    Fail(Lookup(key), key,
         max == std::numeric_limits<int>::max() ? fmt::format("must be at least {}, got {}", min, v)
                                                : fmt::format("must be in [{}, {}], got {}", min, max, v));
  }
  return v;
}

double YamlMap::GetNumber(std::string_view key, double fallback, double min, double max) {
  const double v = Get(key, fallback);
  if (v < min || v > max) {
    // The smallest positive double as a lower bound means "greater than 0".
    const bool positive = min == std::numeric_limits<double>::min();
    std::string rule;
    if (positive && std::isinf(max)) {
      rule = fmt::format("must be greater than 0, got {}", v);
    } else if (positive) {
      rule = fmt::format("must be in (0, {}], got {}", max, v);
    } else if (std::isinf(max)) {
      rule = fmt::format("must be at least {}, got {}", min, v);
    } else {
      rule = fmt::format("must be in [{}, {}], got {}", min, max, v);
    }
    Fail(Lookup(key), key, rule);
  }
  return v;
}

YamlMap YamlMap::Map(std::string_view key) { return YamlMap(Lookup(key), file_, KeyPath(key), overridden_); }

std::vector<YamlMap> YamlMap::MapList(std::string_view key) {
  YAML::Node n = Lookup(key);
  std::vector<YamlMap> out;
  if (!n.IsDefined() || n.IsNull()) return out;
  if (!n.IsSequence()) Fail(n, key, fmt::format("expected a list of mappings, got {}", NodeKind(n)));
  int i = 0;
  for (const YAML::Node& item : n) out.emplace_back(item, file_, fmt::format("{}[{}]", KeyPath(key), i++), overridden_);
  return out;
}

void YamlMap::Finish() const {
  for (auto it = node_.begin(); it != node_.end(); ++it) {
    const std::string key = it->first.Scalar();
    if (known_.count(key)) continue;
    if (key == "<<") {  // yaml-cpp reads a merge key as a plain key
      throw ConfigError(fmt::format("{}: a YAML merge key ('<<') under {}: baton's YAML reader does not merge "
                                    "mappings; write the keys out in full",
                                    Locate(it->first, KeyPath(key)), Quote(path_.empty() ? "the top level" : path_)));
    }
    std::string best;
    std::size_t best_distance = 3;  // suggest only near misses
    for (const std::string& k : known_) {
      const std::size_t d = EditDistance(key, k);
      if (d < best_distance) {
        best_distance = d;
        best = k;
      }
    }
    std::string allowed;
    for (const std::string& k : known_) allowed += (allowed.empty() ? "" : ", ") + k;
    throw ConfigError(fmt::format("{}: unknown key {}{} (allowed here: {})", Locate(it->first, KeyPath(key)),
                                  Quote(KeyPath(key)), best.empty() ? "" : fmt::format("; did you mean '{}'?", best),
                                  allowed));
  }
}

}  // namespace baton
