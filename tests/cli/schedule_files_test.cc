// Every schedule file shipped in schedules/ loads, validates, simulates with
// sensible numbers and survives a write/read round trip.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "baton/error.h"
#include "baton/schedule.h"
#include "baton/sim.h"

namespace baton {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> ScheduleFiles() {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(fs::path(BATON_SOURCE_DIR) / "schedules")) {
    if (entry.is_regular_file() && entry.path().extension() == ".csv") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string ReadBytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Numbers worked out by hand for the files this repository ships (README.md
// in schedules/ explains each); a file added later gets the generic checks.
struct Expected {
  double makespan;
  std::vector<std::vector<int>> peak_in_flight;  // per rank, per stage of the rank
};
const std::map<std::string, Expected>& KnownFiles() {
  static const auto* known = new std::map<std::string, Expected>{
      // Rank 0 keeps at most 3 microbatches in flight instead of 4; each
      // further microbatch then waits a round trip: 6 units each, not 3.
      {"1f1b_4x8_early_backward.csv", {48.0, {{3}, {3}, {2}, {1}}}},
      // ZB-H1: 1F1B's makespan 33 less (p - 1) x W moved into the bubble.
      {"zb_h1_4x8_compute_comms.csv", {27.0, {{4}, {4}, {4}, {4}}}},
      // GPipe: (m + p - 1) x (F + B) = 5 x 3.
      {"gpipe_2x4_pytorch.csv", {15.0, {{4}, {4}}}},
      // DualPipeV: every rank busy m x (F + B) = 30, and the largest idle
      // is DeepSeek's (PP/2 - 1)(F&B + B - 3W) = 3 x (1.5 + 1 - 1.5) with
      // chunks of half a rank. Rank r holds 2p - r microbatches of its chunk
      // 0 and r + 1 of its chunk 1 at their peaks: PP + 1 chunks together.
      {"dualpipev_4x10_pytorch.csv", {33.0, {{8, 1}, {7, 2}, {6, 3}, {5, 4}}}},
  };
  return *known;
}

TEST(ScheduleFilesTest, ThereAreAtLeastThreeFiles) {
  EXPECT_GE(ScheduleFiles().size(), 3u);
  for (const auto& [name, expected] : KnownFiles()) {
    EXPECT_TRUE(fs::exists(fs::path(BATON_SOURCE_DIR) / "schedules" / name)) << name;
  }
}

TEST(ScheduleFilesTest, SomeFileHasPytorchCrlfLineEnds) {
  int crlf = 0;
  for (const fs::path& path : ScheduleFiles()) crlf += ReadBytes(path).find("\r\n") != std::string::npos;
  EXPECT_GE(crlf, 1);
}

TEST(ScheduleFilesTest, EveryFileValidatesAndSimulates) {
  // A name like "zb_h1_4x8_..." states ranks x microbatches.
  const std::regex dims(R"(_(\d+)x(\d+)(_|\.csv$))");
  for (const fs::path& path : ScheduleFiles()) {
    const std::string name = path.filename().string();
    SCOPED_TRACE(name);
    Schedule s;
    ASSERT_NO_THROW(s = ReadCsvFile(path.string()));
    ASSERT_NO_THROW(Validate(s));
    ASSERT_GE(s.ranks, 1);
    ASSERT_GE(s.microbatches, 1);
    ASSERT_EQ(s.stages % s.ranks, 0) << s.stages << " stages on " << s.ranks << " ranks";
    std::smatch m;
    if (std::regex_search(name, m, dims)) {
      EXPECT_EQ(s.ranks, std::stoi(m[1].str()));
      EXPECT_EQ(s.microbatches, std::stoi(m[2].str()));
    }

    const SimResult r = Simulate(s);
    EXPECT_EQ(r.ranks, s.ranks);
    EXPECT_EQ(r.microbatches, s.microbatches);
    EXPECT_EQ(r.chunks, s.chunks());
    ASSERT_EQ(r.per_rank.size(), static_cast<std::size_t>(s.ranks));
    double busy_sum = 0, max_span = 0;
    for (const RankResult& rr : r.per_rank) {
      SCOPED_TRACE("rank " + std::to_string(rr.rank));
      // F = I = W = 1 per rank, split over the rank's stages: 3 per microbatch.
      EXPECT_NEAR(rr.busy, 3.0 * s.microbatches, 1e-9);
      EXPECT_LE(rr.end, r.makespan);
      EXPECT_GE(rr.start, 0.0);
      EXPECT_DOUBLE_EQ(rr.span, rr.end - rr.start);
      EXPECT_GE(rr.span, rr.busy - 1e-9);
      EXPECT_EQ(rr.stages.size(), static_cast<std::size_t>(s.chunks()));
      ASSERT_EQ(rr.peak_in_flight.size(), rr.stages.size());
      for (int count : rr.peak_in_flight) {
        EXPECT_GE(count, 1);
        EXPECT_LE(count, s.microbatches);
      }
      EXPECT_GT(rr.peak_memory, 0.0);
      EXPECT_LE(rr.peak_memory, s.microbatches + 1e-9);
      busy_sum += rr.busy;
      max_span = std::max(max_span, rr.span);
    }
    EXPECT_NEAR(r.bubble_rate, 1.0 - busy_sum / (s.ranks * r.makespan), 1e-12);
    EXPECT_NEAR(r.span_bubble_rate, 1.0 - busy_sum / (s.ranks * max_span), 1e-12);
    EXPECT_GE(r.bubble_rate, 0.0);
    EXPECT_LT(r.bubble_rate, 1.0);

    const auto known = KnownFiles().find(name);
    if (known != KnownFiles().end()) {
      EXPECT_DOUBLE_EQ(r.makespan, known->second.makespan);
      for (const RankResult& rr : r.per_rank) {
        EXPECT_EQ(rr.peak_in_flight, known->second.peak_in_flight[rr.rank]) << "rank " << rr.rank;
      }
    }
  }
}

TEST(ScheduleFilesTest, WriteThenReadGivesTheSameActions) {
  for (const fs::path& path : ScheduleFiles()) {
    SCOPED_TRACE(path.filename().string());
    const Schedule s = ReadCsvFile(path.string());
    std::ostringstream out;
    WriteCsv(s, out);
    // baton writes LF line ends, whatever the file had.
    EXPECT_EQ(out.str().find('\r'), std::string::npos);
    std::istringstream in(out.str());
    const Schedule back = ReadCsv(in, path.string());
    EXPECT_EQ(back.ranks, s.ranks);
    EXPECT_EQ(back.stages, s.stages);
    EXPECT_EQ(back.microbatches, s.microbatches);
    EXPECT_EQ(back.stage_rank, s.stage_rank);
    EXPECT_EQ(back.IsLowered(), s.IsLowered());
    EXPECT_EQ(back.CountActions(), s.CountActions());
    ASSERT_EQ(back.actions.size(), s.actions.size());
    for (std::size_t rank = 0; rank < s.actions.size(); ++rank) {
      ASSERT_EQ(back.actions[rank].size(), s.actions[rank].size()) << "rank " << rank;
      for (std::size_t i = 0; i < s.actions[rank].size(); ++i) {
        EXPECT_EQ(back.actions[rank][i], s.actions[rank][i])
            << "rank " << rank << ", position " << i << ": " << ToString(back.actions[rank][i]) << " vs "
            << ToString(s.actions[rank][i]);
      }
    }
  }
}

// Files PyTorch wrote keep their no-microbatch kinds and idle slots.
TEST(ScheduleFilesTest, PytorchGpipeKeepsHooksAndIdleCells) {
  const Schedule s = ReadCsvFile(std::string(BATON_SOURCE_DIR) + "/schedules/gpipe_2x4_pytorch.csv");
  ASSERT_EQ(s.ranks, 2);
  ASSERT_FALSE(s.actions[0].empty());
  ASSERT_FALSE(s.actions[1].empty());
  EXPECT_EQ(s.actions[0].front(), (Action{0, ActionKind::kUnshard, kNoMicrobatch}));
  EXPECT_EQ(s.actions[0].back(), (Action{0, ActionKind::kReduceGrad, kNoMicrobatch}));
  EXPECT_EQ(s.actions[1].front(), (Action{1, ActionKind::kUnshard, kNoMicrobatch}));
  EXPECT_EQ(s.actions[1].back(), (Action{1, ActionKind::kReduceGrad, kNoMicrobatch}));
  // Rank 1 idles while rank 0 runs its first forward.
  EXPECT_EQ(s.actions[1][1].kind, ActionKind::kIdle);
  EXPECT_FALSE(s.IsLowered());
  EXPECT_EQ(s.CountActions(), 20u);  // 2 x (4 F + 4 B + UNSHARD + REDUCE_GRAD)
}

}  // namespace
}  // namespace baton
