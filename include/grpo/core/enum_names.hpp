// SPDX-License-Identifier: Apache-2.0
// Names of option enums as written in configs, logs and error messages. Each enum has one table listing every value
// with its canonical name first and, after it, the other spellings accepted for it (another system's name for the
// same thing: verl's "vanilla" for ppo_clip, OpenRLHF's "tis", verl's hyphenated "token-mean", ...). to_string and
// every parse_* function are written on top of that one table, so the name printed, the names accepted and the list
// in the error message cannot drift apart.
#pragma once

#include <grpo/core/error.hpp>

#include <array>
#include <cstddef>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>

namespace grpo::detail {

/// One accepted spelling of an enum value.
template <typename EnumType>
struct EnumName {
  EnumType value;
  std::string_view name;
};

/// A name table. The first entry of a value is its canonical name (what enum_name returns); later entries with the
/// same value are aliases, accepted by find_enum and parse_enum and listed after the canonical name in errors.
template <typename EnumType, std::size_t N>
using EnumNames = std::array<EnumName<EnumType>, N>;

/// True when no spelling appears twice in the table (checked with static_assert next to each table).
template <typename EnumType, std::size_t N>
constexpr bool names_are_unique(const EnumNames<EnumType, N>& table) {
  for (std::size_t i = 0; i < N; ++i) {
    for (std::size_t j = i + 1; j < N; ++j) {
      if (table[i].name == table[j].name) return false;
    }
  }
  return true;
}

/// The canonical name of `value`; "unknown" for a value missing from the table (an enum cast from an integer).
template <typename EnumType, std::size_t N>
constexpr std::string_view enum_name(EnumType value, const EnumNames<EnumType, N>& table) {
  for (const auto& entry : table) {
    if (entry.value == value) return entry.name;
  }
  return "unknown";
}

/// The value spelt `name` (canonical or alias; exact, case-sensitive match), or nullopt.
template <typename EnumType, std::size_t N>
constexpr std::optional<EnumType> find_enum(std::string_view name, const EnumNames<EnumType, N>& table) {
  for (const auto& entry : table) {
    if (entry.name == name) return entry.value;
  }
  return std::nullopt;
}

/// The names of a list, for error messages: "a, b, c" for a range of strings; for a name table each value once, in
/// table order, its aliases in parentheses: "ppo_clip (alias vanilla), cispo, k2 (aliases mse, squared)".
template <typename RangeType>
std::string joined_names(const RangeType& names) {
  std::string out;
  for (auto it = std::begin(names); it != std::end(names); ++it) {
    if constexpr (std::is_convertible_v<decltype(*it), std::string_view>) {
      out += (out.empty() ? "" : ", ") + std::string(std::string_view(*it));
    } else {
      // A name table: skip aliases here, they are listed with the first entry of their value.
      bool seen = false;
      for (auto before = std::begin(names); before != it; ++before) seen = seen || before->value == it->value;
      if (seen) continue;
      out += (out.empty() ? "" : ", ") + std::string(it->name);
      std::string aliases;
      int count = 0;
      for (auto after = std::next(it); after != std::end(names); ++after) {
        if (after->value != it->value) continue;
        aliases += (count++ ? ", " : "") + std::string(after->name);
      }
      if (count > 0) out += (count == 1 ? " (alias " : " (aliases ") + aliases + ")";
    }
  }
  return out;
}

/// Throws ConfigError "unknown <what> '<name>'; valid: <joined_names(table)><note>".
template <typename RangeType>
[[noreturn]] void throw_unknown_name(std::string_view what, std::string_view name, const RangeType& table,
                                     std::string_view note = {}) {
  throw_formatted<ConfigError>("unknown {} '{}'; valid: {}{}", what, name, joined_names(table), note);
}

/// The value spelt `name` in `table`; throws ConfigError naming `what`, the unknown name and every valid one.
template <typename EnumType, std::size_t N>
EnumType parse_enum(std::string_view name, const EnumNames<EnumType, N>& table, std::string_view what) {
  if (const auto value = find_enum(name, table)) return *value;
  throw_unknown_name(what, name, table);
}

}  // namespace grpo::detail
