// Text as the SVG pictures write it.
#include "baton/svg_text.h"

#include <cmath>
#include <cstddef>
#include <cstdint>

#include <fmt/format.h>

namespace baton {
namespace {

constexpr double kBoldCharWidth = 0.68;  // kCharWidth's bold twin

void AppendReplacement(std::string& out) { out += "\xEF\xBF\xBD"; }  // U+FFFD

}  // namespace

// The number with at most `decimals` decimals and no trailing zeros.
std::string Num(double value, int decimals) {
  std::string text = fmt::format("{:.{}f}", value, decimals);
  if (text.find('.') != std::string::npos) {
    while (text.back() == '0') text.pop_back();
    if (text.back() == '.') text.pop_back();
  }
  if (text == "-0") text = "0";
  return text;
}

// Escapes text for an XML element or a double-quoted attribute. Bytes that
// are not well-formed UTF-8, and characters XML 1.0 forbids even escaped
// (controls, U+FFFE/U+FFFF), become U+FFFD; tabs and line breaks become
// spaces because every text in the picture is a single line.
std::string XmlEscape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte < 0x80) {
      switch (byte) {
        case '&':
          out += "&amp;";
          break;
        case '<':
          out += "&lt;";
          break;
        case '>':
          out += "&gt;";
          break;
        case '"':
          out += "&quot;";
          break;
        case '\'':
          out += "&apos;";
          break;
        case '\t':
        case '\n':
        case '\r':
          out += ' ';
          break;
        default:
          if (byte < 0x20) {
            AppendReplacement(out);
          } else {
            out += static_cast<char>(byte);
          }
      }
      ++i;
      continue;
    }
    // Lead byte -> sequence length and the smallest code point it may encode
    // (anything smaller is an overlong form).
    std::size_t length = 0;
    std::uint32_t code = 0;
    std::uint32_t min_code = 0;
    if (byte >= 0xC2 && byte <= 0xDF) {
      length = 2, code = byte & 0x1F, min_code = 0x80;
    } else if (byte >= 0xE0 && byte <= 0xEF) {
      length = 3, code = byte & 0x0F, min_code = 0x800;
    } else if (byte >= 0xF0 && byte <= 0xF4) {
      length = 4, code = byte & 0x07, min_code = 0x10000;
    }
    bool valid = length > 0 && i + length <= text.size();
    for (std::size_t k = 1; valid && k < length; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      valid = (next & 0xC0) == 0x80;
      code = (code << 6) | (next & 0x3F);
    }
    valid = valid && code >= min_code && code <= 0x10FFFF && !(code >= 0xD800 && code <= 0xDFFF) &&
            code != 0xFFFE && code != 0xFFFF;
    if (valid) {
      out.append(text.substr(i, length));
      i += length;
    } else {
      AppendReplacement(out);
      ++i;
    }
  }
  return out;
}

// Estimated rendered width; good enough to reserve room, not to typeset.
double TextWidth(std::string_view text, double font_size, bool bold) {
  std::size_t code_points = 0;
  for (char c : text) {
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++code_points;
  }
  return static_cast<double>(code_points) * font_size * (bold ? kBoldCharWidth : kCharWidth);
}

double TickStep(double span, double max_ticks) {
  const double raw = span / max_ticks;
  const double power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double factor : {1.0, 2.0, 5.0, 10.0}) {
    if (factor * power >= raw * (1 - 1e-9)) return factor * power;
  }
  return 10 * power;
}

}  // namespace baton
