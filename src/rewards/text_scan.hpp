// SPDX-License-Identifier: Apache-2.0
// Private helpers shared by the built-in rewards' hand-written scanners: Python's notion of whitespace (str.split,
// `\s`) and of string length (code points), on UTF-8 bytes that may be invalid.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

namespace grpo::rewards::detail {

/// ASCII characters Python's str.isspace accepts: " \t\n\v\f\r" and the separators 0x1c-0x1f.
inline bool is_python_space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f); }

/// Byte length of the Python whitespace character starting at `at` (ASCII as above, or the UTF-8 encoding of
/// U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000), or 0.
inline std::size_t python_space_length(std::string_view text, std::size_t at) {
  const auto byte = [&](std::size_t k) { return at + k < text.size() ? static_cast<unsigned char>(text[at + k]) : 0u; };
  const unsigned c = byte(0);
  if (c < 0x80) return is_python_space(static_cast<unsigned char>(c)) ? 1 : 0;
  if (c == 0xC2) return byte(1) == 0x85 || byte(1) == 0xA0 ? 2 : 0;
  if (c == 0xE1) return byte(1) == 0x9A && byte(2) == 0x80 ? 3 : 0;
  if (c == 0xE2 && byte(1) == 0x80) {
    const unsigned d = byte(2);
    return (d >= 0x80 && d <= 0x8A) || d == 0xA8 || d == 0xA9 || d == 0xAF ? 3 : 0;
  }
  if (c == 0xE2) return byte(1) == 0x81 && byte(2) == 0x9F ? 3 : 0;
  if (c == 0xE3) return byte(1) == 0x80 && byte(2) == 0x80 ? 3 : 0;
  return 0;
}

/// Python's str.split() with no argument: the maximal runs of non-whitespace.
inline std::vector<std::string_view> split_python_whitespace(std::string_view text) {
  std::vector<std::string_view> words;
  std::size_t at = 0, word_start = 0;
  bool in_word = false;
  while (at < text.size()) {
    if (const std::size_t space = python_space_length(text, at)) {
      if (in_word) words.push_back(text.substr(word_start, at - word_start));
      in_word = false;
      at += space;
    } else {
      if (!in_word) word_start = at;
      in_word = true;
      ++at;
    }
  }
  if (in_word) words.push_back(text.substr(word_start));
  return words;
}

/// Python len(str) of UTF-8 text: the bytes that do not continue a multi-byte sequence. Invalid bytes count as
/// one character each when they are lead or ASCII bytes, nothing when they look like continuations.
inline std::size_t utf8_length(std::string_view text) {
  std::size_t count = 0;
  for (char c : text) count += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return count;
}

}  // namespace grpo::rewards::detail
