// Chrome Trace Event JSON export of a simulated timeline.
//
// Format: the "JSON Object Format" of the Trace Event spec, which Perfetto
// and chrome://tracing both open:
//   {"traceEvents":[...], "displayTimeUnit":"ms", "otherData":{...}}
// Each rank is a process (pid = rank) with one thread (tid = rank, so thread
// ids stay unique across the trace), and, where the schedule shards its
// stages, a second thread (tid = ranks + rank) for its gathers and
// reduce-scatters; compute actions are complete ("X")
// events, an OVERLAP_F_B unit one event named "F&B"; a measured timeline's
// waits are events too, on the same thread (a rank waits or computes). The events are
// streamed with fmt rather than built as a JSON tree: a large simulation has
// hundreds of thousands of them.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <iterator>
#include <ostream>
#include <string>
#include <string_view>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "baton/error.h"
#include "baton/sim.h"

namespace baton {
namespace {

// Written out in batches so memory stays flat however long the timeline is.
constexpr std::size_t kFlushBytes = std::size_t{1} << 20;

std::string_view ComputeKindName(ActionKind kind) {
  switch (kind) {
    case ActionKind::kForward:
      return "F";
    case ActionKind::kBackward:
      return "B";
    case ActionKind::kBackwardInput:
      return "I";
    case ActionKind::kBackwardWeight:
      return "W";
    case ActionKind::kOverlapFB:
      return "F&B";
    default:
      return "";
  }
}

// A measured wait, by what it waited for.
std::string_view WaitName(ActionKind kind) {
  switch (kind) {
    case ActionKind::kRecvF:
      return "wait RECV_F";
    case ActionKind::kRecvB:
      return "wait RECV_B";
    case ActionKind::kReduceGrad:
      return "wait gradient sums";
    default:
      return "wait SEND";
  }
}

// Trace timestamps are microseconds; anything finer than a nanosecond is
// floating-point noise (0.1 x 1000 = 100.00000000000001) that would only
// make the file longer and the numbers harder to read.
double ToMicroseconds(double time, double us_per_unit) {
  return std::round(time * us_per_unit * 1000.0) / 1000.0;
}

// A JSON string literal. The schedule name may be a file path with bytes
// that are not UTF-8; those become U+FFFD instead of making the file invalid.
std::string JsonString(const std::string& text) {
  return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void Flush(fmt::memory_buffer& buffer, std::ostream& out) {
  out.write(buffer.data(), static_cast<std::streamsize>(buffer.size()));
  buffer.clear();
}

// The comma before every event but the first, and a line each.
void Separate(fmt::memory_buffer& buffer, bool& first) {
  if (!first) buffer.push_back(',');
  buffer.push_back('\n');
  first = false;
}

// Each rank's process and its compute thread, named and in rank order.
void NameRanks(fmt::memory_buffer& buffer, bool& first, int ranks) {
  for (int rank = 0; rank < ranks; ++rank) {
    Separate(buffer, first);
    fmt::format_to(std::back_inserter(buffer),
                   R"({{"name":"process_name","ph":"M","pid":{0},"tid":{0},)"
                   R"("args":{{"name":"rank {0}"}}}})",
                   rank);
    Separate(buffer, first);
    fmt::format_to(std::back_inserter(buffer),
                   R"({{"name":"process_sort_index","ph":"M","pid":{0},"tid":{0},)"
                   R"("args":{{"sort_index":{0}}}}})",
                   rank);
    Separate(buffer, first);
    fmt::format_to(std::back_inserter(buffer),
                   R"({{"name":"thread_name","ph":"M","pid":{0},"tid":{0},)"
                   R"("args":{{"name":"compute"}}}})",
                   rank);
  }
}

}  // namespace

void WriteChromeTrace(const SimResult& result, std::ostream& out, double us_per_unit) {
  if (!(us_per_unit > 0.0) || !std::isfinite(us_per_unit)) {
    throw ConfigError(fmt::format(
        "chrome trace: microseconds per time unit is {}; it must be a finite number > 0",
        us_per_unit));
  }
  const int ranks = std::max(result.ranks, static_cast<int>(result.timeline.size()));

  fmt::memory_buffer buffer;
  auto it = std::back_inserter(buffer);
  fmt::format_to(it, "{{\"traceEvents\":[");
  bool first = true;
  auto separator = [&] { Separate(buffer, first); };

  NameRanks(buffer, first, ranks);

  for (std::size_t rank = 0; rank < result.timeline.size(); ++rank) {
    bool announced = false;  // the rank's communication thread
    for (const TimedAction& timed : result.timeline[rank]) {
      const bool collective = !timed.wait && (timed.action.kind == ActionKind::kUnshard ||
                                              timed.action.kind == ActionKind::kReduceGrad);
      if (collective) {
        const int tid = ranks + static_cast<int>(rank);
        if (!announced) {
          separator();
          fmt::format_to(it,
                         R"({{"name":"thread_name","ph":"M","pid":{},"tid":{},)"
                         R"("args":{{"name":"communication"}}}})",
                         rank, tid);
          announced = true;
        }
        const double ts = ToMicroseconds(timed.start, us_per_unit);
        separator();
        fmt::format_to(it,
                       R"({{"name":"{}","cat":"communication","ph":"X","ts":{},"dur":{},"pid":{},"tid":{},)"
                       R"("args":{{"stage":{}}}}})",
                       KindName(timed.action.kind), ts,
                       ToMicroseconds(timed.end, us_per_unit) - ts, rank, tid, timed.action.stage);
        continue;
      }
      const std::string_view kind = timed.wait ? WaitName(timed.action.kind) : ComputeKindName(timed.action.kind);
      if (kind.empty()) continue;  // communication takes no compute time
      // Both ends are rounded, so back-to-back actions touch exactly and
      // Perfetto never sees a sliver of overlap it would have to nest.
      const double ts = ToMicroseconds(timed.start, us_per_unit);
      const double dur = ToMicroseconds(timed.end, us_per_unit) - ts;
      separator();
      fmt::format_to(it,
                     R"({{"name":"{0}","cat":"{6}","ph":"X","ts":{1},"dur":{2},)"
                     R"("pid":{3},"tid":{3},"args":{{"stage":{4},"microbatch":{5})",
                     kind, ts, dur, rank, timed.action.stage, timed.action.microbatch, timed.wait ? "wait" : kind);
      if (timed.step >= 0) fmt::format_to(it, R"(,"step":{})", timed.step);
      if (timed.action.kind == ActionKind::kOverlapFB) {
        // The unit's F is stage/microbatch; its B gets its own pair.
        fmt::format_to(it, R"(,"backward_stage":{},"backward_microbatch":{})", timed.action.backward_stage,
                       timed.action.backward_microbatch);
      }
      fmt::format_to(it, "}}}}");
      if (buffer.size() >= kFlushBytes) Flush(buffer, out);
    }
  }

  fmt::format_to(it,
                 "\n],\n\"displayTimeUnit\":\"ms\",\n\"otherData\":{{\"schedule\":{},"
                 "\"ranks\":{},\"microbatches\":{},\"chunks\":{},\"makespan\":{},"
                 "\"bubble_rate\":{},\"span_bubble_rate\":{},\"us_per_unit\":{}}}}}\n",
                 JsonString(result.schedule), result.ranks, result.microbatches, result.chunks,
                 std::isfinite(result.makespan) ? result.makespan : 0.0,
                 std::isfinite(result.bubble_rate) ? result.bubble_rate : 0.0,
                 std::isfinite(result.span_bubble_rate) ? result.span_bubble_rate : 0.0,
                 us_per_unit);
  Flush(buffer, out);
}

}  // namespace baton
