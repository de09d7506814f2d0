// What the collectives after a step's compute add to each rank's end.
#include "collectives.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace baton {

void AddCollectives(const Schedule& s, const SimOptions& o, const std::vector<double>& grad_end,
                    const std::vector<double>& comm_free, SimResult& res) {
  // A tied head's exchange: both its ranks are done with it when the
  // later one's gradient has crossed the wire.
  std::vector<double> tied_end(static_cast<std::size_t>(s.ranks), 0.0);
  if (o.tied.stage_a >= 0 && o.tied.stage_b >= 0) {
    const int a = s.stage_rank[o.tied.stage_a], b = s.stage_rank[o.tied.stage_b];
    if (a != b) {
      auto delay = [&](int from, int to) {
        return o.messages.link_delay.empty() ? 0.0 : o.messages.link_delay[static_cast<std::size_t>(from * s.ranks + to)];
      };
      const double message = o.messages.latency +
                             (o.messages.bandwidth > 0.0 ? o.tied.bytes / o.messages.bandwidth : 0.0);
      const double done =
          std::max(res.per_rank[a].end + delay(a, b), res.per_rank[b].end + delay(b, a)) + message;
      for (const int r : {a, b}) {
        RankResult& out = res.per_rank[r];
        tied_end[static_cast<std::size_t>(r)] = done;
        out.reduce_end = std::max(out.end, done);
        out.exposed_reduce = out.reduce_end - out.end;
        res.makespan = std::max(res.makespan, out.reduce_end);
      }
    }
  }
  if (!o.sums.stage_time.empty()) {
    // Each rank's gradient sums, one after another, each from its stage's
    // last gradient (or the rank's end, after its tied exchange), beside
    // the compute.
    for (int r = 0; r < s.ranks; ++r) {
      RankResult& out = res.per_rank[r];
      const double end = std::max(out.end, tied_end[static_cast<std::size_t>(r)]);
      std::vector<std::pair<double, int>> ready;
      for (int st : out.stages) {
        const bool at_end = !o.sums.at_end.empty() && o.sums.at_end[static_cast<std::size_t>(st)];
        ready.push_back({at_end ? end : grad_end[st], st});
      }
      std::sort(ready.begin(), ready.end());
      double t = 0.0;
      for (const auto& [when, st] : ready) t = std::max(t, when) + o.sums.stage_time[static_cast<std::size_t>(st)];
      out.reduce_end = std::max(t, end);
      out.exposed_reduce = out.reduce_end - out.end;
      res.makespan = std::max(res.makespan, out.reduce_end);
    }
  }
  if (!comm_free.empty()) {
    // The sharding collectives end after the compute where they were not hidden.
    for (int r = 0; r < s.ranks; ++r) {
      RankResult& out = res.per_rank[r];
      double after = 0.0;  // the rank's collectives after its optimizer step
      for (int st : out.stages) {
        if (!o.shards.after_step.empty()) after += o.shards.after_step[static_cast<std::size_t>(st)];
      }
      out.reduce_end = std::max({out.reduce_end, out.end, comm_free[static_cast<std::size_t>(r)]}) + after;
      out.exposed_reduce = out.reduce_end - out.end;
      res.makespan = std::max(res.makespan, out.reduce_end);
    }
  }
}

void AddUpdates(const Schedule& s, const SimOptions& o, SimResult& res) {
  const UpdateCosts& u = o.update;
  auto of_rank = [](const std::vector<double>& per_stage, const RankResult& r) {
    double t = 0.0;
    if (per_stage.empty()) return t;
    for (const int st : r.stages) t += per_stage[static_cast<std::size_t>(st)];
    return t;
  };
  // Per rank: its clip pass and its update; when it is done with its
  // gradients (its compute, the collectives after it, its pass); and with
  // a clip, when the norm is known (the slowest rank's pass, then the
  // exchange).
  const auto ranks = static_cast<std::size_t>(s.ranks);
  std::vector<double> pass(ranks), update(ranks), done(ranks);
  double norm_known = 0.0;
  for (std::size_t r = 0; r < ranks; ++r) {
    const RankResult& out = res.per_rank[r];
    pass[r] = of_rank(u.clip, out);
    update[r] = of_rank(u.stage_time, out);
    done[r] = std::max(out.end, out.reduce_end) + pass[r];
    norm_known = std::max(norm_known, done[r]);
  }
  norm_known += u.exchange;
  double busy = 0.0;
  res.makespan = 0.0;
  for (std::size_t r = 0; r < ranks; ++r) {
    RankResult& out = res.per_rank[r];
    const double from = u.clip.empty() ? done[r] : norm_known;
    out.clip_wait = from - done[r];
    out.update_end = from + update[r];
    out.busy += pass[r] + update[r];
    out.work += pass[r] + update[r];
    busy += out.busy;
    res.makespan = std::max(res.makespan, out.update_end);
  }
  res.bubble_rate = res.makespan > 0.0 ? 1.0 - busy / (s.ranks * res.makespan) : 0.0;
}

double GradientSumTime(double bytes, int replicas, double bucket_bytes, double latency, double bandwidth) {
  if (replicas <= 1 || bytes <= 0.0) return 0.0;
  const double d = replicas;
  const double buckets = bucket_bytes > 0.0 ? std::ceil(bytes / bucket_bytes) : 1.0;
  const double moved = 2.0 * (d - 1.0) / d * bytes;
  return buckets * 2.0 * (d - 1.0) * latency + (bandwidth > 0.0 ? moved / bandwidth : 0.0);
}

double ShardCollectiveTime(double bytes, int replicas, double latency, double bandwidth) {
  if (replicas <= 1 || bytes <= 0.0) return 0.0;
  const double d = replicas;
  return (d - 1.0) * latency + (bandwidth > 0.0 ? (d - 1.0) / d * bytes / bandwidth : 0.0);
}

}  // namespace baton
