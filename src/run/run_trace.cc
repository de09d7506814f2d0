#include "run_trace.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <optional>
#include <tuple>
#include <type_traits>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "baton/error.h"
#include "baton/files.h"
#include "baton/timing.h"

namespace baton {

namespace {

static_assert(std::is_trivially_copyable_v<ActionEvent>, "a rank's events travel as their bytes");

std::string Bytes(const void* data, std::size_t size) { return std::string(static_cast<const char*>(data), size); }

std::string Num(double v) { return fmt::format("{:.3f}", v); }  // microseconds, to the nanosecond

// A compute action's end (or start) moved inside it by at most 1 us, so
// that a flow's arrow binds to the slice it leaves (or enters).
double Inside(double edge_us, double dur_us, double sign) { return edge_us + sign * std::min(1.0, dur_us / 2); }

}  // namespace

ClockOffsets MeasureClockOffsets(Transport& t, const std::vector<char>& same_host, int rounds) {
  const std::size_t n = static_cast<std::size_t>(t.size());
  ClockOffsets c;
  c.offset_s.assign(n, 0.0);
  c.bound_s.assign(n, 0.0);
  if (std::all_of(same_host.begin(), same_host.end(), [](char s) { return s != 0; })) return c;
  std::vector<double> best(n, std::numeric_limits<double>::infinity());
  for (int k = 0; k < rounds; ++k) {
    std::string go = "t";
    const double sent = MonotonicSeconds();  // rank 0's
    t.BroadcastString(&go);
    const double mine = MonotonicSeconds();
    std::vector<std::string> all;
    t.GatherStrings(Bytes(&mine, sizeof mine), &all, "every rank's clock (log.trace)");
    const double back = MonotonicSeconds();
    if (t.rank() != 0) continue;
    for (std::size_t r = 0; r < n; ++r) {
      if (same_host[r] || all[r].size() != sizeof(double)) continue;
      double theirs = 0;
      std::memcpy(&theirs, all[r].data(), sizeof theirs);
      const double half = (back - sent) / 2;
      if (half < best[r]) {
        best[r] = half;
        c.offset_s[r] = theirs - (sent + back) / 2;
        c.bound_s[r] = half;
      }
    }
  }
  std::string both = Bytes(c.offset_s.data(), n * sizeof(double)) + Bytes(c.bound_s.data(), n * sizeof(double));
  t.BroadcastString(&both);
  std::memcpy(c.offset_s.data(), both.data(), n * sizeof(double));
  std::memcpy(c.bound_s.data(), both.data() + n * sizeof(double), n * sizeof(double));
  return c;
}

RunTrace::RunTrace(const TrainConfig& c, Transport& world, RunSetup& u)
    : on_(!c.log.trace.empty()), every_(c.log.trace_every), path_(c.log.trace), world_(&world), u_(&u) {
  if (!on_) return;
  std::vector<std::string> hosts;
  world.GatherStrings(u.env->HostName(), &hosts, "every rank's host (log.trace)");
  std::string same(static_cast<std::size_t>(world.size()), '\1');
  for (std::size_t r = 0; r < hosts.size(); ++r) same[r] = hosts[r] == hosts[0] ? '\1' : '\0';
  world.BroadcastString(&same);
  same_host_.assign(same.begin(), same.end());
  clocks_ = MeasureClockOffsets(world, same_host_, 8);
  base_s_ = MonotonicSeconds();
  if (world.rank() != 0 || u.first_step <= 1) return;
  // Going on from a step: the file's events of the steps before it are
  // kept, and this run's come after them.
  std::string text;
  try {
    text = ReadTextFile(path_, "trace file", std::size_t{1} << 30);
  } catch (const ConfigError&) {
    return;  // none (or unreadable): the trace starts here
  }
  double end_us = 0;
  try {
    const nlohmann::json old = nlohmann::json::parse(text);
    for (const nlohmann::json& e : old.at("traceEvents")) {
      if (e.value("ph", "") == "M") continue;  // made again at each write
      const auto step = e.find("args") != e.end() ? e["args"].value("step", std::int64_t{0}) : 0;
      if (step >= u.first_step) continue;
      end_us = std::max(end_us, e.value("ts", 0.0) + e.value("dur", 0.0));
      next_flow_ = std::max(next_flow_, e.value("id", std::int64_t{0}) + 1);
      lines_.push_back(e.dump());
    }
  } catch (const nlohmann::json::exception&) {
    std::fprintf(stderr, "baton: %s: not a trace this run can go on with; its trace starts again\n", path_.c_str());
    lines_.clear();
    return;
  }
  base_s_ -= end_us * 1e-6 + 1e-3;  // a millisecond after the last kept event
}

void RunTrace::StepStarts(std::int64_t) {
  events_.clear();
  events_.reserve(u_->exec->EventsPerStep());
  u_->exec->SetRecorder(&events_);
  step_start_ = MonotonicSeconds();
  u_->exec->StartDeviceClock();
}

void RunTrace::StepEnds(std::int64_t step) {
  u_->exec->ApplyDeviceClock(0, step_start_);
  u_->exec->SetRecorder(nullptr);
  // Checked again at each traced step: clocks of other hosts drift.
  clocks_ = MeasureClockOffsets(*world_, same_host_, 2);
  std::vector<std::string> all;
  world_->GatherStrings(Bytes(events_.data(), events_.size() * sizeof(ActionEvent)), &all,
                        "every rank's traced step (log.trace)");
  if (world_->rank() != 0) return;
  AddStep(step, all);
  // The file is rewritten whole (atomically): a long run's grows, so it is
  // rewritten only while that takes at most 0.5% of the time since the
  // last write; otherwise at the next checkpoint, stop or end.
  if (last_write_s_ <= 0.005 * (MonotonicSeconds() - last_write_at_)) Write();
}

void RunTrace::AddStep(std::int64_t step, const std::vector<std::string>& packed) {
  const int replicas = std::max(1, u_->plan.replicas);
  struct Placed {
    int rank;
    double start, dur;  // microseconds on the trace
  };
  // A compute action by (replica, forward, stage, microbatch).
  std::map<std::tuple<int, bool, int, int>, Placed> compute;
  std::vector<std::pair<int, ActionEvent>> all;
  std::vector<PathAction> actions;  // every compute action, for the critical path
  for (std::size_t r = 0; r < packed.size(); ++r) {
    const std::size_t n = packed[r].size() / sizeof(ActionEvent);
    for (std::size_t k = 0; k < n; ++k) {
      ActionEvent e;
      std::memcpy(&e, packed[r].data() + k * sizeof(ActionEvent), sizeof e);
      const int rank = static_cast<int>(r);
      all.push_back({rank, e});
      const double at = Ts(e.start - clocks_.offset_s[r]), dur = (e.end - e.start) * 1e6;
      const bool compute_kind = IsCompute(e.kind);
      lines_.push_back(fmt::format(
          R"({{"name":"{}","cat":"{}","ph":"X","ts":{},"dur":{},"pid":{},"tid":{},"args":{{"step":{},"stage":{},"microbatch":{}}}}})",
          KindName(e.kind), compute_kind ? "compute" : "wait", Num(at), Num(dur), rank, compute_kind ? 0 : 1, step,
          e.stage, e.microbatch));
      if (e.kind == ActionKind::kForward || IsInputBackward(e.kind)) {
        compute[{rank % replicas, e.kind == ActionKind::kForward, e.stage, e.microbatch}] = {rank, at, dur};
      }
      if (compute_kind) actions.push_back({rank, at, at + dur, e.kind, e.stage, e.microbatch});
    }
  }
  AddCriticalPath(step, std::move(actions), replicas);
  // Each message: from the action that made it to the one that used it,
  // where they ran on different ranks (an activation forward, an input
  // gradient back).
  for (const auto& [key, from] : compute) {
    const auto& [replica, forward, stage, microbatch] = key;
    const auto to = compute.find({replica, forward, forward ? stage + 1 : stage - 1, microbatch});
    if (to == compute.end() || to->second.rank == from.rank) continue;
    const std::int64_t id = next_flow_++;
    const char* name = forward ? "activation" : "gradient";
    lines_.push_back(fmt::format(
        R"({{"name":"{}","cat":"message","ph":"s","id":{},"ts":{},"pid":{},"tid":0,"args":{{"step":{},"stage":{},"microbatch":{}}}}})",
        name, id, Num(Inside(from.start + from.dur, from.dur, -1)), from.rank, step, stage, microbatch));
    lines_.push_back(fmt::format(
        R"({{"name":"{}","cat":"message","ph":"f","bp":"e","id":{},"ts":{},"pid":{},"tid":0,"args":{{"step":{},"stage":{},"microbatch":{}}}}})",
        name, id, Num(Inside(to->second.start, to->second.dur, +1)), to->second.rank, step,
        std::get<2>(to->first), microbatch));
  }
}

void RunTrace::AddCriticalPath(std::int64_t step, std::vector<PathAction> actions, int replicas) {
  if (actions.empty()) return;
  // Each rank's actions in the order they ran; each forward or input
  // backward by (replica, forward, stage, microbatch): whose message it
  // waits for.
  std::map<int, std::vector<std::size_t>> by_rank;
  std::map<std::tuple<int, bool, int, int>, std::size_t> made;
  std::sort(actions.begin(), actions.end(), [](const PathAction& a, const PathAction& b) { return a.start < b.start; });
  for (std::size_t k = 0; k < actions.size(); ++k) {
    const PathAction& a = actions[k];
    by_rank[a.rank].push_back(k);
    if (a.kind == ActionKind::kForward || IsInputBackward(a.kind)) {
      made[{a.rank % replicas, a.kind == ActionKind::kForward, a.stage, a.microbatch}] = k;
    }
  }
  std::vector<std::size_t> position(actions.size());
  for (const auto& [rank, list] : by_rank) {
    for (std::size_t i = 0; i < list.size(); ++i) position[list[i]] = i;
  }
  // Back from the action that ended last: to whichever of its inputs came
  // last, the action before it on its rank or the message it used (from
  // another rank), until an action waited for neither.
  std::size_t at = 0;
  for (std::size_t k = 1; k < actions.size(); ++k) {
    if (actions[k].end > actions[at].end) at = k;
  }
  for (std::size_t hops = 0; hops < actions.size(); ++hops) {
    const PathAction& a = actions[at];
    lines_.push_back(fmt::format(
        R"({{"name":"{}","cat":"critical","ph":"X","ts":{},"dur":{},"pid":{},"tid":2,"args":{{"step":{},"stage":{},"microbatch":{}}}}})",
        KindName(a.kind), Num(a.start), Num(a.end - a.start), a.rank, step, a.stage, a.microbatch));
    std::optional<std::size_t> local, message;
    if (position[at] > 0) local = by_rank[a.rank][position[at] - 1];
    const bool forward = a.kind == ActionKind::kForward;
    if (forward || IsInputBackward(a.kind)) {
      const auto from = made.find({a.rank % replicas, forward, forward ? a.stage - 1 : a.stage + 1, a.microbatch});
      if (from != made.end() && actions[from->second].rank != a.rank) message = from->second;
    }
    if (message && (!local || actions[*message].end > actions[*local].end)) {
      at = *message;
    } else if (local) {
      at = *local;
    } else {
      break;
    }
  }
}

void RunTrace::Mark(std::string_view what, std::int64_t step, bool write) {
  if (!on_ || world_->rank() != 0) return;
  lines_.push_back(fmt::format(R"({{"name":"{}","cat":"run","ph":"i","s":"g","ts":{},"pid":0,"tid":0,"args":{{"step":{}}}}})",
                               what, Num(Ts(MonotonicSeconds())), step));
  if (write) Write();
}

void RunTrace::MarkLate(std::string_view what, std::int64_t step, int pid, std::string_view late) {
  if (!on_ || world_->rank() != 0) return;
  lines_.push_back(fmt::format(R"({{"name":"{}","cat":"late","ph":"i","s":"p","ts":{},"pid":{},"tid":0,"args":{{"step":{},"late":{}}}}})",
                               what, Num(Ts(MonotonicSeconds())), pid, step, late));
}

void RunTrace::Write() {
  if (!on_ || world_->rank() != 0) return;
  const int replicas = std::max(1, u_->plan.replicas);
  std::string out = "{\"traceEvents\":[\n";
  for (int r = 0; r < world_->size(); ++r) {
    out += fmt::format(R"j({{"name":"process_name","ph":"M","pid":{0},"tid":0,"args":{{"name":"rank {0} (pipeline rank {1}, replica {2})"}}}},)j",
                       r, r / replicas, r % replicas);
    out += "\n";
    out += fmt::format(R"({{"name":"process_sort_index","ph":"M","pid":{0},"tid":0,"args":{{"sort_index":{0}}}}},)", r);
    out += "\n";
    out += fmt::format(R"({{"name":"thread_name","ph":"M","pid":{},"tid":0,"args":{{"name":"compute"}}}},)", r);
    out += "\n";
    out += fmt::format(R"({{"name":"thread_name","ph":"M","pid":{},"tid":1,"args":{{"name":"waits"}}}},)", r);
    out += "\n";
    out += fmt::format(R"({{"name":"thread_name","ph":"M","pid":{},"tid":2,"args":{{"name":"critical path"}}}})", r);
    out += lines_.empty() && r + 1 == world_->size() ? "\n" : ",\n";
  }
  for (std::size_t k = 0; k < lines_.size(); ++k) {
    out += lines_[k];
    out += k + 1 < lines_.size() ? ",\n" : "\n";
  }
  out += fmt::format("],\"displayTimeUnit\":\"ms\",\"otherData\":{{\"trace_every\":{},\"clock_offsets_s\":[{}],"
                     "\"clock_bounds_s\":[{}]}}}}\n",
                     every_, fmt::join(clocks_.offset_s, ","), fmt::join(clocks_.bound_s, ","));
  const double began = MonotonicSeconds();
  WriteTextFile(path_, out, *u_->env);
  last_write_at_ = MonotonicSeconds();
  last_write_s_ = last_write_at_ - began;
}

}  // namespace baton
