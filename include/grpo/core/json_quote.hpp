// SPDX-License-Identifier: Apache-2.0
// Writing JSON strings: the one escaping routine every JSON/JSONL writer in grpo uses.
#pragma once

#include <string>
#include <string_view>

namespace grpo {

/// Appends s to out as a JSON string literal (with quotes): escapes ", \, and control characters (\n, \t, \uXXXX).
/// Bytes ≥ 0x80 are copied as they are (UTF-8 passes through; validating it is the caller's choice).
inline void append_json_quoted(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.push_back('"');
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          out += "\\u00";
          out.push_back(kHex[c >> 4]);
          out.push_back(kHex[c & 15]);
        } else {
          out.push_back(ch);
        }
    }
  }
  out.push_back('"');
}

/// s as a JSON string literal, quotes included.
inline std::string json_quoted(std::string_view s) {
  std::string out;
  out.reserve(s.size() + 2);
  append_json_quoted(out, s);
  return out;
}

}  // namespace grpo
