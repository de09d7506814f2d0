// Which rank or link made a step late (blame.h).
#include "blame.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "adapt.h"
#include "baton/action.h"
#include "baton/error.h"
#include "baton/sim.h"
#include "metrics_row.h"
#include "wire.h"

namespace baton {

namespace {

StepMeasures ReducedMeasures(const RunComms& comms, const RankMessageTimes& mine) {
  Transport& p = comms.pipeline;
  std::vector<std::string> texts;
  p.GatherStrings(MessageTimesJson(mine), &texts, "every pipeline rank's measures of the step");
  StepMeasures m;
  m.whole = false;
  if (p.rank() != 0) return m;
  const auto ranks = static_cast<std::size_t>(p.size());
  std::vector<std::vector<Executor::MessageTime>> times(ranks);
  std::vector<double> both(ranks + ranks * ranks, 0.0);  // compute per rank, then each link's time
  for (const std::string& text : texts) {
    RankMessageTimes r = ParseMessageTimes(text);
    if (r.rank < 0 || r.rank >= static_cast<int>(ranks)) continue;
    both[static_cast<std::size_t>(r.rank)] = r.compute_s;
    times[static_cast<std::size_t>(r.rank)] = std::move(r.times);
  }
  const std::vector<double> transits = ShortestTransits(times);
  std::copy(transits.begin(), transits.end(), both.begin() + static_cast<std::ptrdiff_t>(ranks));
  comms.replicas.AllMax(both, "the slowest replica's measures of the step");
  if (comms.world.rank() != 0) return m;
  m.slowest.assign(both.begin(), both.begin() + static_cast<std::ptrdiff_t>(ranks));
  m.transits.assign(both.begin() + static_cast<std::ptrdiff_t>(ranks), both.end());
  return m;
}

}  // namespace

StepMeasures MeasureStep(const RunComms& comms, Executor& exec, double work, bool whole) {
  return GatherMeasures(comms,
                        {comms.pipeline.rank(), comms.replicas.rank(), exec.TakeMessageTimes(),
                         exec.TakeComputeSeconds() / (work > 0 ? work : 1.0)},
                        whole);
}

StepMeasures GatherMeasures(const RunComms& comms, const RankMessageTimes& mine, bool whole) {
  Transport& t = comms.world;
  const int ranks = comms.pipeline.size(), replicas = comms.replicas.size();
  if (!whole) return ReducedMeasures(comms, mine);
  std::vector<std::string> texts;
  t.GatherStrings(MessageTimesJson(mine), &texts, "every rank's measures of the step");
  StepMeasures m;
  if (t.rank() != 0) return m;
  const ReplicaLayout layout{ranks, replicas};
  m.seconds.assign(static_cast<std::size_t>(ranks * replicas), 0.0);
  for (const std::string& text : texts) {
    RankMessageTimes r = ParseMessageTimes(text);
    if (r.rank < 0 || r.rank >= ranks || r.replica < 0 || r.replica >= replicas) continue;
    m.seconds[static_cast<std::size_t>(layout.World(r.rank, r.replica))] = r.compute_s;
    m.ranks.push_back(std::move(r));
  }
  // What the reduced measure gives, from the whole.
  m.slowest = SlowestReplica(m.seconds, replicas);
  m.transits = SlowestTransits(m.ranks, ranks, replicas);
  return m;
}

std::vector<std::vector<std::vector<Executor::MessageTime>>> PipelineTimes(
    const std::vector<RankMessageTimes>& measured, int ranks, int replicas) {
  std::vector<std::vector<std::vector<Executor::MessageTime>>> pipelines(
      static_cast<std::size_t>(replicas), std::vector<std::vector<Executor::MessageTime>>(static_cast<std::size_t>(ranks)));
  for (const RankMessageTimes& t : measured) {
    if (t.rank < 0 || t.rank >= ranks || t.replica < 0 || t.replica >= replicas) continue;
    pipelines[static_cast<std::size_t>(t.replica)][static_cast<std::size_t>(t.rank)] = t.times;
  }
  return pipelines;
}

std::vector<double> WorldTransits(const std::vector<RankMessageTimes>& measured, int ranks, int replicas) {
  const ReplicaLayout layout{ranks, replicas};
  const auto world = static_cast<std::size_t>(ranks * replicas);
  const auto pipelines = PipelineTimes(measured, ranks, replicas);
  std::vector<double> out(world * world, -1.0);
  for (int d = 0; d < replicas; ++d) {
    const std::vector<double> one = ShortestTransits(pipelines[static_cast<std::size_t>(d)]);
    for (int a = 0; a < ranks; ++a) {
      for (int b = 0; b < ranks; ++b) {
        const auto from = static_cast<std::size_t>(layout.World(a, d)), to = static_cast<std::size_t>(layout.World(b, d));
        out[from * world + to] = one[static_cast<std::size_t>(a * ranks + b)];
      }
    }
  }
  return out;
}

// Per pipeline rank, the largest of its replicas' (`per_rank`: every
// world rank's, in ReplicaLayout's order).
std::vector<double> SlowestReplica(const std::vector<double>& per_rank, int replicas) {
  const ReplicaLayout layout{static_cast<int>(per_rank.size()) / replicas, replicas};
  std::vector<double> out(static_cast<std::size_t>(layout.pipeline_ranks), 0.0);
  for (int w = 0; w < static_cast<int>(per_rank.size()); ++w) {
    double& o = out[static_cast<std::size_t>(layout.PipelineRank(w))];
    o = std::max(o, per_rank[static_cast<std::size_t>(w)]);
  }
  return out;
}

// Every world rank's message times (MeasureStep), each link's shortest
// time a step in each replica's pipeline, and per link the largest of those
// over the replicas (a late wire in one pipeline holds every replica at
// the gradients' sum).
std::vector<double> SlowestTransits(const std::vector<RankMessageTimes>& per_world_rank, int ranks, int replicas) {
  std::vector<double> out;
  for (const auto& pipeline : PipelineTimes(per_world_rank, ranks, replicas)) {
    const std::vector<double> one = ShortestTransits(pipeline);
    if (out.empty()) out.assign(one.size(), -1.0);
    for (std::size_t l = 0; l < one.size(); ++l) out[l] = std::max(out[l], one[l]);
  }
  return out;
}

std::string LateJson(const Late& late) {
  std::string who;
  if (late.what == "rank") who = fmt::format(", \"rank\": {}", late.rank);
  if (late.what == "link") who = fmt::format(", \"from\": {}, \"to\": {}", late.from, late.to);
  return fmt::format("{{\"what\": \"{}\"{}, \"by_s\": {}}}", late.what, who, Json(late.by_s, "{:.6g}"));
}

std::string LateText(const Late& late) {
  if (late.what == "rank") return fmt::format("rank {}", late.rank);
  if (late.what == "link") return fmt::format("link {}>{}", late.from, late.to);
  return "the data";
}

namespace {

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

// A compute action's share of its rank's step (StepModel): F, I and W one
// unit, B two, an overlapped F&B three.
double Units(const Action& a) {
  switch (a.kind) {
    case ActionKind::kForward:
    case ActionKind::kBackwardInput:
    case ActionKind::kBackwardWeight:
      return 1;
    case ActionKind::kBackward:
      return 2;
    case ActionKind::kOverlapFB:
      return 3;
    default:
      return 0;
  }
}

// A measured time as the simulator takes it: finite, not below 0.
double Time(double seconds) { return std::isfinite(seconds) && seconds > 0 ? seconds : 0.0; }

}  // namespace

StepModel::StepModel(Schedule lowered)
    : lowered_(std::move(lowered)), units_(static_cast<std::size_t>(lowered_.ranks), 0.0) {
  for (std::size_t r = 0; r < units_.size(); ++r) {
    for (const Action& a : lowered_.actions[r]) units_[r] += Units(a);
  }
}

double StepModel::Step(const std::vector<double>& seconds, const std::vector<double>& transits) const {
  const auto n = static_cast<std::size_t>(lowered_.ranks);
  SimOptions o;
  o.record_timeline = false;
  o.compute.stages.resize(static_cast<std::size_t>(lowered_.stages));
  for (std::size_t s = 0; s < o.compute.stages.size(); ++s) {
    const auto r = static_cast<std::size_t>(lowered_.stage_rank[s]);
    const double unit = units_[r] > 0 ? Time(seconds[r]) / units_[r] : 0.0;
    o.compute.stages[s] = Costs{unit, unit, unit};
  }
  o.messages.link_delay.assign(n * n, 0.0);
  for (std::size_t l = 0; l < std::min(transits.size(), n * n); ++l) o.messages.link_delay[l] = Time(transits[l]);
  return Simulate(lowered_, o).makespan;
}

StepBlame::StepBlame(int ranks, int actions, const BlameSettings& settings)
    : s_(settings), ranks_(ranks), actions_(std::max(1, actions)) {
  Restart();
}

void StepBlame::SetModel(StepModel model, int replicas) {
  if (replicas < 1 || model.ranks() * replicas != ranks_) {
    throw Error(fmt::format("log.blame: a model of {} pipeline ranks x {} replicas for {} ranks", model.ranks(),
                            replicas, ranks_));
  }
  model_.emplace(std::move(model));
  replicas_ = replicas;
}

double StepBlame::ModelStep(const std::vector<double>& seconds, const std::vector<double>& transits, double work,
                            int replica, int healthy_rank, int healthy_link) const {
  const int P = model_->ranks();
  const ReplicaLayout layout{P, replicas_};
  const auto world = static_cast<std::size_t>(ranks_);
  std::vector<double> s(static_cast<std::size_t>(P)), t(static_cast<std::size_t>(P) * static_cast<std::size_t>(P), -1.0);
  for (int p = 0; p < P; ++p) {
    const int w = layout.World(p, replica);
    s[static_cast<std::size_t>(p)] = (w == healthy_rank ? rank_healthy_ : seconds)[static_cast<std::size_t>(w)] * work;
    for (int q = 0; q < P; ++q) {
      const std::size_t l = static_cast<std::size_t>(w) * world + static_cast<std::size_t>(layout.World(q, replica));
      if (l >= transits.size()) continue;
      t[static_cast<std::size_t>(p * P + q)] =
          static_cast<int>(l) == healthy_link && link_healthy_[l] >= 0 ? link_healthy_[l] : transits[l];
    }
  }
  return model_->Step(s, t);
}

double StepBlame::RankCost(const std::vector<double>& seconds, const std::vector<double>& transits, double work,
                           int rank) const {
  const auto r = static_cast<std::size_t>(rank);
  if (!model_) return (seconds[r] - rank_healthy_[r]) * work;
  const int replica = ReplicaLayout{model_->ranks(), replicas_}.Replica(rank);
  return ModelStep(seconds, transits, work, replica, -1, -1) - ModelStep(seconds, transits, work, replica, rank, -1);
}

double StepBlame::Lateness(const std::vector<double>& seconds, const std::vector<double>& transits, double work,
                           int rank, double by_s) const {
  if (!model_) return by_s;
  const int replica = ReplicaLayout{model_->ranks(), replicas_}.Replica(rank);
  const double modeled = ModelStep(seconds, transits, work, replica, -1, -1) -
                         ModelStep(rank_healthy_, link_healthy_, work, replica, -1, -1);
  return std::min(by_s, modeled);
}

double StepBlame::LinkCost(const std::vector<double>& seconds, const std::vector<double>& transits, double work,
                           int from, int to) const {
  const int link = from * ranks_ + to;
  if (!model_) return transits[static_cast<std::size_t>(link)] - link_healthy_[static_cast<std::size_t>(link)];
  const int replica = ReplicaLayout{model_->ranks(), replicas_}.Replica(from);
  return ModelStep(seconds, transits, work, replica, -1, -1) - ModelStep(seconds, transits, work, replica, -1, link);
}

void StepBlame::Restart() {
  skip_ = s_.settle;
  calibrated_ = false;
  const auto n = static_cast<std::size_t>(ranks_);
  rank_samples_.assign(n, {});
  link_samples_.assign(n * n, {});
  step_samples_.clear();
  work_samples_.clear();
}

void StepBlame::Calibrate() {
  const auto n = static_cast<std::size_t>(ranks_);
  rank_healthy_.assign(n, 0.0);
  for (std::size_t r = 0; r < n; ++r) rank_healthy_[r] = Median(rank_samples_[r]);
  link_healthy_.assign(n * n, -1.0);
  link_spread_.assign(n * n, 0.0);
  for (std::size_t l = 0; l < n * n; ++l) {
    const std::vector<double>& v = link_samples_[l];
    if (v.empty()) continue;
    const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
    link_healthy_[l] = *lo;
    link_spread_[l] = *hi - *lo;
  }
  step_healthy_ = Median(step_samples_);
  typical_work_ = Median(work_samples_);
  calibrated_ = true;
}

std::optional<Late> StepBlame::Observe(const std::vector<double>& seconds, double step_seconds,
                                       const std::vector<double>& transits, double work) {
  if (skip_ > 0) {
    --skip_;
    return std::nullopt;
  }
  const auto n = static_cast<std::size_t>(ranks_);
  if (seconds.size() != n) return std::nullopt;
  const double unit = work > 0 ? work : 1.0;
  if (!calibrated_) {
    for (std::size_t r = 0; r < n; ++r) rank_samples_[r].push_back(seconds[r]);
    for (std::size_t l = 0; l < std::min(transits.size(), n * n); ++l) {
      if (transits[l] >= 0) link_samples_[l].push_back(transits[l]);
    }
    step_samples_.push_back(step_seconds / unit);
    work_samples_.push_back(unit);
    if (static_cast<int>(step_samples_.size()) >= s_.window) Calibrate();
    return std::nullopt;
  }
  // Against the step's price under the healthy costs.
  const double expected = step_healthy_ * unit, by_s = step_seconds - expected;
  if (by_s > std::max(s_.threshold * expected, s_.min_seconds)) {
    if (std::optional<Late> late = Suspect(seconds, transits, unit, by_s)) return late;
  }
  // Within its price, or with no rank or link to blame: a step that costs
  // more than the run's typical step, and is late against it, is the data's.
  const double typical = step_healthy_ * typical_work_, over = step_seconds - typical;
  if (unit > typical_work_ * (1 + s_.threshold) && over > std::max(s_.threshold * typical, s_.min_seconds)) {
    Late late;
    late.what = "data";
    late.by_s = over;
    return late;
  }
  return std::nullopt;
}

std::optional<Late> StepBlame::Suspect(const std::vector<double>& seconds, const std::vector<double>& transits,
                                       double work, double by_s) const {
  const auto n = static_cast<std::size_t>(ranks_);
  // Each suspect's excess against its own bar; the largest is named, a
  // rank before any link: a rank's compute is its own CPU time, which a
  // late wire does not lengthen, while a busy rank (on a core it shares)
  // takes longer to see its messages arrive, which lengthens its links'
  // times.
  double best = 1.0, mean_action = 0;
  Late late;
  late.by_s = by_s;
  for (std::size_t r = 0; r < n; ++r) {
    const double healthy = rank_healthy_[r], excess = (seconds[r] - healthy) * work;
    mean_action += healthy * work / static_cast<double>(n * static_cast<std::size_t>(actions_));
    // Past its trigger, and the rank's extra compute cost the step (on its
    // critical path) at least rank_share of its lateness (a few percent of
    // CPU time that a busy machine's neighbour adds does not make a step
    // late by a wire's delay, nor does extra compute that waits hid).
    if (healthy <= 0 || excess <= std::max(s_.rank_trigger * healthy * work, s_.min_seconds)) continue;
    const int rank = static_cast<int>(r);
    const double bar = std::max({s_.min_seconds, s_.rank_share * Lateness(seconds, transits, work, rank, by_s),
                                 s_.rank_floor * by_s});
    const double cost = RankCost(seconds, transits, work, rank);
    if (cost > bar && cost / bar > best) {
      best = cost / bar;
      late.what = "rank";
      late.rank = static_cast<int>(r);
    }
  }
  if (!late.what.empty()) return late;
  for (std::size_t l = 0; l < std::min(transits.size(), n * n); ++l) {
    if (link_healthy_[l] < 0 || transits[l] < 0) continue;
    const double excess = transits[l] - link_healthy_[l];
    const double bar = std::max({3 * link_spread_[l], s_.link_trigger * mean_action, s_.min_seconds});
    if (excess <= bar) continue;
    // And on the critical path: its extra time cost the step at least
    // link_share of its lateness (without a model, a message's delay
    // counts once however often the path crosses the link: no such bar).
    const int from = static_cast<int>(l / n), to = static_cast<int>(l % n);
    if (model_ && LinkCost(seconds, transits, work, from, to) <
                      std::max(s_.min_seconds, s_.link_share * Lateness(seconds, transits, work, from, by_s))) {
      continue;
    }
    if (excess / bar > best) {
      best = excess / bar;
      late.what = "link";
      late.rank = -1;
      late.from = from;
      late.to = to;
    }
  }
  if (late.what.empty()) return std::nullopt;
  return late;
}

namespace {

// Compute actions a rank runs a step (the most of any rank).
int ComputeActions(const Schedule& lowered) {
  std::size_t most = 1;
  for (const std::vector<Action>& row : lowered.actions) {
    const auto n = static_cast<std::size_t>(
        std::count_if(row.begin(), row.end(), [](const Action& a) { return IsCompute(a.kind); }));
    most = std::max(most, n);
  }
  return static_cast<int>(most);
}

}  // namespace

RunBlame::RunBlame(const TrainConfig& c, const RunComms& comms, RunSetup& u, const BlameSettings& settings)
    : comms_(comms), u_(u), every_(c.log.every_steps) {
  if (comms.world.rank() == 0) {
    BlameSettings s = settings;
    s.threshold = c.log.blame_threshold;
    judge_.emplace(comms.world.size(), ComputeActions(u.plan.lowered), s);
    judge_->SetModel(StepModel(u.plan.lowered), comms.replicas.size());
  }
  u.exec->MeasureCompute(true);
}

// A plan change: its schedule and placement are the critical path's from here.
void RunBlame::Restart() {
  if (!judge_) return;
  judge_->Restart();
  judge_->SetModel(StepModel(u_.plan.lowered), comms_.replicas.size());
}

std::optional<Late> RunBlame::AfterStep(const StepMeasures& measures, std::int64_t step, double step_seconds,
                                        double work, bool tty) {
  std::optional<Late> late;
  if (!judge_) return late;
  const int ranks = comms_.pipeline.size(), replicas = comms_.replicas.size();
  late = judge_->Observe(measures.seconds, step_seconds, WorldTransits(measures.ranks, ranks, replicas), work);
  ++window_steps_;
  if (late) {
    ++late_steps_;
    ++window_late_;
    window_by_s_ += late->by_s;
    const std::string who = LateText(*late);
    if (std::find(window_culprits_.begin(), window_culprits_.end(), who) == window_culprits_.end()) {
      window_culprits_.push_back(who);
    }
    if (u_.metrics) u_.metrics->Hold(Row({{"event", "\"late\""}, {"step", std::to_string(step)}, {"late", LateJson(*late)}}));
  }
  if (every_ > 0 && step % every_ == 0 && window_late_ > 0) {
    std::fprintf(stderr, "%sbaton: late: %d of the last %d steps, by %.3g s on average, made late by %s\n",
                 tty ? "\n" : "", window_late_, window_steps_, window_by_s_ / window_late_,
                 fmt::format("{}", fmt::join(window_culprits_, ", ")).c_str());
  }
  if (every_ > 0 && step % every_ == 0) {
    window_late_ = window_steps_ = 0;
    window_by_s_ = 0;
    window_culprits_.clear();
  }
  return late;
}

void RunBlame::WriteRows() {
  Agree(comms_.world, "rank 0 writing the metrics file", [&] {
    if (comms_.world.rank() == 0 && u_.metrics) u_.metrics->WriteHeld();
  });
}

}  // namespace baton
