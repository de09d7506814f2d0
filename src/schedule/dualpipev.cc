// DualPipeV: DeepSeek's DualPipe cut in half onto a V (Sea AI Lab's
// "cut-in-half"), in the order of deepseek-ai/DualPipe's dualpipev.py and
// PyTorch's ScheduleDualPipeV. Rank r holds stage r (chunk 0, going down the
// V) and stage 2p-1-r (chunk 1, coming back up); the loss is on rank 0.
//
// In the steady state every unit is an OVERLAP_F_B: one chunk's forward run
// together with the other chunk's full backward, so that each one's
// communication hides behind the other's compute. The warm-up and the
// cool-down split some backwards into I and W (zero bubble) to fill gaps.
#include <deque>
#include <utility>
#include <vector>

#include "baton/schedule.h"
#include "generator_util.h"

namespace baton {

using namespace generators;

Schedule GenerateDualPipeV(int p, int m) {
  constexpr std::string_view kName = "dualpipev";
  CheckCommon(kName, p, m, 2);
  Require(m >= 2 * p, kName, fmt::format("needs at least as many microbatches as stages, 2 x ranks = {}", 2 * p), m);
  Schedule s = Empty(std::string(kName), p, m, 2, Placement::kV);
  for (int r = 0; r < p; ++r) {
    auto& out = s.actions[r];
    out.reserve(4 * m);
    const int down = r, up = 2 * p - 1 - r;  // the rank's two stages
    // Next microbatch per stage for F and for backwards (B or I alike).
    std::vector<int> f(s.stages, 0), b(s.stages, 0);
    std::deque<std::pair<int, int>> pending_w;  // (stage, microbatch) of I's whose W has not run
    auto forward = [&](int stage) { out.push_back(F(stage, f[stage]++)); };
    auto backward = [&](int stage, bool split) {
      if (split) {
        pending_w.emplace_back(stage, b[stage]);
        out.push_back(I(stage, b[stage]++));
      } else {
        out.push_back(B(stage, b[stage]++));
      }
    };
    auto weight = [&] {
      if (pending_w.empty()) return;
      out.push_back(W(pending_w.front().first, pending_w.front().second));
      pending_w.pop_front();
    };
    auto overlapped = [&](int forward_stage, int backward_stage) {
      out.push_back(OverlapFB(forward_stage, f[forward_stage]++, backward_stage, b[backward_stage]++));
    };

    // 1: chunk-0 forwards, two per rank below this one.
    for (int k = 0; k < 2 * (p - r - 1); ++k) forward(down);
    // 2: chunk 0 and chunk 1 in turn until microbatch 0 reaches the loss.
    for (int k = 0; k < r + 1; ++k) {
      forward(down);
      forward(up);
    }
    // 3: zero-bubble I, W, F on chunk 1 while chunk 0's backwards are on their way.
    for (int k = 0; k < p - r - 1; ++k) {
      backward(up, /*split=*/true);
      weight();
      forward(up);
    }
    // 4, the steady state: F0 with B1, then F1 with B0. The last rank runs
    // its first F0 and B1 apart, which shortens the bubble.
    for (int k = 0; k < m - 2 * p + r + 1; ++k) {
      if (k == 0 && r == p - 1) {
        forward(down);
        backward(up, /*split=*/false);
      } else {
        overlapped(down, up);
      }
      overlapped(up, down);
    }
    // 5: chunk 0's forwards are done; B1 alone, then F1 with B0.
    for (int k = 0; k < p - r - 1; ++k) {
      backward(up, /*split=*/false);
      overlapped(up, down);
    }
    // 6: the remaining backwards of both chunks; from the middle one on they
    // are split, so their W's can fill the tail.
    const int tail = r + 1;
    bool split = false;
    for (int k = 0; k < tail; ++k) {
      if (k == tail / 2 && r % 2 == 1) split = true;
      backward(up, split);
      if (k == tail / 2 && r % 2 == 0) split = true;
      backward(down, split);
    }
    // 7: a W, then chunk 0's next backward.
    for (int k = 0; k < p - r - 1; ++k) {
      weight();
      backward(down, split);
    }
    // 8: the W's left.
    while (!pending_w.empty()) weight();
  }
  return s;
}

}  // namespace baton
