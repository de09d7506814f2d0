// `baton tune` for packed documents: each token budget and packing tuned
// as a config of its own, and its best candidates priced by the run's own
// steps (see tune_packed.h).
#include "tune_packed.h"

#include <fmt/format.h>

#include <algorithm>

#include "baton/error.h"
#include "baton/measure_profile.h"
#include "baton/model.h"
#include "baton/placement.h"
#include "baton/plan.h"
#include "baton/profile_price.h"
#include "baton/schedule.h"
#include "baton/train.h"

namespace baton {
namespace {

// The config at a point, parsed again from its file with the point's
// settings over the caller's, so that every rule a run is held to holds.
// A GPT's position table grows to the budget where it is shorter.
TrainConfig PointConfig(const TrainConfig& base, const PackedTuneRequest& req, int budget, int batch,
                        Packing packing) {
  std::vector<std::string> sets = req.sets;
  sets.push_back(fmt::format("data.max_tokens={}", budget));
  sets.push_back(fmt::format("data.packing={}", EnumName(packing)));
  sets.push_back(fmt::format("train.batch_size={}", batch));
  if (base.model.gpt && base.model.gpt_spec.seq_len < budget) sets.push_back(fmt::format("model.seq_len={}", budget));
  return LoadTrainConfig(req.config_path, sets);
}

// The config with a candidate's settings, as the overlay writes them.
TrainConfig WithCandidate(const TrainConfig& c, const Candidate& k) {
  TrainConfig out = c;
  out.pipeline.schedule = k.schedule;
  out.pipeline.microbatches = k.microbatches;
  out.pipeline.chunks = TraitsOf(k.schedule).any_chunks ? k.chunks : 0;
  out.pipeline.checkpointing = k.checkpointing;
  out.pipeline.keep = k.checkpointing == Checkpointing::kSelective ? SelectiveKeep(c) : std::vector<LayerType>{};
  out.pipeline.seq_slices = k.slices;
  out.pipeline.seq_split = k.seq_split;
  out.data_parallel.zero = k.zero;
  if (k.bounds.empty()) return out;
  return WithPlacement(out, DescribeModel(c.model.layers, c.model.input, c.model.seq), k.bounds);
}

// The point's mean step over the run's first `steps` steps: each priced by
// its microbatches' real lengths (greedy, balanced), or at one fixed
// shape (pad); its real tokens and the slot positions they leave unused.
void PriceSteps(PackedPoint& p, const Profile& profile, int steps) {
  const RunPlan plan = PlanRun(p.config);
  const PackedRunSteps run = PackedSteps(p.config, plan, 0, steps);
  const double fixed = RealLengths(p.packing) ? 0.0 : PredictFromProfile(plan, profile).sim.makespan;
  double time = 0, tokens = 0, slots = 0;
  for (const auto& replicas : run.steps) {
    time += fixed > 0 ? fixed : PredictPackedStep(plan, profile, replicas).makespan;
    for (const auto& mbs : replicas) {
      for (const PackedMicrobatch& mb : mbs) {
        tokens += mb.tokens;
        slots += static_cast<double>(plan.rows) * plan.model.seq;
      }
    }
  }
  const double n = static_cast<double>(std::max<std::size_t>(run.steps.size(), 1));
  p.step_s = time / n;
  p.tokens = tokens / n;
  p.unused = slots > 0 ? 1.0 - tokens / slots : 0.0;
}

// The point at its best finalist: the tuner's fastest fitting candidates
// at whole microbatches, repriced by the point's steps.
void ChooseCandidate(PackedPoint& p, const TrainConfig& c, const TuneReport& report, const Profile& profile,
                     int steps) {
  p.candidates = report.ranked.size();
  if (report.feasible == 0) {
    p.why_not = report.smallest ? fmt::format("no candidate fits the budget (the smallest needs {:.1f} MiB)",
                                              report.smallest->max_peak_bytes / (1024.0 * 1024.0))
                                : "no candidate could run";
    return;
  }
  const std::size_t finalists = std::min<std::size_t>(report.feasible, kPackedFinalists);
  for (std::size_t i = 0; i < finalists; ++i) {
    PackedPoint tried = p;
    tried.candidate = report.ranked[i];
    tried.config = WithCandidate(c, tried.candidate.candidate);
    PriceSteps(tried, profile, steps);
    if (i == 0 || tried.TokensPerSecond() > p.TokensPerSecond()) p = std::move(tried);
  }
}

// The profile of a budget: `path` with {max_tokens} replaced by it, or
// `path` itself for the config's own budget; otherwise none (measured
// here).
std::string ProfilePathAt(const std::string& path, int budget, int own) {
  const std::string mark = "{max_tokens}";
  if (const auto at = path.find(mark); at != std::string::npos) {
    return path.substr(0, at) + std::to_string(budget) + path.substr(at + mark.size());
  }
  return budget == own ? path : std::string();
}

}  // namespace

std::vector<PackedPoint> TunePacked(const TrainConfig& config, const TuneRequest& request,
                                    const PackedTuneRequest& packed, std::string* profile_sources) {
  if (config.data.packing == Packing::kNone) {
    throw ConfigError("tune --budgets/--packings: the config packs no documents (data.packing: none)");
  }
  if (packed.steps < 1) throw ConfigError(fmt::format("tune: --steps must be >= 1, got {}", packed.steps));
  const std::vector<int> budgets = packed.budgets.empty() ? std::vector<int>{config.data.seq_len} : packed.budgets;
  const std::vector<Packing> packings =
      packed.packings.empty() ? std::vector<Packing>{Packing::kGreedy, Packing::kBalanced} : packed.packings;
  if (std::find(packings.begin(), packings.end(), Packing::kNone) != packings.end()) {
    throw ConfigError("tune --packings: none cuts fixed windows, not documents: give greedy, balanced or pad");
  }
  const long long positions = static_cast<long long>(config.train.batch_size) * config.data.seq_len;
  std::vector<PackedPoint> points;
  for (int budget : budgets) {
    if (budget < 1) throw ConfigError(fmt::format("tune --budgets: a token budget is >= 1, got {}", budget));
    std::vector<PackedPoint> at(packings.size());
    for (std::size_t k = 0; k < packings.size(); ++k) {
      at[k].budget = budget;
      at[k].packing = packings[k];
      at[k].batch_size = static_cast<int>(positions / budget);
    }
    auto refuse = [&](const std::string& why) {
      for (PackedPoint& p : at) p.why_not = why;
    };
    if (positions % budget != 0) {
      refuse(fmt::format("the batch's {} positions (train.batch_size x data.max_tokens) are not whole samples of {}",
                         positions, budget));
    } else {
      try {
        // One profile and one ranking a budget: the packing moves no fixed shape.
        const TrainConfig first = PointConfig(config, packed, budget, at[0].batch_size, packings[0]);
        std::string source;
        const Profile profile = ProfileFor(first, ProfilePathAt(packed.profile_path, budget, config.data.seq_len), &source);
        *profile_sources += fmt::format("  max_tokens {}: {}\n", budget, source);
        const TuneReport report = TuneConfig(first, request, profile);
        for (std::size_t k = 0; k < packings.size(); ++k) {
          try {
            const TrainConfig c = k == 0 ? first : PointConfig(config, packed, budget, at[k].batch_size, packings[k]);
            ChooseCandidate(at[k], c, report, profile, packed.steps);
          } catch (const ConfigError& e) {
            at[k].why_not = e.what();
          }
        }
      } catch (const ConfigError& e) {
        refuse(e.what());
      }
    }
    points.insert(points.end(), at.begin(), at.end());
  }
  std::stable_sort(points.begin(), points.end(), [](const PackedPoint& a, const PackedPoint& b) {
    if (a.why_not.empty() != b.why_not.empty()) return a.why_not.empty();
    return a.TokensPerSecond() > b.TokensPerSecond();
  });
  return points;
}

}  // namespace baton
