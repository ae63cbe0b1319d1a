// SPDX-License-Identifier: Apache-2.0
// Locale-free ASCII text helpers: whitespace as C's isspace accepts it in the "C" locale (space, \t, \n, \v, \f, \r),
// trimming by it (Python's str.strip() on ASCII text), lower-casing, a case-insensitive prefix test and line splitting.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

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

/// `s` with its ASCII capital letters lower-cased.
inline std::string ascii_lowercase(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = ascii_lower(c);
  return out;
}

/// The lines of `text` without their '\n' (views into `text`); a final newline ends the last line instead of
/// starting an empty one.
inline std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) {
      lines.push_back(text.substr(start));
      break;
    }
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

}  // namespace grpo
