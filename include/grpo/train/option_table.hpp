// SPDX-License-Identifier: Apache-2.0
// An option table: every setting of a program declared once — its config key, help, check and the variable that
// holds its value (and so its default) — and from that one table: command-line flags, config-file keys, --help and
// the config.yaml a run writes back.
//
//   std::int64_t steps = 200;
//   grpo::train::OptionTable table;
//   table.add(grpo::train::make_option("steps", steps, "optimizer steps", grpo::train::positive()));
//   const auto given = table.parse_command_line(args);      // --steps 50, --config run.yaml, --set steps=50
//   table.apply(given);                                      // errors: "--steps: expected a number > 0, got '0'",
//                                                            // "run.yaml:3: field 'steps': expected an integer, ..."
//
// Flags and keys: the option "kl_target" is the flag --kl-target and the config key kl_target; a nested config
// section joins its keys (kl: {target: 0.1} is kl_target; --set kl.target=0.1 too). Booleans are --x / --no-x and
// `x: true|false`; lists are comma-separated on the command line and YAML lists (or one scalar) in a config.
// Precedence: the command line, then --set overrides, then the config file (with its `extends` bases), then values a
// caller adds at the lowest rank (add_fallback: a converted foreign config), then the declared defaults. Two keys of
// one file naming the same option is an error.
#pragma once

#include <grpo/core/enum_names.hpp>
#include <grpo/core/json_quote.hpp>
#include <grpo/io/layered_config.hpp>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace grpo::train {

/// A check of a parsed value: empty when it is acceptable, else what was expected ("a number > 0"); the error then
/// reads "<flag or file:line field>: expected <that>, got '<text>'".
template <typename T>
using OptionCheck = std::function<std::string(const T&)>;

/// One option. `assign` parses and stores the value(s) given (throwing ConfigError with the reason alone: the table
/// prefixes where the value came from); `yaml` renders the value in effect as YAML flow text ("" = unset: not written).
struct OptionSpec {
  std::string key;                   ///< snake_case config key; the flag is "--" + key with '-' for '_'
  std::vector<std::string> aliases;  ///< other keys (and flags) for the same option
  std::string help;
  enum class Arity { flag, one, list } arity = Arity::one;
  std::string value_name;            ///< for --help: INT, NUMBER, NAME, PATH, LIST, ...
  std::function<void(const std::vector<std::string>& values)> assign;
  std::function<std::string()> yaml;
  bool written = true;               ///< part of the config.yaml a run writes (not --resume, an action)
  int phase = 0;                     ///< apply() sets options in phase order (0 first), in table order within a phase
};

/// An option whose assign and yaml the caller sets (a value stored otherwise than written, an enum, a pair).
OptionSpec custom_option(std::string key, std::string help, std::string value_name,
                         OptionSpec::Arity arity = OptionSpec::Arity::one);

/// The flag of a key: "kl_target" → "--kl-target".
std::string flag_of(std::string_view key);

// Checks for numeric options.
OptionCheck<double> positive();
OptionCheck<double> at_least_zero();
OptionCheck<double> within(double low, double high);
/// A string check: one of `names` ("expected one of a, b, c").
OptionCheck<std::string> one_of(std::vector<std::string> names);

/// `text` as a number (strtod's whole-text syntax, not NaN) that `check` accepts; ConfigError "expected a number, got
/// 'x'" or "expected <check's words>, got 'x'". For options that store a number otherwise than as written.
double option_number(const std::string& text, const OptionCheck<double>& check = nullptr);

/// Binds an option to `value` (its current value is the default). T: bool, std::int64_t, std::uint64_t, int,
/// double, std::string, std::filesystem::path, std::optional<double>, std::optional<std::string>,
/// std::vector<std::string>, std::vector<double>. Numbers are checked for their type first ("an integer", "an integer
/// >= 0", "a number"), then by `check` (numeric checks take the value as a double; list checks each item).
template <typename T>
OptionSpec make_option(std::string key, T& value, std::string help, OptionCheck<double> check = nullptr);
OptionSpec make_option(std::string key, std::string& value, std::string help, OptionCheck<std::string> check);

/// Binds an option to an enum `value` declared with GRPO_ENUM_NAMES (core/enum_names.hpp): a value is written by its
/// canonical name, any of its spellings is accepted, and an unknown one is a ConfigError listing the valid names.
template <::grpo::detail::NamedEnum EnumType>
OptionSpec enum_option(std::string key, EnumType& value, std::string help) {
  OptionSpec option = custom_option(std::move(key), std::move(help), "NAME");
  option.assign = [&value](const std::vector<std::string>& values) {
    const auto table = enum_names(value);
    value = ::grpo::detail::parse_enum(values.at(0), table.names, table.what);
  };
  option.yaml = [&value] { return json_quoted(std::string(to_string(value))); };
  return option;
}

/// Values given for options, with where each came from ("--steps", "run.yaml:3", "--set kl.target=0.1").
struct GivenValue {
  std::vector<std::string> values;
  std::string source;
  std::string field;  ///< the config key path as written ("kl.target"), empty on the command line
  int rank = 0;       ///< 3 command line, 2 --set, 1 config file, 0 fallback
};

/// What a command line said: option values by key, and the table's own flags.
struct CommandLine {
  std::map<std::string, GivenValue> given;  ///< by option key
  std::optional<std::filesystem::path> config;
  std::vector<std::string> overrides;  ///< --set KEY=VALUE, in order
  bool help = false;
};

class OptionTable {
 public:
  /// Adds an option. grpo::Error for a key or alias already in the table.
  void add(OptionSpec option);
  const std::vector<OptionSpec>& options() const { return options_; }
  /// The option of a key, alias or flag name (with '-' or '_'), or nullptr.
  const OptionSpec* find(std::string_view name) const;

  /// Reads `args` (without the program name): every option's flags as --name VALUE or --name=VALUE, --no-name for a
  /// boolean, and --config FILE, --set KEY=VALUE (repeatable), --help / -h. Nothing is assigned yet. ConfigError
  /// naming the argument for an unknown flag, a missing value or a value given to a boolean flag twice.
  CommandLine parse_command_line(std::span<const std::string> args) const;

  /// Adds the values of a config tree (nested maps join their keys with '_') to `given` below the command line's:
  /// --set nodes (source "--set ...") over file nodes. `section` is offered each top-level entry first and returns
  /// true for the entries it reads itself (a program's `domains:` list), marking what it reads (io::ConfigNode). ConfigError "file:line: unknown field 'x'"
  /// for a key naming no option, "file:line: field 'x' is null", and for two keys of the files naming one option.
  void add_config(const io::ConfigNode& root, std::map<std::string, GivenValue>& given,
                  const std::function<bool(const std::string& key, const io::ConfigNode& node)>& section = {}) const;

  /// Adds a value at the lowest rank (used only when nothing else gives the option). ConfigError for an unknown key.
  void add_fallback(std::map<std::string, GivenValue>& given, const std::string& key, std::vector<std::string> values,
                    std::string source) const;

  /// Assigns every given value, by phase, then in table order; `only_phase` restricts it to one phase. A failing
  /// assignment is rethrown as ConfigError "<flag>: <reason>" (command line) or "<file:line>: field '<key>': <reason>".
  void apply(const std::map<std::string, GivenValue>& given, std::optional<int> only_phase = std::nullopt) const;

  /// --help text: `usage`, then each option's flags, value name, help and default (its value now).
  std::string help(std::string_view usage) const;

 private:
  std::vector<OptionSpec> options_;
  std::map<std::string, std::size_t, std::less<>> by_name_;  // keys and aliases, '_' form
};

}  // namespace grpo::train
