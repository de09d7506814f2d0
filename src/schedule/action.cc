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
constexpr std::array<KindText, 12> kKindTexts = {{
    {ActionKind::kOverlapFB, "OVERLAP_F_B"},
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
  throw ScheduleError(
      fmt::format("{}: cannot read action {}: {} (expected {{stage}}{{F|B|I|W|SEND_F|RECV_F|SEND_B|"
                  "RECV_B}}{{microbatch}} like \"2F0\", UNSHARD/RESHARD/REDUCE_GRAD with no microbatch, or an "
                  "overlapped forward and full backward like \"(0F3;1B2)OVERLAP_F_B\")",
                  where, Quote(cell, 80, '"'), why));
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
  if (action.kind == ActionKind::kOverlapFB) {
    return fmt::format("({}F{};{}B{})OVERLAP_F_B", action.stage, action.microbatch, action.backward_stage,
                       action.backward_microbatch);
  }
  if (!HasMicrobatch(action.kind)) return fmt::format("{}{}", action.stage, KindName(action.kind));
  return fmt::format("{}{}{}", action.stage, KindName(action.kind), action.microbatch);
}

namespace {

// "(0F3;1B2)OVERLAP_F_B": PyTorch's _Action with sub_actions, as its
// __repr__ writes it. `cell` is trimmed and starts with '('.
Action ParseOverlap(std::string_view cell, std::string_view where) {
  constexpr std::string_view kSuffix = "OVERLAP_F_B";
  const std::size_t close = cell.find(')');
  if (close == std::string_view::npos) Fail(where, cell, "the '(' of an OVERLAP_F_B unit is never closed");
  const std::string_view suffix = cell.substr(close + 1);
  if (suffix != kSuffix) {
    Fail(where, cell, fmt::format("a parenthesised pair must be followed by OVERLAP_F_B, not \"{}\"", suffix));
  }
  const std::string_view inner = cell.substr(1, close - 1);
  const std::size_t semicolon = inner.find(';');
  if (semicolon == std::string_view::npos || inner.find(';', semicolon + 1) != std::string_view::npos) {
    Fail(where, cell, "an OVERLAP_F_B unit holds exactly two actions separated by ';', a forward and a full backward");
  }
  const std::string part_where = fmt::format("{} (in \"{}\")", where, cell);
  const std::string_view first_text = Trim(inner.substr(0, semicolon));
  const std::string_view second_text = Trim(inner.substr(semicolon + 1));
  if (first_text.empty() || second_text.empty() || first_text.front() == '(' || second_text.front() == '(') {
    Fail(where, cell, "an OVERLAP_F_B unit holds exactly two single actions, a forward and a full backward");
  }
  const Action forward = ParseAction(first_text, part_where);
  const Action backward = ParseAction(second_text, part_where);
  if (forward.kind != ActionKind::kForward || backward.kind != ActionKind::kBackward) {
    Fail(where, cell,
         fmt::format("an OVERLAP_F_B unit is a forward F then a full backward B (PyTorch's DualPipeV form), "
                     "not {} then {}",
                     KindName(forward.kind), KindName(backward.kind)));
  }
  return OverlapFB(forward.stage, forward.microbatch, backward.stage, backward.microbatch);
}

}  // namespace

Action ParseAction(std::string_view raw, std::string_view where) {
  std::string_view cell = Trim(raw);
  if (cell.empty()) return Action{};
  if (cell.front() == '(') return ParseOverlap(cell, where);

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
  if (found->kind == ActionKind::kOverlapFB) {
    Fail(where, cell, "OVERLAP_F_B is written as its two parts in parentheses, like \"(0F3;1B2)OVERLAP_F_B\"");
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
