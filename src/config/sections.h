// The training config's sections that have files of their own, read from
// its YAML by ParseTrainConfig (train_config.cc) in order; private to the
// config room.
#ifndef BATON_SRC_CONFIG_SECTIONS_H_
#define BATON_SRC_CONFIG_SECTIONS_H_

#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "baton/config.h"
#include "yaml_reader.h"

namespace baton {

inline constexpr int kMaxInt = std::numeric_limits<int>::max();

// `key`'s word in `map`, `fallback` when absent; a word not in `allowed`
// is a ConfigError naming them.
std::string OneOf(YamlMap& map, std::string_view key, std::string fallback, const std::vector<std::string>& allowed);

// data: the dataset and its keys; a key another dataset reads is refused
// by name. Read first: the model's widths depend on the dataset.
void ReadData(YamlMap& top, TrainConfig& c);

// model: a GPT (type: gpt) or a list of layers, its widths checked against
// the data's features and classes; its loss and initialisation.
void ReadModel(YamlMap& top, TrainConfig& c);

// train.optimizer (optimizer_config.cc).
void ReadOptimizer(YamlMap& train, OptimizerSpec& o);

// train.lr_schedule (LrSchedule, baton/model.h), checked against the
// optimizer's peak rate and, where the run's length is set, its steps
// (optimizer_config.cc; read after the optimizer and train.steps).
void ReadLrSchedule(YamlMap& train, const TrainConfig& c, LrSchedule& s);

}  // namespace baton

#endif  // BATON_SRC_CONFIG_SECTIONS_H_
