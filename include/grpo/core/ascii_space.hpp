// SPDX-License-Identifier: Apache-2.0
// ASCII whitespace, locale-free: what C's isspace accepts in the "C" locale (space, \t, \n, \v, \f, \r), and trimming
// by it (Python's str.strip() on ASCII text).
#pragma once

#include <string_view>

namespace grpo {

constexpr bool is_ascii_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

/// `s` without leading and trailing ASCII whitespace (a view into `s`).
constexpr std::string_view trim_ascii_space(std::string_view s) {
  while (!s.empty() && is_ascii_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_ascii_space(s.back())) s.remove_suffix(1);
  return s;
}

}  // namespace grpo
