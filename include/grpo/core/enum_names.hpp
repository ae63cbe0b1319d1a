// SPDX-License-Identifier: Apache-2.0
// Names of option enums as written in configs, logs and error messages. Each enum has one table listing every value
// with its canonical name first and, after it, the other spellings accepted for it (another system's name for the
// same thing: verl's "vanilla" for ppo_clip, OpenRLHF's "tis", verl's hyphenated "token-mean", ...).
// GRPO_ENUM_NAMES(Enum, table, what[, parse_fn]) next to the table generates the enum's to_string, its parse function
// and the enum_names hook option tables read, so the name printed, the names accepted and the list in the error
// message cannot drift apart, and no enum repeats the pair by hand.
#pragma once

#include <grpo/core/error.hpp>

#include <array>
#include <concepts>
#include <cstddef>
#include <iterator>
#include <optional>
#include <span>
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

/// True when no spelling appears twice in the table (GRPO_ENUM_NAMES asserts it).
template <typename EnumType, std::size_t N>
constexpr bool names_are_unique(const EnumNames<EnumType, N>& table) {
  for (std::size_t i = 0; i < N; ++i) {
    for (std::size_t j = i + 1; j < N; ++j) {
      if (table[i].name == table[j].name) return false;
    }
  }
  return true;
}

/// The canonical name of `value` in `table` (an EnumNames or a span of EnumName); "unknown" for a value missing from
/// the table (an enum cast from an integer).
template <typename EnumType, typename TableType>
constexpr std::string_view enum_name(EnumType value, const TableType& table) {
  for (const auto& entry : table) {
    if (entry.value == value) return entry.name;
  }
  return "unknown";
}

/// The value spelt `name` (canonical or alias; exact, case-sensitive match), or nullopt.
template <typename TableType>
constexpr auto find_enum(std::string_view name, const TableType& table)
    -> std::optional<std::remove_cvref_t<decltype(std::begin(table)->value)>> {
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
template <typename TableType>
auto parse_enum(std::string_view name, const TableType& table, std::string_view what) {
  if (const auto value = find_enum(name, table)) return *value;
  throw_unknown_name(what, name, table);
}

/// An enum's name table and what its values are called in errors ("loss type"): what the `enum_names(value)` hook
/// that GRPO_ENUM_NAMES declares returns, found by argument-dependent lookup (enum_option reads it).
template <typename EnumType>
struct EnumNameTable {
  std::span<const EnumName<EnumType>> names;
  std::string_view what;
};

/// True for an enum declared with GRPO_ENUM_NAMES.
template <typename EnumType>
concept NamedEnum = std::is_enum_v<EnumType> && requires(EnumType value) {
  { enum_names(value) } -> std::same_as<EnumNameTable<EnumType>>;
};

}  // namespace grpo::detail

/// Declares, in the enclosing namespace, what an enum's name table `table` (an EnumNames) gives it:
///   std::string_view to_string(Enum)                the canonical name ("unknown" for a value not in the table);
///   Enum parse_fn(std::string_view name)            only when parse_fn is given: the value spelt `name`, canonical
///                                                   or alias; ConfigError "unknown <what> 'x'; valid: ..." otherwise;
///   grpo::detail::EnumNameTable<Enum> enum_names(Enum)   the table and `what` (the option table's hook).
/// It also asserts at compile time that no spelling appears twice. An enum whose parsing reads more than a name
/// (KL estimators' '+' suffix) leaves parse_fn out and writes its parser on find_enum.
#define GRPO_ENUM_NAMES(Enum, table, what, ...)                                                          \
  [[nodiscard]] constexpr std::string_view to_string(Enum value) {                                       \
    return ::grpo::detail::enum_name(value, table);                                                      \
  }                                                                                                      \
  [[nodiscard]] constexpr ::grpo::detail::EnumNameTable<Enum> enum_names(Enum) { return {table, what}; } \
  __VA_OPT__(inline Enum __VA_ARGS__(std::string_view name) {                                            \
    return ::grpo::detail::parse_enum(name, table, what);                                                \
  })                                                                                                     \
  static_assert(::grpo::detail::names_are_unique(table), "a name appears twice in " #table)
