// SPDX-License-Identifier: Apache-2.0
// JSON config parsing with simdjson (see json_config.hpp); no simdjson type or error leaves this file.
#include "json_config.hpp"

#include <grpo/core/error.hpp>
#include <grpo/io/json_fields.hpp>

#include <simdjson.h>

namespace grpo::rewards::detail {
namespace {

simdjson::dom::element parse_document(simdjson::dom::parser& parser, std::string_view json, std::string_view context) {
  simdjson::dom::element root;
  const auto error = parser.parse(simdjson::padded_string(json)).get(root);
  GRPO_CHECK_CONFIG(!error, "{}: invalid JSON ({})", context, simdjson::error_message(error));
  return root;
}

}  // namespace

std::vector<std::pair<std::string, OptionValue>> parse_json_object(std::string_view json, std::string_view context) {
  std::vector<std::pair<std::string, OptionValue>> fields;
  for (auto& [key, value] : io::json_object_fields(json, context)) {
    GRPO_CHECK_CONFIG(value.has_value(), "{}: option '{}' is null; leave it out to use its default", context, key);
    fields.emplace_back(std::move(key), std::move(*value));
  }
  return fields;
}

std::vector<std::string> parse_json_array_of_objects(std::string_view json, std::string_view context) {
  simdjson::dom::parser parser;
  const simdjson::dom::element root = parse_document(parser, json, context);
  simdjson::dom::array array;
  GRPO_CHECK_CONFIG(!root.get_array().get(array), "{}: expected a JSON array of objects, got {}", context,
                    simdjson::minify(root).substr(0, 80));
  std::vector<std::string> objects;
  for (simdjson::dom::element item : array) {
    GRPO_CHECK_CONFIG(item.type() == simdjson::dom::element_type::OBJECT, "{}[{}]: expected a JSON object, got {}",
                      context, objects.size(), simdjson::minify(item).substr(0, 80));
    objects.push_back(simdjson::minify(item));
  }
  return objects;
}

char first_json_char(std::string_view json) {
  for (char c : json) {
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') return c;
  }
  return '\0';
}

}  // namespace grpo::rewards::detail
