#include "baton/action.h"

#include <array>
#include <charconv>
#include <limits>

#include <fmt/format.h>

#include "baton/error.h"

namespace baton {
namespace {

struct KindText {
  ActionKind kind;
  std::string_view text;
};

// Longest names first so that "SEND_F" is never read as a shorter prefix.
constexpr std::array<KindText, 11> kKindTexts = {{
    {ActionKind::kReduceGrad, "REDUCE_GRAD"},
    {ActionKind::kUnshard, "UNSHARD"},
    {ActionKind::kReshard, "RESHARD"},
    {ActionKind::kSendF, "SEND_F"},
    {ActionKind::kRecvF, "RECV_F"},
    {ActionKind::kSendB, "SEND_B"},
    {ActionKind::kRecvB, "RECV_B"},
    {ActionKind::kForward, "F"},
    {ActionKind::kBackward, "B"},
    {ActionKind::kBackwardInput, "I"},
    {ActionKind::kBackwardWeight, "W"},
}};

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

[[noreturn]] void Fail(std::string_view where, std::string_view cell, std::string_view why) {
  throw ScheduleError(fmt::format(
      "{}: cannot read action \"{}\": {} (expected {{stage}}{{F|B|I|W|SEND_F|RECV_F|SEND_B|"
      "RECV_B}}{{microbatch}} like \"2F0\", or UNSHARD/RESHARD/REDUCE_GRAD with no microbatch)",
      where, cell, why));
}

// Reads a run of digits as a non-negative int32.
int ReadNumber(std::string_view digits, std::string_view what, std::string_view where,
               std::string_view cell) {
  int value = 0;
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec == std::errc::result_out_of_range || ptr != digits.data() + digits.size()) {
    Fail(where, cell, fmt::format("{} {} is out of range (at most {})", what, digits,
                                  std::numeric_limits<std::int32_t>::max()));
  }
  return value;
}

}  // namespace

std::string_view KindName(ActionKind kind) {
  for (const KindText& k : kKindTexts) {
    if (k.kind == kind) return k.text;
  }
  return "";
}

std::string ToString(const Action& action) {
  if (action.kind == ActionKind::kIdle) return "";
  if (!HasMicrobatch(action.kind)) return fmt::format("{}{}", action.stage, KindName(action.kind));
  return fmt::format("{}{}{}", action.stage, KindName(action.kind), action.microbatch);
}

Action ParseAction(std::string_view raw, std::string_view where) {
  std::string_view cell = Trim(raw);
  if (cell.empty()) return Action{};

  std::size_t i = 0;
  while (i < cell.size() && IsDigit(cell[i])) ++i;
  if (i == 0) {
    if (cell.front() == '-' || cell.front() == '+') Fail(where, cell, "a stage cannot have a sign");
    Fail(where, cell, "it does not start with a stage number");
  }
  Action action;
  action.stage = ReadNumber(cell.substr(0, i), "stage", where, cell);

  std::string_view rest = cell.substr(i);
  const KindText* found = nullptr;
  for (const KindText& k : kKindTexts) {
    if (rest.substr(0, k.text.size()) == k.text) {
      found = &k;
      break;
    }
  }
  if (found == nullptr) {
    std::size_t end = 0;
    while (end < rest.size() && !IsDigit(rest[end])) ++end;
    Fail(where, cell, fmt::format("unknown kind \"{}\"", rest.substr(0, end)));
  }
  action.kind = found->kind;
  rest.remove_prefix(found->text.size());

  if (!HasMicrobatch(action.kind)) {
    if (!rest.empty()) {
      Fail(where, cell, fmt::format("{} takes no microbatch, but \"{}\" follows it", found->text, rest));
    }
    return action;
  }
  if (rest.empty()) Fail(where, cell, fmt::format("{} needs a microbatch number", found->text));
  std::size_t digits = 0;
  while (digits < rest.size() && IsDigit(rest[digits])) ++digits;
  if (digits == 0) {
    if (rest.front() == '-' || rest.front() == '+') {
      Fail(where, cell, "a microbatch cannot have a sign");
    }
    Fail(where, cell, fmt::format("\"{}\" is not a microbatch number", rest));
  }
  if (digits != rest.size()) {
    Fail(where, cell, fmt::format("trailing characters \"{}\"", rest.substr(digits)));
  }
  action.microbatch = ReadNumber(rest, "microbatch", where, cell);
  return action;
}

}  // namespace baton
