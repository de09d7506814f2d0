// The recipe's sections of train: the optimizer and its learning rate's
// schedule (ReadTrain, train_config.cc, reads them in order).
#include <fmt/format.h>

#include <cstdint>
#include <limits>

#include "baton/config.h"
#include "sections.h"
#include "yaml_reader.h"

namespace baton {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace

// train.optimizer: SGD (with momentum) or AdamW and their settings; one
// type's setting under the other is refused by name.
void ReadOptimizer(YamlMap& train, OptimizerSpec& o) {
  YamlMap opt = train.Map("optimizer");
  o.type = Choice(opt, "type", o.type);
  o.lr = opt.GetNumber("lr", o.lr, std::numeric_limits<double>::min(), kInf);
  o.momentum = opt.GetNumber("momentum", o.momentum, 0.0, kInf);
  o.weight_decay = opt.GetNumber("weight_decay", o.type == OptimizerType::kAdamW ? 0.01 : 0.0, 0.0, kInf);
  YAML::Node betas = opt.Node("betas");
  if (betas.IsDefined() && !betas.IsNull()) {
    if (!betas.IsSequence() || betas.size() != 2) opt.Fail(betas, "betas", "expected two numbers [beta1, beta2]");
    try {
      o.beta1 = betas[0].as<double>();
      o.beta2 = betas[1].as<double>();
    } catch (const YAML::Exception&) {
      opt.Fail(betas, "betas", "expected two numbers [beta1, beta2]");
    }
    if (!(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1)) {
      opt.Fail(betas, "betas", fmt::format("each beta must be in [0, 1), got [{}, {}]", o.beta1, o.beta2));
    }
  }
  o.eps = opt.GetNumber("eps", o.eps, std::numeric_limits<double>::min(), 1.0);
  if (o.type == OptimizerType::kAdamW && opt.Has("momentum")) opt.Fail(opt.Node("momentum"), "momentum", "is an sgd setting");
  if (o.type == OptimizerType::kSgd && (opt.Has("betas") || opt.Has("eps"))) {
    opt.Fail(opt.Has("betas") ? opt.Node("betas") : opt.Node("eps"), opt.Has("betas") ? "betas" : "eps",
             "is an adamw setting");
  }
  opt.Finish();
}

// train.lr_schedule (LrSchedule, baton/model.h), checked against the
// optimizer's peak rate and, where the run's length is set, its steps.
void ReadLrSchedule(YamlMap& train, const TrainConfig& c, LrSchedule& s) {
  if (!train.Has("lr_schedule")) return;
  YamlMap m = train.Map("lr_schedule");
  s.type = Choice(m, "type", s.type);
  s.warmup_steps = m.Get<long long>("warmup_steps", 0);
  if (s.warmup_steps < 0) m.Fail(m.Node("warmup_steps"), "warmup_steps", "must be >= 0 (0: no warm-up)");
  const bool decays = s.type != LrDecay::kConstant;
  for (const char* key : {"min_lr", "decay_steps"}) {
    if (!decays && m.Has(key)) {
      m.Fail(m.Node(key), key, "only applies to a decay (type: linear or cosine); constant keeps optimizer.lr");
    }
  }
  const double lr = c.train.optimizer.lr;
  s.min_lr = m.GetNumber("min_lr", 0.0, 0.0, std::numeric_limits<double>::max());
  if (s.min_lr > lr) {
    m.Fail(m.Node("min_lr"), "min_lr",
           fmt::format("{} is above the peak rate train.optimizer.lr {}: a decay ends at or below where it starts",
                       s.min_lr, lr));
  }
  s.decay_steps = m.Get<long long>("decay_steps", 0);
  if (s.decay_steps < 0) m.Fail(m.Node("decay_steps"), "decay_steps", "must be >= 0 (0: the run's last step)");
  const std::int64_t decay = s.decay_steps > 0 ? s.decay_steps : c.train.steps;
  if (decays && decay > 0 && s.warmup_steps >= decay) {
    m.Fail(m.Node("warmup_steps"), "warmup_steps",
           fmt::format("{} steps of warm-up are not shorter than the decay's {} ({}): the decay would never run",
                       s.warmup_steps, decay, s.decay_steps > 0 ? "decay_steps" : "train.steps"));
  }
  m.Finish();
}

}  // namespace baton
