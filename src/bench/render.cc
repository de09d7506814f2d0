#include "render.h"

#include <fmt/format.h>

#include <algorithm>
#include <sstream>

#include "baton/files.h"
#include "baton/sim.h"

namespace baton {
namespace {

// One rank's events of step `step` into `row`, shifted by `offset` seconds,
// in milliseconds; waits too where `waits`.
void AddEvents(const StepRecord& s, int step, double offset, bool waits, std::vector<TimedAction>& row) {
  for (const ActionEvent& e : s.events) {
    const bool compute = IsCompute(e.kind);
    if (!compute && !waits) continue;
    TimedAction t;
    t.action = Action{e.stage, e.kind, e.microbatch};
    t.start = (offset + e.start) * 1e3;
    t.end = (offset + e.end) * 1e3;
    t.wait = !compute;
    t.step = step;
    row.push_back(t);
  }
}

// A measured timeline as a SimResult (the ranks' start, end, busy and span,
// the makespan and bubbles as the simulator defines them).
void Summarize(SimResult& r) {
  double busy = 0, max_span = 0;
  for (int k = 0; k < r.ranks; ++k) {
    RankResult& rr = r.per_rank[static_cast<std::size_t>(k)];
    rr.rank = k;
    bool first = true;
    for (const TimedAction& t : r.timeline[static_cast<std::size_t>(k)]) {
      if (t.wait) continue;
      if (first) rr.start = t.start;
      first = false;
      rr.end = t.end;
      rr.busy += t.end - t.start;
    }
    rr.work = rr.busy;
    rr.span = rr.end - rr.start;
    r.makespan = std::max(r.makespan, rr.end);
    busy += rr.busy;
    max_span = std::max(max_span, rr.span);
  }
  r.bubble_rate = r.makespan > 0 ? 1 - busy / (r.ranks * r.makespan) : 0;
  r.span_bubble_rate = max_span > 0 ? 1 - busy / (r.ranks * max_span) : 0;
}

}  // namespace

void WriteBenchTrace(const std::string& path, const std::string& schedule, const std::vector<RankRecord>& records) {
  SimResult r;
  r.schedule = schedule;
  r.ranks = static_cast<int>(records.size());
  r.timeline.resize(records.size());
  r.per_rank.resize(records.size());
  double offset = 0;
  for (std::size_t k = 0; k < records.front().steps.size(); ++k) {
    double longest = 0;
    for (std::size_t rank = 0; rank < records.size(); ++rank) {
      const StepRecord& s = records[rank].steps[k];
      AddEvents(s, static_cast<int>(k), offset, /*waits=*/true, r.timeline[rank]);
      longest = std::max(longest, s.wall);
    }
    offset += longest;
  }
  Summarize(r);
  std::ostringstream out;
  WriteChromeTrace(r, out, 1000.0);  // one unit, a millisecond
  WriteTextFile(path, out.str());
}

void WriteBenchSvg(const std::string& path, const BenchContext& c, const BenchAnalysis& a,
                   const std::vector<RankRecord>& records) {
  const Schedule& s = c.plan->lowered;
  SimResult measured;
  measured.schedule = fmt::format("{}: measured step {} (ms)", a.report.schedule, a.median_step);
  measured.ranks = s.ranks;
  measured.microbatches = s.microbatches;
  measured.chunks = s.chunks();
  measured.timeline.resize(static_cast<std::size_t>(s.ranks));
  measured.per_rank.resize(static_cast<std::size_t>(s.ranks));
  for (int k = 0; k < s.ranks; ++k) {
    for (int st = 0; st < s.stages; ++st) {
      if (s.stage_rank[st] == k) measured.per_rank[static_cast<std::size_t>(k)].stages.push_back(st);
    }
    // The first replica's pipeline.
    const RankRecord& r = records[static_cast<std::size_t>(c.layout.World(k, 0))];
    AddEvents(r.steps[a.median_step], -1, 0.0, /*waits=*/false, measured.timeline[static_cast<std::size_t>(k)]);
  }
  Summarize(measured);
  SimResult simulated = a.predicted;
  simulated.schedule = fmt::format("{}: simulated from the measured costs (ms)", a.report.schedule);
  ScaleTimes(simulated, 1e3);
  std::ostringstream out;
  WriteSvgStack({measured, simulated}, out);
  WriteTextFile(path, out.str());
}

}  // namespace baton
