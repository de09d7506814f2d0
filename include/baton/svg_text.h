// Text as baton's SVG pictures write it (numbers, escaped strings,
// estimated widths, axis ticks), apart from the drawing: the simulator's
// timelines, baton plot, baton data stats.
#ifndef BATON_SVG_TEXT_H_
#define BATON_SVG_TEXT_H_

#include <string>
#include <string_view>

namespace baton {

// Average glyph advance as a fraction of the font size. Generous, because
// the fallback font (DejaVu Sans) is wider than Helvetica.
inline constexpr double kCharWidth = 0.62;

// The number with at most `decimals` decimals and no trailing zeros.
std::string Num(double value, int decimals = 2);
// Escapes text for an XML element or a double-quoted attribute. Bytes that
// are not well-formed UTF-8, and characters XML 1.0 forbids even escaped
// (controls, U+FFFE/U+FFFF), become U+FFFD; tabs and line breaks become
// spaces because every text in the picture is a single line.
std::string XmlEscape(std::string_view text);
// Estimated rendered width; good enough to reserve room, not to typeset.
double TextWidth(std::string_view text, double font_size, bool bold = false);
// A 1-2-5 step (1, 2 or 5 times a power of ten) giving at most about
// `max_ticks` ticks over a span of `span`.
double TickStep(double span, double max_ticks);

}  // namespace baton

#endif  // BATON_SVG_TEXT_H_
