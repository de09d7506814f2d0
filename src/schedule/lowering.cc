#include <cstdint>

#include <fmt/format.h>

#include "baton/error.h"
#include "baton/schedule.h"

namespace baton {
namespace {

[[noreturn]] void IndexError(const Schedule& s, int rank, std::size_t pos, const Action& a) {
  throw ScheduleError(
      fmt::format("{}: rank {}, position {}: action {} is outside the schedule's {} stages x {} microbatches", s.name,
                  rank, pos, ToString(a), s.stages, s.microbatches));
}

// Looked at for every action, so kept apart from the error's formatting,
// which would keep it from being inlined.
inline void CheckIndex(const Schedule& s, int rank, std::size_t pos, const Action& a) {
  if (a.stage < 0 || a.stage >= s.stages || (HasMicrobatch(a.kind) && (a.microbatch < 0 || a.microbatch >= s.microbatches))) {
    IndexError(s, rank, pos, a);
  }
}

// Which hand-overs have happened while lowering: the input of F(s, j) is
// on stage s's rank (received, or handed over locally), and likewise the
// output gradient of I/B(s, j). The first stage's input and the last
// stage's gradient (from the loss) are always there. 16 bits a flag, not 8:
// a store through a character type may alias anything, and the rows' ends
// would be reloaded after each.
class Handovers {
 public:
  Handovers(int stages, int microbatches)
      : stages_(stages), m_(microbatches), flags_(static_cast<std::size_t>(stages) * microbatches, 0) {}
  // Whether `part` (a compute action, or a unit's part) could run now.
  bool Ready(const Action& part) const {
    if (part.kind == ActionKind::kForward) return part.stage == 0 || (At(part.stage, part.microbatch) & kForward);
    if (IsInputBackward(part.kind)) return part.stage == stages_ - 1 || (At(part.stage, part.microbatch) & kBackward);
    return true;
  }
  void ForwardArrives(int stage, int mb) { flags_[Index(stage, mb)] |= kForward; }
  void BackwardArrives(int stage, int mb) { flags_[Index(stage, mb)] |= kBackward; }

 private:
  static constexpr std::uint16_t kForward = 1, kBackward = 2;
  std::size_t Index(int stage, int mb) const { return static_cast<std::size_t>(stage) * m_ + mb; }
  std::uint16_t At(int stage, int mb) const { return flags_[Index(stage, mb)]; }
  int stages_, m_;
  std::vector<std::uint16_t> flags_;
};

// No row can go on: every unfinished rank's next action waits for one that
// never runs before it. Names each, with the grid.
[[noreturn]] void ThrowDeadlock(const Schedule& in, const std::vector<std::size_t>& cursor, const Handovers& h) {
  std::string stuck;
  std::optional<GridMark> mark;
  for (int r = 0; r < in.ranks; ++r) {
    if (cursor[r] == in.actions[r].size()) continue;
    const Action a = in.actions[r][cursor[r]];
    if (!mark) mark = GridMark{r, static_cast<int>(cursor[r])};
    ForEachPart(a, [&](const Action& part) {
      if (h.Ready(part)) return;  // this part could run; the other one waits
      const bool fwd = part.kind == ActionKind::kForward;
      const int from = fwd ? part.stage - 1 : part.stage + 1;
      stuck += fmt::format(
          "  rank {}, position {}: {} waits for {} of stage {} (on rank {}), which never runs before it\n", r,
          cursor[r], ToString(a), fwd ? "the forward" : "the input gradient", from, in.stage_rank[from]);
    });
  }
  throw ScheduleError(fmt::format("{}: the schedule deadlocks; every unfinished rank waits on another:\n{}{}",
                                  in.name, stuck, FormatGrid(in, mark, 24)));
}

}  // namespace

Schedule Lower(const Schedule& in) {
  if (in.IsLowered()) return in;
  const int p = in.ranks, S = in.stages, m = in.microbatches;
  Schedule out;
  out.name = in.name;
  out.ranks = p;
  out.stages = S;
  out.microbatches = m;
  out.slices = in.slices;
  out.stage_rank = in.stage_rank;
  out.actions.resize(p);
  // A row is reserved once, at most three entries per action: the action,
  // its SEND, and the RECV another rank's SEND places before it (an
  // OVERLAP_F_B unit has two of each, and its row may grow). Growing rows by
  // doubling instead copied them and touched up to twice the memory the
  // lowered schedule needs; capacity reserved and never written costs none.
  for (int r = 0; r < p; ++r) out.actions[r].reserve(3 * in.actions[r].size());

  Handovers handed(S, m);
  std::vector<std::size_t> cursor(p, 0);
  std::size_t remaining = 0;
  for (const auto& row : in.actions) remaining += row.size();

  while (remaining > 0) {
    bool progress = false;
    for (int r = 0; r < p; ++r) {
      const auto& row = in.actions[r];
      if (cursor[r] == row.size()) continue;
      const Action a = row[cursor[r]];
      // Each pass takes about one action from each of the rows, too many
      // streams for the hardware to fetch ahead of: fetch a few passes'
      // worth ahead of this row's cursor.
      if (cursor[r] + 12 < row.size()) __builtin_prefetch(&row[cursor[r] + 12]);
      bool ready = true;
      // An OVERLAP_F_B unit is placed once both its parts could run.
      ForEachPart(a, [&](const Action& part) {
        if (part.kind != ActionKind::kIdle) CheckIndex(in, r, cursor[r], part);
        ready = ready && handed.Ready(part);
      });
      if (!ready) continue;
      ++cursor[r];
      --remaining;
      progress = true;
      if (a.kind == ActionKind::kIdle) continue;  // idle slots mean nothing once messages are explicit
      auto& mine = out.actions[r];
      // Likewise for the lines this row is about to be written into (a
      // write to a line not in the cache waits for it to be read first).
      if (mine.size() + 16 < mine.capacity()) __builtin_prefetch(mine.data() + mine.size() + 16, 1);
      mine.push_back(a);

      // Each part's SEND follows the unit, in part order (F's, then B's),
      // as PyTorch's _add_send_recv places them.
      ForEachPart(a, [&](const Action& part) {
        if (part.kind == ActionKind::kForward && part.stage + 1 < S) {
          const int next = part.stage + 1, to = in.stage_rank[next];
          handed.ForwardArrives(next, part.microbatch);
          if (to != r) {
            out.actions[r].push_back({part.stage, ActionKind::kSendF, part.microbatch});
            out.actions[to].push_back({next, ActionKind::kRecvF, part.microbatch});
          }
        } else if (IsInputBackward(part.kind) && part.stage > 0) {
          const int prev = part.stage - 1, to = in.stage_rank[prev];
          handed.BackwardArrives(prev, part.microbatch);
          if (to != r) {
            out.actions[r].push_back({part.stage, ActionKind::kSendB, part.microbatch});
            out.actions[to].push_back({prev, ActionKind::kRecvB, part.microbatch});
          }
        }
      });
    }
    if (!progress) ThrowDeadlock(in, cursor, handed);
  }
  return out;
}

Schedule ComputeOnly(const Schedule& in) {
  Schedule out = in;
  for (auto& row : out.actions) {
    std::erase_if(row, [](const Action& a) { return IsComm(a.kind); });
  }
  return out;
}

}  // namespace baton
