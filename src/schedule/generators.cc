// Schedule generators: pure functions of ranks p, microbatches m, chunks v.
// Rank r counts from 0; "the next" microbatch of a kind and chunk is the
// lowest one not yet placed, so each (kind, chunk) keeps a counter.
#include <algorithm>
#include <array>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "baton/error.h"
#include "baton/schedule.h"

namespace baton {
namespace {

// Keeps schedules within what a person could mean (and memory can hold).
constexpr long long kMaxActions = 100'000'000;

void Require(bool ok, std::string_view schedule, std::string_view rule, int value) {
  if (!ok) throw ScheduleError(fmt::format("{}: {} (got {})", schedule, rule, value));
}

void CheckCommon(std::string_view name, int p, int m, int v) {
  Require(p >= 1, name, "the number of ranks must be at least 1", p);
  Require(m >= 1, name, "the number of microbatches must be at least 1", m);
  Require(v >= 1, name, "the number of chunks must be at least 1", v);
  const long long actions = 3LL * p * m * v;
  if (actions > kMaxActions) {
    throw ScheduleError(fmt::format(
        "{}: {} ranks x {} microbatches x {} chunks is too large (more than {} actions)", name, p,
        m, v, kMaxActions));
  }
}

Schedule Empty(std::string name, int p, int m, int v, Placement placement) {
  Schedule s;
  s.name = std::move(name);
  s.ranks = p;
  s.stages = p * v;
  s.microbatches = m;
  s.stage_rank.resize(s.stages);
  for (int stage = 0; stage < s.stages; ++stage) s.stage_rank[stage] = StageRank(placement, stage, p);
  s.actions.resize(p);
  return s;
}

Action F(int stage, int mb) { return {stage, ActionKind::kForward, mb}; }
Action B(int stage, int mb) { return {stage, ActionKind::kBackward, mb}; }
Action I(int stage, int mb) { return {stage, ActionKind::kBackwardInput, mb}; }
Action W(int stage, int mb) { return {stage, ActionKind::kBackwardWeight, mb}; }

// ZB-H1 and ZB-H2 differ only in the warm-up depth and when the W's start.
Schedule ZeroBubbleH(std::string name, int p, int m, bool h2) {
  CheckCommon(name, p, m, 1);
  Require(m >= p, name, fmt::format("needs at least as many microbatches as ranks ({})", p), m);
  Schedule s = Empty(std::move(name), p, m, 1, Placement::kLoop);
  for (int r = 0; r < p; ++r) {
    auto& out = s.actions[r];
    out.reserve(3 * m);
    const int warmup = h2 ? std::min(2 * (p - r - 1), m) : p - r - 1;
    // W's wait until the rank has a bubble to fill: from iteration r (H1),
    // from 2r (H2); the ones still pending run at the end, in order.
    const int w_from = h2 ? 2 * r : r;
    int f = 0, b = 0, w = 0;
    for (; f < warmup; ++f) out.push_back(F(r, f));
    for (int i = 0; i < m; ++i) {
      if (f < m) out.push_back(F(r, f++));
      out.push_back(I(r, b++));
      if (i >= w_from) out.push_back(W(r, w++));
    }
    while (w < m) out.push_back(W(r, w++));
  }
  return s;
}

}  // namespace

Schedule GenerateGPipe(int p, int m) {
  CheckCommon("gpipe", p, m, 1);
  Schedule s = Empty("gpipe", p, m, 1, Placement::kLoop);
  for (int r = 0; r < p; ++r) {
    auto& out = s.actions[r];
    out.reserve(2 * m);
    for (int j = 0; j < m; ++j) out.push_back(F(r, j));
    for (int j = 0; j < m; ++j) out.push_back(B(r, j));
  }
  return s;
}

Schedule Generate1F1B(int p, int m) {
  CheckCommon("1f1b", p, m, 1);
  Schedule s = Empty("1f1b", p, m, 1, Placement::kLoop);
  for (int r = 0; r < p; ++r) {
    auto& out = s.actions[r];
    out.reserve(2 * m);
    // Rank r must hold p-r-1 forwards in flight before its first backward can
    // arrive: the backward of microbatch 0 starts on the last rank only after
    // microbatch 0 has passed the p-r-1 ranks after r.
    const int warmup = std::min(p - r - 1, m);
    int f = 0, b = 0;
    for (; f < warmup; ++f) out.push_back(F(r, f));
    while (b < m) {
      if (f < m) out.push_back(F(r, f++));
      out.push_back(B(r, b++));
    }
  }
  return s;
}

Schedule GenerateInterleaved1F1B(int p, int m, int v) {
  CheckCommon("interleaved_1f1b", p, m, v);
  Require(m % p == 0, "interleaved_1f1b",
          fmt::format("the number of microbatches must be a multiple of the number of ranks ({})", p),
          m);
  Schedule s = Empty("interleaved_1f1b", p, m, v, Placement::kLoop);
  const int total = m * v;  // forwards (and backwards) per rank
  const int group = p * v;  // one round of p microbatches through all v chunks
  for (int r = 0; r < p; ++r) {
    auto& out = s.actions[r];
    out.reserve(2 * total);
    // Megatron-LM's order: the k-th forward runs chunk (k mod pv) div p on
    // microbatch (k div pv)*p + k mod p; backwards walk the same sequence
    // with the chunks reversed.
    auto microbatch = [&](int k) { return (k / group) * p + k % p; };
    auto forward = [&](int k) { return F(((k % group) / p) * p + r, microbatch(k)); };
    auto backward = [&](int k) { return B((v - 1 - (k % group) / p) * p + r, microbatch(k)); };
    // Deeper warm-up than 1F1B: each of the v-1 extra chunks needs a full
    // round of p microbatches in flight before its backwards come back.
    const int warmup = std::min(2 * (p - r - 1) + (v - 1) * p, total);
    int f = 0, b = 0;
    for (; f < warmup; ++f) out.push_back(forward(f));
    while (b < total) {
      if (f < total) out.push_back(forward(f++));
      out.push_back(backward(b++));
    }
  }
  return s;
}

Schedule GenerateZbH1(int p, int m) { return ZeroBubbleH("zb_h1", p, m, /*h2=*/false); }
Schedule GenerateZbH2(int p, int m) { return ZeroBubbleH("zb_h2", p, m, /*h2=*/true); }

Schedule GenerateZbv(int p, int m, int v) {
  CheckCommon("zbv", p, m, v);
  Require(v == 2, "zbv", "ZB-V places exactly 2 chunks per rank (chunks must be 2)", v);
  Schedule s = Empty("zbv", p, m, 2, Placement::kV);
  // Built for n >= 2p-1 microbatches (the handcrafted pattern's minimum);
  // actions of microbatches >= m are dropped afterwards.
  const int n = std::max(m, 2 * p - 1);
  for (int r = 0; r < p; ++r) {
    auto& out = s.actions[r];
    out.reserve(6 * n);
    const std::array<int, 2> stage = {r, 2 * p - 1 - r};
    std::array<int, 2> f{}, i{}, w{};  // next microbatch per chunk and kind
    auto emit = [&](Action a) {
      if (a.microbatch < m) out.push_back(a);
    };
    auto do_f = [&](int c) { emit(F(stage[c], f[c]++)); };
    auto do_i = [&](int c) { emit(I(stage[c], i[c]++)); };
    auto do_w = [&](int c) { emit(W(stage[c], w[c]++)); };

    // Warm-up: fill the V down (chunk 0) and back up (chunk 1).
    for (int k = 0; k < 2 * (p - r) - 1; ++k) do_f(0);
    for (int k = 0; k < r; ++k) {
      do_f(1);
      do_f(0);
    }
    for (int k = 0; k < p - r; ++k) {
      do_f(1);
      do_i(1);
      do_w(1);
    }
    // Steady: one microbatch through both chunks, forward and backward.
    while (f[1] < f[0] || f[0] < n) {
      if (f[0] < n) do_f(0);
      do_i(0);
      do_w(0);
      do_f(1);
      do_i(1);
      do_w(1);
    }
    // Cool-down: drain the input gradients first, W's fill the tail.
    for (int k = 0; k < r; ++k) {
      do_i(0);
      do_i(1);
    }
    for (int k = 0; k < p - r; ++k) {
      do_i(0);
      do_w(0);
    }
    while (w[1] < n) do_w(1);
    while (w[0] < n) do_w(0);
  }
  return s;
}

const std::vector<std::string>& GeneratorNames() {
  static const std::vector<std::string> names = {"gpipe", "1f1b",  "interleaved_1f1b",
                                                 "zb_h1", "zb_h2", "zbv"};
  return names;
}

Schedule Generate(std::string_view name, int p, int m, int v) {
  if (name == "interleaved_1f1b") return GenerateInterleaved1F1B(p, m, v == 0 ? 2 : v);
  if (name == "zbv") return GenerateZbv(p, m, v == 0 ? 2 : v);
  const bool known = std::find(GeneratorNames().begin(), GeneratorNames().end(), name) !=
                     GeneratorNames().end();
  if (!known) {
    throw ScheduleError(fmt::format("unknown schedule \"{}\" (known: {})", name,
                                    fmt::join(GeneratorNames(), ", ")));
  }
  Require(v == 0 || v == 1, name, "this schedule holds one chunk per rank (chunks must be 1)", v);
  if (name == "gpipe") return GenerateGPipe(p, m);
  if (name == "1f1b") return Generate1F1B(p, m);
  if (name == "zb_h1") return GenerateZbH1(p, m);
  return GenerateZbH2(p, m);
}

}  // namespace baton
