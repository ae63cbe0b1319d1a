// SPDX-License-Identifier: Apache-2.0
// A dataset row: the string-keyed fields of one JSON object (a JSONL line), read by the dataset, the prompt
// sources and the rewards (rewards::Row is this type).
#pragma once

#include <fmt/format.h>

#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace grpo::io {

/// One field of a dataset row. Strings stay strings; JSON numbers and booleans (as 0/1) become double; a list of
/// strings (several gold answers, test inputs) is a vector; anything nested deeper (objects, lists of objects) is
/// kept as its JSON text in a std::string, for the reward that knows its shape to parse.
using FieldValue = std::variant<std::string, double, std::vector<std::string>>;

/// The dataset row a prompt came from, as a small string-keyed map: ground truth / solution / answer, the domain
/// tag, test cases, ... Shared (read-only) by the G completions of one prompt.
class Row {
 public:
  Row() = default;
  Row(std::initializer_list<std::pair<const std::string, FieldValue>> fields) : fields_(fields) {}

  /// Parses a dataset row, one JSON object such as a JSONL line (ROLL, GSM8K, ...): strings, numbers, booleans (as
  /// 0/1) and lists of strings become fields; null fields are left out; objects and other lists keep their JSON text
  /// (ROLL's `messages` is already a JSON string and stays one). Throws grpo::ParseError for invalid JSON or a value
  /// that is not an object.
  static Row from_json(std::string_view json_object);

  /// Sets (or replaces) a field.
  void set(std::string key, FieldValue value) { fields_.insert_or_assign(std::move(key), std::move(value)); }

  /// The field, or nullptr when absent.
  const FieldValue* find(std::string_view key) const {
    auto it = fields_.find(key);
    return it == fields_.end() ? nullptr : &it->second;
  }

  bool contains(std::string_view key) const { return find(key) != nullptr; }

  /// The field as text: a string as is, a number in its shortest round-trip form (18.0 → "18"); nullopt for an
  /// absent field or a list.
  std::optional<std::string> text(std::string_view key) const {
    const FieldValue* value = find(key);
    if (value == nullptr) return std::nullopt;
    if (const auto* string = std::get_if<std::string>(value)) return *string;
    if (const auto* number = std::get_if<double>(value)) return fmt::format("{}", *number);
    return std::nullopt;
  }

  const std::map<std::string, FieldValue, std::less<>>& fields() const { return fields_; }

 private:
  std::map<std::string, FieldValue, std::less<>> fields_;
};

}  // namespace grpo::io
