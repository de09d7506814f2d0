// baton plot: a run's metrics file (log.metrics, JSON lines) drawn as one
// SVG picture: the training loss and the validation (or test) loss, the
// step time and the real tokens a second (samples a second where the run
// packs no documents), the learning rate and the gradient norm where they
// move, over the steps; re-plans, recoveries, lost ranks, resumes and late
// steps (log.blame) as lines through every panel, skipped steps as
// crosses.
// --compare overlays other runs' files, a colour each.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "baton/error.h"
#include "baton/files.h"
#include "baton/svg_text.h"
#include "commands.h"
#include "plot.h"

namespace baton {

namespace {

// A row's number under `key`, or NaN where it is absent or null (a step
// whose loss was not finite).
double Number(const nlohmann::json& row, const char* key) {
  const auto it = row.find(key);
  if (it == row.end() || !it->is_number()) return std::numeric_limits<double>::quiet_NaN();
  return it->get<double>();
}

// "12.5", "0.001", "120000", "3.5e+05": short enough for an axis.
std::string Label(double v) {
  if (v == 0) return "0";
  const double a = std::abs(v);
  if (a < 1e12 && v == std::round(v)) return fmt::format("{:.0f}", v);  // a step, a count
  if (a >= 1e5 || a < 1e-3) return fmt::format("{:.3g}", v);
  std::string s = fmt::format("{:.4f}", v);
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s;
}

// A coordinate: at most 2 decimals.
std::string Coord(double v) { return Num(v, 2); }

// Ticks at 1, 2 or 5 times a power of ten, about `count` of them over [lo, hi].
std::vector<double> Ticks(double lo, double hi, int count) {
  const double step = TickStep(hi - lo, count);
  std::vector<double> out;
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9; t += step) out.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);
  return out;
}

constexpr const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"};

struct EventStyle {
  const char* event;
  const char* label;
  const char* color;
  const char* dash;
};
constexpr EventStyle kEvents[] = {{"replan", "re-plan", "#2a9d8f", "6 3"},
                                  {"replan_failed", "re-plan failed", "#e9c46a", "2 3"},
                                  {"lost_rank", "lost rank", "#6d597a", "2 2"},
                                  {"recovered", "recovery", "#e76f51", "8 2 2 2"},
                                  {"late", "late step (log.blame)", "#f4a261", "1 3"},
                                  {"resumed", "resumed", "#264653", "4 2 1 2"}};

const EventStyle* StyleOf(const std::string& event) {
  for (const EventStyle& s : kEvents) {
    if (event == s.event) return &s;
  }
  return nullptr;
}

// One panel: a value a step for each run (NaN where the run has none).
struct Panel {
  std::string title;
  std::string key;  // the class its lines carry
  bool from_zero = true;
  bool trim = false;  // its top at most 3 x the median (step times and rates)
  std::vector<std::vector<std::pair<double, double>>> lines;   // per run: (step, value)
  std::vector<std::vector<std::pair<double, double>>> dashed;  // per run: validation points
};

// The picture's frame: panels of `height` from x = left over `width`, the
// steps from x_lo to x_hi.
struct Frame {
  double left = 78, width = 720, right = 24, height = 150, gap = 52, top = 40;
  double x_lo = 0, x_hi = 1;
  double X(double step) const { return left + (step - x_lo) / (x_hi - x_lo) * width; }
};

// A panel's value range and its place: y of a value (clamped to the top).
struct Scale {
  double lo = 0, hi = 1, top = 0, bottom = 0;
  double Y(double v) const { return bottom - (std::min(v, hi) - lo) / (hi - lo) * (bottom - top); }
};

// The panels the runs fill: loss, step time and rate always; the learning
// rate where it moves, the gradient norm where one was measured.
std::vector<Panel> PanelsOf(const std::vector<MetricsRun>& runs) {
  const bool tokens = std::all_of(runs.begin(), runs.end(), [](const MetricsRun& r) {
    return std::any_of(r.steps.begin(), r.steps.end(), [](const MetricsStep& s) { return !std::isnan(s.tokens_per_s); });
  });
  const bool test = std::any_of(runs.begin(), runs.end(), [](const MetricsRun& r) { return r.test_split; });
  std::vector<Panel> panels;
  panels.push_back({test ? "loss (training: solid; test: dashed, dots)" : "loss (training: solid; validation: dashed, dots)",
                    "loss", false, false, {}, {}});
  panels.push_back({"step time (s)", "step_time", true, true, {}, {}});
  panels.push_back({tokens ? "real tokens/s" : "samples/s", "rate", true, true, {}, {}});
  Panel lr{"learning rate", "lr", true, false, {}, {}}, norm{"gradient norm (before clipping)", "grad_norm", true, false, {}, {}};
  bool lr_moves = false, has_norm = false;
  for (const MetricsRun& r : runs) {
    std::vector<std::pair<double, double>> loss, time, rate, rates, norms;
    for (const MetricsStep& s : r.steps) {
      loss.push_back({s.step, s.loss});
      time.push_back({s.step, s.step_time_s});
      rate.push_back({s.step, tokens ? s.tokens_per_s : s.samples_per_s});
      rates.push_back({s.step, s.lr});
      norms.push_back({s.step, s.grad_norm});
      if (!std::isnan(s.lr) && s.lr != r.steps.front().lr) lr_moves = true;
      if (s.grad_norm > 0) has_norm = true;
    }
    panels[0].lines.push_back(loss);
    panels[0].dashed.push_back(r.validation);
    panels[1].lines.push_back(time);
    panels[2].lines.push_back(rate);
    lr.lines.push_back(rates);
    norm.lines.push_back(norms);
  }
  if (lr_moves) panels.push_back(lr);
  if (has_norm) panels.push_back(norm);
  return panels;
}

// The steps every run's rows and events cover.
void StepRange(const std::vector<MetricsRun>& runs, Frame& f) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const MetricsRun& r : runs) {
    for (const MetricsStep& s : r.steps) lo = std::min(lo, s.step), hi = std::max(hi, s.step);
    for (const auto& [step, v] : r.validation) lo = std::min(lo, step), hi = std::max(hi, step);
    for (const auto& [step, e] : r.events) lo = std::min(lo, step), hi = std::max(hi, step);
  }
  f.x_lo = lo;
  f.x_hi = hi > lo ? hi : lo + 1;
}

// A panel's range: its finite values (from 0 for times, rates and norms);
// a time or a rate far above the rest (the first logged step holds the
// start-up) would flatten the panel, so its top is at most 3 times the
// median, and what lies above is drawn at the top, marked.
Scale ScaleOf(const Panel& p, double top, double height) {
  Scale s;
  s.top = top;
  s.bottom = top + height;
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  std::vector<double> values;
  for (const auto* set : {&p.lines, &p.dashed}) {
    for (const auto& line : *set) {
      for (const auto& [step, v] : line) {
        if (!std::isfinite(v)) continue;
        lo = std::min(lo, v), hi = std::max(hi, v);
        if (set == &p.lines) values.push_back(v);
      }
    }
  }
  if (!std::isfinite(lo)) lo = 0, hi = 1;
  if (p.from_zero) lo = std::min(lo, 0.0);
  if (p.trim && !values.empty()) {
    std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2), values.end());
    const double median = values[values.size() / 2];
    if (median > 0) hi = std::min(hi, 3 * median);
  }
  if (hi <= lo) {
    const double pad = lo == 0 ? 1.0 : std::abs(lo) * 0.05;
    lo -= pad, hi += pad;
  }
  s.lo = lo;
  s.hi = hi;
  return s;
}

// The title, a line a run in its colour, and the markers' key.
void DrawLegend(std::ostream& o, const std::vector<MetricsRun>& runs, const Frame& f) {
  const double left = f.left;
  o << fmt::format("<text x=\"{}\" y=\"22\" font-size=\"14\" font-weight=\"bold\">{}</text>\n", left,
                   runs.size() == 1 ? XmlEscape(runs[0].path) : fmt::format("{} runs", runs.size()));
  double y = f.top;
  for (std::size_t i = 0; i < runs.size(); ++i, y += 18) {
    const char* c = kColors[i % std::size(kColors)];
    o << fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"2\"/>\n", left,
                     Coord(y - 4), left + 24, Coord(y - 4), c);
    o << fmt::format("<text x=\"{}\" y=\"{}\">{}: {} steps logged</text>\n", left + 30, Coord(y), XmlEscape(runs[i].path),
                     runs[i].steps.size());
  }
  double x = left;
  for (const EventStyle& e : kEvents) {
    o << fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"1.5\" "
                     "stroke-dasharray=\"{}\"/>\n",
                     Coord(x), Coord(y - 12), Coord(x), Coord(y + 2), e.color, e.dash);
    o << fmt::format("<text x=\"{}\" y=\"{}\">{}</text>\n", Coord(x + 6), Coord(y), e.label);
    x += 22 + 6.5 * static_cast<double>(std::string_view(e.label).size());
  }
  o << fmt::format("<text x=\"{}\" y=\"{}\" fill=\"#c00\" font-weight=\"bold\">\u00d7</text>\n", Coord(x), Coord(y));
  o << fmt::format("<text x=\"{}\" y=\"{}\">skipped step</text>\n", Coord(x + 12), Coord(y));
}

// A panel's box, title, grid and both axes' ticks.
void DrawAxes(std::ostream& o, const Panel& p, const Frame& f, const Scale& s) {
  o << fmt::format("<text x=\"{}\" y=\"{}\" font-weight=\"bold\">{}</text>\n", f.left, Coord(s.top - 8), p.title);
  o << fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#999\"/>\n", f.left,
                   Coord(s.top), f.width, Coord(s.bottom - s.top));
  for (const double t : Ticks(s.lo, s.hi, 4)) {
    o << fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#eee\"/>\n", f.left, Coord(s.Y(t)),
                     f.left + f.width, Coord(s.Y(t)));
    o << fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n", f.left - 6, Coord(s.Y(t) + 4), Label(t));
  }
  for (const double t : Ticks(f.x_lo, f.x_hi, 8)) {
    o << fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#999\"/>\n", Coord(f.X(t)),
                     Coord(s.bottom), Coord(f.X(t)), Coord(s.bottom + 4));
    o << fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", Coord(f.X(t)), Coord(s.bottom + 16),
                     Label(t));
  }
  o << fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\" fill=\"#666\">step</text>\n", f.left + f.width,
                   Coord(s.bottom + 30));
}

// Run `run`'s points as polylines, one a stretch of finite values (a step
// of no value breaks it); a value above the panel at its top, marked.
void DrawLine(std::ostream& o, const std::vector<std::pair<double, double>>& points, const std::string& cls, std::size_t run,
              const char* dash, const Frame& f, const Scale& s) {
  const char* c = kColors[run % std::size(kColors)];
  std::string pts;
  auto flush = [&] {
    if (pts.empty()) return;
    o << fmt::format("<polyline class=\"{}\" data-run=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\"{} "
                     "points=\"{}\"/>\n",
                     cls, run, c, dash, pts);
    pts.clear();
  };
  for (const auto& [step, v] : points) {
    if (!std::isfinite(v)) {
      flush();
      continue;
    }
    if (!pts.empty()) pts += ' ';
    pts += Coord(f.X(step)) + "," + Coord(s.Y(v));
    if (v > s.hi) {
      o << fmt::format("<path class=\"above\" data-run=\"{}\" d=\"M{},{} l-4,7 h8 z\" fill=\"{}\"><title>step {}: {} "
                       "(above the panel)</title></path>\n",
                       run, Coord(f.X(step)), Coord(s.top), c, Label(step), Label(v));
    }
  }
  flush();
}

// The events as lines through the panel; on the loss panel, skipped steps.
void DrawMarks(std::ostream& o, const Panel& p, const MetricsRun& r, std::size_t run, const Frame& f, const Scale& s) {
  for (const auto& [step, event] : r.events) {
    const EventStyle* e = StyleOf(event);
    if (e == nullptr) continue;
    o << fmt::format("<line class=\"event {}\" data-run=\"{}\" data-step=\"{}\" x1=\"{}\" y1=\"{}\" x2=\"{}\" "
                     "y2=\"{}\" stroke=\"{}\" stroke-width=\"1.5\" stroke-dasharray=\"{}\"><title>{} at step {} "
                     "({})</title></line>\n",
                     e->event, run, Label(step), Coord(f.X(step)), Coord(s.top), Coord(f.X(step)), Coord(s.bottom),
                     e->color, e->dash, e->label, Label(step), XmlEscape(r.path));
  }
  if (p.key != "loss") return;
  for (const MetricsStep& m : r.steps) {
    if (!m.skipped) continue;
    o << fmt::format("<text class=\"skipped\" data-run=\"{}\" data-step=\"{}\" x=\"{}\" y=\"{}\" "
                     "text-anchor=\"middle\" fill=\"#c00\" font-weight=\"bold\">\u00d7<title>step {} skipped "
                     "(train.on_nonfinite: skip)</title></text>\n",
                     run, Label(m.step), Coord(f.X(m.step)), Coord(s.bottom - 4), Label(m.step));
  }
}

// One panel whole: its axes, every run's lines (validation dashed, a dot
// an evaluation), then the marks over them.
void DrawPanel(std::ostream& o, const Panel& p, const std::vector<MetricsRun>& runs, const Frame& f, double top) {
  const Scale s = ScaleOf(p, top, f.height);
  o << fmt::format("<g class=\"panel {}\" data-lo=\"{:.17g}\" data-hi=\"{:.17g}\" data-top=\"{}\" data-height=\"{}\">\n",
                   p.key, s.lo, s.hi, Coord(s.top), Coord(f.height));
  DrawAxes(o, p, f, s);
  for (std::size_t i = 0; i < runs.size(); ++i) {
    if (i < p.lines.size()) DrawLine(o, p.lines[i], p.key + " steps", i, "", f, s);
    if (i >= p.dashed.size() || p.dashed[i].empty()) continue;
    DrawLine(o, p.dashed[i], p.key + " validation", i, " stroke-dasharray=\"5 3\"", f, s);
    for (const auto& [step, v] : p.dashed[i]) {
      if (!std::isfinite(v)) continue;
      o << fmt::format("<circle class=\"validation\" cx=\"{}\" cy=\"{}\" r=\"3\" fill=\"{}\"/>\n", Coord(f.X(step)),
                       Coord(s.Y(v)), kColors[i % std::size(kColors)]);
    }
  }
  for (std::size_t i = 0; i < runs.size(); ++i) DrawMarks(o, p, runs[i], i, f, s);
  o << "</g>\n";
}

}  // namespace

MetricsRun ReadMetricsRun(const std::string& path) {
  // A long run's file: 256 MiB is about a million rows.
  std::istringstream in(ReadTextFile(path, "metrics file", std::size_t{256} << 20));
  MetricsRun run;
  run.path = path;
  std::string line;
  double last_step = 0;
  for (std::int64_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json row;
    try {
      row = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception&) {
      throw ConfigError(fmt::format("{}:{}: not JSON (a metrics file holds one JSON object a line, as baton train "
                                    "writes log.metrics)",
                                    path, number));
    }
    if (!row.is_object()) {
      throw ConfigError(fmt::format("{}:{}: not a JSON object (a metrics file holds one object a line)", path, number));
    }
    const double step = Number(row, "step");
    if (row.contains("event")) {
      if (!row["event"].is_string()) throw ConfigError(fmt::format("{}:{}: \"event\" is not a string", path, number));
      // An event of no step (a lost rank under stop) belongs to the last step before it.
      run.events.push_back({std::isnan(step) ? last_step : step, row["event"].get<std::string>()});
      continue;
    }
    // A resumed run's first row names the checkpoint's step it went on from.
    if (const double after = Number(row, "resumed_after"); !std::isnan(after)) run.events.push_back({after, "resumed"});
    const bool validation = row.contains("validation_loss") || row.contains("test_loss");
    const bool train = row.contains("loss");
    if (!train && !validation) continue;  // a row of some other kind: not drawn
    if (std::isnan(step)) throw ConfigError(fmt::format("{}:{}: a loss without a numeric \"step\"", path, number));
    last_step = step;
    if (validation) {
      const double v = row.contains("validation_loss") ? Number(row, "validation_loss") : Number(row, "test_loss");
      run.validation.push_back({step, v});
      if (row.contains("test_loss")) run.test_split = true;
      continue;
    }
    MetricsStep s;
    s.step = step;
    s.loss = Number(row, "loss");
    s.step_time_s = Number(row, "step_time_s");
    s.tokens_per_s = Number(row, "tokens_per_s");
    s.samples_per_s = Number(row, "samples_per_s");
    s.lr = Number(row, "lr");
    s.grad_norm = Number(row, "grad_norm");
    s.skipped = row.value("skipped", false) || row.value("nonfinite", false);
    run.steps.push_back(s);
  }
  if (run.steps.empty()) {
    throw ConfigError(fmt::format("{}: no step rows (rows with \"step\" and \"loss\"; a run with log.every_steps: 0 "
                                  "logs none)",
                                  path));
  }
  return run;
}

std::string PlotSvg(const std::vector<MetricsRun>& runs) {
  const std::vector<Panel> panels = PanelsOf(runs);
  Frame f;
  StepRange(runs, f);
  const double legend_h = 18.0 * static_cast<double>(runs.size()) + 26;
  const double total_w = f.left + f.width + f.right;
  const double total_h = f.top + legend_h + static_cast<double>(panels.size()) * (f.height + f.gap) + 10;
  std::ostringstream o;
  o << fmt::format("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
                   "font-family=\"sans-serif\" font-size=\"11\">\n",
                   Coord(total_w), Coord(total_h), Coord(total_w), Coord(total_h));
  o << fmt::format("<rect width=\"{}\" height=\"{}\" fill=\"white\"/>\n", Coord(total_w), Coord(total_h));
  DrawLegend(o, runs, f);
  double top = f.top + legend_h;
  for (const Panel& p : panels) {
    DrawPanel(o, p, runs, f, top);
    top += f.height + f.gap;
  }
  o << "</svg>\n";
  return o.str();
}

namespace {

struct PlotFlags {
  std::string metrics, svg;
  std::vector<std::string> compare;
};

}  // namespace

void AddPlotCommand(CLI::App& app) {
  auto f = std::make_shared<PlotFlags>();
  CLI::App* cmd = app.add_subcommand(
      "plot", "Draw a run from its metrics file: loss and validation loss, step time, real tokens/s (and the "
              "learning rate and gradient norm where they move) over the steps, with re-plans, recoveries, lost "
              "ranks and skipped steps marked");
  cmd->add_option("metrics", f->metrics, "the run's metrics file (log.metrics, JSON lines)")->required();
  cmd->add_option("--svg", f->svg, "the picture (an SVG file; - for standard output)")->required();
  cmd->add_option("--compare", f->compare, "another run's metrics file, drawn over it (repeat for more)");
  cmd->callback([f] {
    CommandFiles files;
    files.inputs.push_back({"the metrics file", f->metrics});
    for (const std::string& other : f->compare) files.inputs.push_back({"--compare", other});
    files.outputs.push_back({"--svg", f->svg});
    CheckCommandFiles(files);
    std::vector<MetricsRun> runs{ReadMetricsRun(f->metrics)};
    for (const std::string& other : f->compare) runs.push_back(ReadMetricsRun(other));
    WriteOutput(f->svg, PlotSvg(runs));
  });
}

}  // namespace baton
