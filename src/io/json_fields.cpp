// SPDX-License-Identifier: Apache-2.0
// JSON object fields with simdjson (see json_fields.hpp); no simdjson type or error leaves this file.
#include <grpo/core/error.hpp>
#include <grpo/io/json_fields.hpp>

#include <simdjson.h>

#include <set>

namespace grpo::io {
namespace {

// The value of a field; nullopt for JSON null.
std::optional<JsonValue> to_json_value(simdjson::dom::element value) {
  using simdjson::dom::element_type;
  switch (value.type()) {
    case element_type::BOOL:
      return bool(value.get_bool().value_unsafe());
    case element_type::INT64:
      return double(value.get_int64().value_unsafe());
    case element_type::UINT64:
      return double(value.get_uint64().value_unsafe());
    case element_type::DOUBLE:
      return value.get_double().value_unsafe();
    case element_type::STRING:
      return std::string(value.get_string().value_unsafe());
    case element_type::ARRAY: {
      std::vector<std::string> strings;
      const simdjson::dom::array array = value.get_array().value_unsafe();
      for (simdjson::dom::element item : array) {
        if (item.type() != element_type::STRING) return JsonText{simdjson::minify(value)};
        strings.emplace_back(item.get_string().value_unsafe());
      }
      return strings;
    }
    case element_type::OBJECT:
      return JsonText{simdjson::minify(value)};
    case element_type::NULL_VALUE:
      break;
  }
  return std::nullopt;
}

}  // namespace

std::vector<std::pair<std::string, std::optional<JsonValue>>> json_object_fields(std::string_view json,
                                                                               std::string_view context) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  const auto error = parser.parse(simdjson::padded_string(json)).get(root);
  GRPO_CHECK_CONFIG(!error, "{}: invalid JSON ({})", context, simdjson::error_message(error));
  simdjson::dom::object object;
  GRPO_CHECK_CONFIG(!root.get_object().get(object), "{}: expected a JSON object, got {}", context,
                    simdjson::minify(root).substr(0, 80));
  std::vector<std::pair<std::string, std::optional<JsonValue>>> fields;
  std::set<std::string, std::less<>> seen;
  for (const auto field : object) {
    std::string key(field.key);
    GRPO_CHECK_CONFIG(seen.insert(key).second, "{}: option '{}' appears twice", context, key);
    fields.emplace_back(std::move(key), to_json_value(field.value));
  }
  return fields;
}

}  // namespace grpo::io
