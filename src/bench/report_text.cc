// `baton bench`'s report as text, and a sweep's reports as a bar chart.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "baton/bench.h"

namespace baton {

std::string DescribeBenchReport(const BenchReport& b) {
  std::string out = fmt::format(
      "bench {}: {} ranks, {} microbatches, {} chunk(s) per rank, batch {}; {} warm-up + {} measured steps\n",
      b.schedule, b.ranks, b.microbatches, b.chunks, b.batch_size, b.warmup_steps, b.steps);
  out += fmt::format("step time        median {:.3f} ms (min {:.3f}, max {:.3f}); {:.0f} samples/s{}\n",
                     b.step_time_median_s * 1e3, b.step_time_min_s * 1e3, b.step_time_max_s * 1e3, b.samples_per_s,
                     b.tokens_per_s > b.samples_per_s ? fmt::format(" ({:.0f} tokens/s)", b.tokens_per_s) : "");
  out += fmt::format("bubble           measured {:.2f}%, simulated from measured costs {:.2f}%\n", 100 * b.bubble_rate,
                     100 * b.simulated_bubble_rate);
  out += fmt::format("prediction       simulator {:.3f} ms from median action costs; measured / predicted = {:.3f}"
                     " ({:.3f} ms from mean costs; action times spread {:.0f}% p10-p90)\n",
                     b.predicted_step_time_s * 1e3, b.measured_over_predicted,
                     b.predicted_step_time_mean_costs_s * 1e3, 100 * b.action_time_spread);
  if (!b.packed_predicted_s.empty()) {
    out += fmt::format("packed steps     measured / predicted from the profile, step by step: median {:.3f} (", 
                       b.packed_measured_over_predicted);
    for (std::size_t k = 0; k < b.packed_predicted_s.size() && k < b.step_times_s.size(); ++k) {
      out += fmt::format("{}{:.1f}/{:.1f}", k ? ", " : "", b.step_times_s[k] * 1e3, b.packed_predicted_s[k] * 1e3);
    }
    out += " ms)\n";
  }
  out += fmt::format("message latency  {:.1f} us one way (rank 0 <-> 1, one activation)\n", b.message_latency_s * 1e6);
  if (b.gemm_gflops_inside > 0) {
    out += fmt::format("products         {:.2f} GFLOP/s inside actions, call by call; the same calls bare {:.2f} GFLOP/s: "
                       "{:.3f} of the bare SGEMM time (goal >= 0.9)\n",
                       b.gemm_gflops_inside, b.gemm_gflops_bare, b.gemm_inside_over_bare);
  }
  if (b.replicas > 1) {
    out += fmt::format(
        "gradient sums    {} replicas: {:.3f} ms per step per rank, {:.0f}% hidden behind the pipeline's compute, "
        "{:.3f} ms after it; all-reduce {:.1f} us a ring step, {:.2f} GB/s: {:.3f} ms for the largest stage\n",
        b.replicas, b.reduction_s * 1e3, 100 * b.reduction_hidden_fraction, b.reduction_exposed_s * 1e3,
        b.allreduce_step_latency_s * 1e6, b.allreduce_bandwidth_Bps / 1e9, b.predicted_reduction_s * 1e3);
  }
  if (b.zero.has_actions()) {
    out += fmt::format("sharding         ZeRO {}: per stage and step {} reduce-scatter(s)", b.zero.number(),
                       b.reduce_scatters_per_stage);
    if (b.zero.shards_parameters()) {
      out += fmt::format(", {} all-gather(s), waited for {:.3f} ms of {:.3f} ms (alpha-beta): {:.0f}% hidden (goal >= 80%)",
                         b.gathers_per_stage, b.gather_wait_s * 1e3, b.predicted_gather_s * 1e3,
                         100 * b.gather_hidden_fraction);
    }
    out += "\n";
  }
  const int computing = b.cores_shared ? std::min(b.ranks, b.cores) : b.ranks;
  if (b.cores_shared) {
    out += fmt::format("cores            {} ranks share {} cores: the simulator shares them too, each action costing "
                       "its CPU time (and its share of the rank's CPU time outside actions: up to {:.0f}% more); "
                       "cores idle: measured {:.2f}%, simulated {:.2f}%\n",
                       b.ranks, b.cores, 100 * b.cpu_outside_actions, 100 * b.core_idle_rate,
                       100 * b.simulated_core_idle_rate);
  }
  out += fmt::format("compute          {:.2f} GFLOP/s in all = {:.3f} of {} x one rank's peak {:.2f} GFLOP/s; "
                     "goal 0.95 (1 - {}) x {} x peak = {:.2f}\n",
                     b.gflops_total, b.fraction_of_peak, computing, b.peak_gflops_one_core,
                     b.cores_shared ? "cores idle" : "bubble", computing, b.goal_gflops);
  out += fmt::format("while computing  {:.2f} GFLOP/s per rank = {:.3f} of the bare product rate ({})\n",
                     b.gflops_while_busy, b.busy_fraction_of_peak, b.blas_core);
  out += fmt::format("recording        {:.0f} ns per event; step median without recording {:.3f} ms; actions timed "
                     "by {}\n\n",
                     b.record_cost_per_event_s * 1e9, b.step_time_unrecorded_s * 1e3,
                     b.action_clock == "device" ? "the device (CUDA events on the compute stream)" : "the host's clock");
  out += fmt::format("{:>4}  {:>10}  {:>10}  {:>10}  {:>10}  {:>8}\n", "rank", "wall ms", "busy ms", "waiting ms",
                     "idle ms", "GFLOP/s");
  for (const BenchRank& r : b.per_rank) {
    out += fmt::format("{:>4}  {:>10.3f}  {:>10.3f}  {:>10.3f}  {:>10.3f}  {:>8.2f}\n", r.rank, r.wall_s * 1e3,
                       r.busy_s * 1e3, r.waiting_s * 1e3, r.idle_s * 1e3, r.gflops);
  }
  return out;
}

std::string SweepSvg(const std::vector<std::pair<std::string, BenchReport>>& rows) {
  const double bar = 36, gap = 14, left = 70, top = 50, height = 160, panel_gap = 70;
  const double width = left + rows.size() * (bar + gap) + 40;
  double max_rate = 1, max_bubble = 0.25;
  for (const auto& [label, r] : rows) {
    max_rate = std::max(max_rate, r.samples_per_s);
    max_bubble = std::max({max_bubble, r.bubble_rate, r.simulated_bubble_rate});
  }
  max_bubble = std::min(1.0, std::ceil(max_bubble * 4) / 4);  // the bubble axis ends at a quarter
  std::string svg = fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" "
      "height=\"{1}\" viewBox=\"0 0 {0} {1}\" font-family=\"DejaVu Sans, sans-serif\" font-size=\"11\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      width, top + 2 * height + panel_gap + 150);
  svg += fmt::format("<text x=\"{}\" y=\"22\" font-size=\"15\" font-weight=\"bold\">baton bench --sweep</text>\n",
                     left);
  for (int panel = 0; panel < 2; ++panel) {
    const double y0 = top + panel * (height + panel_gap);
    svg += fmt::format("<text x=\"{}\" y=\"{}\" fill=\"#444\">{}</text>\n", left, y0 - 8,
                       panel == 0 ? "samples / s (measured)" : "bubble rate (measured, blue; simulated, outline)");
    svg += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"#999\"/>\n", left, y0 + height,
                       width - 30);
    for (int tick = 0; tick <= 4; ++tick) {
      const double y = y0 + height - tick * height / 4;
      const std::string label = panel == 0 ? fmt::format("{:.0f}", max_rate * tick / 4)
                                           : fmt::format("{:.0f}%", 100 * max_bubble * tick / 4);
      svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\" fill=\"#666\">{}</text>\n", left - 6, y + 4,
                         label);
      svg += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"#eee\"/>\n", left, y,
                         width - 30);
    }
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const BenchReport& r = rows[i].second;
      const double x = left + gap / 2 + i * (bar + gap);
      if (panel == 0) {
        const double h = height * r.samples_per_s / max_rate;
        svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#0072B2\"/>\n", x,
                           y0 + height - h, bar, h);
        svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"9\">{:.0f}</text>\n",
                           x + bar / 2, y0 + height - h - 3, r.samples_per_s);
      } else {
        const double h = height * r.bubble_rate / max_bubble, hs = height * r.simulated_bubble_rate / max_bubble;
        svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#56B4E9\"/>\n", x,
                           y0 + height - h, bar, h);
        svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#D55E00\" "
                           "stroke-width=\"1.5\"/>\n",
                           x + 3, y0 + height - hs, bar - 6, hs);
        svg += fmt::format("<text transform=\"translate({},{}) rotate(40)\" fill=\"#333\">{}</text>\n", x + 4,
                           y0 + height + 14, rows[i].first);
      }
    }
  }
  return svg + "</svg>\n";
}

}  // namespace baton
