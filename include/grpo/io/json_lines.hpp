// SPDX-License-Identifier: Apache-2.0
// Walking a JSON-lines text (one JSON value a line) with the "file:line" every row error names; shared by the data
// set and chat-file loaders.
#pragma once

#include <grpo/core/ascii_text.hpp>

#include <fmt/format.h>

#include <cstddef>
#include <string>
#include <string_view>

namespace grpo::io {

/// Whether `text` is a JSON array (its first non-blank character is '['), not JSON lines.
inline bool is_json_array(std::string_view text) { return trim_ascii_space(text).starts_with('['); }

/// Calls visit(line, where) for every non-blank line of `text` (trimmed, CRLF endings too), in order; `where` is
/// "<source>:<line number>", 1-based, counting blank lines.
template <typename Visit>
void for_each_json_line(std::string_view text, std::string_view source, Visit&& visit) {
  std::size_t line_number = 0;
  while (!text.empty()) {
    ++line_number;
    const std::size_t end = text.find('\n');
    const std::string_view line = trim_ascii_space(text.substr(0, end));
    text.remove_prefix(end == std::string_view::npos ? text.size() : end + 1);
    if (!line.empty()) visit(line, fmt::format("{}:{}", source, line_number));
  }
}

}  // namespace grpo::io
