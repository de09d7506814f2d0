// The optimizers' rules that every backend shares: what a spec may hold and
// the names of the state each one keeps (PyTorch's).
#include <fmt/format.h>

#include <cmath>
#include <string_view>

#include "baton/error.h"
#include "baton/model.h"

namespace baton {

void CheckOptimizerSpec(const OptimizerSpec& s) {
  auto fail = [&](std::string_view field, double value, std::string_view rule) {
    throw ConfigError(fmt::format("optimizer ({}): {} must be {}, got {}", EnumName(s.type), field, rule, value));
  };
  // Written as !(ok) so that NaN fails every rule.
  if (!(s.lr > 0.0) || !std::isfinite(s.lr)) fail("lr", s.lr, "a finite number > 0");
  if (!(s.momentum >= 0.0) || !std::isfinite(s.momentum)) fail("momentum", s.momentum, "a finite number >= 0");
  if (!(s.weight_decay >= 0.0) || !std::isfinite(s.weight_decay)) {
    fail("weight_decay", s.weight_decay, "a finite number >= 0");
  }
  if (!(s.beta1 >= 0.0 && s.beta1 < 1.0)) fail("beta1", s.beta1, "in [0, 1)");
  if (!(s.beta2 >= 0.0 && s.beta2 < 1.0)) fail("beta2", s.beta2, "in [0, 1)");
  if (!(s.eps > 0.0) || !std::isfinite(s.eps)) fail("eps", s.eps, "a finite number > 0");
}

std::vector<std::string> OptimizerStateNames(const OptimizerSpec& s) {
  if (s.type == OptimizerType::kAdamW) return {"exp_avg", "exp_avg_sq"};
  if (s.momentum != 0.0) return {"momentum_buffer"};
  return {};
}

}  // namespace baton
