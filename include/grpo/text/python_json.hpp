// SPDX-License-Identifier: Apache-2.0
// JSON written back as Python's json.dumps(value, ensure_ascii=False) writes it: the text transformers' `tojson`
// filter puts into a chat template (tool schemas, tool-call arguments), so that a C++ chat format can reproduce it
// character for character.
#pragma once

#include <string>
#include <string_view>

namespace grpo::text {

/// Parses the JSON text `json` (one value; surrounding whitespace allowed) and returns it as Python's
/// json.dumps(json.loads(json), ensure_ascii=False) writes it:
///   - ", " between items and ": " after keys; "{}" and "[]" when empty;
///   - object keys in their order; a repeated key keeps its first place and its last value (a Python dict);
///   - strings with '"' and '\' escaped, \n \r \t \b \f, the other control characters as \u00xx (lowercase hex),
///     everything else as UTF-8 (so "\u00e9" in the input comes out as "é");
///   - integers (no fraction, no exponent) with their digits as written, of any size, "-0" as "0";
///   - other numbers as Python's float repr: the shortest digits that read back as the same double, in fixed
///     notation when the decimal exponent is in [-4, 16) ("1.0", "0.1", "0.0001", "-0.0") and as "1e-05", "1e+16",
///     "1.5e-07" otherwise; "Infinity" / "-Infinity" beyond the double range, 0.0 below it;
///   - true, false, null.
/// Throws grpo::ParseError naming `what` (e.g. "ChatRenderOptions.tools[0]") when `json` is not one valid JSON value
/// (RFC 8259: Python's NaN / Infinity literals and lone surrogate escapes such as "\ud800" are errors here too).
std::string python_json_dumps(std::string_view json, std::string_view what);

/// The JSON string literal Python's json.dumps(text, ensure_ascii=False) writes for the UTF-8 text `text`, quotes
/// included: the escapes listed above, every other byte as it is.
std::string python_json_string(std::string_view text);

}  // namespace grpo::text
