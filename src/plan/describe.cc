// The plan as text, for `baton validate`.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "baton/plan.h"
#include "baton/slices.h"

namespace baton {

std::string DescribePlan(const RunPlan& run) {
  std::string out = fmt::format("# plan: {} ranks, schedule {} ({} stages, {} microbatches of {} samples{})\n",
                                run.lowered.ranks, run.lowered.name, run.stages(), run.lowered.sequences(), run.rows,
                                run.slices > 1 ? fmt::format(", each in {} slices: {} units", run.slices,
                                                             run.microbatches())
                                               : "");
  if (run.slices > 1) {
    std::vector<int> tokens;
    for (int s = 0; s < run.slices; ++s) tokens.push_back(run.cuts[s + 1] - run.cuts[s]);
    out += fmt::format("# sequence slices: tokens {} of {} ({} tokens a slice)\n", CutsText(run.cuts),
                       run.cuts.back(), fmt::join(tokens, ", "));
  }
  std::vector<RankPlan> ranks;
  for (int rank = 0; rank < run.lowered.ranks; ++rank) ranks.push_back(PlanRank(run, rank));
  for (int s = 0; s < run.stages(); ++s) {
    const RankPlan& r = ranks[static_cast<std::size_t>(run.lowered.stage_rank[s])];
    const StagePlan& st = r.local_stages[static_cast<std::size_t>(r.local[s])];
    // Forward FLOPs of the stage's matrix products for one microbatch (every
    // token row of every sample), as `baton bench` and `baton tune` count them.
    const double flops = run.model.GemmFlopsPerRow(st.first_layer, st.last_layer) * st.rows * run.model.seq;
    out += fmt::format(
        "#   stage {} on rank {}: layers {}..{}, ring capacity {} {} of {} bytes{}, {} parameters, "
        "{} -> {}{}, forward {:.0f} FLOPs (matrix products) per microbatch, {} parameter bytes\n",
        st.stage, r.rank, st.first_layer, st.last_layer - 1, st.ring_capacity, run.slices > 1 ? "slices" : "microbatches",
        st.slot_bytes,
        st.sequence_bytes > 0 ? fmt::format(", {} key/value slots and {} gradient slots of {} bytes",
                                            st.sequence_capacity, st.gradient_capacity, st.sequence_bytes)
                              : "",
        st.num_params, ToString(st.input()), ToString(st.output()), st.split_backward ? ", split backward" : "", flops,
        st.num_params * sizeof(float));
  }
  for (const RankPlan& r : ranks) {
    int messages = 0;
    std::size_t bytes = 0;
    for (const Instruction& in : r.step) {
      if (in.action.kind == ActionKind::kSendF || in.action.kind == ActionKind::kSendB) {
        ++messages;
        bytes += in.tensor.bytes();  // a sliced unit's: its tokens
      }
    }
    out += fmt::format("#   rank {}: {} actions per step, sends {} messages ({} bytes), ring memory {} bytes\n",
                       r.rank, r.step.size(), messages, bytes, r.RingBytes());
  }
  // Memory per rank, in MiB: what the executor allocates, and the
  // simulator's peak of it in time.
  auto mib = [](double b) { return fmt::format("{:.2f}", b / (1024.0 * 1024.0)); };
  const std::vector<RankMemory> memory = PlanMemory(run);
  for (std::size_t rank = 0; rank < memory.size(); ++rank) {
    const RankMemory& m = memory[rank];
    out += fmt::format(
        "#   rank {} memory (MiB): parameters {}, gradients {}, optimizer state {}, rings {}, workspaces {}, "
        "layer scratch {}, message buffers {}{}; allocated {}, simulated peak {}\n",
        rank, mib(double(m.params)), mib(double(m.grads)), mib(double(m.optimizer)), mib(double(m.rings)),
        mib(double(m.workspaces)), mib(double(m.layer_scratch)), mib(double(m.messages)),
        m.sequences > 0 ? ", sequence slots " + mib(double(m.sequences)) : "", mib(double(m.total())),
        mib(m.simulated_peak));
  }
  out += fmt::format("# simulated with unit costs: bubble {:.2f}%\n", 100 * run.sim.bubble_rate);
  return out;
}

std::string DescribeRunPlan(const TrainConfig& config) {
  const RunPlan plan = PlanRun(config);
  CheckModelInput(config, plan);
  return DescribePlan(plan);
}

}  // namespace baton
