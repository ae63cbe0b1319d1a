// SPDX-License-Identifier: Apache-2.0
// Row::from_json (see row.hpp), on the library's one JSON object reader.
#include <grpo/core/error.hpp>
#include <grpo/io/json_fields.hpp>
#include <grpo/io/row.hpp>

namespace grpo::io {

Row Row::from_json(std::string_view json_object) {
  std::vector<std::pair<std::string, std::optional<JsonValue>>> fields;
  try {
    fields = json_object_fields(json_object, "dataset row");
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

}  // namespace grpo::io
