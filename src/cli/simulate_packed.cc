// `baton simulate CONFIG --profile P` for packed documents: each step priced
// by its microbatches' real lengths (see simulate_packed.h).
#include "simulate_packed.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <sstream>

#include "baton/data.h"
#include "baton/error.h"
#include "baton/files.h"
#include "baton/machine.h"
#include "baton/profile_price.h"
#include "baton/sim.h"
#include "baton/timing.h"
#include "baton/train.h"
#include "commands.h"

namespace baton {
namespace {

// One step's microbatches per replica, from a lengths file.
std::vector<std::vector<PackedMicrobatch>> ReadLengths(const std::string& path, const RunPlan& plan, int replicas) {
  const std::string text = ReadTextFile(path, "lengths file");
  const int seq = plan.model.seq;
  std::vector<PackedMicrobatch> all;
  std::istringstream in(text);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (const auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto where = [&](const std::string& rule) { return ConfigError(fmt::format("{}:{}: {}", path, number, rule)); };
    PackedMicrobatch mb;
    std::istringstream samples(line);
    std::string sample;
    while (std::getline(samples, sample, ';')) {
      std::replace(sample.begin(), sample.end(), ',', ' ');
      std::istringstream docs(sample);
      std::string word;
      long long filled = 0;
      bool any = false;
      while (docs >> word) {
        std::size_t used = 0;
        long long n = 0;
        try {
          n = std::stoll(word, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used != word.size() || n < 1) {
          throw where(fmt::format("'{}': a document's length is a whole number of tokens >= 1", word));
        }
        filled += n;
        if (filled > seq) {
          throw where(fmt::format("a sample of {}+ tokens: a sample holds at most data.max_tokens = {}", filled, seq));
        }
        mb.squares += static_cast<double>(n) * static_cast<double>(n);
        mb.tokens += static_cast<double>(n);
        any = true;
      }
      if (!any) throw where("an empty sample: give each sample its documents' lengths, samples apart by ';'");
      ++mb.rows;
      mb.length = std::max(mb.length, static_cast<int>(filled));
    }
    if (mb.rows > plan.rows) {
      throw where(fmt::format("{} samples: a microbatch holds at most {} (train.batch_size / replicas / "
                              "microbatches)", mb.rows, plan.rows));
    }
    all.push_back(mb);
  }
  const std::size_t want = static_cast<std::size_t>(plan.sequences()) * static_cast<std::size_t>(replicas);
  if (all.size() != want) {
    throw ConfigError(fmt::format("{}: {} microbatches, but a step of this config has {} ({} a replica x {} "
                                  "replicas): one line each, replica 0's first",
                                  path, all.size(), want, plan.sequences(), replicas));
  }
  std::vector<std::vector<PackedMicrobatch>> out(static_cast<std::size_t>(replicas));
  for (std::size_t k = 0; k < all.size(); ++k) out[k / static_cast<std::size_t>(plan.sequences())].push_back(all[k]);
  return out;
}

struct PricedStep {
  SimResult sim;
  std::vector<std::vector<PackedMicrobatch>> replicas;
  double tokens = 0;  // real tokens of the global batch (every replica's)
  double even = 0;    // EvenStep's price of it
};

// A reference for a packing: the step were each replica's real tokens and
// documents' squares spread evenly over all of its microbatches, every
// sample of each equally full (documents divisible at will: where one
// document is long, no packing of the real ones reaches it; not a bound
// either: cheap microbatches at the pipeline's ends can beat it).
double EvenStep(const RunPlan& plan, const Profile& profile, const std::vector<std::vector<PackedMicrobatch>>& replicas) {
  std::vector<std::vector<PackedMicrobatch>> even;
  for (const std::vector<PackedMicrobatch>& mbs : replicas) {
    double tokens = 0, squares = 0;
    for (const PackedMicrobatch& mb : mbs) {
      tokens += mb.tokens;
      squares += mb.squares;
    }
    const double m = static_cast<double>(mbs.size());
    PackedMicrobatch share;
    share.rows = plan.rows;
    share.length = static_cast<int>(std::lround(tokens / m / plan.rows));
    share.tokens = tokens / m;
    share.squares = squares / m;
    even.emplace_back(mbs.size(), share);
  }
  return PredictPackedStep(plan, profile, even).makespan;
}

// Prices `step` (its replicas' microbatches), its even reference too.
void Price(const RunPlan& plan, const Profile& profile, PricedStep& step) {
  for (const auto& mbs : step.replicas) {
    for (const PackedMicrobatch& mb : mbs) step.tokens += mb.tokens;
  }
  step.sim = PredictPackedStep(plan, profile, step.replicas);
  step.even = EvenStep(plan, profile, step.replicas);
}

// What arranging the steps took (data.packing: balanced): batches, seconds.
struct Planning {
  std::int64_t batches = 0;
  double seconds = 0;
};

// The run's first `steps` steps, in its order (the loaders a run makes).
std::vector<PricedStep> DatasetSteps(const TrainConfig& c, const RunPlan& plan, const Profile& profile, int steps,
                                     std::optional<int> cores, Planning& planning) {
  PackedRunSteps run = PackedSteps(c, plan, 0, steps, cores);
  planning.batches = run.arranged;
  planning.seconds = run.arrange_seconds;
  std::vector<PricedStep> out;
  for (auto& replicas : run.steps) {
    PricedStep step;
    step.replicas = std::move(replicas);
    Price(plan, profile, step);
    out.push_back(std::move(step));
  }
  return out;
}

// The one output check (baton/files.h): the run's inputs, the profile,
// the lengths file and the outputs.
void CheckFiles(const TrainConfig& config, const PackedSimulation& what) {
  CommandFiles files = RunInputsOf(config);
  AddProfileInputs(files, "--profile", what.profile_path);
  if (!what.lengths.empty()) files.inputs.push_back({"--lengths", what.lengths});
  if (what.svg) files.outputs.push_back({"--svg", *what.svg});
  if (what.trace) files.outputs.push_back({"--trace", *what.trace});
  if (what.json) files.outputs.push_back({"--json", *what.json});
  CheckCommandFiles(files);
}

// The table (unless a file goes to standard output), the first step's
// picture and trace, and every step's JSON, where asked.
void WriteOutputs(const PackedSimulation& what, const std::string& table, const nlohmann::ordered_json& j,
                  const SimResult& first) {
  const bool to_stdout = what.json.value_or("") == "-" || what.svg.value_or("") == "-" || what.trace.value_or("") == "-";
  if (!to_stdout) std::cout << table;
  if (what.svg) {
    std::ostringstream svg;
    WriteSvg(first, svg);
    WriteOutput(*what.svg, svg.str());
  }
  if (what.trace) {
    std::ostringstream trace;
    WriteChromeTrace(first, trace);
    WriteOutput(*what.trace, trace.str());
  }
  if (what.json) WriteOutput(*what.json, j.dump(1) + "\n");
}

}  // namespace

void SimulatePacked(const TrainConfig& config, const RunPlan& plan, const Profile& profile,
                    const PackedSimulation& what) {
  if (what.steps < 1) throw ConfigError(fmt::format("simulate: --steps must be >= 1, got {}", what.steps));
  CheckFiles(config, what);

  const ProfilePrediction whole = PredictFromProfile(plan, profile);
  std::vector<PricedStep> steps;
  Planning planning;
  if (!what.lengths.empty()) {
    PricedStep step;
    step.replicas = ReadLengths(what.lengths, plan, config.data_parallel.size);
    Price(plan, profile, step);
    steps.push_back(std::move(step));
  } else {
    steps = DatasetSteps(config, plan, profile, what.steps, what.cores, planning);
  }
  const double slot = static_cast<double>(plan.rows) * plan.model.seq;
  std::string out = fmt::format(
      "{}: {} ranks x {} replicas, {} microbatches of {} samples of data.max_tokens {} (packing: {}), costs from {}\n",
      whole.sim.schedule, plan.lowered.ranks, plan.replicas, plan.sequences(), plan.rows, plan.model.seq,
      EnumName(config.data.packing), what.source);
  out += fmt::format("whole microbatches (every position a token): step {:.3f} ms\n", whole.sim.makespan * 1e3);
  out += fmt::format("{:>5}  {:>12}  {:>8}  {:>8}  {:>12}  {:>9}  {:>9}  {:>7}\n", "step", "predicted ms", "even ms",
                     "tokens", "tokens/s", "fullest", "emptiest", "unused");
  nlohmann::ordered_json j;
  j["whole_step_s"] = whole.sim.makespan;
  auto& rows = j["steps"] = nlohmann::ordered_json::array();
  std::vector<double> times, rates;
  for (std::size_t k = 0; k < steps.size(); ++k) {
    const PricedStep& s = steps[k];
    double longest = 0, shortest = 1e300, used = 0, slots = 0;
    std::vector<double> lengths;
    for (const auto& mbs : s.replicas) {
      for (const PackedMicrobatch& mb : mbs) {
        longest = std::max(longest, mb.tokens);
        shortest = std::min(shortest, mb.tokens);
        used += mb.tokens;
        slots += slot;
        lengths.push_back(mb.length);
      }
    }
    const double t = s.sim.makespan;
    times.push_back(t);
    rates.push_back(t > 0 ? s.tokens / t : 0.0);
    out += fmt::format("{:>5}  {:>12.3f}  {:>8.3f}  {:>8.0f}  {:>12.0f}  {:>9.0f}  {:>9.0f}  {:>6.1f}%\n", k + 1,
                       t * 1e3, s.even * 1e3, s.tokens, rates.back(), longest, shortest, 100 * (1 - used / slots));
    rows.push_back({{"step", k + 1}, {"predicted_s", t}, {"even_s", s.even}, {"tokens", s.tokens},
                    {"lengths", lengths}, {"bubble_rate", s.sim.bubble_rate}});
  }
  // The steps as a run: their tokens over their time (and the even steps').
  double tokens = 0, time = 0, even = 0;
  for (const PricedStep& s : steps) {
    tokens += s.tokens;
    time += s.sim.makespan;
    even += s.even;
  }
  out += fmt::format("median predicted step {:.3f} ms, {:.0f} real tokens/s\n", Median(times) * 1e3, Median(rates));
  out += fmt::format("the {} steps: {:.0f} real tokens/s ({:.3f}x the even steps' time)\n", steps.size(),
                     tokens / time, time / even);
  j["tokens_per_s"] = tokens / time;
  j["even_tokens_per_s"] = tokens / even;
  if (planning.batches > 0) {
    const double each = planning.seconds / static_cast<double>(planning.batches);
    out += fmt::format("planning: {:.3f} ms a step arranged ({:.2f}% of the median predicted step), ahead of the steps\n",
                       each * 1e3, 100 * each / Median(times));
    j["arrange_s_per_step"] = each;
  }
  j["median_step_s"] = Median(times);
  j["median_tokens_per_s"] = Median(rates);
  WriteOutputs(what, out, j, steps.front().sim);
}

}  // namespace baton
