// Tests for the Chrome trace and SVG exporters, on SimResults built by hand
// so the expected times are known exactly.
#include <cstddef>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "baton/error.h"
#include "baton/sim.h"

namespace baton {
namespace {

TimedAction Timed(int stage, ActionKind kind, int microbatch, double start, double end) {
  return {Action{stage, kind, microbatch}, start, end};
}

// 1F1B on 2 ranks with 2 microbatches, F = 1 and B = 2 time units.
//   rank 0: F0 F1 . . . B0 B0 B1 B1        (times 0-2, 5-9)
//   rank 1:    F0 B0 B0 F1 B1 B1           (times 1-7)
SimResult TwoRankResult() {
  SimResult r;
  r.schedule = "1f1b";
  r.ranks = 2;
  r.microbatches = 2;
  r.chunks = 1;
  r.timeline = {
      {Timed(0, ActionKind::kForward, 0, 0, 1), Timed(0, ActionKind::kForward, 1, 1, 2),
       Timed(0, ActionKind::kBackward, 0, 5, 7), Timed(0, ActionKind::kBackward, 1, 7, 9)},
      {Timed(1, ActionKind::kForward, 0, 1, 2), Timed(1, ActionKind::kBackward, 0, 2, 4),
       Timed(1, ActionKind::kForward, 1, 4, 5), Timed(1, ActionKind::kBackward, 1, 5, 7)},
  };
  r.makespan = 9;
  r.bubble_rate = 1 - 12.0 / (2 * 9);
  r.span_bubble_rate = r.bubble_rate;
  for (int rank = 0; rank < 2; ++rank) {
    RankResult rr;
    rr.rank = rank;
    rr.stages = {rank};
    r.per_rank.push_back(rr);
  }
  return r;
}

std::size_t CountAll(std::string_view text, std::string_view needle) {
  std::size_t count = 0;
  for (std::size_t at = text.find(needle); at != std::string_view::npos;
       at = text.find(needle, at + needle.size())) {
    ++count;
  }
  return count;
}

nlohmann::json Trace(const SimResult& result, double us_per_unit = 1000.0) {
  std::ostringstream out;
  WriteChromeTrace(result, out, us_per_unit);
  return nlohmann::json::parse(out.str());
}

std::string Svg(const SimResult& result) {
  std::ostringstream out;
  WriteSvg(result, out);
  return out.str();
}

// ---- Chrome trace ----

TEST(ChromeTraceTest, OneCompleteEventPerActionWithTimesInMicroseconds) {
  const SimResult result = TwoRankResult();
  const nlohmann::json trace = Trace(result, 1000.0);
  EXPECT_EQ(trace.at("displayTimeUnit"), "ms");

  std::vector<nlohmann::json> events;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") == "X") events.push_back(e);
  }
  ASSERT_EQ(events.size(), 8u);
  // Written rank by rank, in timeline order.
  std::size_t k = 0;
  for (int rank = 0; rank < 2; ++rank) {
    for (const TimedAction& t : result.timeline[rank]) {
      const nlohmann::json& e = events[k++];
      const std::string kind = t.action.kind == ActionKind::kForward ? "F" : "B";
      EXPECT_EQ(e.at("name"), kind);
      EXPECT_EQ(e.at("cat"), kind);
      EXPECT_EQ(e.at("pid"), rank);
      EXPECT_EQ(e.at("tid"), rank);
      EXPECT_DOUBLE_EQ(e.at("ts").get<double>(), t.start * 1000);
      EXPECT_DOUBLE_EQ(e.at("dur").get<double>(), (t.end - t.start) * 1000);
      EXPECT_EQ(e.at("args").at("stage"), t.action.stage);
      EXPECT_EQ(e.at("args").at("microbatch"), t.action.microbatch);
    }
  }
}

TEST(ChromeTraceTest, OneNamedAndSortedProcessPerRank) {
  const nlohmann::json trace = Trace(TwoRankResult());
  std::map<int, std::string> names;
  std::map<int, int> sort_index;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") != "M") continue;
    const int pid = e.at("pid");
    if (e.at("name") == "process_name") {
      EXPECT_TRUE(names.emplace(pid, e.at("args").at("name")).second) << "pid " << pid;
    } else if (e.at("name") == "process_sort_index") {
      sort_index[pid] = e.at("args").at("sort_index");
    }
  }
  EXPECT_EQ(names, (std::map<int, std::string>{{0, "rank 0"}, {1, "rank 1"}}));
  EXPECT_EQ(sort_index, (std::map<int, int>{{0, 0}, {1, 1}}));
}

TEST(ChromeTraceTest, ScaleIsAppliedAndFloatingPointNoiseRoundedAway) {
  SimResult result;
  result.ranks = 1;
  result.timeline = {{Timed(0, ActionKind::kForward, 0, 0.1, 0.3),
                      Timed(0, ActionKind::kBackwardInput, 0, 0.3, 0.7),
                      Timed(0, ActionKind::kBackwardWeight, 0, 0.7, 1.0)}};
  const nlohmann::json trace = Trace(result, 1000.0);
  std::vector<std::vector<double>> got;
  std::vector<std::string> names;
  for (const auto& e : trace.at("traceEvents")) {
    if (e.at("ph") != "X") continue;
    got.push_back({e.at("ts").get<double>(), e.at("dur").get<double>()});
    names.push_back(e.at("name"));
  }
  // 0.1 x 1000 is 100.00000000000001 in floating point; ts is exactly 100.
  EXPECT_EQ(got, (std::vector<std::vector<double>>{{100, 200}, {300, 400}, {700, 300}}));
  EXPECT_EQ(names, (std::vector<std::string>{"F", "I", "W"}));

  const nlohmann::json in_seconds = Trace(result, 1e6);
  EXPECT_DOUBLE_EQ(in_seconds.at("traceEvents").back().at("ts").get<double>(), 700000);
}

TEST(ChromeTraceTest, SkipsCommunicationActions) {
  SimResult result = TwoRankResult();
  result.timeline[0].push_back(Timed(0, ActionKind::kSendF, 1, 2, 2));
  const nlohmann::json trace = Trace(result);
  std::size_t complete = 0;
  for (const auto& e : trace.at("traceEvents")) complete += e.at("ph") == "X";
  EXPECT_EQ(complete, 8u);
}

TEST(ChromeTraceTest, ScheduleNameIsEscaped) {
  SimResult result = TwoRankResult();
  result.schedule = "dir/\"my\" sched\\ule\n\t.csv";
  EXPECT_EQ(Trace(result).at("otherData").at("schedule"), result.schedule);
  // Bytes that are not UTF-8 (a file name, say) must not break the JSON.
  result.schedule = "bad\xff\xfe name";
  EXPECT_EQ(Trace(result).at("otherData").at("schedule"), "bad\xEF\xBF\xBD\xEF\xBF\xBD name");
}

TEST(ChromeTraceTest, EmptyResultIsValidJson) {
  const nlohmann::json trace = Trace(SimResult{});
  EXPECT_TRUE(trace.at("traceEvents").empty());
}

TEST(ChromeTraceTest, RejectsNonPositiveScale) {
  std::ostringstream out;
  EXPECT_THROW(WriteChromeTrace(TwoRankResult(), out, 0.0), ConfigError);
  EXPECT_THROW(WriteChromeTrace(TwoRankResult(), out, -1.0), ConfigError);
}

// ---- SVG ----

// The fill of the group each box is drawn in, keyed by the box's tooltip
// ("0F1 on rank 0, ...").
std::map<std::string, std::string> BoxFills(const std::string& svg) {
  std::map<std::string, std::string> fills;
  std::string fill;
  for (std::size_t at = 0; at < svg.size();) {
    const std::size_t group = svg.find("<g class=\"boxes\" fill=\"", at);
    const std::size_t box = svg.find("<rect class=\"box\"", at);
    if (box == std::string::npos) break;
    if (group < box) {
      const std::size_t value = svg.find("fill=\"", group) + 6;
      fill = svg.substr(value, svg.find('"', value) - value);
      at = group + 1;
      continue;
    }
    const std::size_t title = svg.find("<title>", box) + 7;
    fills[svg.substr(title, svg.find(" on rank", title) - title)] = fill;
    at = box + 1;
  }
  return fills;
}

TEST(SvgTest, WellFormedWithOneBoxPerAction) {
  const std::string svg = Svg(TwoRankResult());
  EXPECT_EQ(svg.rfind("<svg ", 0), 0u);
  EXPECT_EQ(svg.substr(svg.find_last_not_of('\n') - 5, 6), "</svg>");
  EXPECT_EQ(CountAll(svg, "<rect class=\"box\""), 8u);
  EXPECT_EQ(CountAll(svg, "<g"), CountAll(svg, "</g>"));
  EXPECT_EQ(CountAll(svg, "<text"), CountAll(svg, "</text>"));
  EXPECT_EQ(CountAll(svg, "\""), 2 * (CountAll(svg, "=\"")));
  EXPECT_NE(svg.find(">rank 0</text>"), std::string::npos);
  EXPECT_NE(svg.find(">rank 1</text>"), std::string::npos);
}

TEST(SvgTest, BoxesShowTheirMicrobatch) {
  const std::string svg = Svg(TwoRankResult());
  // Up to the time axis, whose tick labels are numbers too.
  const std::string boxes = svg.substr(0, svg.find("<g class=\"axis\""));
  // Each rank runs F and B on microbatches 0 and 1: four labels each.
  EXPECT_EQ(CountAll(boxes, ">0</text>"), 4u);
  EXPECT_EQ(CountAll(boxes, ">1</text>"), 4u);
}

// Sequence slices: a unit is labelled microbatch.slice, and the title
// counts microbatches and slices.
TEST(SvgTest, SlicesAreLabelledMicrobatchDotSlice) {
  const std::string svg = Svg(Simulate(GenerateSeq1F1B(2, 2, 2)));
  const std::string boxes = svg.substr(0, svg.find("<g class=\"axis\""));
  // Each rank runs F and B of microbatch 1's slice 0 (unit 2): two labels each.
  EXPECT_EQ(CountAll(boxes, ">1.0</text>"), 4u);
  EXPECT_EQ(CountAll(boxes, ">0.1</text>"), 4u);
  EXPECT_NE(svg.find("m = 2 × 2 slices"), std::string::npos);
}

TEST(SvgTest, TitleCarriesScheduleAndMetrics) {
  const std::string svg = Svg(TwoRankResult());
  EXPECT_NE(svg.find(">1f1b</text>"), std::string::npos);
  EXPECT_NE(svg.find("p = 2 · m = 2 · v = 1"), std::string::npos);
  EXPECT_NE(svg.find("makespan 9"), std::string::npos);
  EXPECT_NE(svg.find("bubble 33.3 %"), std::string::npos);
}

TEST(SvgTest, LegendListsOnlyKindsPresent) {
  const std::string svg = Svg(TwoRankResult());
  EXPECT_NE(svg.find("F  forward"), std::string::npos);
  EXPECT_NE(svg.find("B  backward"), std::string::npos);
  EXPECT_EQ(svg.find("backward, weight"), std::string::npos);
  EXPECT_EQ(svg.find("backward, input"), std::string::npos);
}

TEST(SvgTest, SpecialCharactersAreEscaped) {
  SimResult result = TwoRankResult();
  result.schedule = "a<b & \"c\" 'd'\n\x01\xff";
  const std::string svg = Svg(result);
  EXPECT_NE(svg.find("a&lt;b &amp; &quot;c&quot; &apos;d&apos; \xEF\xBF\xBD\xEF\xBF\xBD"),
            std::string::npos);
  EXPECT_EQ(svg.find("a<b"), std::string::npos);
  EXPECT_EQ(svg.find('\x01'), std::string::npos);
  EXPECT_EQ(svg.find('\xff'), std::string::npos);
}

TEST(SvgTest, ChunksAreShadedByPositionOnTheirRank) {
  // V placement on 2 ranks: rank 0 holds stages 0 and 3, rank 1 stages 1 and
  // 2. Stage 3 is rank 0's chunk 1 although 3 mod 2 = 1 would say otherwise.
  SimResult result;
  result.schedule = "v";
  result.ranks = 2;
  result.microbatches = 1;
  result.chunks = 2;
  result.timeline = {
      {Timed(0, ActionKind::kForward, 0, 0, 1), Timed(3, ActionKind::kForward, 0, 3, 4)},
      {Timed(1, ActionKind::kForward, 0, 1, 2), Timed(2, ActionKind::kForward, 0, 2, 3)},
  };
  result.makespan = 4;
  result.per_rank.resize(2);
  result.per_rank[0].rank = 0;
  result.per_rank[0].stages = {0, 3};
  result.per_rank[1].rank = 1;
  result.per_rank[1].stages = {1, 2};

  const std::map<std::string, std::string> fills = BoxFills(Svg(result));
  ASSERT_EQ(fills.size(), 4u);
  EXPECT_EQ(fills.at("0F0"), fills.at("1F0"));
  EXPECT_EQ(fills.at("3F0"), fills.at("2F0"));
  EXPECT_NE(fills.at("0F0"), fills.at("3F0"));
}

TEST(SvgTest, ManyActionsDropDetailAndStaySmall) {
  constexpr int kRanks = 8;
  constexpr int kPerRank = 6000;
  SimResult result;
  result.schedule = "long";
  result.ranks = kRanks;
  result.timeline.resize(kRanks);
  for (int rank = 0; rank < kRanks; ++rank) {
    double t = rank;
    for (int j = 0; j < kPerRank / 2; ++j) {
      result.timeline[rank].push_back(Timed(rank, ActionKind::kForward, j, t, t + 1));
      result.timeline[rank].push_back(Timed(rank, ActionKind::kBackward, j, t + 1, t + 3));
      t += 3;
    }
    result.makespan = std::max(result.makespan, t);
  }
  const std::string svg = Svg(result);
  EXPECT_EQ(svg.rfind("<svg ", 0), 0u);
  EXPECT_EQ(CountAll(svg, "<rect class=\"box\""), 0u);
  // One path per colour and rank; the row labels are the only texts there.
  EXPECT_EQ(CountAll(svg, "<path"), 2u * kRanks);
  EXPECT_EQ(CountAll(svg, ">1234</text>"), 0u);
  EXPECT_LT(svg.size(), 16u * kRanks * kPerRank);
}

TEST(SvgTest, EmptyResultStillDraws) {
  const std::string svg = Svg(SimResult{});
  EXPECT_EQ(svg.rfind("<svg ", 0), 0u);
  EXPECT_EQ(CountAll(svg, "<rect class=\"box\""), 0u);
  EXPECT_EQ(CountAll(svg, "<g"), CountAll(svg, "</g>"));
}

}  // namespace
}  // namespace baton
