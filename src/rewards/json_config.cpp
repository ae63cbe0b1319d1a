// SPDX-License-Identifier: Apache-2.0
// JSON config parsing with simdjson (see json_config.hpp); no simdjson type or error leaves this file.
#include "json_config.hpp"

#include <grpo/core/error.hpp>

#include <simdjson.h>

#include <optional>
#include <set>

namespace grpo::rewards::detail {
namespace {

simdjson::dom::element parse_document(simdjson::dom::parser& parser, std::string_view json, std::string_view context) {
  simdjson::dom::element root;
  const auto error = parser.parse(simdjson::padded_string(json)).get(root);
  GRPO_CHECK_CONFIG(!error, "{}: invalid JSON ({})", context, simdjson::error_message(error));
  return root;
}

// The value of a field; nullopt for JSON null.
std::optional<OptionValue> to_option_value(simdjson::dom::element value) {
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

// The fields of the object at the root of `json`, null values included (as nullopt).
std::vector<std::pair<std::string, std::optional<OptionValue>>> object_fields(std::string_view json,
                                                                             std::string_view context) {
  simdjson::dom::parser parser;
  const simdjson::dom::element root = parse_document(parser, json, context);
  simdjson::dom::object object;
  GRPO_CHECK_CONFIG(!root.get_object().get(object), "{}: expected a JSON object, got {}", context,
                    simdjson::minify(root).substr(0, 80));
  std::vector<std::pair<std::string, std::optional<OptionValue>>> fields;
  std::set<std::string, std::less<>> seen;
  for (const auto field : object) {
    std::string key(field.key);
    GRPO_CHECK_CONFIG(seen.insert(key).second, "{}: option '{}' appears twice", context, key);
    fields.emplace_back(std::move(key), to_option_value(field.value));
  }
  return fields;
}

}  // namespace

std::vector<std::pair<std::string, OptionValue>> parse_json_object(std::string_view json, std::string_view context) {
  std::vector<std::pair<std::string, OptionValue>> fields;
  for (auto& [key, value] : object_fields(json, context)) {
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

namespace grpo::rewards {

Row Row::from_json(std::string_view json_object) {
  std::vector<std::pair<std::string, std::optional<OptionValue>>> fields;
  try {
    fields = detail::object_fields(json_object, "dataset row");
  } catch (const ConfigError& error) {
    throw ParseError(error.what());
  }
  struct ToField {
    FieldValue operator()(bool b) const { return b ? 1.0 : 0.0; }
    FieldValue operator()(double d) const { return d; }
    FieldValue operator()(std::string& s) const { return std::move(s); }
    FieldValue operator()(std::vector<std::string>& list) const { return std::move(list); }
    FieldValue operator()(JsonText& json) const { return std::move(json.text); }
  };
  Row row;
  for (auto& [key, value] : fields) {
    if (value) row.set(key, std::visit(ToField{}, *value));
  }
  return row;
}

}  // namespace grpo::rewards
