// SPDX-License-Identifier: Apache-2.0
// Locale-free ASCII text helpers: whitespace as C's isspace accepts it in the "C" locale (space, \t, \n, \v, \f, \r),
// trimming by it (Python's str.strip() on ASCII text), lower-casing and a case-insensitive prefix test.
#pragma once

#include <cstddef>
#include <string_view>

namespace grpo {

constexpr bool is_ascii_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

/// `s` without leading and trailing ASCII whitespace (a view into `s`).
constexpr std::string_view trim_ascii_space(std::string_view s) {
  while (!s.empty() && is_ascii_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_ascii_space(s.back())) s.remove_suffix(1);
  return s;
}

/// `c` lower-cased when it is an ASCII capital letter, else `c`.
constexpr char ascii_lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

/// Whether `s` holds `lower_word` (given in lower case) at `pos`, ignoring the case of ASCII letters in `s`.
constexpr bool ascii_iequals_at(std::string_view s, std::size_t pos, std::string_view lower_word) {
  if (pos > s.size() || lower_word.size() > s.size() - pos) return false;
  for (std::size_t k = 0; k < lower_word.size(); ++k) {
    if (ascii_lower(s[pos + k]) != lower_word[k]) return false;
  }
  return true;
}

}  // namespace grpo
