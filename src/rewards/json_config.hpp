// SPDX-License-Identifier: Apache-2.0
// Private: JSON config parsing for the registry and RewardSet. simdjson stays behind these two functions.
#pragma once

#include <grpo/rewards/registry.hpp>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace grpo::rewards::detail {

/// The fields of a JSON object, in document order. Scalars become bool/double/string, an array of strings a
/// vector, other arrays and objects their minified JSON text. Throws ConfigError naming `context` for invalid
/// JSON, a value that is not an object, a duplicate key, or a null value.
std::vector<std::pair<std::string, OptionValue>> parse_json_object(std::string_view json, std::string_view context);

/// The minified JSON text of each element of a JSON array whose elements must all be objects.
std::vector<std::string> parse_json_array_of_objects(std::string_view json, std::string_view context);

/// The first non-whitespace character of `json` ('\0' if none): tells an array config from an object config.
char first_json_char(std::string_view json);

}  // namespace grpo::rewards::detail
