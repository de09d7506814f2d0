// Adaptive plans (adapt.h).
#include "adapt.h"

#include "migrate.h"
#include "metrics_row.h"
#include "wire.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>

#include "baton/placement.h"
#include "baton/profile_price.h"
#include "baton/timing.h"

namespace baton {

namespace {

// Replica d's factors out of every world rank's (ReplicaLayout's order).
std::vector<double> ReplicaFactors(const std::vector<double>& world, int replicas, int d) {
  const ReplicaLayout layout{static_cast<int>(world.size()) / replicas, replicas};
  std::vector<double> out;
  for (int p = 0; p < layout.pipeline_ranks; ++p) out.push_back(world[static_cast<std::size_t>(layout.World(p, d))]);
  return out;
}
}  // namespace

void SpeedMeter::Expect(std::vector<double> priced, std::vector<double> assumed) {
  if (calibration_.size() == priced.size()) before_ = calibration_;
  priced_ = std::move(priced);
  assumed_ = std::move(assumed);
  if (assumed_.empty()) assumed_.assign(priced_.size(), 1.0);
  ratios_.assign(priced_.size(), {});
  calibration_.clear();
  skip_ = s_.settle;
}

void SpeedMeter::Reprice(std::vector<double> priced) {
  if (priced.size() != priced_.size()) return;
  for (std::size_t r = 0; r < priced.size(); ++r) {
    if (!(priced[r] > 0 && priced_[r] > 0)) continue;
    const double scale = priced_[r] / priced[r];
    for (double& ratio : ratios_[r]) ratio *= scale;
    if (r < calibration_.size()) calibration_[r] *= scale;
  }
  priced_ = std::move(priced);
}

void SpeedMeter::Observe(const std::vector<double>& seconds) {
  if (skip_ > 0) {
    --skip_;
    return;
  }
  for (std::size_t r = 0; r < priced_.size() && r < seconds.size(); ++r) {
    std::vector<double>& w = ratios_[r];
    w.push_back(priced_[r] > 0 ? seconds[r] / priced_[r] : 0.0);
    if (static_cast<int>(w.size()) > s_.window) w.erase(w.begin());
  }
  if (calibration_.empty() && !ratios_.empty() && static_cast<int>(ratios_[0].size()) == s_.window) {
    for (std::size_t r = 0; r < ratios_.size(); ++r) {
      double c = Median(ratios_[r]) / assumed_[r];
      if (r < before_.size() && before_[r] > 0 && c > 0 && (c > before_[r] * kDrift || c * kDrift < before_[r])) {
        c = before_[r];  // a change during the window, not the layers' mix
      }
      calibration_.push_back(c);
    }
  }
}

std::vector<double> SpeedMeter::Factors() const {
  if (calibration_.empty() || ratios_.empty() || static_cast<int>(ratios_[0].size()) < s_.window) return {};
  std::vector<double> out;
  for (std::size_t r = 0; r < ratios_.size(); ++r) {
    const double base = calibration_[r];
    // A rank with nothing priced (no compute) runs at any speed.
    out.push_back(base > 0 && priced_[r] > 0 ? Median(ratios_[r]) / base : 1.0);
  }
  return out;
}

std::vector<double> SpeedMeter::HealthySeconds() const {
  std::vector<double> out;
  for (std::size_t r = 0; r < calibration_.size() && r < priced_.size(); ++r) {
    out.push_back(calibration_[r] * priced_[r]);
  }
  return out;
}

LinkMeter::LinkMeter(const AdaptSettings& settings, int ranks)
    : s_(settings),
      window_(static_cast<std::size_t>(ranks) * static_cast<std::size_t>(ranks)),
      calibration_(window_.size(), -1.0),
      spread_(window_.size(), 0.0) {}

void LinkMeter::Observe(const std::vector<double>& transit) {
  if (skip_ > 0) {
    --skip_;
    return;
  }
  for (std::size_t l = 0; l < window_.size() && l < transit.size(); ++l) {
    if (transit[l] < 0) continue;
    std::vector<double>& w = window_[l];
    w.push_back(transit[l]);
    if (static_cast<int>(w.size()) > s_.link_window) w.erase(w.begin());
    if (calibration_[l] < 0 && static_cast<int>(w.size()) == s_.link_window) {
      const auto [low, high] = std::minmax_element(w.begin(), w.end());
      calibration_[l] = *low;
      spread_[l] = *high - *low;
    }
  }
}

std::vector<double> LinkMeter::Delays() const {
  std::vector<double> out(window_.size(), 0.0);
  bool any = false;
  for (std::size_t l = 0; l < window_.size(); ++l) {
    if (window_[l].empty()) continue;
    if (calibration_[l] < 0) return {};  // a link still filling its first window
    any = true;
    const double late = *std::min_element(window_[l].begin(), window_[l].end()) - calibration_[l];
    out[l] = late > 3.0 * spread_[l] ? late : 0.0;
  }
  return any ? out : std::vector<double>{};
}

std::vector<double> ShortestTransits(const std::vector<std::vector<Executor::MessageTime>>& per_rank) {
  const std::size_t ranks = per_rank.size();
  std::vector<double> out(ranks * ranks, -1.0);
  // Per link, each message's send time, by key; then its arrival.
  std::vector<std::map<std::int64_t, double>> sent(ranks * ranks);
  struct Arrival {
    std::size_t link;
    std::int64_t key;
    double seconds;
  };
  std::vector<Arrival> arrivals;
  for (std::size_t r = 0; r < ranks; ++r) {
    for (const Executor::MessageTime& m : per_rank[r]) {
      const auto peer = static_cast<std::size_t>(m.peer);
      if (m.peer < 0 || peer >= ranks) continue;
      if (m.sent) {
        sent[r * ranks + peer][m.key] = m.seconds;
      } else {
        arrivals.push_back({peer * ranks + r, m.key, m.seconds});
      }
    }
  }
  for (const Arrival& a : arrivals) {
    const auto it = sent[a.link].find(a.key);
    if (it == sent[a.link].end()) continue;
    const double t = a.seconds - it->second;
    if (out[a.link] < 0 || t < out[a.link]) out[a.link] = t;
  }
  return out;
}

AdaptivePlanner::AdaptivePlanner(Profile profile, const AdaptSettings& settings)
    : profile_(std::move(profile)), s_(settings), meter_(settings) {}

AdaptivePlanner::AdaptivePlanner(std::function<Profile()> measure, const AdaptSettings& settings)
    : measure_(std::move(measure)), s_(settings), meter_(settings) {}

std::vector<double> AdaptivePlanner::PricedCompute() const {
  // Without a price yet every rank's compute counts as 1, which the
  // window's calibration divides out (a factor is a rank's time against
  // its own first window).
  const auto d_count = running_plans_.size();
  const auto ranks = static_cast<std::size_t>(running_plans_.front().lowered.ranks);
  std::vector<double> priced(ranks * d_count, 1.0);
  if (!profile_) return priced;
  for (std::size_t d = 0; d < d_count; ++d) {
    const ProfilePrediction healthy = PredictFromProfile(running_plans_[d], *profile_);
    for (std::size_t p = 0; p < ranks && p < healthy.sim.per_rank.size(); ++p) {
      priced[p * d_count + d] = healthy.sim.per_rank[p].busy;
    }
  }
  return priced;
}

void AdaptivePlanner::Start(const RunPlan& plan) {
  if (!first_plan_) first_plan_ = plan;
  running_plans_ = {plan};
  std::vector<double> priced = PricedCompute();
  if (assumed_.empty()) assumed_.assign(priced.size(), 1.0);
  meter_.Expect(std::move(priced), assumed_);
  if (links_) links_->Settle();
}

std::vector<RunPlan> AdaptivePlanner::ReplicaPlans(const TrainConfig& running) const {
  std::vector<RunPlan> plans;
  for (int d = 0; d < replicas_; ++d) plans.push_back(PlanRun(ReplicaConfig(running, d)));
  return plans;
}

void AdaptivePlanner::StartReplicas(const TrainConfig& running, int replicas) {
  replicas_ = replicas;
  running_plans_ = ReplicaPlans(running);
  if (!first_plan_) first_plan_ = running_plans_.front();
  std::vector<double> priced = PricedCompute();
  if (assumed_.empty()) assumed_.assign(priced.size(), 1.0);
  meter_.Expect(std::move(priced), assumed_);
  if (links_) links_->Settle();
}

std::pair<std::vector<int>, double> AdaptivePlanner::BestSplit(const TrainConfig& running, std::vector<int> split,
                                                               const std::vector<double>& factors,
                                                               const std::vector<double>& links) {
  const int d_count = replicas_;
  int total = 0;
  for (const int m : split) total += m;
  std::map<std::pair<int, int>, double> memo;
  // Replica d's step with m microbatches (the others share the rest: only
  // the total and its own count shape its plan).
  auto time = [&](int d, int m) {
    const auto key = std::make_pair(d, m);
    if (const auto it = memo.find(key); it != memo.end()) return it->second;
    double t = std::numeric_limits<double>::infinity();
    if (m >= 1) {
      TrainConfig c = running;
      std::vector<int> share(static_cast<std::size_t>(d_count), 0);
      share[static_cast<std::size_t>(d)] = m;
      for (int e = 0, k = 0; e < d_count; ++e) {
        if (e == d) continue;
        share[static_cast<std::size_t>(e)] = (total - m) / (d_count - 1) + (k++ < (total - m) % (d_count - 1) ? 1 : 0);
      }
      c.pipeline.replica_microbatches = share;
      try {
        t = PredictFromProfile(PlanRun(ReplicaConfig(c, d)), *profile_,
                               Slowdown(ReplicaFactors(factors, d_count, d), links))
                .sim.makespan;
      } catch (const Error&) {
        // a count the schedule cannot take
      }
    }
    memo[key] = t;
    return t;
  };
  auto slowest = [&](const std::vector<int>& s) {
    double most = 0;
    for (int d = 0; d < d_count; ++d) most = std::max(most, time(d, s[static_cast<std::size_t>(d)]));
    return most;
  };
  double now = slowest(split);
  // One microbatch at a time from the replica that finishes last to the
  // one that would finish soonest with it, while the step shortens.
  for (int moves = 0; moves < total; ++moves) {
    int from = 0, to = 0;
    for (int d = 1; d < d_count; ++d) {
      const auto i = static_cast<std::size_t>(d);
      if (time(d, split[i]) > time(from, split[static_cast<std::size_t>(from)])) from = d;
      if (time(d, split[i] + 1) < time(to, split[static_cast<std::size_t>(to)] + 1)) to = d;
    }
    if (from == to || split[static_cast<std::size_t>(from)] <= 1) break;
    std::vector<int> next = split;
    --next[static_cast<std::size_t>(from)];
    ++next[static_cast<std::size_t>(to)];
    const double then = slowest(next);
    if (!(then < now * (1 - 1e-9))) break;
    split = std::move(next);
    now = then;
  }
  return {split, now};
}

const Profile& AdaptivePlanner::Price() {
  if (!profile_) {
    const double start = MonotonicSeconds();
    profile_ = measure_();
    profile_seconds_ = MonotonicSeconds() - start;
    // The running plan was priced at 1 a rank until now: its meter's
    // ratios and calibration in the profile's unit from here, as every
    // plan moved to is priced.
    meter_.Reprice(PricedCompute());
  }
  if (healthy_ < 0) healthy_ = PredictFromProfile(*first_plan_, *profile_).sim.makespan;
  // The first full window, healthy: the price's unit in this machine's
  // seconds of a step (ranks sharing cores included).
  if (unit_ < 0) unit_ = first_window_step_ / healthy_;
  return *profile_;
}

bool AdaptivePlanner::Triggered(const std::vector<double>& factors, const std::vector<double>& delays) {
  bool moved = false;
  const std::vector<double> healthy = meter_.HealthySeconds();
  if (first_healthy_.empty()) first_healthy_ = healthy;
  for (std::size_t r = 0; r < factors.size(); ++r) {
    // A change of speed is worth its compute a step on the rank's share
    // now, or on its share in the first plan if that was more: a rank that
    // recovers after a move left it little work is worth its layers back.
    const double share = std::max(r < healthy.size() ? healthy[r] : 0.0,
                                  r < first_healthy_.size() ? first_healthy_[r] : 0.0);
    const double worth = std::abs(factors[r] - assumed_[r]) * share;
    moved = moved || (std::abs(factors[r] / assumed_[r] - 1.0) > s_.trigger && worth > s_.min_seconds);
  }
  if (assumed_links_.empty()) assumed_links_.assign(delays.size(), 0.0);
  for (std::size_t l = 0; l < delays.size() && l < assumed_links_.size(); ++l) {
    moved = moved || std::abs(delays[l] - assumed_links_[l]) > std::max(s_.link_trigger * Median(steps_), s_.min_seconds);
  }
  return moved;
}

std::optional<AdaptivePlanner::Proposal> AdaptivePlanner::ProposeForReplicas(const TrainConfig& running,
                                                                               const RunPlan& plan,
                                                                               const Profile& profile,
                                                                               const std::vector<double>& factors,
                                                                               const std::vector<double>& links) {
  // adapt: full: each replica under its own ranks' factors; the plan's
  // placement and schedule under each pipeline rank's slowest replica
  // (every replica keeps the same plan), with the microbatches shared
  // evenly; or the running placement and schedule with the microbatches
  // re-split between the replicas; whichever is faster.
  Proposal p;
  Replan& r = p.replan;
  r.world_factors = factors;
  const std::vector<double> slowest = SlowestReplica(factors, replicas_);
  std::vector<int> split = running.pipeline.replica_microbatches;
  if (split.empty()) split.assign(static_cast<std::size_t>(replicas_), running.pipeline.microbatches);
  const std::vector<RunPlan> plans = ReplicaPlans(running);
  for (int d = 0; d < replicas_; ++d) {
    p.now = std::max(p.now, PredictFromProfile(plans[static_cast<std::size_t>(d)], profile,
                                               Slowdown(ReplicaFactors(factors, replicas_, d), links))
                                .sim.makespan);
  }
  TrainConfig even = running;
  even.pipeline.replica_microbatches.clear();
  const PlacementChoice best = ChoosePlan(even, profile, Slowdown(slowest, links), SwappableSchedules(running));
  r.schedule = best.schedule;
  r.chunks = best.chunks;
  r.bounds = best.bounds;
  p.after = best.step_s;
  const std::vector<int> evenly(static_cast<std::size_t>(replicas_), running.pipeline.microbatches);
  bool stays = best.bounds == plan.bounds && best.schedule == running.pipeline.schedule &&
               best.chunks == plan.lowered.chunks() && split == evenly;
  auto [resplit, step] = BestSplit(running, split, factors, links);
  if (step < p.after) {
    p.after = step;
    r.schedule = running.pipeline.schedule;
    r.chunks = plan.lowered.chunks();
    r.bounds = plan.bounds;
    stays = resplit == split;
    r.split = resplit == evenly ? std::vector<int>{} : resplit;
  }
  r.factors = slowest;
  if (stays) return std::nullopt;
  return p;
}

std::optional<AdaptivePlanner::Proposal> AdaptivePlanner::Propose(const TrainConfig& running, const RunPlan& plan,
                                                                    const Profile& profile,
                                                                    const std::vector<double>& factors,
                                                                    const std::vector<double>& links) {
  if (replicas_ > 1) return ProposeForReplicas(running, plan, profile, factors, links);
  const Slowdown slowdown(factors, links);
  Proposal p;
  p.now = PredictFromProfile(plan, profile, slowdown).sim.makespan;
  const PlacementChoice best = ChoosePlan(running, profile, slowdown, SwappableSchedules(running));
  if (best.bounds == plan.bounds && best.schedule == running.pipeline.schedule && best.chunks == plan.lowered.chunks()) {
    return std::nullopt;
  }
  p.replan.schedule = best.schedule;
  p.replan.chunks = best.chunks;
  p.replan.bounds = best.bounds;
  p.replan.factors = factors;
  p.after = best.step_s;
  return p;
}

bool AdaptivePlanner::WorthIt(const Proposal& p, std::int64_t done, std::int64_t total) const {
  const double gain = p.now - p.after;  // in the price's unit
  if (!(gain >= s_.min_gain * p.now)) return false;
  // A plan a rank could not build is not tried again: the running one
  // stands for these factors.
  const Replan& r = p.replan;
  for (const Replan& f : failed_) {
    if (f.schedule == r.schedule && f.chunks == r.chunks && f.bounds == r.bounds && f.split == r.split) return false;
  }
  // Ski rental with the real numbers: the time won over the steps left
  // against what moving costs.
  const double cost = move_seconds_ >= 0 ? move_seconds_ : 2.0 * Median(steps_);
  return gain * unit_ * static_cast<double>(total - done) > cost;
}

std::optional<Replan> AdaptivePlanner::Observe(const TrainConfig& running, const RunPlan& plan, std::int64_t done,
                                               std::int64_t total, const std::vector<double>& seconds,
                                               double step_seconds, const std::vector<double>& transits) {
  meter_.Observe(seconds);
  if (!transits.empty()) {
    if (!links_) links_.emplace(s_, plan.lowered.ranks);
    links_->Observe(transits);
  }
  steps_.push_back(step_seconds);
  if (static_cast<int>(steps_.size()) > s_.window) steps_.erase(steps_.begin());
  const std::vector<double> factors = meter_.Factors();
  if (factors.empty()) return std::nullopt;
  const std::vector<double> delays = links_ ? links_->Delays() : std::vector<double>{};
  if (first_window_step_ < 0) first_window_step_ = Median(steps_);
  if (done >= total) return std::nullopt;
  if (!Triggered(factors, delays)) return std::nullopt;
  // The factors moved: the running plan and the best one, priced under
  // them (the links' delays in the price's unit). Whatever is decided, the
  // plan stands for these factors now.
  const Profile& profile = Price();  // measured now if there was none
  const double start = MonotonicSeconds();
  assumed_ = factors;
  if (!delays.empty()) assumed_links_ = delays;
  std::vector<double> priced_links;
  for (double d : delays) priced_links.push_back(d / unit_);
  std::optional<Proposal> p = Propose(running, plan, profile, factors, priced_links);
  if (!p) return std::nullopt;
  p->replan.decide_seconds = MonotonicSeconds() - start;
  if (!WorthIt(*p, done, total)) return std::nullopt;
  Replan& r = p->replan;
  r.link_delays = delays;
  r.step_before = p->now * unit_;
  r.step_after = p->after * unit_;
  r.step_healthy = healthy_ * unit_;
  return r;
}

void AdaptivePlanner::Failed(const Replan& r) { failed_.push_back(r); }

namespace {

// "1f1b layout E,t*2|t*2,L": a plan as the lines about it name it.
std::string PlanText(const TrainConfig& config, const RunPlan& plan) {
  const int chunks = plan.lowered.chunks();
  return fmt::format("{}{} layout {}", config.pipeline.schedule, chunks > 1 ? fmt::format(" ({} chunks)", chunks) : "",
                     LayoutText(config, plan.model, plan.bounds));
}

std::string Factors(const std::vector<double>& f) {
  std::vector<std::string> parts;
  for (double v : f) parts.push_back(fmt::format("{:.2f}", v));
  return fmt::format("[{}]", fmt::join(parts, ", "));
}

// The links measured late by at least 0.1 ms: "; link 0>1 +10.1 ms" for
// the line, {"0>1": 0.0101} for the row.
constexpr double kLateLink = 1e-4;
std::string LateLinksText(const std::vector<double>& delays, int ranks) {
  std::string out;
  for (std::size_t l = 0; l < delays.size(); ++l) {
    if (delays[l] >= kLateLink) out += fmt::format("; link {}>{} +{:.1f} ms", l / ranks, l % ranks, delays[l] * 1e3);
  }
  return out;
}
std::string LateLinksJson(const std::vector<double>& delays, int ranks) {
  std::vector<std::string> parts;
  for (std::size_t l = 0; l < delays.size(); ++l) {
    if (delays[l] >= kLateLink) parts.push_back(fmt::format("\"{}>{}\": {:.6g}", l / ranks, l % ranks, delays[l]));
  }
  return fmt::format("{{{}}}", fmt::join(parts, ", "));
}

}  // namespace

RunAdapter::RunAdapter(const TrainConfig& config, const RunComms& comms, RunSetup& u, const AdaptSettings& settings)
    : comms_(comms), u_(u) {
  Transport& t = comms.world;
  Agree(t, "rank 0 reading the profile the adaptive plans price from", [&] {
    if (t.rank() != 0) return;
    // Asked for (or given a profile): the profile now, so that a re-plan
    // takes milliseconds. On by default: measured at the first slowdown,
    // on this rank alone (the others wait for its decision), so that a
    // healthy run never pays for it.
    if (!config.pipeline.profile.empty() || config.pipeline.adapt_asked) {
      std::string source;
      planner_.emplace(RunProfile(config, &source), settings);
      if (config.pipeline.adapt_asked) {
        std::fprintf(stderr, "baton: adaptive plans on: each rank's speed measured against %s\n", source.c_str());
      }
    } else {
      planner_.emplace([config] {
        std::string source;
        return RunProfile(config, &source);
      }, settings);
    }
    StartPlanner(config);
  });
  u.exec->MeasureCompute(true);
}

void RunAdapter::StartPlanner(const TrainConfig& config) {
  if (config.pipeline.adapt == AdaptMode::kFull && comms_.replicas.size() > 1) {
    planner_->StartReplicas(config, comms_.replicas.size());
  } else {
    planner_->Start(u_.plan);
  }
}

namespace {

// Each replica's microbatches under `config`.
std::vector<int> SplitOf(const TrainConfig& config) {
  std::vector<int> split = config.pipeline.replica_microbatches;
  if (split.empty()) split.assign(static_cast<std::size_t>(config.data_parallel.size), config.pipeline.microbatches);
  return split;
}

// "5/3": each replica's microbatches under `config`.
std::string SplitText(const TrainConfig& config) { return fmt::format("{}", fmt::join(SplitOf(config), "/")); }

}  // namespace

RunAdapter::Decision RunAdapter::Decide(const TrainConfig& config, std::int64_t done, std::int64_t total,
                                        double step_seconds, bool tty, double work, const StepMeasures& measured) {
  // With replicas every pipeline has the same plan: a pipeline rank's time
  // is its slowest replica's (the gradients' sum waits for it), a link's
  // its slowest pipeline's. World rank 0 (rank 0 of the first replica)
  // decides for all. Per unit of the step's work: packed documents' steps
  // differ in it (MeasureStep's seconds are).
  Transport& t = comms_.world;
  const int replicas = comms_.replicas.size();
  step_seconds /= work > 0 ? work : 1.0;
  Decision d;
  if (t.rank() == 0 && deciding_) {
    const double profiled = planner_->profile_seconds();
    // adapt: full measures every world rank on its own.
    const bool full = config.pipeline.adapt == AdaptMode::kFull && replicas > 1;
    try {
      // (full measures the whole: StepWatch gathers it.)
      d.replan = planner_->Observe(config, u_.plan, done, total, full ? measured.seconds : measured.slowest,
                                   step_seconds, measured.transits);
    } catch (const Error& e) {
      deciding_ = false;  // the run goes on as planned
      std::fprintf(stderr, "baton: warning: adaptive plans stop after step %lld: %s\n", static_cast<long long>(done),
                   e.what());
    }
    if (profiled == 0 && planner_->profile_seconds() > 0) {
      std::fprintf(stderr, "%sbaton: adaptive plans: a rank's speed moved after step %lld; measured a profile to "
                   "price the plans in %.2f s\n", tty ? "\n" : "", static_cast<long long>(done),
                   planner_->profile_seconds());
    }
    if (d.replan) d.text = DecisionJson({d.replan->schedule, d.replan->chunks, d.replan->bounds, d.replan->split});
  }
  t.BroadcastString(&d.text, "rank 0's decision on the plan");
  return d;
}

void RunAdapter::AfterStep(TrainConfig& config, std::int64_t done, std::int64_t total, double step_seconds,
                           bool tty, double work, const StepMeasures& measured) {
  const Decision decided = Decide(config, done, total, step_seconds, tty, work, measured);
  if (decided.text.empty()) return;
  Transport& t = comms_.world;
  const ReplanDecision decision = ParseDecision(decided.text);
  TrainConfig next = config;
  next.pipeline.schedule = decision.schedule;
  next.pipeline.chunks = decision.chunks;
  next.pipeline.replica_microbatches = decision.split;
  const Before before{PlanText(config, u_.plan), config.pipeline.schedule,
                      LayoutText(config, u_.plan.model, u_.plan.bounds), SplitOf(config)};
  next = WithPlacement(next, u_.plan.model, decision.bounds);
  // The move's plan as PlanText names it (without planning it here: a plan
  // is built only inside the swap, where every rank agrees on its errors).
  const std::string target =
      fmt::format("{}{} layout {}{}", next.pipeline.schedule,
                  next.pipeline.chunks > 1 ? fmt::format(" ({} chunks)", next.pipeline.chunks) : "",
                  LayoutText(next, u_.plan.model, decision.bounds),
                  next.pipeline.replica_microbatches.empty()
                      ? ""
                      : fmt::format(", microbatches a replica {}", SplitText(next)));
  const PlanSwap swap = SwapPlan(config, next, comms_, u_, done);
  u_.exec->MeasureCompute(true);  // a new executor either way
  std::string row;  // rank 0's, written by every rank's agreement: a failed write ends them alike
  if (!swap.failed.empty()) {
    // Every rank went back to the running plan, its state as it was.
    if (swap.failed_here) {
      std::fprintf(stderr,
                   "%sbaton: rank %d: warning: the move after step %lld to %s failed: %s; every rank went back "
                   "to %s and the run goes on (that plan is not tried again)\n",
                   tty ? "\n" : "", u_.world_rank, static_cast<long long>(done), target.c_str(), swap.failed.c_str(),
                   before.plan.c_str());
    }
    if (t.rank() == 0) {
      planner_->Failed(*decided.replan);
      StartPlanner(config);
      row = fmt::format("{{\"event\": \"replan_failed\", \"step\": {}, \"layout\": \"{}\", \"to\": \"{}\", "
                        "\"seconds\": {:.6g}}}",
                        done, before.plan, target, swap.seconds);
    }
    WriteRow(t, u_.metrics.get(), row);
    return;
  }
  config = std::move(next);
  ++replans_;
  double moved[1] = {static_cast<double>(swap.bytes_sent)};
  t.ReduceSum(moved);
  if (t.rank() == 0) row = Replanned(config, *decided.replan, done, tty, swap.seconds, moved[0], before);
  WriteRow(t, u_.metrics.get(), row);
}

std::string RunAdapter::Replanned(const TrainConfig& config, const Replan& replan, std::int64_t done, bool tty,
                                  double move_seconds, double moved_bytes, const Before& before) {
  const int ranks = comms_.pipeline.size();
  planner_->Moved(move_seconds);
  StartPlanner(config);
  const std::string after = PlanText(config, u_.plan);
  const bool full = config.pipeline.adapt == AdaptMode::kFull && comms_.replicas.size() > 1;
  const std::vector<int> split_after = SplitOf(config);
  const std::string resplit =
      full ? fmt::format("; microbatches a replica {} -> {}", fmt::join(before.split, "/"), fmt::join(split_after, "/"))
           : "";
  std::fprintf(stderr,
               "%sbaton: re-planned after step %lld: rank speeds %s%s; %s -> %s%s; predicted step %.2f ms -> %.2f "
               "ms; moved %.1f KiB in %.1f ms (decided in %.1f ms)\n",
               tty ? "\n" : "", static_cast<long long>(done),
               (full ? Factors(replan.world_factors) + " (each replica's rank)" : Factors(replan.factors)).c_str(),
               LateLinksText(replan.link_delays, ranks).c_str(), before.plan.c_str(), after.c_str(), resplit.c_str(),
               replan.step_before * 1e3, replan.step_after * 1e3, moved_bytes / 1024.0, move_seconds * 1e3,
               replan.decide_seconds * 1e3);
  return fmt::format(
      "{{\"event\": \"replan\", \"step\": {}, \"factors\": {}, \"link_delays_s\": {}, "
      "\"schedule_before\": \"{}\", \"schedule\": \"{}\", \"chunks\": {}, \"layout_before\": \"{}\", "
      "\"layout_after\": \"{}\", \"predicted_step_before_s\": {:.6g}, \"predicted_step_after_s\": {:.6g}, "
      "\"predicted_step_healthy_s\": {:.6g}, \"bytes_moved\": {:.0f}, \"move_seconds\": {:.6g}, "
      "\"decide_seconds\": {:.6g}{}}}",
      done, Factors(replan.factors), LateLinksJson(replan.link_delays, ranks), before.schedule,
      config.pipeline.schedule, u_.plan.lowered.chunks(), before.layout, LayoutText(config, u_.plan.model, u_.plan.bounds),
      replan.step_before, replan.step_after, replan.step_healthy, moved_bytes, move_seconds, replan.decide_seconds,
      full ? fmt::format(", \"world_factors\": {}, \"microbatches_before\": [{}], \"microbatches\": [{}]",
                         Factors(replan.world_factors), fmt::join(before.split, ", "), fmt::join(split_after, ", "))
           : std::string());
}

}  // namespace baton
