// SPDX-License-Identifier: Apache-2.0
// Building tiny byte-level BPE tokenizers in tests: GPT-2's byte → vocabulary-spelling map.
#pragma once

#include <string>

namespace grpo::testing {

/// The vocabulary spelling of a byte in a byte-level BPE (GPT-2's bytes_to_unicode): printable bytes (33–126,
/// 161–172, 174–255) are the character of the same code point; the others are U+0100 onward in byte order (space =
/// "Ġ", newline = "Ċ"). UTF-8 encoded.
inline std::string byte_spelling(int byte) {
  const auto printable = [](int b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255); };
  int code_point = byte;
  if (!printable(byte)) {
    code_point = 256;
    for (int b = 0; b < byte; ++b) {
      if (!printable(b)) ++code_point;
    }
  }
  std::string out;
  if (code_point < 0x80) {
    out.push_back(static_cast<char>(code_point));
  } else {
    out.push_back(static_cast<char>(0xC0 | (code_point >> 6)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  }
  return out;
}

}  // namespace grpo::testing
