// Error types. Setup errors (config, schedule, sizes) are thrown before
// anything is allocated; their message is written for a person: where
// (file:line:column, key path, or rank/position/action), the value, the rule.
#ifndef BATON_ERROR_H_
#define BATON_ERROR_H_

#include <cstddef>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <string_view>

namespace baton {

// Base of every error baton throws on purpose.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A schedule that is malformed, violates a generator's constraint, or cannot
// run to completion.
class ScheduleError : public Error {
 public:
  using Error::Error;
};

// A configuration file or command-line setting that is unknown, mistyped or
// out of range.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// An output file (weights, checkpoint, report, picture) that cannot be
// written: the path and the reason. Nothing half-written is left behind.
class OutputError : public Error {
 public:
  using Error::Error;
};

// The machine lacks what a run needs (memory): the rank, what for, how
// much. Raised at setup, before the run starts, and agreed like a
// ConfigError.
class ResourceError : public Error {
 public:
  using Error::Error;
};

// A run that started and then stopped by every rank's agreement, saying
// why: a non-finite loss or gradient, a metrics write that failed, a fault
// that never fired. What was written before it stays whole.
class RunError : public Error {
 public:
  using Error::Error;
};

// A wait that passed its deadline, where the job ends by exception rather
// than by MPI_Abort (ranks as threads, comm.h MakeThreadRanks): the rank,
// what it waited for, how long.
class DeadlineExpired : public Error {
 public:
  using Error::Error;
};

// Thrown on the ranks that did not fail themselves when a setup error on
// another rank ends the job; that rank prints the reason, these print nothing.
class PeerFailed : public Error {
 public:
  PeerFailed() : Error("setup failed on another rank") {}
};

// Untrusted text (a config value, a schedule cell, a file name read from a
// file) as an error message quotes it: between `quote`s, every byte that
// is not printable ASCII as \xNN (so no terminal escape sequence reaches a
// terminal), cut after `max` bytes with how many more there were.
inline std::string Quote(std::string_view text, std::size_t max = 80, char quote = '\'') {
  std::string out(1, quote);
  const std::size_t n = text.size() < max ? text.size() : max;
  for (std::size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  out += quote;
  if (n < text.size()) out += "... (" + std::to_string(text.size() - n) + " more bytes)";
  return out;
}

// A JSON library's message as an error quotes it: without the library's
// own tag ("[json.exception.parse_error.101] "), so the reader sees what
// is wrong and where, not which exception class said it.
inline std::string_view JsonError(std::string_view what) {
  if (what.rfind("[json.exception.", 0) == 0) {
    const std::size_t end = what.find("] ");
    if (end != std::string_view::npos) what.remove_prefix(end + 2);
  }
  return what;
}

// A whole error message as it is printed: control bytes other than line
// breaks and tabs as \xNN, and each line cut after `max_line` bytes. The
// last guard, for messages that quote without Quote.
inline std::string ForTerminal(std::string_view message, std::size_t max_line = 2000) {
  std::string out;
  std::size_t line = 0;
  for (std::size_t i = 0; i < message.size(); ++i) {
    const auto c = static_cast<unsigned char>(message[i]);
    if (c == '\n') {
      out += '\n';
      line = 0;
      continue;
    }
    if (line == max_line) {
      std::size_t end = message.find('\n', i);
      if (end == std::string_view::npos) end = message.size();
      out += "... (" + std::to_string(end - i) + " more bytes)";
      i = end - 1;
      continue;
    }
    ++line;
    if (c == '\t' || (c >= 0x20 && c != 0x7f)) {
      out += static_cast<char>(c);
    } else {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    }
  }
  return out;
}

}  // namespace baton

#endif  // BATON_ERROR_H_
