// Schedule generators: pure functions of ranks p, microbatches m, chunks v.
// Rank r counts from 0; "the next" microbatch of a kind and chunk is the
// lowest one not yet placed, so each (kind, chunk) keeps a counter.
// dualpipev.cc, zb_auto.cc and v_schedules.cc hold the longer generators.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "baton/error.h"
#include "baton/schedule.h"
#include "generator_util.h"

namespace baton {

using namespace generators;

namespace {

// ZB-H1 and ZB-H2 differ only in the warm-up depth and when the W's start.
// With k slices a sequence the units are m x k, forwards in unit order and
// input backwards in BackwardUnit's; the first backward (the last slice of
// microbatch 0) waits for all k slices' forwards, so the warm-up is k - 1
// units longer.
Schedule ZeroBubbleH(std::string name, int p, int m, bool h2, int k) {
  CheckCommon(name, p, m * k, 1);
  Require(m >= p, name, fmt::format("needs at least as many microbatches as ranks ({})", p), m);
  const int n = m * k;
  Schedule s = Empty(std::move(name), p, n, 1, Placement::kLoop);
  s.slices = k;
  for (int r = 0; r < p; ++r) {
    auto& out = s.actions[r];
    out.reserve(3 * n);
    const int warmup = std::min((h2 ? 2 * (p - r - 1) : p - r - 1) + k - 1, n);
    // W's wait until the rank has a bubble to fill: from iteration r (H1),
    // from 2r (H2); the ones still pending run at the end, in order.
    const int w_from = h2 ? 2 * r : r;
    int f = 0, b = 0, w = 0;
    for (; f < warmup; ++f) out.push_back(F(r, f));
    for (int i = 0; i < n; ++i) {
      if (f < n) out.push_back(F(r, f++));
      out.push_back(I(r, BackwardUnit(b++, k)));
      if (i >= w_from) out.push_back(W(r, BackwardUnit(w++, k)));
    }
    while (w < n) out.push_back(W(r, BackwardUnit(w++, k)));
  }
  return s;
}

// 1F1B over units: without slices Generate1F1B; with k slices Seq1F1B.
Schedule OneFOneB(std::string name, int p, int m, int k) {
  CheckCommon(name, p, m * k, 1);
  const int n = m * k;
  Schedule s = Empty(std::move(name), p, n, 1, Placement::kLoop);
  s.slices = k;
  for (int r = 0; r < p; ++r) {
    auto& out = s.actions[r];
    out.reserve(2 * n);
    // Rank r must hold p-r-1 forwards in flight before its first backward can
    // arrive: the backward of microbatch 0 starts on the last rank only after
    // microbatch 0 has passed the p-r-1 ranks after r. With slices that
    // first backward is the last slice's, after k - 1 more forwards.
    const int warmup = std::min(p - r - 1 + k - 1, n);
    int f = 0, b = 0;
    for (; f < warmup; ++f) out.push_back(F(r, f));
    while (b < n) {
      if (f < n) out.push_back(F(r, f++));
      out.push_back(B(r, BackwardUnit(b++, k)));
    }
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

Schedule Generate1F1B(int p, int m) { return OneFOneB("1f1b", p, m, 1); }

Schedule GenerateLoopedBfs(int p, int m, int v) {
  CheckCommon("looped_bfs", p, m, v);
  Schedule s = Empty("looped_bfs", p, m, v, Placement::kLoop);
  for (int r = 0; r < p; ++r) {
    auto& out = s.actions[r];
    out.reserve(2 * static_cast<std::size_t>(m) * v);
    for (int c = 0; c < v; ++c) {
      for (int j = 0; j < m; ++j) out.push_back(F(c * p + r, j));
    }
    for (int c = v - 1; c >= 0; --c) {
      for (int j = 0; j < m; ++j) out.push_back(B(c * p + r, j));
    }
  }
  return s;
}

Schedule GenerateSeq1F1B(int p, int m, int slices) {
  Require(slices >= 1, "seq1f1b", "the number of sequence slices must be at least 1", slices);
  return OneFOneB("seq1f1b", p, m, slices);
}

namespace {

// Megatron-LM's schedule table (get_schedule_table): microbatches in groups
// of g, each group run through all v chunks in turn before the next group;
// the last group takes what is left of m. Entry k is the k-th forward of a
// rank (its chunk and microbatch); the backwards walk the same table with
// the chunks reversed.
struct TableEntry {
  int microbatch;
  int chunk;
};
std::vector<TableEntry> ScheduleTable(int m, int v, int g) {
  std::vector<TableEntry> table;
  table.reserve(static_cast<std::size_t>(m) * v);
  for (int first = 0; first < m; first += g) {
    const int end = first + g >= m ? m : first + g;
    for (int chunk = 0; chunk < v; ++chunk) {
      for (int mb = first; mb < end; ++mb) table.push_back({mb, chunk});
    }
  }
  return table;
}

}  // namespace

Schedule GenerateInterleaved1F1B(int p, int m, const GenerateOptions& o) {
  constexpr std::string_view kName = "interleaved_1f1b";
  const int v = o.chunks == 0 ? 2 : o.chunks;
  // With k slices a sequence the table's entries are units (slice s of
  // microbatch j is unit j k + s) and its groups whole sequences, so that a
  // sequence's slices go through the chunks together; the backwards walk a
  // group's units with each sequence's slices last first (BackwardUnit).
  const int k = std::max(o.slices, 1);
  const int n = m * k;  // units
  CheckCommon(kName, p, n, v);
  // Every group must span the pipeline: rank 0 runs chunk c+1 of a group's
  // microbatches only after rank p-1 has run chunk c of them, so a group of
  // fewer than p units leaves rank 0 waiting on work that itself waits on
  // rank 0 (a deadlock). Megatron's table makes groups of g and a last
  // group of m mod g, so that remainder must be 0 or at least p units. The
  // default is the smallest such g from p units up (p itself when p
  // divides m, without slices). g counts microbatches.
  auto groups_span = [&](int size) { return m % size == 0 || (m % size) * k >= p; };
  int g = o.microbatch_group;
  if (v > 1) {
    Require(n >= p, kName,
            k == 1 ? fmt::format("with {} chunks the number of microbatches must be at least the number of ranks ({})",
                                 v, p)
                   : fmt::format("with {} chunks the number of units (microbatches x {} slices) must be at least the "
                                 "number of ranks ({})",
                                 v, k, p),
            k == 1 ? m : n);
    if (g == 0) {
      g = (p + k - 1) / k;
      while (!groups_span(g)) ++g;
    }
    Require(g * k >= p && g <= m, kName,
            k == 1 ? fmt::format("the microbatch group size must be between the number of ranks ({}) and of "
                                 "microbatches ({})",
                                 p, m)
                   : fmt::format("the microbatch group size must be at most the number of microbatches ({}), and its "
                                 "{} slices each at least the number of ranks ({})",
                                 m, k, p),
            g);
    Require(groups_span(g), kName,
            fmt::format("with {} microbatches in groups of {} the last group holds {}, fewer than the {} ranks it must "
                        "span; choose a group size whose remainder m mod g is 0 or at least {}",
                        m, g, m % g, p, p),
            g);
  } else {
    g = m;  // one chunk: the table is just the microbatches in order
  }
  const int group = g * k;   // units a group
  const int total = n * v;   // forwards (and backwards) per rank
  // Forwards a rank must have run before its first backward: the backward
  // of the last chunk of unit k-1 (microbatch 0's last slice) needs that
  // chunk's forward, entry (v-1) g k + k - 1 of the table. The steady phase
  // runs one forward before each backward, so that many warm-up forwards
  // are the fewest that cannot deadlock; each forward in flight holds
  // 1/(v k) of M_B.
  const int least_warmup = std::min((v - 1) * group + k - 1, total - 1);
  int memory_cap = total;
  if (o.memory_limit > 0.0) {
    const double per = 1.0 / (static_cast<double>(v) * k);
    const double least_limit = (least_warmup + 1.0) * per;
    Require(o.memory_limit >= least_limit - 1e-9, kName,
            fmt::format("the memory limit must be at least {:.4g} M_B: the first backward of the last chunk needs {} "
                        "forwards of 1/{} M_B each in flight",
                        least_limit, least_warmup + 1, v * k),
            o.memory_limit);
    memory_cap = static_cast<int>(std::floor(o.memory_limit * v * k + 1e-9)) - 1;
  }
  Schedule s = Empty(std::string(kName), p, n, v, Placement::kLoop);
  s.slices = k;
  const std::vector<TableEntry> table = ScheduleTable(n, v, group);
  for (int r = 0; r < p; ++r) {
    auto& out = s.actions[r];
    out.reserve(2 * total);
    auto forward = [&](int e) { return F(table[e].chunk * p + r, table[e].microbatch); };
    auto backward = [&](int e) { return B((v - 1 - table[e].chunk) * p + r, BackwardUnit(table[e].microbatch, k)); };
    // Deeper warm-up than 1F1B: each of the v-1 extra chunks needs a full
    // group in flight before its backwards come back, and the first
    // backward is a sequence's last slice; a memory limit cuts it short
    // (never below the least that can run).
    const int warmup =
        std::min({2 * (p - r - 1) + (v - 1) * group + k - 1, total, std::max(memory_cap, least_warmup)});
    int f = 0, b = 0;
    for (; f < warmup; ++f) out.push_back(forward(f));
    while (b < total) {
      if (f < total) out.push_back(forward(f++));
      out.push_back(backward(b++));
    }
  }
  return s;
}

Schedule GenerateInterleaved1F1B(int p, int m, int v) {
  GenerateOptions o;
  o.chunks = v;
  return GenerateInterleaved1F1B(p, m, o);
}

Schedule GenerateInterleavedZb(int p, int m, int v) {
  constexpr std::string_view kName = "interleaved_zb";
  CheckCommon(kName, p, m, v);
  // PyTorch's rounds: microbatches are taken mpr = m / rounds at a time
  // through each chunk, which needs m to divide evenly.
  const int rounds = std::max(1, m / p);
  Require(
      m % rounds == 0, kName,
      fmt::format("the number of microbatches must be a multiple of the number of rounds max(1, m div p) = {}", rounds),
      m);
  const int per_round = m / rounds;
  Schedule s = Empty(std::string(kName), p, m, v, Placement::kLoop);
  const int total = m * v;  // forwards (and input backwards) per rank
  for (int r = 0; r < p; ++r) {
    auto& out = s.actions[r];
    out.reserve(3 * total);
    // One forward per hop from the last rank, as ZB-H1 (PyTorch's
    // multiply_factor 1), on top of a round through the extra chunks.
    const int warmup = std::min((v - 1) * per_round + (p - 1 - r), total);
    auto forward_stage = [&](int step) { return ((step / per_round) % v) * p + r; };
    auto backward_stage = [&](int step) { return (v - 1 - ((step - warmup) / per_round) % v) * p + r; };
    std::vector<int> f(s.stages, 0), b(s.stages, 0), w(s.stages, 0);  // next microbatch per stage
    std::vector<int> backward_steps;                                  // the step of each I, in order: W's follow them
    backward_steps.reserve(total);
    std::size_t weights = 0;
    auto weight = [&] {
      const int stage = backward_stage(backward_steps[weights++]);
      out.push_back(W(stage, w[stage]++));
    };
    for (int step = 0; step < total + warmup; ++step) {
      if (step < total) {
        const int stage = forward_stage(step);
        out.push_back(F(stage, f[stage]++));
      }
      if (step < warmup) continue;
      const int stage = backward_stage(step);
      out.push_back(I(stage, b[stage]++));
      backward_steps.push_back(step);
      // Rank r defers its W's by r steps, ZB-H1's lag, so the tail's W's
      // fill the cool-down bubble.
      if (step - warmup >= r) weight();
    }
    while (weights < backward_steps.size()) weight();
  }
  return s;
}

Schedule GenerateZbH1(int p, int m, int slices) {
  Require(slices >= 1, "zb_h1", "the number of sequence slices must be at least 1", slices);
  return ZeroBubbleH("zb_h1", p, m, /*h2=*/false, slices);
}
Schedule GenerateZbH2(int p, int m, int slices) {
  Require(slices >= 1, "zb_h2", "the number of sequence slices must be at least 1", slices);
  return ZeroBubbleH("zb_h2", p, m, /*h2=*/true, slices);
}

// With k slices a sequence the same pattern runs over the m k units:
// forwards in unit order, input backwards and W's in BackwardUnit's order
// (each sequence's slices last first), and each chunk k - 1 units deeper in
// the warm-up and the cool-down, as the first backward is the first
// sequence's last slice.
Schedule GenerateZbv(int p, int m, int v, int slices) {
  const int k = std::max(slices, 1);
  m *= k;  // units
  CheckCommon("zbv", p, m, v);
  Require(v == 2, "zbv", "ZB-V places exactly 2 chunks per rank (chunks must be 2)", v);
  Schedule s = Empty("zbv", p, m, 2, Placement::kV);
  s.slices = k;
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
    auto do_i = [&](int c) { emit(I(stage[c], BackwardUnit(i[c]++, k))); };
    auto do_w = [&](int c) { emit(W(stage[c], BackwardUnit(w[c]++, k))); };

    // Warm-up: fill the V down (chunk 0) and back up (chunk 1); with
    // slices, k - 1 units deeper on each chunk, as the first backward is
    // the first sequence's last slice.
    for (int x = 0; x < 2 * (p - r) - 1 + k - 1; ++x) do_f(0);
    for (int x = 0; x < r; ++x) {
      do_f(1);
      do_f(0);
    }
    for (int x = 0; x < k - 1; ++x) do_f(1);
    for (int x = 0; x < p - r; ++x) {
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
    // Cool-down: drain the input gradients first, W's fill the tail (with
    // slices, k - 1 more of each chunk: the warm-up's).
    for (int x = 0; x < r + k - 1; ++x) {
      do_i(0);
      do_i(1);
    }
    for (int x = 0; x < p - r; ++x) {
      do_i(0);
      do_w(0);
    }
    while (i[0] < n) {
      do_i(0);
      do_w(0);
    }
    while (i[1] < n) do_i(1);
    while (w[1] < n) do_w(1);
    while (w[0] < n) do_w(0);
  }
  return s;
}

Schedule ExpandSlices(const Schedule& whole, int k) {
  Require(k >= 1, whole.name, "the number of sequence slices must be at least 1", k);
  Require(whole.slices == 1, whole.name, "expands a schedule of whole microbatches (slices 1)", whole.slices);
  CheckCommon(whole.name, whole.ranks, whole.microbatches * k, std::max(whole.chunks(), 1));
  Schedule s = whole;
  s.microbatches = whole.microbatches * k;
  s.slices = k;
  for (std::size_t r = 0; r < s.actions.size(); ++r) {
    std::vector<Action>& out = s.actions[r];
    out.clear();
    out.reserve(whole.actions[r].size() * static_cast<std::size_t>(k));
    for (const Action& a : whole.actions[r]) {
      if (!HasMicrobatch(a.kind)) {
        out.push_back(a);
        continue;
      }
      for (int i = 0; i < k; ++i) {
        Action part = a;
        // Forwards go slice by slice, backwards last slice first.
        const bool forward = a.kind == ActionKind::kForward || a.kind == ActionKind::kSendF ||
                             a.kind == ActionKind::kRecvF || a.kind == ActionKind::kOverlapFB;
        part.microbatch = UnitOf(a.microbatch, forward ? i : k - 1 - i, k);
        if (a.kind == ActionKind::kOverlapFB) part.backward_microbatch = UnitOf(a.backward_microbatch, k - 1 - i, k);
        out.push_back(part);
      }
    }
  }
  return s;
}

namespace {

// Adapters from the registry's one signature to each generator's own; by
// then GenerateOptions::chunks holds the chunk count the schedule runs with.
Schedule RunGPipe(int p, int m, const GenerateOptions&) { return GenerateGPipe(p, m); }
Schedule Run1F1B(int p, int m, const GenerateOptions&) { return Generate1F1B(p, m); }
Schedule RunLoopedBfs(int p, int m, const GenerateOptions& o) { return GenerateLoopedBfs(p, m, o.chunks); }
Schedule RunSeq1F1B(int p, int m, const GenerateOptions& o) { return GenerateSeq1F1B(p, m, o.slices); }
Schedule RunZbH1(int p, int m, const GenerateOptions& o) { return GenerateZbH1(p, m, o.slices); }
Schedule RunZbH2(int p, int m, const GenerateOptions& o) { return GenerateZbH2(p, m, o.slices); }
Schedule RunZbv(int p, int m, const GenerateOptions& o) { return GenerateZbv(p, m, o.chunks, o.slices); }
Schedule RunInterleavedZb(int p, int m, const GenerateOptions& o) { return GenerateInterleavedZb(p, m, o.chunks); }
Schedule RunDualPipeV(int p, int m, const GenerateOptions&) { return GenerateDualPipeV(p, m); }
Schedule RunVMin(int p, int m, const GenerateOptions&) { return GenerateVMin(p, m); }
Schedule RunVHalf(int p, int m, const GenerateOptions&) { return GenerateVHalf(p, m); }

// The registry: every generator, in the order users see them listed, each
// row its spec (GeneratorTraits; a field left out keeps its default).
constexpr GeneratorEntry kGenerators[] = {
    {.name = "gpipe",
     .title = "GPipe",
     .traits = {.slices = true, .expands_slices = true, .other_backward = "zb_h1"},
     .generate = RunGPipe},
    {.name = "1f1b",
     .title = "1F1B",
     .traits = {.other_backward = "zb_h1"},
     .generate = Run1F1B},
    {.name = "seq1f1b",
     .title = "Seq1F1B",
     .traits = {.slices = true, .one_slice_is = "1f1b", .other_backward = "zb_h1"},
     .generate = RunSeq1F1B},
    {.name = "interleaved_1f1b",
     .title = "interleaved 1F1B",
     .traits = {.default_chunks = 2, .any_chunks = true, .memory_limit = true, .slices = true,
                .other_backward = "zb_h1"},
     .generate = GenerateInterleaved1F1B},
    {.name = "looped_bfs",
     .title = "looped breadth-first",
     .traits = {.default_chunks = 2, .any_chunks = true, .slices = true, .expands_slices = true},
     .generate = RunLoopedBfs},
    {.name = "zb_h1",
     .title = "ZB-H1",
     .traits = {.split_backward = true, .slices = true, .other_backward = "1f1b"},
     .generate = RunZbH1},
    {.name = "zb_h2",
     .title = "ZB-H2",
     .traits = {.split_backward = true, .slices = true, .other_backward = "1f1b"},
     .generate = RunZbH2},
    {.name = "zbv",
     .title = "ZB-V",
     .traits = {.default_chunks = 2, .split_backward = true, .placement = Placement::kV, .slices = true},
     .generate = RunZbv},
    {.name = "interleaved_zb",
     .title = "interleaved zero bubble",
     .traits = {.default_chunks = 2, .any_chunks = true, .split_backward = true, .slices = true,
                .expands_slices = true, .other_backward = "1f1b"},
     .generate = RunInterleavedZb},
    {.name = "dualpipev",
     .title = "DualPipeV",
     .traits = {.default_chunks = 2, .split_backward = true, .overlapped_units = true, .placement = Placement::kV,
                .slices = true, .expands_slices = true},
     .generate = RunDualPipeV},
    {.name = "zb_auto",
     .title = "ZB automatic",
     .traits = {.split_backward = true, .memory_limit = true, .plans_with_costs = true, .slices = true,
                .expands_slices = true, .other_backward = "1f1b"},
     .generate = GenerateZbAuto},
    {.name = "v_min",
     .title = "V-Min",
     .traits = {.default_chunks = 2, .split_backward = true, .placement = Placement::kV, .slices = true,
                .expands_slices = true},
     .generate = RunVMin},
    {.name = "v_half",
     .title = "V-Half",
     .traits = {.default_chunks = 2, .split_backward = true, .placement = Placement::kV, .slices = true,
                .expands_slices = true},
     .generate = RunVHalf},
    {.name = "v_zb",
     .title = "V-ZB",
     .traits = {.default_chunks = 2, .split_backward = true, .memory_limit = true, .plans_with_costs = true,
                .placement = Placement::kV, .slices = true, .expands_slices = true},
     .generate = GenerateVZb},
};

}  // namespace

std::span<const GeneratorEntry> Generators() { return kGenerators; }

const GeneratorEntry* FindGenerator(std::string_view name) {
  for (const GeneratorEntry& g : kGenerators) {
    if (g.name == name) return &g;
  }
  return nullptr;
}

const GeneratorEntry* SlicedFormOf(std::string_view name) {
  const GeneratorEntry* g = FindGenerator(name);
  if (g != nullptr && g->traits.slices) return g;
  for (const GeneratorEntry& e : kGenerators) {
    if (!e.traits.one_slice_is.empty() && e.traits.one_slice_is == name) return &e;
  }
  return nullptr;
}

const GeneratorEntry& GeneratorOf(std::string_view name) {
  const GeneratorEntry* g = FindGenerator(name);
  if (g == nullptr) {
    throw ScheduleError(fmt::format("unknown schedule \"{}\" (known: {})", name, fmt::join(GeneratorNames(), ", ")));
  }
  return *g;
}

const std::vector<std::string>& GeneratorNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const GeneratorEntry& g : kGenerators) out.emplace_back(g.name);
    return out;
  }();
  return names;
}

GeneratorTraits TraitsOf(std::string_view name) { return GeneratorOf(name).traits; }

Schedule Generate(std::string_view name, int p, int m, const GenerateOptions& o) {
  const GeneratorEntry& g = GeneratorOf(name);
  const int v = o.chunks;
  if (!g.traits.any_chunks) {
    const int own = g.traits.default_chunks;
    Require(v == 0 || v == own, name,
            own == 1 ? std::string("this schedule holds one chunk per rank (chunks must be 1)")
                     : fmt::format("{} places exactly {} chunks per rank (chunks must be {})", g.title, own, own),
            v);
  }
  if (o.slices > 1 && !g.traits.slices) {
    std::vector<std::string> sliced;
    for (const GeneratorEntry& e : kGenerators) {
      if (e.traits.slices) sliced.emplace_back(e.name);
    }
    Require(false, name,
            fmt::format("{} does not run sequence slices (seq_slices must be 1; the schedules that do: {}{})", g.title,
                        fmt::join(sliced, ", "), name == "1f1b" ? "; 1F1B over slices is seq1f1b" : ""),
            o.slices);
  }
  Require(o.slices >= 0, name, "the number of sequence slices must be at least 1", o.slices);
  GenerateOptions resolved = o;
  if (resolved.chunks == 0) resolved.chunks = g.traits.default_chunks;
  if (resolved.slices == 0) resolved.slices = 1;
  if (g.traits.expands_slices && resolved.slices > 1) {
    const int k = resolved.slices;
    resolved.slices = 1;
    return ExpandSlices(g.generate(p, m, resolved), k);
  }
  return g.generate(p, m, resolved);
}

Schedule Generate(std::string_view name, int p, int m, int v) {
  GenerateOptions o;
  o.chunks = v;
  return Generate(name, p, m, o);
}

}  // namespace baton
