// Error types. Setup errors (config, schedule, sizes) are thrown before
// anything is allocated; their message is written for a person: where
// (file:line:column, key path, or rank/position/action), the value, the rule.
#ifndef BATON_ERROR_H_
#define BATON_ERROR_H_

#include <stdexcept>
#include <string>

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

// Thrown on the ranks that did not fail themselves when a setup error on
// another rank ends the job; that rank prints the reason, these print nothing.
class PeerFailed : public Error {
 public:
  PeerFailed() : Error("setup failed on another rank") {}
};

}  // namespace baton

#endif  // BATON_ERROR_H_
