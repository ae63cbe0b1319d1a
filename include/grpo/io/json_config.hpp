// SPDX-License-Identifier: Apache-2.0
// Settings files for command-line programs: a flat JSON object whose fields are the program's flags,
//
//   {"steps": 200, "loss_type": "dapo", "lr": 1e-3, "rewards": ["accuracy", "format"], "resume": true}
//
// read into the text values the flags would have been given, so a front end (CLI11 in examples/r1_zero.cpp) can
// feed them to the same parsers and validators as its command line, and report errors by file and line.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace grpo::io {

/// One field of a settings file.
struct ConfigField {
  std::string name;                 ///< the key as written
  std::vector<std::string> values;  ///< a scalar gives one value, a list one per element (empty list: none)
  std::string source;               ///< "file:line" of the key, for error messages
};

/// Parses a settings object. Values become text: strings unquoted, integers in decimal, other numbers in the
/// shortest form that reads back to the same double, booleans "true"/"false"; a list gives one value per element.
/// Throws ParseError naming `source` (and the line and field) for malformed JSON, a top-level value that is not
/// an object, a repeated field, null, or a nested object (or a list holding one or a list).
std::vector<ConfigField> parse_json_config(std::string_view json, std::string_view source);

/// parse_json_config of a file's contents; errors name the file (and it being missing or unreadable).
std::vector<ConfigField> read_json_config(const std::filesystem::path& path);

}  // namespace grpo::io
