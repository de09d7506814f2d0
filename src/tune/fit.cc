// Fitting the shared-core model to measured steps (baton/profile_price.h).
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "baton/error.h"
#include "baton/profile_price.h"

namespace baton {
namespace {

// The calibration runs' prices (the stages priced once), and each one's
// step at a factor and a waiting share.
struct CalibrationFit {
  const std::vector<RunPlan>& plans;
  const std::vector<double>& measured;
  std::vector<SimOptions> options;

  CalibrationFit(const std::vector<RunPlan>& p, const Profile& profile, const std::vector<double>& m)
      : plans(p), measured(m) {
    if (plans.empty() || plans.size() != measured.size()) {
      throw ConfigError(fmt::format("fitting shared cores: {} plans and {} measured steps: one step a plan, at least one",
                                    plans.size(), measured.size()));
    }
    for (const RunPlan& plan : plans) options.push_back(PriceRun(plan, ProfileRunCosts(plan, profile)));
  }
  // log(simulated / measured) of run k.
  double LogError(std::size_t k, double scale, double share) const {
    SimOptions o = options[k];
    o.cores.shared = SharedCores{scale, share};
    return std::log(Simulate(plans[k].lowered, o).makespan / measured[k]);
  }
  double MeanLogError(double scale, double share) const {
    double sum = 0;
    for (std::size_t k = 0; k < plans.size(); ++k) sum += LogError(k, scale, share);
    return sum / static_cast<double>(plans.size());
  }
  // The factor at which the mean log error is 0 (bisection; an end of the
  // range where the measured steps lie beyond it).
  double Scale(double share) const {
    double lo = kMinSharedCoreCost, hi = kMaxSharedCoreCost;
    if (MeanLogError(lo, share) >= 0) return lo;
    if (MeanLogError(hi, share) <= 0) return hi;
    for (int i = 0; i < 40; ++i) {
      const double mid = 0.5 * (lo + hi);
      (MeanLogError(mid, share) < 0 ? lo : hi) = mid;
    }
    return 0.5 * (lo + hi);
  }
};

}  // namespace

double FitSharedCoreCost(const std::vector<RunPlan>& plans, const Profile& profile,
                         const std::vector<double>& measured_step_s) {
  const CalibrationFit fit(plans, profile, measured_step_s);
  return fit.Scale(profile.machine.shared.waiting_share);
}

SharedCoresFit FitSharedCores(const std::vector<RunPlan>& plans, const Profile& profile,
                              const std::vector<double>& measured_step_s) {
  const CalibrationFit fit(plans, profile, measured_step_s);
  SharedCoresFit best{fit.Scale(profile.machine.shared.waiting_share), profile.machine.shared.waiting_share, 0.0};
  if (plans.size() < 3) return best;
  best.squared_error = std::numeric_limits<double>::infinity();
  for (int i = 0; i <= kSharedWaitingSteps; ++i) {
    const double share = double(i) / kSharedWaitingSteps;
    const double scale = fit.Scale(share);
    double error = 0;
    for (std::size_t k = 0; k < plans.size(); ++k) error += std::pow(fit.LogError(k, scale, share), 2);
    if (error < best.squared_error) best = SharedCoresFit{scale, share, error};
  }
  return best;
}

}  // namespace baton
