// Enums whose values have names: the spelling a config file uses for them.
//
// A config choice ("checkpointing: selective", "device: cuda", a layer's
// "type: linear") is parsed into its enum once, in src/config, and the rest
// of baton switches on the enum. To make one a named enum, declare
//   std::string_view EnumName(E value);           // "selective"
//   std::span<const E> EnumValues(E);              // every value, in order
// in namespace baton. It then compares equal to its name (`policy ==
// "full"`), prints as its name, and parses with ParseEnum.
#ifndef BATON_NAMED_ENUM_H_
#define BATON_NAMED_ENUM_H_

#include <concepts>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

namespace baton {

template <typename E>
concept NamedEnum = std::is_enum_v<E> && requires(E e) {
  { EnumName(e) } -> std::convertible_to<std::string_view>;
  { EnumValues(e) } -> std::convertible_to<std::span<const E>>;
};

template <NamedEnum E>
bool operator==(E value, std::string_view name) {
  return EnumName(value) == name;
}

template <NamedEnum E>
std::ostream& operator<<(std::ostream& out, E value) {
  return out << EnumName(value);
}

// The value named `name`, or nothing.
template <NamedEnum E>
std::optional<E> ParseEnum(std::string_view name) {
  for (E value : EnumValues(E{})) {
    if (EnumName(value) == name) return value;
  }
  return std::nullopt;
}

// "a, b, c": every name, for error messages.
template <NamedEnum E>
std::string EnumNameList() {
  std::string out;
  for (E value : EnumValues(E{})) {
    if (!out.empty()) out += ", ";
    out += EnumName(value);
  }
  return out;
}

}  // namespace baton

#endif  // BATON_NAMED_ENUM_H_
