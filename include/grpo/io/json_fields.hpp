// SPDX-License-Identifier: Apache-2.0
// The fields of one JSON object as plain C++ values: the one reader behind dataset rows (io::Row::from_json) and
// reward config entries (rewards::RewardOptions). simdjson stays behind it.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace grpo::io {

/// Nested JSON (an object, or an array that is not all strings), kept as its minified text for the reader that
/// knows its shape.
struct JsonText {
  std::string text;
};

/// One field's value: a boolean, a number (every JSON number as double), a string, an array of strings, or the
/// minified text of anything nested deeper.
using JsonValue = std::variant<bool, double, std::string, std::vector<std::string>, JsonText>;

/// The fields of the JSON object `json`, in document order; JSON null as nullopt. Throws ConfigError naming `context`
/// for invalid JSON, a value that is not an object, or a key that appears twice.
std::vector<std::pair<std::string, std::optional<JsonValue>>> json_object_fields(std::string_view json,
                                                                               std::string_view context);

}  // namespace grpo::io
