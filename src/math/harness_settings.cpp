// SPDX-License-Identifier: Apache-2.0
// Math-Verify's per-case harness settings from JSON (grpo verify --jsonl's "config", the conformance suite's rows).
#include "grpo/core/error.hpp"
#include "grpo/math/verify.hpp"

#include <fmt/format.h>
#include <simdjson.h>

#include <cstdint>
#include <string>
#include <vector>

namespace grpo::math {

HarnessSettings read_harness_settings(std::string_view config, HarnessSettings settings) {
  simdjson::dom::parser parser;
  const simdjson::padded_string padded(config);
  simdjson::dom::element element;
  if (parser.parse(padded).get(element)) throw ParseError(fmt::format("config is not valid JSON: {}", config));
  if (element.is_null()) return settings;
  simdjson::dom::object object;
  if (element.get_object().get(object)) throw ParseError("config should be an object");
  for (auto [key, value] : object) {
    const auto whole = [&, key = key, value = value]() {
      std::int64_t n = 0;
      if (value.get_int64().get(n)) throw ParseError(fmt::format("config.{} should be an integer", key));
      return static_cast<int>(n);
    };
    const auto flag = [&, key = key, value = value]() {
      bool b = false;
      if (value.get_bool().get(b)) throw ParseError(fmt::format("config.{} should be true or false", key));
      return b;
    };
    if (key == "float_rounding") {
      settings.float_rounding = whole();
    } else if (key == "numeric_precision") {
      settings.numeric_precision = whole();
    } else if (key == "boxed_match_priority") {
      settings.boxed_match_priority = whole();
    } else if (key == "strict") {
      settings.strict = flag();
    } else if (key == "allow_set_relation_comp") {
      settings.allow_set_relation_comp = flag();
    } else if (key == "harness") {
      std::string_view text;
      if (value.get_string().get(text)) throw ParseError("config.harness should be a string");
      settings.harness = std::string(text);
    } else if (key == "extraction") {
      simdjson::dom::array targets;
      if (value.get_array().get(targets)) throw ParseError("config.extraction should be a list of strings");
      std::vector<std::string> names;
      for (auto target : targets) {
        std::string_view text;
        if (target.get_string().get(text)) throw ParseError("config.extraction should be a list of strings");
        names.emplace_back(text);
      }
      settings.extraction = std::move(names);
    } else {
      throw ParseError(fmt::format("config: unknown key '{}' (float_rounding, numeric_precision, strict, extraction, "
                                   "boxed_match_priority, allow_set_relation_comp, harness)",
                                   key));
    }
  }
  return settings;
}

}  // namespace grpo::math
