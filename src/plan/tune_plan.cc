// `baton tune` and the automatic placement: the tuner core (baton/tune.h)
// fed each candidate's costs from a profile through PriceStage, and its
// memory through the plan: every candidate's stages are planned by
// PlanShape and PlanStageAlone, and its ranks' static bytes summed by
// StaticBytesCache, as PlanMemory sums them for a run.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>

#include "baton/error.h"
#include "baton/files.h"
#include "baton/plan.h"
#include "baton/tune.h"

namespace baton {
namespace {

std::string Mib(double bytes) { return fmt::format("{:.1f} MiB", bytes / (1024.0 * 1024.0)); }

// A stage's costs with every action `scale` times as long.
Costs Scaled(Costs c, double scale) {
  c.forward *= scale;
  c.backward_input *= scale;
  c.backward_weight *= scale;
  if (c.forward_backward) *c.forward_backward *= scale;
  return c;
}

// The config's list, or selective's default (train_config.cc): the outputs
// of the layers with matrix products.
std::vector<LayerType> SelectiveKeep(const TrainConfig& config) {
  return !config.pipeline.keep.empty() ? config.pipeline.keep
                                       : std::vector<LayerType>{LayerType::kLinear, LayerType::kAttention};
}

// The profile's message cost: measured, or 20 us and no bandwidth limit.
double Latency(const Profile& profile) { return profile.latency_s > 0 ? profile.latency_s : 20e-6; }

// The largest message between two stages of a placement: the activation
// (f32) entering each stage but the first, for `rows` samples.
double LargestMessageBytes(const ModelDesc& model, const std::vector<int>& bounds, int rows) {
  double bytes = 0;
  for (std::size_t s = 1; s + 1 < bounds.size(); ++s) {
    const int a = model.top_begin[static_cast<std::size_t>(bounds[s])];
    bytes = std::max(bytes, double(rows) * model.seq * model.width[static_cast<std::size_t>(a)] * sizeof(float));
  }
  return bytes;
}

// A GPT stage of top-level layers [first, last) as a layout's parts.
LayoutStage GptParts(const ModelDesc& model, int first, int last) {
  const int n = model.top_layers();
  LayoutStage st;
  st.embedding = first == 0;
  st.loss = last == n;
  st.blocks = (std::min(last, n - kGptLossLayers) - std::max(first, kGptEmbeddingLayers)) / kGptBlockLayers;
  return st;
}

// Prices the candidates of one config from one profile, remembering each
// shape (microbatches, policy, stage count) and each stage's price.
class ProfilePricer {
 public:
  ProfilePricer(const TrainConfig& config, const Profile& profile)
      : config_(config), profile_(profile), model_(DescribeModel(config.model.layers, config.model.input, config.model.seq)) {
    ShareCores(config.pipeline.ranks, config.data_parallel.size, profile.identity.cores, &core_pool_, &pool_cores_);
    cost_scale_ = SharedCoreCost(profile, config.pipeline.ranks, config.data_parallel.size);
  }

  const ModelDesc& model() const { return model_; }

  CandidateCosts operator()(const Candidate& c) {
    CandidateCosts out;
    const int p = config_.pipeline.ranks, batch = config_.train.batch_size / config_.data_parallel.size;
    if (batch % c.microbatches != 0) {
      out.invalid = fmt::format("{} microbatches do not divide the batch of {}", c.microbatches, batch);
      return out;
    }
    Shape* shape = ShapeOf(c, p * c.chunks, &out.invalid);
    if (shape == nullptr) return out;
    if (!c.bounds.empty()) shape->plan.bounds = c.bounds;
    const GeneratorTraits traits = TraitsOf(c.schedule);
    for (int s = 0; s < shape->plan.stages(); ++s) {
      const StagePrice& price = shape->Price(s, traits.split_backward);
      out.stage_costs.push_back(Scaled(price.costs, cost_scale_));
      out.activation_bytes.push_back(price.slot_bytes);
      if (c.slices > 1) {
        // A slice holds a slice's slot; its sequence a key/value slot.
        out.slot_bytes.push_back(price.slot_bytes);
        out.sequence_bytes.push_back(price.sequence_bytes);
      }
    }
    out.static_bytes = shape->statics(shape->plan, traits.placement, p, traits.split_backward);
    if (c.slices > 1) {
      // A slice costs its share of the microbatch's profiled work and sends its tokens.
      out.slice_cost = shape->plan.slice_cost;
      out.slice_memory = shape->plan.slice_token_share;
    }
    out.weight_memory_ratio = 1.0;  // a ring slot is held until its W
    out.ring_memory = true;         // each stage's ring as deep as its peak, allocated at setup
    out.latency = Latency(profile_);
    out.bandwidth = profile_.bandwidth_Bps;
    out.message_bytes = LargestMessageBytes(model_, shape->plan.bounds, shape->plan.rows);
    out.core_pool = core_pool_;
    out.pool_cores = pool_cores_;
    out.waiting_share = profile_.waiting_share;
    return out;
  }

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

  Shape* ShapeOf(const Candidate& c, int stages, std::string* invalid) {
    const auto key = std::make_tuple(c.microbatches, static_cast<int>(c.checkpointing), stages, c.slices,
                                     static_cast<int>(c.seq_split));
    auto it = shapes_.find(key);
    if (it != shapes_.end()) return it->second.get();
    TrainConfig planned = config_;
    planned.pipeline.microbatches = c.microbatches;
    planned.pipeline.checkpointing = c.checkpointing;
    planned.pipeline.seq_slices = c.slices;
    planned.pipeline.seq_split = c.seq_split;
    planned.pipeline.keep =
        c.checkpointing == Checkpointing::kSelective ? SelectiveKeep(config_) : std::vector<LayerType>{};
    // A placement the search sets, or the config's (auto: balanced until searched).
    if (!c.bounds.empty() || planned.pipeline.partition == Partition::kAuto) {
      planned.pipeline.partition = Partition::kBalanced;
    }
    auto shape = std::make_unique<Shape>();
    try {
      shape->plan = PlanShape(planned, model_, stages);
    } catch (const ConfigError& e) {
      *invalid = e.what();
      return nullptr;
    }
    shape->layers = LayersAt(profile_, shape->plan.rows);
    return shapes_.emplace(key, std::move(shape)).first->second.get();
  }

  const TrainConfig& config_;
  const Profile& profile_;
  ModelDesc model_;
  std::vector<int> core_pool_;
  std::vector<double> pool_cores_;
  double cost_scale_ = 1.0;  // SharedCoreCost
  std::map<std::tuple<int, int, int, int, int>, std::unique_ptr<Shape>> shapes_;
};

TuneSpace SpaceOf(const TrainConfig& config, const ModelDesc& model, const TuneRequest& req) {
  TuneSpace space;
  space.ranks = config.pipeline.ranks;
  // Every generator by default, less those that without slices are another
  // one's schedule (seq1f1b: 1f1b).
  if (req.schedules.empty()) {
    for (const GeneratorEntry& g : Generators()) {
      if (g.traits.one_slice_is.empty()) space.schedules.emplace_back(g.name);
    }
  } else {
    space.schedules = req.schedules;
  }
  space.microbatches = req.microbatches.empty() ? DefaultMicrobatches(config) : req.microbatches;
  space.chunks = req.chunks.empty() ? std::vector<int>{2, 4} : req.chunks;
  space.checkpointing = req.policies.empty() ? std::vector<Checkpointing>{Checkpointing::kNone, Checkpointing::kSelective,
                                                                            Checkpointing::kFull}
                                             : req.policies;
  // Limits a config can state: the schedules' own (an overlay names no limit).
  space.memory_limits = {0.0};
  space.slices = req.slices.empty() ? std::vector<int>{config.pipeline.seq_slices} : req.slices;
  space.seq_splits = req.seq_splits.empty() ? std::vector<SeqSplit>{config.pipeline.seq_split} : req.seq_splits;
  if (req.placement || config.pipeline.partition == Partition::kAuto) {
    space.cuts = PlacementCuts(config, model);
    space.layers = model.top_layers();
  }
  return space;
}

std::string Table(const TrainConfig& config, const ModelDesc& model, const TuneReport& report, int top) {
  std::string text = fmt::format("{:>4}  {:<17} {:>4} {:>3}  {:<10} {:<10} {:>10} {:>7} {:>12}  {:<24} {}\n", "rank",
                                 "schedule", "m", "v", "policy", "slices", "step ms", "bubble", "peak/rank", "layout",
                                 "fits");
  const std::size_t rows = std::min<std::size_t>(report.ranked.size(), static_cast<std::size_t>(std::max(top, 1)));
  for (std::size_t i = 0; i < rows; ++i) {
    const CandidateResult& r = report.ranked[i];
    const std::string layout = r.candidate.bounds.empty() ? "(config's)" : LayoutText(config, model, r.candidate.bounds);
    const std::string slices = r.candidate.slices > 1
                                   ? fmt::format("{}:{}", r.candidate.slices, EnumName(r.candidate.seq_split))
                                   : "1";
    text += fmt::format("{:>4}  {:<17} {:>4} {:>3}  {:<10} {:<10} {:>10} {:>6.1f}% {:>12}  {:<24} {}\n", i + 1,
                        r.candidate.schedule, r.candidate.microbatches, r.candidate.chunks,
                        EnumName(r.candidate.checkpointing), slices,
                        r.simulated ? fmt::format("{:.2f}", r.step_time * 1e3) : "-",
                        100 * r.bubble_rate, r.simulated ? Mib(r.max_peak_bytes) : "-", layout,
                        r.feasible ? "yes" : "no: " + r.why_not);
  }
  if (report.layouts > 0) {
    text += fmt::format(
        "searched {} candidates x their placements: {} points ({} simulated, the rest bounded) in {:.3f} s: {:.0f} "
        "per second; {} fit\n",
        report.ranked.size(), report.layouts, report.layouts_simulated, report.seconds, report.CandidatesPerSecond(),
        report.feasible);
  } else {
    text += fmt::format("searched {} candidates ({} simulated) in {:.3f} s: {:.0f} per second; {} fit\n",
                        report.ranked.size(), report.simulated, report.seconds, report.CandidatesPerSecond(),
                        report.feasible);
  }
  return text;
}

// The winner's settings as a YAML overlay of the config.
std::string Overlay(const TrainConfig& config, const ModelDesc& model, const TuneReport& report, double budget) {
  const CandidateResult& best = *report.Best();
  const Candidate& c = best.candidate;
  std::string overlay = fmt::format(
      "# baton tune {}: the best of {} candidates under {} per rank (predicted {:.2f} ms, bubble {:.1f}%)\n"
      "pipeline:\n  schedule: {}\n  microbatches: {}\n  chunks: {}\n  checkpointing: {}\n",
      config.source, report.ranked.size(), Mib(budget), best.step_time * 1e3, 100 * best.bubble_rate, c.schedule,
      c.microbatches, TraitsOf(c.schedule).any_chunks ? c.chunks : 0, EnumName(c.checkpointing));
  if (c.checkpointing == Checkpointing::kSelective) {
    std::vector<std::string> names;
    for (LayerType t : SelectiveKeep(config)) names.emplace_back(EnumName(t));
    overlay += fmt::format("  keep: [{}]\n", fmt::join(names, ", "));
  }
  if (c.slices > 1 || config.pipeline.seq_slices > 1) {
    overlay += fmt::format("  seq_slices: {}\n", c.slices);
    if (c.slices > 1) overlay += fmt::format("  seq_split: {}\n", EnumName(c.seq_split));
  }
  if (!c.bounds.empty()) {
    overlay += fmt::format("  {}: {}\n", config.model.gpt ? "layout" : "partition",
                           config.model.gpt ? "\"" + LayoutText(config, model, c.bounds) + "\""
                                            : LayoutText(config, model, c.bounds));
  }
  return overlay;
}

}  // namespace

StagePrice PriceStage(const RunPlan& shape, const std::vector<LayerProfile>& layers, int stage, bool split_backward) {
  const StagePlan st = PlanStageAlone(shape, stage, split_backward);
  const ModelDesc& model = shape.model;
  StagePrice out;
  double f = 0, i = 0, w = 0, b = 0;
  for (int t = st.first_layer; t < st.last_layer; ++t) {
    const LayerProfile& l = layers[static_cast<std::size_t>(t)];
    f += l.forward;
    i += l.backward_input;
    w += l.backward_weight;
    b += l.backward;
  }
  // What the policy drops: op k's output, redone from its input.
  for (int k = 0; k + 1 < st.ops(); ++k) {
    if (st.kept[k + 1]) continue;
    const int op = st.first_op + k;
    const int top = model.ops[static_cast<std::size_t>(op)].top;
    const LayerProfile& l = layers[static_cast<std::size_t>(top)];
    const auto within = static_cast<std::size_t>(op - model.top_begin[static_cast<std::size_t>(top)]);
    if (within < l.op_forward.size()) out.recompute += l.op_forward[within];
  }
  if (!split_backward && i + w > 0) {
    // One B: the measured B, in I and W's proportions.
    i *= b / (i + w);
    w = b - i;
  }
  out.costs = Costs{f, i + out.recompute, w + (split_backward ? out.recompute : 0.0)};
  out.slot_bytes = static_cast<double>(st.slot_bytes);
  out.sequence_bytes = static_cast<double>(st.sequence_bytes);
  return out;
}

void ShareCores(int ranks, int replicas, int cores, std::vector<int>* core_pool, std::vector<double>* pool_cores) {
  core_pool->clear();
  pool_cores->clear();
  const int world = ranks * replicas;
  if (cores <= 0 || world <= cores) return;
  core_pool->assign(static_cast<std::size_t>(ranks), 0);
  pool_cores->assign(1, double(cores) * ranks / world);
}

SimOptions CostedSimOptions(std::vector<Costs> stage_costs, double latency, double bandwidth, double message_bytes,
                            std::vector<int> core_pool, std::vector<double> pool_cores) {
  SimOptions sim;
  sim.stage_costs = std::move(stage_costs);
  sim.comm = latency;
  sim.bandwidth = bandwidth;
  sim.message_bytes = message_bytes;
  sim.core_pool = std::move(core_pool);
  sim.pool_cores = std::move(pool_cores);
  return sim;
}

namespace {

// The simulator's options for `plan` from the profile: each stage priced
// from its layers, messages and core sharing as profiled.
SimOptions ProfileSimOptions(const RunPlan& plan, const Profile& profile) {
  const std::vector<LayerProfile> layers = LayersAt(profile, plan.rows);
  std::vector<Costs> costs;
  for (int s = 0; s < plan.stages(); ++s) {
    costs.push_back(PriceStage(plan, layers, s, SplitsBackward(plan.lowered, s)).costs);
  }
  const double scale = SharedCoreCost(profile, plan.lowered.ranks, plan.replicas);
  for (Costs& c : costs) c = Scaled(c, scale);
  std::vector<int> pool;
  std::vector<double> cores;
  ShareCores(plan.lowered.ranks, plan.replicas, profile.identity.cores, &pool, &cores);
  SimOptions o = CostedSimOptions(std::move(costs), Latency(profile), profile.bandwidth_Bps,
                                  LargestMessageBytes(plan.model, plan.bounds, plan.rows), std::move(pool),
                                  std::move(cores));
  o.waiting_share = profile.waiting_share;
  if (plan.slices > 1) {
    // A slice costs its share of a whole microbatch's profiled work, and
    // its messages carry its tokens.
    o.slice_cost = plan.slice_cost;
    o.slice_memory = plan.slice_token_share;
  }
  return o;
}

}  // namespace

ProfilePrediction PredictFromProfile(const RunPlan& plan, const Profile& profile) {
  ProfilePrediction out;
  out.sim = Simulate(plan.lowered, ProfileSimOptions(plan, profile));
  // What the run allocates: the static bytes and every stage's ring.
  for (const RankMemory& m : PlanMemory(plan)) out.peak_bytes.push_back(static_cast<double>(m.total()));
  return out;
}

double SharedCoreCost(const Profile& profile, int ranks, int replicas) {
  std::vector<int> pool;
  std::vector<double> cores;
  ShareCores(ranks, replicas, profile.identity.cores, &pool, &cores);
  return pool.empty() ? 1.0 : profile.shared_core_cost;
}

namespace {

// The calibration runs' simulator options at factor 1 (the stages priced
// once), and each one's step at a factor and a waiting share.
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
    Profile unscaled = profile;
    unscaled.shared_core_cost = 1.0;
    for (const RunPlan& plan : plans) {
      options.push_back(ProfileSimOptions(plan, unscaled));
      options.back().record_timeline = false;
    }
  }
  // log(simulated / measured) of run k.
  double LogError(std::size_t k, double scale, double share) const {
    SimOptions o = options[k];
    for (Costs& c : o.stage_costs) c = Scaled(c, scale);
    o.waiting_share = share;
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
  return fit.Scale(profile.waiting_share);
}

SharedCoresFit FitSharedCores(const std::vector<RunPlan>& plans, const Profile& profile,
                              const std::vector<double>& measured_step_s) {
  const CalibrationFit fit(plans, profile, measured_step_s);
  SharedCoresFit best{fit.Scale(profile.waiting_share), profile.waiting_share, 0.0};
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

std::vector<int> BottleneckPlacement(const TrainConfig& config, const ModelDesc& model,
                                     const std::vector<LayerProfile>& layers, int stages) {
  const int n = model.top_layers();
  std::vector<int> points{0};
  for (int c : PlacementCuts(config, model)) points.push_back(c);
  points.push_back(n);
  const int P = static_cast<int>(points.size());
  std::vector<double> prefix(static_cast<std::size_t>(n) + 1, 0.0);
  for (int l = 0; l < n; ++l) {
    const LayerProfile& lp = layers[static_cast<std::size_t>(l)];
    prefix[static_cast<std::size_t>(l) + 1] = prefix[static_cast<std::size_t>(l)] + lp.forward + lp.backward;
  }
  auto cost = [&](int a, int b) { return prefix[static_cast<std::size_t>(points[b])] - prefix[static_cast<std::size_t>(points[a])]; };
  // best[s][j]: the least bottleneck of s stages over points[0..j]; from[s][j] its last cut.
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(static_cast<std::size_t>(stages) + 1, std::vector<double>(P, inf));
  std::vector<std::vector<int>> from(static_cast<std::size_t>(stages) + 1, std::vector<int>(P, -1));
  best[0][0] = 0.0;
  for (int s = 1; s <= stages; ++s) {
    for (int j = 1; j < P; ++j) {
      for (int i = 0; i < j; ++i) {
        const double v = std::max(best[s - 1][i], cost(i, j));
        if (v < best[s][j]) {
          best[s][j] = v;
          from[s][j] = i;
        }
      }
    }
  }
  if (!std::isfinite(best[stages][P - 1])) return {};
  std::vector<int> bounds{n};
  for (int s = stages, j = P - 1; s > 0; --s) {
    j = from[s][j];
    bounds.push_back(points[j]);
  }
  std::reverse(bounds.begin(), bounds.end());
  return bounds;
}

std::vector<int> DefaultMicrobatches(const TrainConfig& config) {
  const int p = config.pipeline.ranks, batch = config.train.batch_size / config.data_parallel.size;
  std::vector<int> out;
  for (int k : {1, 2, 4, 8}) {
    if (batch % (k * p) == 0) out.push_back(k * p);
  }
  if (batch % config.pipeline.microbatches == 0 &&
      std::find(out.begin(), out.end(), config.pipeline.microbatches) == out.end()) {
    out.push_back(config.pipeline.microbatches);
    std::sort(out.begin(), out.end());
  }
  return out;
}

std::vector<int> PlacementCuts(const TrainConfig& config, const ModelDesc& model) {
  std::vector<int> cuts;
  const int n = model.top_layers();
  if (config.model.gpt) {
    for (int t = kGptEmbeddingLayers; t <= n - kGptLossLayers; t += kGptBlockLayers) cuts.push_back(t);
  } else {
    for (int t = 1; t < n; ++t) cuts.push_back(t);
  }
  return cuts;
}

std::string LayoutText(const TrainConfig& config, const ModelDesc& model, const std::vector<int>& bounds) {
  std::vector<std::string> stages;
  for (std::size_t s = 0; s + 1 < bounds.size(); ++s) {
    const int a = bounds[s], b = bounds[s + 1];
    if (!config.model.gpt) {
      stages.push_back(std::to_string(b - a));
      continue;
    }
    const LayoutStage st = GptParts(model, a, b);
    std::vector<std::string> parts;
    if (st.embedding) parts.emplace_back("E");
    if (st.blocks == 1) parts.emplace_back("t");
    if (st.blocks > 1) parts.push_back(fmt::format("t*{}", st.blocks));
    if (st.loss) parts.emplace_back("L");
    stages.push_back(fmt::format("{}", fmt::join(parts, ",")));
  }
  return config.model.gpt ? fmt::format("{}", fmt::join(stages, "|")) : fmt::format("[{}]", fmt::join(stages, ","));
}

TrainConfig WithPlacement(const TrainConfig& config, const ModelDesc& model, const std::vector<int>& bounds) {
  TrainConfig c = config;
  if (config.model.gpt) {
    c.pipeline.partition = Partition::kLayout;
    c.pipeline.layout = PipelineLayout{};
    c.pipeline.layout.text = LayoutText(config, model, bounds);
    c.pipeline.layout.where = fmt::format("{}: pipeline.layout (placed automatically)", config.source);
    for (std::size_t s = 0; s + 1 < bounds.size(); ++s) c.pipeline.layout.stages.push_back(GptParts(model, bounds[s], bounds[s + 1]));
  } else {
    c.pipeline.partition = Partition::kExplicit;
    c.pipeline.partition_counts.clear();
    for (std::size_t s = 0; s + 1 < bounds.size(); ++s) c.pipeline.partition_counts.push_back(bounds[s + 1] - bounds[s]);
  }
  return c;
}

PlacementChoice ChoosePlacement(const TrainConfig& config, const Profile& profile) {
  const std::string& name = config.pipeline.schedule;
  const std::vector<std::string> names = GeneratorNames();
  if (std::find(names.begin(), names.end(), name) == names.end()) {
    throw ConfigError(fmt::format("{}: an automatic placement needs a generated schedule (one of {}), not \"{}\"",
                                  config.source, fmt::join(names, ", "), name));
  }
  ProfilePricer pricer(config, profile);
  TuneSpace space;
  space.ranks = config.pipeline.ranks;
  space.schedules = {name};
  space.microbatches = {config.pipeline.microbatches};
  const GeneratorTraits traits = TraitsOf(name);
  space.chunks = {config.pipeline.chunks > 0 ? config.pipeline.chunks : traits.default_chunks};
  space.checkpointing = {config.pipeline.checkpointing};
  space.memory_limits = {0.0};
  space.slices = {config.pipeline.seq_slices};
  space.seq_splits = {config.pipeline.seq_split};
  space.cuts = PlacementCuts(config, pricer.model());
  space.layers = pricer.model().top_layers();
  TuneOptions options;
  options.memory_bytes = config.pipeline.memory_bytes > 0 ? config.pipeline.memory_bytes : 1e300;
  const TuneReport report = baton::Tune(space, std::ref(pricer), options);
  const CandidateResult& r = report.ranked.front();
  if (!r.feasible) {
    if (r.simulated) {
      throw ConfigError(fmt::format(
          "{}: no placement of {} fits pipeline.memory_bytes {} per rank: the smallest any needs is {} (layout {}, "
          "rank {})",
          config.source, name, Mib(options.memory_bytes), Mib(r.max_peak_bytes),
          LayoutText(config, pricer.model(), r.candidate.bounds), r.max_peak_rank));
    }
    throw ConfigError(fmt::format("{}: no placement of {} can run: {}", config.source, name, r.why_not));
  }
  PlacementChoice out;
  out.bounds = r.candidate.bounds;
  out.layout = LayoutText(config, pricer.model(), out.bounds);
  out.step_s = r.step_time;
  out.peak_bytes = r.peak_bytes;
  out.layouts = report.layouts;
  out.simulated = report.layouts_simulated;
  out.seconds = report.seconds;
  return out;
}

std::string Tune(const TrainConfig& config, const TuneRequest& req, const Profile& profile,
                 const std::string& profile_source) {
  if (!(req.memory_bytes > 0)) throw ConfigError("tune: --memory-bytes must be a number of bytes > 0");
  ProfilePricer pricer(config, profile);
  TuneOptions options;
  options.memory_bytes = req.memory_bytes;
  const TuneReport report = baton::Tune(SpaceOf(config, pricer.model(), req), std::ref(pricer), options);

  std::string text = fmt::format("tune: {} ranks, batch {}, per-rank budget {}; costs from {}\n", config.pipeline.ranks,
                                 config.train.batch_size, Mib(req.memory_bytes), profile_source);
  text += Table(config, pricer.model(), report, req.top);
  if (report.Best() == nullptr) {
    if (report.smallest) {
      const Candidate& s = report.smallest->candidate;
      text += fmt::format("nothing fits {} per rank: the smallest any candidate needs is {} ({} m{} v{} {}{})\n",
                          Mib(req.memory_bytes), Mib(report.smallest->max_peak_bytes), s.schedule, s.microbatches,
                          s.chunks, EnumName(s.checkpointing),
                          s.bounds.empty() ? "" : ", layout " + LayoutText(config, pricer.model(), s.bounds));
    } else {
      text += "no candidate could run (see why above)\n";
    }
    return text;
  }
  const std::string overlay = Overlay(config, pricer.model(), report, req.memory_bytes);
  if (!req.overlay_path.empty()) {
    WriteTextFile(req.overlay_path, overlay);
    text += fmt::format("wrote the winner's settings to {}\n", req.overlay_path);
  }
  return text + overlay;
}

}  // namespace baton
