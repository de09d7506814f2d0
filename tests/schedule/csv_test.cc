#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "baton/error.h"
#include "baton/schedule.h"
#include "baton/sim.h"

namespace baton {
namespace {

std::string ToCsv(const Schedule& s) {
  std::ostringstream out;
  WriteCsv(s, out);
  return out.str();
}

Schedule FromCsv(const std::string& text, const std::string& name = "test.csv") {
  std::istringstream in(text);
  return ReadCsv(in, name);
}

TEST(Csv, EveryGeneratorRoundTripsInBothForms) {
  for (const std::string& name : GeneratorNames()) {
    const Schedule compute = Generate(name, 4, 8);
    for (const Schedule& s : {compute, Lower(compute)}) {
      const std::string text = ToCsv(s);
      const Schedule back = FromCsv(text);
      EXPECT_EQ(back.actions, s.actions) << name;
      EXPECT_EQ(back.ranks, s.ranks);
      EXPECT_EQ(back.stages, s.stages);
      EXPECT_EQ(back.microbatches, s.microbatches);
      EXPECT_EQ(back.stage_rank, s.stage_rank);
      EXPECT_EQ(back.IsLowered(), s.IsLowered());
      EXPECT_EQ(ToCsv(back), text);  // byte for byte
      EXPECT_NO_THROW(Validate(back));
    }
  }
}

TEST(Csv, WritesOneRowPerRankInPyTorchTextForm) {
  EXPECT_EQ(ToCsv(Generate1F1B(2, 2)), "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n");
  EXPECT_EQ(ToCsv(Lower(Generate1F1B(2, 2))),
            "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n"
            "1RECV_F0,1F0,1RECV_F1,1B0,1SEND_B0,1F1,1B1,1SEND_B1\n");
}

TEST(Csv, ReadsPyTorchDumpWithCrlfIdleCellsAndHookKinds) {
  // As PyTorch's _dump_csv writes it (csv.writer: CRLF, None as empty cell),
  // with FSDP/DDP hook actions that baton keeps as no-ops.
  const std::string text =
      "0UNSHARD,0F0,0F1,,,0B0,0B1,0REDUCE_GRAD\r\n"
      "1UNSHARD,,1F0,1F1,1B0,1B1,1RESHARD,1REDUCE_GRAD\r\n";
  const Schedule s = FromCsv(text, "pytorch.csv");
  EXPECT_EQ(s.ranks, 2);
  EXPECT_EQ(s.stages, 2);
  EXPECT_EQ(s.microbatches, 2);
  ASSERT_EQ(s.actions[0].size(), 8u);
  EXPECT_EQ(s.actions[0][0], (Action{0, ActionKind::kUnshard, kNoMicrobatch}));
  EXPECT_EQ(s.actions[0][3].kind, ActionKind::kIdle);
  EXPECT_EQ(s.actions[1][6], (Action{1, ActionKind::kReshard, kNoMicrobatch}));
  EXPECT_NO_THROW(Validate(s));
  const SimResult r = Simulate(s);
  EXPECT_NEAR(r.makespan, 9.0, 1e-12);  // GPipe 2x2 with F=1, B=2: (m+p-1)(F+B)
  // Written back with LF, then read again: the same actions.
  EXPECT_EQ(FromCsv(ToCsv(s)).actions, s.actions);
  // Lowering drops idle slots and keeps the hook actions in place.
  const Schedule lowered = Lower(s);
  EXPECT_EQ(ToCsv(lowered),
            "0UNSHARD,0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1,0REDUCE_GRAD\n"
            "1UNSHARD,1RECV_F0,1RECV_F1,1F0,1F1,1B0,1SEND_B0,1B1,1SEND_B1,1RESHARD,1REDUCE_GRAD\n");
}

std::string ErrorOf(const std::string& text) {
  try {
    FromCsv(text, "bad.csv");
  } catch (const ScheduleError& e) {
    return e.what();
  }
  return "";
}

TEST(Csv, MalformedCellsNameRowRankAndColumn) {
  EXPECT_NE(ErrorOf("0F0,0B0\n1F0,1X0\n").find("bad.csv: row 2 (rank 1), column 2: cannot read action \"1X0\""),
            std::string::npos);
  EXPECT_NE(ErrorOf("0F0,0B0abc\n").find("bad.csv: row 1 (rank 0), column 2: cannot read action \"0B0abc\""),
            std::string::npos);
  EXPECT_NE(ErrorOf("0F0,0B-1\n").find("column 2"), std::string::npos);
}

TEST(Csv, StructuralProblemsOfTheFileAreExplained) {
  EXPECT_NE(ErrorOf("0F0,0B0\n0F1,0B1\n").find("stage 0 appears on two ranks: rank 1"), std::string::npos);
  EXPECT_NE(ErrorOf("0F0,0B0\n2F0,2B0\n").find("stage 1 has no action on any rank"), std::string::npos);
  EXPECT_NE(ErrorOf("").find("has no rows"), std::string::npos);
  EXPECT_NE(ErrorOf(",,\n").find("bad.csv: row 1 (rank 0) holds no action"), std::string::npos);
  EXPECT_NE(ErrorOf("0F0,0B0\n\n1F0,1B0\n").find("row 2 (rank 1) holds no action"), std::string::npos);
  EXPECT_EQ(FromCsv("0F0,0B0\r\n\r\n\r\n").ranks, 1);  // trailing blank lines are not ranks
}

TEST(Csv, HugeStageOrMicrobatchNumbersAreRefusedWithoutAllocating) {
  // Found by fuzzing: tables sized by these numbers would take gigabytes.
  for (const char* text : {"0F0,1I1777777777\n", "0SEND_B474836414\n", "0F2147483647\n"}) {
    const std::string msg = ErrorOf(text);
    EXPECT_NE(msg.find("pairs, but it holds only"), std::string::npos) << text << ": " << msg;
  }
  for (const char* text : {"1777777777F0\n", "2147483647F0\n", ",21474836RESHARD,\n"}) {
    const std::string msg = ErrorOf(text);
    EXPECT_NE(msg.find("stages must be numbered 0..S-1 without gaps"), std::string::npos) << text << ": " << msg;
  }
}

TEST(Csv, PyTorchDualPipeVFileWithOverlappedUnitsLoadsRoundTripsAndRuns) {
  // schedules/dualpipev_4x10_pytorch.csv: ScheduleDualPipeV's order for 4
  // ranks and 10 microbatches as PyTorch's _dump_csv writes it (CRLF, one
  // _Action per cell, "(0F3;7B2)OVERLAP_F_B" for an overlapped unit).
  const std::string path = std::string(BATON_SOURCE_DIR) + "/schedules/dualpipev_4x10_pytorch.csv";
  const Schedule s = ReadCsvFile(path);
  EXPECT_EQ(s.ranks, 4);
  EXPECT_EQ(s.stages, 8);
  EXPECT_EQ(s.microbatches, 10);
  EXPECT_EQ(s.stage_rank, (std::vector<int>{0, 1, 2, 3, 3, 2, 1, 0}));  // the V
  std::size_t units = 0;
  for (const auto& row : s.actions) {
    units += static_cast<std::size_t>(
        std::count_if(row.begin(), row.end(), [](const Action& a) { return a.kind == ActionKind::kOverlapFB; }));
  }
  EXPECT_GT(units, 0u);
  EXPECT_NO_THROW(Validate(s));
  // baton's generator gives the same cells, and both forms write back the
  // same text (LF line ends) and read back identically.
  EXPECT_EQ(s.actions, GenerateDualPipeV(4, 10).actions);
  for (const Schedule& form : {s, Lower(s)}) {
    const std::string text = ToCsv(form);
    const Schedule back = FromCsv(text);
    EXPECT_EQ(back.actions, form.actions);
    EXPECT_EQ(ToCsv(back), text);
    EXPECT_NO_THROW(Validate(back));
  }
  std::ifstream in(path, std::ios::binary);
  const std::string original((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string lf = original;
  std::erase(lf, '\r');
  EXPECT_EQ(ToCsv(s), lf);
  EXPECT_NE(original.find("\r\n"), std::string::npos);  // PyTorch's csv.writer line ends
  // It runs: with F = I = W = 1 per rank and no F&B given, each unit costs
  // F + B of a chunk.
  const SimResult r = Simulate(s);
  EXPECT_GT(r.makespan, 0.0);
  EXPECT_NEAR(r.per_rank[0].busy, 10 * 3.0, 1e-9);  // m x (F + B) over the rank's two half-cost chunks
}

TEST(Csv, OverlapCellsKeepBothStagesPlaced) {
  // A unit names two stages; both belong to the row's rank.
  EXPECT_NE(ErrorOf("0F0,(0F1;1B0)OVERLAP_F_B,0B1\n1F0,1B0,1F1,1B1\n").find("stage 1 appears on two ranks"),
            std::string::npos);
  const Schedule s = FromCsv("0F0,1F0,(0F1;1B0)OVERLAP_F_B,1F1,0B0,1B1,0B1\n");
  EXPECT_EQ(s.stages, 2);
  EXPECT_EQ(s.stage_rank, (std::vector<int>{0, 0}));
  EXPECT_NO_THROW(Validate(s));
}

TEST(Csv, UnreadableFileIsAnError) {
  EXPECT_THROW(ReadCsvFile("/nonexistent/schedule.csv"), ScheduleError);
}

}  // namespace
}  // namespace baton
