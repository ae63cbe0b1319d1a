// SPDX-License-Identifier: Apache-2.0
// Private: typed access to simdjson DOM fields that throws grpo::ParseError naming the source and field path.
#pragma once

#include <grpo/core/error.hpp>

#include <simdjson.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace grpo::text::detail {

/// A JSON value with the name of its document and its path inside it, for error messages.
struct JsonField {
  simdjson::dom::element value;
  std::string_view source;
  std::string path;

  [[noreturn]] void fail(std::string_view expected) const {
    ::grpo::detail::throw_formatted<ParseError>("{}: field '{}' should be {}", source, path, expected);
  }
  bool is_null() const { return value.is_null(); }
  std::string_view string() const {
    std::string_view out;
    if (value.get_string().get(out)) fail("a string");
    return out;
  }
  bool boolean() const {
    bool out = false;
    if (value.get_bool().get(out)) fail("true or false");
    return out;
  }
  int64_t integer() const {
    int64_t out = 0;
    if (value.get_int64().get(out)) fail("an integer");
    return out;
  }
  simdjson::dom::object object() const {
    simdjson::dom::object out;
    if (value.get_object().get(out)) fail("an object");
    return out;
  }
  simdjson::dom::array array() const {
    simdjson::dom::array out;
    if (value.get_array().get(out)) fail("an array");
    return out;
  }
  /// The member `key`, or nullopt when it is absent or null.
  std::optional<JsonField> find(std::string_view key) const {
    simdjson::dom::element member;
    if (object().at_key(key).get(member) || member.is_null()) return std::nullopt;
    return JsonField{member, source, path.empty() ? std::string(key) : path + "." + std::string(key)};
  }
  /// The member `key`; throws ParseError when it is absent or null.
  JsonField at(std::string_view key) const {
    auto member = find(key);
    if (!member) {
      ::grpo::detail::throw_formatted<ParseError>("{}: missing field '{}{}{}'", source, path, path.empty() ? "" : ".",
                                                  key);
    }
    return *member;
  }
  JsonField element(simdjson::dom::element item, std::size_t index) const {
    return JsonField{item, source, path + "[" + std::to_string(index) + "]"};
  }
  bool boolean_or(std::string_view key, bool fallback) const {
    const auto member = find(key);
    return member ? member->boolean() : fallback;
  }
};

/// The bytes of a JSON file, padded for simdjson; throws ParseError naming the file.
inline simdjson::padded_string load_json_file(const std::filesystem::path& path) {
  simdjson::padded_string json;
  if (const auto error = simdjson::padded_string::load(path.string()).get(json)) {
    ::grpo::detail::throw_formatted<ParseError>("cannot read {}: {}", path.string(), simdjson::error_message(error));
  }
  return json;
}

/// Appends ".0" to integer literals of more than 18 digits outside strings, so that simdjson reads them as doubles.
/// Hugging Face configs write model_max_length = 1e30 out as an integer, which simdjson rejects.
inline simdjson::padded_string widen_big_integers(std::string_view json) {
  std::string out;
  out.reserve(json.size() + 16);
  bool in_string = false;
  for (std::size_t i = 0; i < json.size(); ++i) {
    const char c = json[i];
    out += c;
    if (in_string) {
      if (c == '\\' && i + 1 < json.size()) {
        out += json[++i];
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
      continue;
    }
    if (c < '0' || c > '9' || (i > 0 && ((json[i - 1] >= '0' && json[i - 1] <= '9') || json[i - 1] == '.'))) continue;
    std::size_t end = i;
    while (end < json.size() && json[end] >= '0' && json[end] <= '9') ++end;
    const bool integer = end == json.size() || (json[end] != '.' && json[end] != 'e' && json[end] != 'E');
    out.append(json.substr(i + 1, end - i - 1));
    if (integer && end - i > 18) out += ".0";
    i = end - 1;
  }
  return simdjson::padded_string(out);
}

/// Parses `json` and returns its root (valid while `parser` and `json` live); throws ParseError naming `source`.
/// Integers too big for 64 bits are read as doubles (`json` is then replaced by the widened text).
inline JsonField parse_json(simdjson::dom::parser& parser, simdjson::padded_string& json, std::string_view source) {
  simdjson::dom::element root;
  auto error = parser.parse(json).get(root);
  if (error == simdjson::NUMBER_ERROR) {
    json = widen_big_integers(std::string_view(json.data(), json.size()));
    error = parser.parse(json).get(root);
  }
  if (error)
    ::grpo::detail::throw_formatted<ParseError>("{}: invalid JSON: {}", source, simdjson::error_message(error));
  return JsonField{root, source, ""};
}

}  // namespace grpo::text::detail
