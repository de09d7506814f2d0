// SVG picture of a simulated timeline, meant to go into a paper or a README.
//
// Layout, top to bottom: title (schedule name), a line with p/m/v and the
// metrics, the legend, one row per rank (rank 0 on top), the time axis.
// Idle time is the row's light grey band showing through.
//
// Two drawing modes keep the file proportionate to what can be seen:
// - detailed: one <rect class="box"> per action, white separators, the
//   microbatch number where it fits, and a tooltip (<title>) per box when
//   there are not too many;
// - dense (many actions, or boxes a couple of pixels wide): per rank and
//   colour one <path> whose segments are stroked as wide as the row, no text
//   and no separators. About ten bytes per action instead of a hundred, and
//   the same picture at that scale.
// An OVERLAP_F_B unit is its F and its B side by side, half the unit's time
// each, inside one dark outline.
// Only SVG 1.1 presentation attributes are used (no CSS), so rsvg-convert,
// Inkscape and browsers agree on the result.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <sstream>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "baton/sim.h"
#include "baton/svg_text.h"

namespace baton {
namespace {

struct Rgb {
  double r = 0;  // each in [0, 255]
  double g = 0;
  double b = 0;
};

struct KindStyle {
  ActionKind kind;
  std::string_view name;   // PyTorch's letter
  std::string_view label;  // legend text
  Rgb color;
};

// Okabe & Ito's colour-blind-safe palette. B and I never share a schedule in
// practice (B is I + W fused), so their neighbouring hues do not compete.
// The last two are sharded data parallel's collectives, drawn as a strip
// along the bottom of their rank's row (they run beside the compute).
constexpr std::array<KindStyle, 6> kKindStyles = {{
    {ActionKind::kForward, "F", "forward", {0x00, 0x72, 0xB2}},
    {ActionKind::kBackward, "B", "backward", {0xD5, 0x5E, 0x00}},
    {ActionKind::kBackwardInput, "I", "backward, input", {0xE6, 0x9F, 0x00}},
    {ActionKind::kBackwardWeight, "W", "backward, weight", {0x00, 0x9E, 0x73}},
    {ActionKind::kUnshard, "UNSHARD", "gather (a stage's parameters)", {0x56, 0xB4, 0xE9}},
    {ActionKind::kReduceGrad, "REDUCE_GRAD", "reduce-scatter (its gradients)", {0xCC, 0x79, 0xA7}},
}};

bool IsCollective(ActionKind kind) { return kind == ActionKind::kUnshard || kind == ActionKind::kReduceGrad; }

constexpr std::string_view kFontFamily = "Helvetica, Arial, 'DejaVu Sans', sans-serif";
constexpr std::string_view kBackground = "#ffffff";
constexpr std::string_view kRowBand = "#ececec";
constexpr std::string_view kInk = "#1a1a1a";    // title, labels, axis
constexpr std::string_view kMuted = "#555555";  // subtitle, tick labels
constexpr std::string_view kDarkText = "#111111";
constexpr std::string_view kLightText = "#ffffff";

constexpr double kMargin = 16;
constexpr double kTitleFont = 15;
constexpr double kSubtitleFont = 12;
constexpr double kLegendFont = 12;
constexpr double kLabelFont = 12;
constexpr double kTickFont = 11;
constexpr double kMaxBoxFont = 11;
constexpr double kMinBoxFont = 7;
constexpr double kBoxTextPadding = 3;  // pixels of box left around its number
constexpr double kLegendSwatch = 11;

// Horizontal scale: the typical action gets this many pixels, within the
// plot-width bounds, so a short schedule is not a postage stamp and a long
// one does not become a banner.
constexpr double kTargetBoxWidth = 26;
constexpr double kMinPlotWidth = 420;
constexpr double kMaxPlotWidth = 1600;
// Rows: at most about this many pixels for all of them together.
constexpr double kRowsHeight = 900;
constexpr double kMaxRowPitch = 24;
constexpr double kMinRowPitch = 4;

// Past either limit the detailed mode is switched off (see the file comment).
constexpr std::size_t kMaxDetailedBoxes = 20000;
constexpr double kMinDetailedBoxWidth = 2.5;
// Tooltips (handy in a browser) cost more bytes than the box they describe.
constexpr std::size_t kMaxTooltipBoxes = 5000;
// Touching boxes get a white one-pixel line between them, except boxes so
// narrow it would swallow them.
constexpr double kMinSeparatedBoxWidth = 4;
constexpr double kMinBoxWidth = 0.5;  // an action is never invisible


// ---- Colour ----

// Chunk c of v is the kind's colour mixed with white by up to one half, so
// chunk 0 keeps the full colour and the last chunk is clearly lighter.
Rgb ChunkShade(Rgb base, int chunk, int chunks) {
  const double t = chunks > 1 ? 0.5 * chunk / (chunks - 1) : 0.0;
  return {base.r + (255 - base.r) * t, base.g + (255 - base.g) * t, base.b + (255 - base.b) * t};
}

std::string Hex(Rgb c) {
  auto channel = [](double v) { return static_cast<int>(std::lround(std::clamp(v, 0.0, 255.0))); };
  return fmt::format("#{:02x}{:02x}{:02x}", channel(c.r), channel(c.g), channel(c.b));
}

// WCAG relative luminance.
double Luminance(Rgb c) {
  auto linear = [](double v) {
    v /= 255;
    return v <= 0.03928 ? v / 12.92 : std::pow((v + 0.055) / 1.055, 2.4);
  };
  return 0.2126 * linear(c.r) + 0.7152 * linear(c.g) + 0.0722 * linear(c.b);
}

// White or near-black, whichever contrasts more with the box.
std::string_view TextColorOn(Rgb fill) {
  const double l = Luminance(fill);
  return (1.05 / (l + 0.05)) >= ((l + 0.05) / 0.05) ? kLightText : kDarkText;
}

// ---- Geometry ----

int KindIndex(ActionKind kind) {
  for (std::size_t i = 0; i < kKindStyles.size(); ++i) {
    if (kKindStyles[i].kind == kind) return static_cast<int>(i);
  }
  return -1;
}

// One compute action as drawn.
struct Box {
  int rank = 0;
  int style = 0;  // index into kKindStyles
  int chunk = 0;
  const TimedAction* timed = nullptr;
};

bool SameColor(const Box& a, const Box& b) { return a.style == b.style && a.chunk == b.chunk; }

struct Geometry {
  double left = 0;         // x of time 0
  double px_per_unit = 1;  // horizontal scale
  double rows_top = 0;
  double row_pitch = 24;  // row height plus the gap below it
  double row_height = 20;
  int slices = 1;         // sequence slices: units are labelled "microbatch.slice"

  // A unit's label: its microbatch, or with slices "j.s".
  std::string Label(int unit) const {
    return slices > 1 ? fmt::format("{}.{}", SequenceOfUnit(unit, slices), SliceOfUnit(unit, slices))
                      : std::to_string(unit);
  }

  double X(double t) const { return left + t * px_per_unit; }
  // A box's left and right edge, on whole pixels so the boxes stay crisp.
  std::pair<double, double> PixelSpan(const TimedAction& t) const {
    return {std::round(X(t.start)), std::round(X(t.end))};
  }
  // A one-pixel vertical line at time t: centred on the pixel column where a
  // box starting at t begins, so it is crisp and lines up with the boxes.
  double TickX(double t) const { return std::round(X(t)) + 0.5; }
  double RowY(int rank) const { return rows_top + rank * row_pitch; }
};

// Chunk of each (rank, stage): the stage's index among the rank's stages,
// which is right for every placement (loop or V).
std::vector<std::vector<int>> RankStages(const SimResult& result, int ranks) {
  std::vector<std::vector<int>> stages(ranks);
  for (const RankResult& r : result.per_rank) {
    if (r.rank >= 0 && r.rank < ranks) stages[r.rank] = r.stages;
  }
  for (int rank = 0; rank < ranks; ++rank) {
    // Hand-built results may carry no per-rank summary: read the stages off
    // the timeline instead.
    if (!stages[rank].empty() || rank >= static_cast<int>(result.timeline.size())) continue;
    for (const TimedAction& t : result.timeline[rank]) stages[rank].push_back(t.action.stage);
    std::sort(stages[rank].begin(), stages[rank].end());
    stages[rank].erase(std::unique(stages[rank].begin(), stages[rank].end()), stages[rank].end());
  }
  return stages;
}

int ChunkOf(const std::vector<int>& rank_stages, int stage) {
  auto it = std::lower_bound(rank_stages.begin(), rank_stages.end(), stage);
  if (it == rank_stages.end() || *it != stage) return 0;
  return static_cast<int>(it - rank_stages.begin());
}

// ---- Drawing ----

using Buffer = fmt::memory_buffer;

// REQUIRES (both box drawers): `boxes` sorted by colour, then rank, then start.
void DrawDetailedBoxes(Buffer& buf, const std::vector<Box>& boxes, const Geometry& g,
                       const std::vector<std::vector<Rgb>>& fills, bool tooltips) {
  auto it = std::back_inserter(buf);
  // Grouped by colour so each box carries only its geometry.
  for (std::size_t i = 0; i < boxes.size(); ++i) {
    const Box& box = boxes[i];
    if (i == 0 || !SameColor(box, boxes[i - 1])) {
      if (i > 0) fmt::format_to(it, "</g>\n");
      fmt::format_to(it, "<g class=\"boxes\" fill=\"{}\">\n", Hex(fills[box.style][box.chunk]));
    }
    const TimedAction& t = *box.timed;
    const auto [x0, x1] = g.PixelSpan(t);
    fmt::format_to(it, "<rect class=\"box\" x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"", Num(x0),
                   Num(g.RowY(box.rank)), Num(std::max(x1 - x0, kMinBoxWidth)), Num(g.row_height));
    if (tooltips) {
      fmt::format_to(it, "><title>{}{}{}{} on rank {}, time {} to {}</title></rect>\n",
                     t.action.stage, kKindStyles[box.style].name, t.action.microbatch,
                     g.slices > 1 ? " (microbatch.slice " + g.Label(t.action.microbatch) + ")" : "", box.rank,
                     Num(t.start, 3), Num(t.end, 3));
    } else {
      fmt::format_to(it, "/>\n");
    }
  }
  if (!boxes.empty()) fmt::format_to(it, "</g>\n");
}

void DrawBoxLabels(Buffer& buf, const std::vector<Box>& boxes, const Geometry& g,
                   const std::vector<std::vector<Rgb>>& fills) {
  if (boxes.empty()) return;
  // One font size for the whole picture: the largest at which nearly every
  // box holds its number. Labels in only some boxes would read as a pattern.
  std::vector<double> fitting(boxes.size());
  for (std::size_t i = 0; i < boxes.size(); ++i) {
    const TimedAction& t = *boxes[i].timed;
    const double digits = static_cast<double>(g.Label(t.action.microbatch).size());
    const auto [x0, x1] = g.PixelSpan(t);
    fitting[i] = (x1 - x0 - kBoxTextPadding) / (digits * kCharWidth);
  }
  auto few = fitting.begin() + static_cast<std::ptrdiff_t>(fitting.size() / 20);
  std::nth_element(fitting.begin(), few, fitting.end());
  const double font = std::floor(2 * std::min({kMaxBoxFont, g.row_height * 0.6, *few})) / 2;
  if (font < kMinBoxFont) return;

  auto it = std::back_inserter(buf);
  for (std::string_view color : {kLightText, kDarkText}) {
    bool open = false;
    for (const Box& box : boxes) {
      if (TextColorOn(fills[box.style][box.chunk]) != color) continue;
      const TimedAction& t = *box.timed;
      const std::string label = g.Label(t.action.microbatch);
      const auto [x0, x1] = g.PixelSpan(t);
      if (x1 - x0 < TextWidth(label, font) + kBoxTextPadding) continue;
      if (!open) {
        fmt::format_to(it,
                       "<g class=\"labels\" fill=\"{}\" font-size=\"{}\" text-anchor=\"middle\">\n",
                       color, Num(font));
        open = true;
      }
      // rsvg ignores dominant-baseline; a baseline 0.35 em below the centre
      // centres digits in every renderer.
      fmt::format_to(it, "<text x=\"{}\" y=\"{}\">{}</text>\n", Num((x0 + x1) / 2),
                     Num(g.RowY(box.rank) + g.row_height / 2 + 0.35 * font), label);
    }
    if (open) fmt::format_to(it, "</g>\n");
  }
}

// White lines where one box ends and the next begins on the same rank.
// REQUIRES: `boxes` in rank, then time order.
void DrawSeparators(Buffer& buf, const std::vector<Box>& boxes, const Geometry& g) {
  auto it = std::back_inserter(buf);
  bool open = false;
  for (std::size_t i = 1; i < boxes.size(); ++i) {
    const Box& prev = boxes[i - 1];
    const Box& next = boxes[i];
    if (prev.rank != next.rank) continue;
    const auto [prev_x0, prev_x1] = g.PixelSpan(*prev.timed);
    const auto [next_x0, next_x1] = g.PixelSpan(*next.timed);
    if (prev_x1 != next_x0 || prev_x1 - prev_x0 < kMinSeparatedBoxWidth ||
        next_x1 - next_x0 < kMinSeparatedBoxWidth) {
      continue;
    }
    if (!open) {
      fmt::format_to(it, "<path fill=\"none\" stroke=\"{}\" stroke-width=\"1\" d=\"", kBackground);
      open = true;
    }
    // Centred on the last pixel column of the earlier box.
    fmt::format_to(it, "M{} {}v{}", Num(prev_x1 - 0.5), Num(g.RowY(prev.rank)), Num(g.row_height));
  }
  if (open) fmt::format_to(it, "\"/>\n");
}

// Positions in tenths of a pixel: relative path steps computed from rounded
// absolute positions never drift, and need no floating-point formatting.
void AppendTenths(Buffer& buf, long long tenths) {
  auto it = std::back_inserter(buf);
  if (tenths < 0) {
    buf.push_back('-');
    tenths = -tenths;
  }
  if (tenths % 10 == 0) {
    fmt::format_to(it, "{}", tenths / 10);
  } else {
    fmt::format_to(it, "{}.{}", tenths / 10, tenths % 10);
  }
}

void DrawDenseBoxes(Buffer& buf, const std::vector<Box>& boxes, const Geometry& g,
                    const std::vector<std::vector<Rgb>>& fills) {
  auto it = std::back_inserter(buf);
  long long pen = 0;       // current point, tenths of a pixel
  long long run_end = -1;  // end of the segment being drawn
  for (std::size_t i = 0; i < boxes.size(); ++i) {
    const Box& box = boxes[i];
    const long long x0 = std::llround(g.X(box.timed->start) * 10);
    // At least a tenth of a pixel, so no action disappears.
    const long long x1 = std::max(x0 + 1, std::llround(g.X(box.timed->end) * 10));
    if (i == 0 || !SameColor(box, boxes[i - 1]) || box.rank != boxes[i - 1].rank) {
      if (i > 0) fmt::format_to(it, "\"/>\n");
      fmt::format_to(it, "<path fill=\"none\" stroke=\"{}\" stroke-width=\"{}\" d=\"M",
                     Hex(fills[box.style][box.chunk]), Num(g.row_height));
      AppendTenths(buf, x0);
      buf.push_back(' ');
      AppendTenths(buf, std::llround((g.RowY(box.rank) + g.row_height / 2) * 10));
    } else if (x0 <= run_end) {
      // Touches the previous segment: lengthen it instead of starting one.
      if (x1 > run_end) {
        buf.push_back('h');
        AppendTenths(buf, x1 - run_end);
        pen = run_end = x1;
      }
      continue;
    } else {
      buf.push_back('m');
      AppendTenths(buf, x0 - pen);
      fmt::format_to(it, " 0");
    }
    buf.push_back('h');
    AppendTenths(buf, x1 - x0);
    pen = run_end = x1;
  }
  if (!boxes.empty()) fmt::format_to(it, "\"/>\n");
}

// What a timeline holds to draw: its boxes (an OVERLAP_F_B unit as its F,
// left half, and its B, right half, inside one outline), which kinds occur,
// the chunks, the time the axis spans and the boxes' durations.
struct Scene {
  int ranks = 0;
  int chunks = 1;
  std::vector<std::vector<int>> rank_stages;
  std::vector<Box> boxes;
  std::array<bool, kKindStyles.size()> kind_present{};
  // The halves of the overlapped units (reserved up front so the boxes'
  // pointers to them stay valid) and the units to outline (rank, unit).
  std::vector<TimedAction> halves;
  std::vector<std::pair<int, const TimedAction*>> units;
  std::vector<Box> collectives;  // sharding's gathers and reduce-scatters
  double time_end = 0;
  std::vector<double> durations;
  std::vector<std::vector<Rgb>> fills;  // [style][chunk]
};

Scene Collect(const SimResult& result, double axis_end) {
  Scene sc;
  sc.ranks = std::max(result.ranks, static_cast<int>(result.timeline.size()));
  sc.rank_stages = RankStages(result, sc.ranks);
  std::size_t overlapped = 0;
  for (const auto& row : result.timeline) {
    overlapped += static_cast<std::size_t>(std::count_if(
        row.begin(), row.end(), [](const TimedAction& t) { return t.action.kind == ActionKind::kOverlapFB; }));
  }
  sc.halves.reserve(2 * overlapped);
  sc.units.reserve(overlapped);
  sc.chunks = std::max(1, result.chunks);
  for (const auto& stages : sc.rank_stages) sc.chunks = std::max(sc.chunks, static_cast<int>(stages.size()));
  sc.time_end = std::isfinite(result.makespan) ? std::max(0.0, result.makespan) : 0.0;
  if (std::isfinite(axis_end)) sc.time_end = std::max(sc.time_end, axis_end);
  for (int rank = 0; rank < static_cast<int>(result.timeline.size()); ++rank) {
    for (const TimedAction& unit : result.timeline[rank]) {
      if (!std::isfinite(unit.start) || !std::isfinite(unit.end)) continue;
      const TimedAction* parts[2] = {&unit, nullptr};
      if (unit.action.kind == ActionKind::kOverlapFB) {
        const double middle = (unit.start + unit.end) / 2;
        const Action& a = unit.action;
        sc.halves.push_back({Action{a.stage, ActionKind::kForward, a.microbatch}, unit.start, middle});
        parts[0] = &sc.halves.back();
        sc.halves.push_back({Action{a.backward_stage, ActionKind::kBackward, a.backward_microbatch}, middle, unit.end});
        parts[1] = &sc.halves.back();
        sc.units.push_back({rank, &unit});
      }
      for (const TimedAction* part : parts) {
        if (part == nullptr) continue;
        const TimedAction& t = *part;
        const int style = KindIndex(t.action.kind);
        if (style < 0 || t.wait) continue;
        const int chunk = std::min(ChunkOf(sc.rank_stages[rank], t.action.stage), sc.chunks - 1);
        (IsCollective(t.action.kind) ? sc.collectives : sc.boxes).push_back({rank, style, chunk, &t});
        sc.kind_present[style] = true;
        sc.time_end = std::max(sc.time_end, t.end);
        if (t.end > t.start) sc.durations.push_back(t.end - t.start);
      }
    }
  }
  if (!(sc.time_end > 0)) sc.time_end = 1;  // nothing ran: still draw the empty rows
  sc.fills.resize(kKindStyles.size());
  for (std::size_t s = 0; s < kKindStyles.size(); ++s) {
    for (int c = 0; c < sc.chunks; ++c) sc.fills[s].push_back(ChunkShade(kKindStyles[s].color, c, sc.chunks));
  }
  return sc;
}

struct LegendItem {
  int style;
  std::string text;
};

// Where everything goes: the scale (the short end of the common durations,
// F, I, W rather than B, sets it, so the short boxes still hold their
// numbers), the rows, the texts and the picture's size.
struct Layout {
  Geometry g;
  double plot_width = 0, row_gap = 0;
  bool detailed = false;
  std::string title, subtitle;
  int label_every = 1;
  double label_font = 0;
  std::vector<LegendItem> legend;
  std::string chunk_note, overlap_note;
  double title_y = 0, subtitle_y = 0, legend_y = 0, rows_bottom = 0, axis_y = 0, width = 0, height = 0;
};

Layout Arrange(const SimResult& result, Scene& sc) {
  Layout l;
  double typical = sc.time_end / 8;
  if (!sc.durations.empty()) {
    auto short_end = sc.durations.begin() + static_cast<std::ptrdiff_t>(sc.durations.size() / 5);
    std::nth_element(sc.durations.begin(), short_end, sc.durations.end());
    typical = *short_end;
  }
  l.plot_width = std::clamp(sc.time_end / typical * kTargetBoxWidth, kMinPlotWidth, kMaxPlotWidth);
  Geometry& g = l.g;
  g.px_per_unit = l.plot_width / sc.time_end;
  g.slices = std::max(result.slices, 1);
  g.row_pitch = std::clamp(std::floor(kRowsHeight / std::max(1, sc.ranks)), kMinRowPitch, kMaxRowPitch);
  l.row_gap = g.row_pitch >= 16 ? 4 : g.row_pitch >= 8 ? 2 : 1;
  g.row_height = g.row_pitch - l.row_gap;
  l.detailed = sc.boxes.size() <= kMaxDetailedBoxes && typical * g.px_per_unit >= kMinDetailedBoxWidth;

  l.title = result.schedule.empty() ? "schedule" : result.schedule;
  const int shown_ranks = result.ranks > 0 ? result.ranks : sc.ranks;
  const std::string chunk_text = result.chunks > 0 ? std::to_string(result.chunks) : std::to_string(sc.chunks);
  const std::string m_text = result.slices > 1 ? fmt::format("{} × {} slices", result.microbatches / result.slices,
                                                             result.slices)
                                               : std::to_string(result.microbatches);
  l.subtitle = fmt::format("p = {} · m = {} · v = {}    makespan {} · bubble {} %", shown_ranks, m_text, chunk_text,
                           Num(result.makespan, 3), Num(100 * result.bubble_rate, 1));
  if (std::abs(result.span_bubble_rate - result.bubble_rate) >= 0.0005) {
    l.subtitle += fmt::format(" (span {} %)", Num(100 * result.span_bubble_rate, 1));
  }
  // Label every rank while the labels fit their rows, else every k-th.
  l.label_every = static_cast<int>(std::ceil(kLabelFont * 1.1 / g.row_pitch));
  l.label_font = std::min(kLabelFont, std::max(8.0, g.row_pitch * 0.75));
  const double label_width = TextWidth(fmt::format("rank {}", std::max(0, sc.ranks - 1)), l.label_font);
  g.left = std::round(kMargin + label_width + 8);

  // Legend entries and their widths, to lay them out on one line.
  for (std::size_t s = 0; s < kKindStyles.size(); ++s) {
    if (sc.kind_present[s]) l.legend.push_back({static_cast<int>(s), fmt::format("{}  {}", kKindStyles[s].name, kKindStyles[s].label)});
  }
  l.chunk_note = sc.chunks > 1 ? (sc.chunks == 2 ? "light = chunk 1" : fmt::format("lighter = later chunk (0…{})", sc.chunks - 1))
                               : "";
  double legend_width = 0;
  for (const LegendItem& item : l.legend) {
    legend_width += sc.chunks * kLegendSwatch + 5 + TextWidth(item.text, kLegendFont) + 18;
  }
  if (!l.chunk_note.empty()) legend_width += TextWidth(l.chunk_note, kLegendFont);
  l.overlap_note = sc.units.empty() ? "" : "outlined: an F and a B run as one OVERLAP_F_B unit";
  if (!l.overlap_note.empty()) legend_width += 18 + TextWidth(l.overlap_note, kLegendFont);

  l.title_y = kMargin + kTitleFont;
  l.subtitle_y = l.title_y + kSubtitleFont + 7;
  l.legend_y = l.subtitle_y + 12;  // top of the swatches
  g.rows_top = l.legend_y + kLegendSwatch + 14;
  l.rows_bottom = g.rows_top + sc.ranks * g.row_pitch - l.row_gap;
  l.axis_y = l.rows_bottom + 5;
  l.height = l.axis_y + 5 + kTickFont + 6 + kTickFont + kMargin;
  l.width = std::max({g.X(sc.time_end) + kMargin + 4, kMargin * 2 + TextWidth(l.title, kTitleFont, true),
                      kMargin * 2 + TextWidth(l.subtitle, kSubtitleFont), g.left + legend_width + kMargin});
  return l;
}

// The <svg> element's start, the title and the metrics.
void DrawHeader(Buffer& buf, const Layout& l) {
  auto it = std::back_inserter(buf);
  fmt::format_to(it,
                 "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"{0}\" "
                 "height=\"{1}\" viewBox=\"0 0 {0} {1}\" font-family=\"{2}\">\n",
                 Num(std::ceil(l.width)), Num(std::ceil(l.height)), kFontFamily);
  fmt::format_to(it, "<title>{}</title>\n", XmlEscape(l.title));
  fmt::format_to(it, "<rect width=\"100%\" height=\"100%\" fill=\"{}\"/>\n", kBackground);
  fmt::format_to(it,
                 "<text x=\"{}\" y=\"{}\" font-size=\"{}\" font-weight=\"bold\" fill=\"{}\">{}"
                 "</text>\n",
                 Num(kMargin), Num(l.title_y), Num(kTitleFont), kInk, XmlEscape(l.title));
  fmt::format_to(it, "<text x=\"{}\" y=\"{}\" font-size=\"{}\" fill=\"{}\" xml:space=\"preserve\">{}</text>\n",
                 Num(kMargin), Num(l.subtitle_y), Num(kSubtitleFont), kMuted, XmlEscape(l.subtitle));
}

// One swatch per chunk and the kind's name for every kind drawn; the notes.
void DrawLegend(Buffer& buf, const Layout& l, const Scene& sc) {
  auto it = std::back_inserter(buf);
  double lx = l.g.left;
  fmt::format_to(it, "<g class=\"legend\" font-size=\"{}\" fill=\"{}\" xml:space=\"preserve\">\n",
                 Num(kLegendFont), kInk);
  for (const LegendItem& item : l.legend) {
    for (int c = 0; c < sc.chunks; ++c) {
      fmt::format_to(it, "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"/>\n",
                     Num(lx + c * kLegendSwatch), Num(l.legend_y), Num(kLegendSwatch), Num(kLegendSwatch),
                     Hex(sc.fills[item.style][c]));
    }
    lx += sc.chunks * kLegendSwatch + 5;
    fmt::format_to(it, "<text x=\"{}\" y=\"{}\">{}</text>\n", Num(lx), Num(l.legend_y + kLegendSwatch - 1),
                   XmlEscape(item.text));
    lx += TextWidth(item.text, kLegendFont) + 18;
  }
  if (!l.chunk_note.empty()) {
    fmt::format_to(it, "<text x=\"{}\" y=\"{}\" fill=\"{}\">{}</text>\n", Num(lx),
                   Num(l.legend_y + kLegendSwatch - 1), kMuted, XmlEscape(l.chunk_note));
    lx += TextWidth(l.chunk_note, kLegendFont) + 18;
  }
  if (!l.overlap_note.empty()) {
    fmt::format_to(it, "<text x=\"{}\" y=\"{}\" fill=\"{}\">{}</text>\n", Num(lx),
                   Num(l.legend_y + kLegendSwatch - 1), kMuted, XmlEscape(l.overlap_note));
  }
  fmt::format_to(it, "</g>\n");
}

// Row bands and rank labels.
void DrawRows(Buffer& buf, const Layout& l, int ranks) {
  auto it = std::back_inserter(buf);
  fmt::format_to(it, "<g class=\"bands\" fill=\"{}\">\n", kRowBand);
  for (int rank = 0; rank < ranks; ++rank) {
    fmt::format_to(it, "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"/>\n", Num(l.g.left),
                   Num(l.g.RowY(rank)), Num(l.plot_width), Num(l.g.row_height));
  }
  fmt::format_to(it, "</g>\n");
  fmt::format_to(it, "<g class=\"ranks\" font-size=\"{}\" fill=\"{}\" text-anchor=\"end\">\n",
                 Num(l.label_font), kInk);
  for (int rank = 0; rank < ranks; rank += l.label_every) {
    fmt::format_to(it, "<text x=\"{}\" y=\"{}\">rank {}</text>\n", Num(l.g.left - 8),
                   Num(l.g.RowY(rank) + l.g.row_height / 2 + 0.35 * l.label_font), rank);
  }
  fmt::format_to(it, "</g>\n");
}

// The boxes, in kind and chunk order (one path per colour when dense), and
// the overlapped units' outlines. `boxes` is in rank, then time order until
// it is sorted here.
void DrawBoxes(Buffer& buf, const Layout& l, Scene& sc) {
  auto it = std::back_inserter(buf);
  Buffer separators;
  if (l.detailed) DrawSeparators(separators, sc.boxes, l.g);
  std::stable_sort(sc.boxes.begin(), sc.boxes.end(), [](const Box& a, const Box& b) {
    if (a.style != b.style) return a.style < b.style;
    if (a.chunk != b.chunk) return a.chunk < b.chunk;
    return a.rank < b.rank;
  });
  if (l.detailed) {
    DrawDetailedBoxes(buf, sc.boxes, l.g, sc.fills, sc.boxes.size() <= kMaxTooltipBoxes);
    buf.append(separators);
    DrawBoxLabels(buf, sc.boxes, l.g, sc.fills);
  } else {
    DrawDenseBoxes(buf, sc.boxes, l.g, sc.fills);
  }
  if (!sc.collectives.empty()) {
    // A strip along the bottom of the row, a quarter of its height.
    const double strip = std::max(2.0, l.g.row_height / 4);
    fmt::format_to(it, "<g class=\"collectives\">\n");
    for (const Box& box : sc.collectives) {
      const auto [x0, x1] = l.g.PixelSpan(*box.timed);
      fmt::format_to(it, "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"><title>{} {}-{}</title></rect>\n",
                     Num(x0), Num(l.g.RowY(box.rank) + l.g.row_height - strip), Num(std::max(x1 - x0, kMinBoxWidth)),
                     Num(strip), Hex(sc.fills[box.style][0]), ToString(box.timed->action), Num(box.timed->start),
                     Num(box.timed->end));
    }
    fmt::format_to(it, "</g>\n");
  }
  if (sc.units.empty()) return;
  fmt::format_to(it, "<g class=\"overlap\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\">\n", kInk);
  for (const auto& [rank, unit] : sc.units) {
    const auto [x0, x1] = l.g.PixelSpan(*unit);
    fmt::format_to(it, "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\"/>\n", Num(x0 + 0.75),
                   Num(l.g.RowY(rank) + 0.75), Num(std::max(x1 - x0 - 1.5, kMinBoxWidth)), Num(l.g.row_height - 1.5));
  }
  fmt::format_to(it, "</g>\n");
}

// The time axis and its ticks (every 1-2-5 step, at least ~60 px apart),
// and the gridlines under the boxes (visible in idle time only): drawn in
// two parts around the boxes.
struct Ticks {
  std::vector<double> at;
  int decimals = 0;
};
Ticks TicksOf(const Layout& l, double time_end) {
  Ticks t;
  const double step = TickStep(time_end, std::clamp(l.plot_width / 60, 2.0, 12.0));
  t.decimals = std::max(0, -static_cast<int>(std::floor(std::log10(step) + 1e-9)));
  for (int k = 0; k * step <= time_end * (1 + 1e-9); ++k) t.at.push_back(k * step);
  return t;
}

void DrawGrid(Buffer& buf, const Layout& l, const Ticks& ticks) {
  auto it = std::back_inserter(buf);
  fmt::format_to(it, "<g class=\"grid\" stroke=\"{}\" stroke-width=\"1\">\n", kBackground);
  for (double t : ticks.at) {
    if (t == 0) continue;
    fmt::format_to(it, "<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\"/>\n", Num(l.g.TickX(t)),
                   Num(l.g.rows_top), Num(l.rows_bottom));
  }
  fmt::format_to(it, "</g>\n");
}

void DrawAxis(Buffer& buf, const Layout& l, const Ticks& ticks, double time_end) {
  auto it = std::back_inserter(buf);
  fmt::format_to(it, "<g class=\"axis\" stroke=\"{}\" stroke-width=\"1\">\n", kMuted);
  fmt::format_to(it, "<line x1=\"{0}\" y1=\"{2}\" x2=\"{1}\" y2=\"{2}\"/>\n", Num(l.g.left),
                 Num(l.g.X(time_end)), Num(l.axis_y + 0.5));
  for (double t : ticks.at) {
    fmt::format_to(it, "<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\"/>\n", Num(l.g.TickX(t)),
                   Num(l.axis_y + 0.5), Num(l.axis_y + 5));
  }
  fmt::format_to(it, "</g>\n");
  fmt::format_to(it, "<g class=\"ticks\" font-size=\"{}\" fill=\"{}\" text-anchor=\"middle\">\n", Num(kTickFont),
                 kMuted);
  for (double t : ticks.at) {
    fmt::format_to(it, "<text x=\"{}\" y=\"{}\">{}</text>\n", Num(l.g.X(t)), Num(l.axis_y + 5 + kTickFont),
                   Num(t, ticks.decimals));
  }
  fmt::format_to(it, "<text x=\"{}\" y=\"{}\" fill=\"{}\">time</text>\n", Num(l.g.left + l.plot_width / 2),
                 Num(l.axis_y + 5 + kTickFont + 6 + kTickFont), kInk);
  fmt::format_to(it, "</g>\n</svg>\n");
}

}  // namespace

void WriteSvg(const SimResult& result, std::ostream& out, double axis_end) {
  Scene scene = Collect(result, axis_end);
  const Layout layout = Arrange(result, scene);
  const Ticks ticks = TicksOf(layout, scene.time_end);
  Buffer buf;
  DrawHeader(buf, layout);
  DrawLegend(buf, layout, scene);
  DrawRows(buf, layout, scene.ranks);
  DrawGrid(buf, layout, ticks);
  DrawBoxes(buf, layout, scene);
  DrawAxis(buf, layout, ticks, scene.time_end);
  out.write(buf.data(), static_cast<std::streamsize>(buf.size()));
}

}  // namespace baton

namespace baton {
namespace {

// The value of attribute `attr` in an <svg> element's text, 0 if absent.
double SvgSize(const std::string& svg, std::string_view attr) {
  const std::size_t at = svg.find(std::string(attr) + "=\"");
  return at == std::string::npos ? 0.0 : std::atof(svg.c_str() + at + attr.size() + 2);
}

// The <svg> element itself, without the XML declaration before it.
std::string_view SvgElement(const std::string& svg) {
  const std::size_t at = svg.find("<svg");
  return at == std::string::npos ? std::string_view(svg) : std::string_view(svg).substr(at);
}

}  // namespace

void WriteSvgStack(const std::vector<SimResult>& results, std::ostream& out) {
  double axis = 0;
  for (const SimResult& r : results) axis = std::max(axis, r.makespan);
  std::vector<std::string> pictures;
  double width = 0, height = 0;
  for (const SimResult& r : results) {
    std::ostringstream one;
    WriteSvg(r, one, axis);
    pictures.push_back(one.str());
    width = std::max(width, SvgSize(pictures.back(), "width"));
    height += SvgSize(pictures.back(), "height");
  }
  // Each picture is a complete <svg> element, nested at its height.
  out << fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" "
      "height=\"{}\" viewBox=\"0 0 {} {}\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      width, height, width, height);
  double y = 0;
  for (const std::string& svg : pictures) {
    std::string element(SvgElement(svg));
    if (y > 0) element.insert(4, fmt::format(" y=\"{}\"", y));
    out << element << "\n";
    y += SvgSize(svg, "height");
  }
  out << "</svg>\n";
}

}  // namespace baton
