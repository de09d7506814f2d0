// The tune room's pricer: a config's candidates priced from one profile
// (each stage by PriceStage, its memory through the plan), remembering
// each shape and each stage's price. Private to src/tune.
#ifndef BATON_TUNE_PRICER_H_
#define BATON_TUNE_PRICER_H_

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "baton/config.h"
#include "baton/plan.h"
#include "baton/price.h"
#include "baton/profile_price.h"
#include "baton/profile.h"
#include "baton/tune.h"

namespace baton {

// Prices the candidates of one config from one profile, remembering each
// shape (microbatches, policy, stage count, slices, ZeRO stage) and each
// stage's price.
class ProfilePricer {
 public:
  // `rank_slowdown`: empty, or one per pipeline rank: the times its
  // compute takes against the profile's (the adaptive plans' measure).
  ProfilePricer(const TrainConfig& config, const Profile& profile, Slowdown slowdown = {});

  const ModelDesc& model() const { return model_; }

  CandidateCosts operator()(const Candidate& c);

 private:
  struct Shape {
    RunPlan plan;
    std::vector<LayerProfile> layers;
    std::map<std::tuple<int, int, bool>, StagePrice> prices;
    StaticBytesCache statics;

    const StagePrice& Price(int s, bool split) {
      const auto key = std::make_tuple(plan.bounds[static_cast<std::size_t>(s)],
                                       plan.bounds[static_cast<std::size_t>(s) + 1], split);
      auto it = prices.find(key);
      if (it == prices.end()) it = prices.emplace(key, PriceStage(plan, layers, s, split)).first;
      return it->second;
    }
  };

  Shape* ShapeOf(const Candidate& c, int stages, std::string* invalid);

  const TrainConfig& config_;
  const Profile& profile_;
  ModelDesc model_;
  RunCosts base_;  // every candidate's messages, cores and memory model
  std::vector<double> slowdown_;  // per rank; the links' delays are in base_
  std::map<std::tuple<int, int, int, int, int, int>, std::unique_ptr<Shape>> shapes_;
};

}  // namespace baton

#endif  // BATON_TUNE_PRICER_H_
