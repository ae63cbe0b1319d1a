// SPDX-License-Identifier: Apache-2.0
#include <grpo/core/error.hpp>
#include <grpo/io/json_config.hpp>
#include <grpo/io/read_file.hpp>

#include <fmt/format.h>
#include <simdjson.h>

#include <algorithm>
#include <set>

namespace grpo::io {
namespace {

[[noreturn]] void config_error(std::string_view where, std::string_view what) {
  ::grpo::detail::throw_formatted<ParseError>("{}: {}", where, what);
}

// The 1-based line of the first `"key"` followed by a colon, for messages (simdjson's DOM keeps no positions).
std::size_t line_of_key(std::string_view json, std::string_view key) {
  const std::string quoted = fmt::format("\"{}\"", key);
  for (std::size_t at = json.find(quoted); at != std::string_view::npos; at = json.find(quoted, at + 1)) {
    std::size_t next = at + quoted.size();
    while (next < json.size() && (json[next] == ' ' || json[next] == '\t' || json[next] == '\n' || json[next] == '\r'))
      ++next;
    if (next < json.size() && json[next] == ':')
      return 1 + static_cast<std::size_t>(std::count(json.begin(), json.begin() + static_cast<std::ptrdiff_t>(at), '\n'));
  }
  return 1;
}

// The text of a scalar, or nullopt for null, an object or a list.
std::optional<std::string> scalar_text(simdjson::dom::element value) {
  switch (value.type()) {
    case simdjson::dom::element_type::STRING:
      return std::string(std::string_view(value.get_string()));
    case simdjson::dom::element_type::INT64:
      return fmt::format("{}", int64_t(value.get_int64()));
    case simdjson::dom::element_type::UINT64:
      return fmt::format("{}", uint64_t(value.get_uint64()));
    case simdjson::dom::element_type::DOUBLE:
      return fmt::format("{}", double(value.get_double()));
    case simdjson::dom::element_type::BOOL:
      return bool(value.get_bool()) ? "true" : "false";
    default:
      return std::nullopt;
  }
}

}  // namespace

std::vector<ConfigField> parse_json_config(std::string_view json, std::string_view source) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (const auto error = parser.parse(simdjson::padded_string(json)).get(root)) {
    config_error(source, fmt::format("invalid JSON ({})", simdjson::error_message(error)));
  }
  simdjson::dom::object object;
  if (root.get_object().get(object)) config_error(source, "expected a JSON object of settings {\"name\": value, ...}");

  std::vector<ConfigField> fields;
  std::set<std::string, std::less<>> seen;
  for (const auto [key, value] : object) {
    ConfigField field;
    field.name = std::string(key);
    field.source = fmt::format("{}:{}", source, line_of_key(json, key));
    if (!seen.insert(field.name).second) config_error(field.source, fmt::format("field '{}' is repeated", key));
    if (value.is_array()) {
      for (simdjson::dom::element item : value.get_array()) {
        std::optional<std::string> text = scalar_text(item);
        if (!text) {
          config_error(field.source, fmt::format("field '{}': a list may hold only numbers, strings and booleans", key));
        }
        field.values.push_back(std::move(*text));
      }
    } else {
      std::optional<std::string> text = scalar_text(value);
      if (!text) {
        config_error(field.source,
                     fmt::format("field '{}' must be a number, string, boolean or list of them, got {}", key,
                                 value.is_null() ? "null" : "an object"));
      }
      field.values.push_back(std::move(*text));
    }
    fields.push_back(std::move(field));
  }
  return fields;
}

std::vector<ConfigField> read_json_config(const std::filesystem::path& path) {
  return parse_json_config(read_file(path), path.string());
}

}  // namespace grpo::io
