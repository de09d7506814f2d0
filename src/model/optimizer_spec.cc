// The optimizers' rules that every backend shares: what a spec may hold and
// the names of the state each one keeps (PyTorch's).
#include <fmt/format.h>

#include <array>
#include <cmath>
#include <numbers>
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

namespace {
constexpr std::array<LrDecay, 3> kLrDecays = {LrDecay::kConstant, LrDecay::kLinear, LrDecay::kCosine};
}  // namespace

std::string_view EnumName(LrDecay type) {
  return type == LrDecay::kConstant ? "constant" : type == LrDecay::kLinear ? "linear" : "cosine";
}
std::span<const LrDecay> EnumValues(LrDecay) { return kLrDecays; }

double LearningRateAt(const LrSchedule& s, double lr, std::int64_t step, std::int64_t total_steps) {
  const std::int64_t warmup = s.warmup_steps;
  if (warmup > 0 && step <= warmup) return lr * static_cast<double>(step) / static_cast<double>(warmup);
  if (s.type == LrDecay::kConstant) return lr;
  const std::int64_t decay = s.decay_steps > 0 ? s.decay_steps : total_steps;
  if (step > decay || decay <= warmup) return s.min_lr;
  const double r = static_cast<double>(step - warmup) / static_cast<double>(decay - warmup);
  if (s.type == LrDecay::kLinear) return lr - r * (lr - s.min_lr);
  return s.min_lr + 0.5 * (1.0 + std::cos(std::numbers::pi * r)) * (lr - s.min_lr);
}

std::vector<std::string> OptimizerStateNames(const OptimizerSpec& s) {
  if (s.type == OptimizerType::kAdamW) return {"exp_avg", "exp_avg_sq"};
  if (s.momentum != 0.0) return {"momentum_buffer"};
  return {};
}

}  // namespace baton
