// Strict, typed access to a YAML mapping, shared by every config loader.
// Each accessor records the key as known; Finish() then rejects any key that
// was never asked for (with a did-you-mean). Duplicate keys are rejected on
// construction. Every error is a ConfigError that starts "file:line:column:".
#ifndef BATON_CONFIG_YAML_READER_H_
#define BATON_CONFIG_YAML_READER_H_

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "baton/error.h"
#include "baton/named_enum.h"

namespace baton {

// Parses a file (read with ReadTextFile's size cap); a missing or oversized
// file, a YAML syntax error or a top level that is not a mapping becomes a
// ConfigError (an empty file is null: the caller decides).
YAML::Node LoadYamlFile(const std::string& path);
// Parses YAML text read from `source` (for messages): null for an empty
// text; a top level that is neither null nor a mapping is a ConfigError.
YAML::Node LoadYamlText(const std::string& text, const std::string& source);
// "SOURCE: the config file is empty ...".
ConfigError EmptyConfig(const std::string& source);
// Applies "a.b.c=value" (value in YAML syntax; list items by index) to root,
// creating missing mappings. Throws ConfigError for a malformed assignment.
// Returns the key path it set ("a.b.c").
std::string ApplyOverride(YAML::Node& root, const std::string& assignment, const std::string& source);

class YamlMap {
 public:
  // `path` is the key path of this mapping ("" at the top, "costs" below).
  // REQUIRES: node is a map or null (null reads as an empty map).
  // `overridden` (optional) holds the key paths set on the command line, so
  // their errors say --set instead of a file position.
  YamlMap(YAML::Node node, std::string file, std::string path,
          std::shared_ptr<const std::set<std::string>> overridden = nullptr);

  bool Has(std::string_view key);

  template <typename T>
  T Get(std::string_view key, T fallback) {
    std::optional<T> v = Optional<T>(key);
    return v ? *v : fallback;
  }
  template <typename T>
  std::optional<T> Optional(std::string_view key);

  // A number in [min, max]; out of range is an error that states the range.
  int GetInt(std::string_view key, int fallback, int min, int max);
  double GetNumber(std::string_view key, double fallback, double min, double max);

  // The node under `key` (undefined if absent); marks the key as known.
  YAML::Node Node(std::string_view key) { return Lookup(key); }

  // A nested mapping (empty if the key is absent).
  YamlMap Map(std::string_view key);
  // A list of nested mappings (empty if absent).
  std::vector<YamlMap> MapList(std::string_view key);

  // Throws for every key that no accessor asked for.
  void Finish() const;

  // "file:line:column" of a node of this file.
  std::string Where(const YAML::Node& node) const;
  std::string KeyPath(std::string_view key) const;
  // Where a key's value came from: "(--set K)" for a value set on the command
  // line (or inside one), else the node's file:line:column.
  std::string Locate(const YAML::Node& node, const std::string& key_path) const;
  [[noreturn]] void Fail(const YAML::Node& node, std::string_view key, const std::string& why) const;

 private:
  YAML::Node Lookup(std::string_view key);

  YAML::Node node_;
  std::string file_;
  std::string path_;
  std::set<std::string, std::less<>> known_;
  std::shared_ptr<const std::set<std::string>> overridden_;
};

// The value types a config may hold.
template <>
std::optional<std::string> YamlMap::Optional<std::string>(std::string_view key);
template <>
std::optional<long long> YamlMap::Optional<long long>(std::string_view key);
template <>
std::optional<int> YamlMap::Optional<int>(std::string_view key);
template <>
std::optional<double> YamlMap::Optional<double>(std::string_view key);
template <>
std::optional<bool> YamlMap::Optional<bool>(std::string_view key);
template <>
std::optional<std::vector<std::string>> YamlMap::Optional<std::vector<std::string>>(std::string_view key);

// A config choice, parsed into its enum once, where it is read; without a
// fallback the key is required.
template <NamedEnum E>
E Choice(YamlMap& map, std::string_view key, std::optional<E> fallback) {
  const std::string v = map.Get<std::string>(key, fallback ? std::string(EnumName(*fallback)) : std::string());
  const std::optional<E> e = ParseEnum<E>(v);
  if (!e) map.Fail(map.Node(key), key, "'" + v + "' is not one of: " + EnumNameList<E>());
  return *e;
}
template <NamedEnum E>
E Choice(YamlMap& map, std::string_view key, E fallback) {
  return Choice(map, key, std::optional<E>(fallback));
}

}  // namespace baton

#endif  // BATON_CONFIG_YAML_READER_H_
