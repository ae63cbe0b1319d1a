// SPDX-License-Identifier: Apache-2.0
// The reward registry: config names → factories, so a JSON config can say
//   "rewards": [{"name": "accuracy"}, {"name": "cosine", "weight": 0.5, "max_len": 1000}]
// and user code can add its own rewards beside the built-in ones. docs/rewards.md lists every built-in name and
// option.
#pragma once

#include <grpo/core/enum_names.hpp>
#include <grpo/io/json_fields.hpp>
#include <grpo/rewards/reward_function.hpp>

#include <cstddef>
#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace grpo::rewards {

/// Nested JSON (an object, or an array that is not all strings), kept as text for the factory that understands it.
using JsonText = io::JsonText;

/// One option value of a config entry (io::JsonValue). JSON null is rejected when parsing.
using OptionValue = io::JsonValue;

/// The options of one reward config entry: its "name" and the other fields. Typed accessors check the type and
/// throw ConfigError naming the entry, the option and the value; every accessor marks its option as used, so that
/// RewardRegistry::create can reject options no factory read (a misspelt "max_lenght" is an error, not a no-op).
class RewardOptions {
 public:
  /// `context` names the entry in error messages, e.g. "rewards[1]".
  explicit RewardOptions(std::string reward_name, std::map<std::string, OptionValue, std::less<>> values = {},
                         std::string context = "reward");

  /// Parses one JSON object with a string "name" field. Throws ConfigError for bad JSON, a missing or non-string
  /// name, or a null value.
  static RewardOptions from_json(std::string_view json_object, std::string context = "reward");

  const std::string& reward_name() const { return reward_name_; }
  const std::string& context() const { return context_; }
  bool contains(std::string_view key) const { return values_.find(key) != values_.end(); }

  double number(std::string_view key, double fallback) const;
  std::optional<double> optional_number(std::string_view key) const;
  /// A non-negative integer (written as a JSON number without fraction).
  std::size_t count(std::string_view key, std::size_t fallback) const;
  bool flag(std::string_view key, bool fallback) const;
  std::string text(std::string_view key, std::string fallback) const;
  /// A string that must be one of `allowed`; the error lists them.
  std::string choice(std::string_view key, std::string fallback, std::initializer_list<std::string_view> allowed) const;
  /// An enum option, written by any of its names (GRPO_ENUM_NAMES); `fallback` when absent. The error lists the names.
  template <::grpo::detail::NamedEnum EnumType>
  EnumType choice(std::string_view key, EnumType fallback) const {
    const std::string name = text(key, std::string(to_string(fallback)));
    const auto table = enum_names(fallback);
    if (const auto value = ::grpo::detail::find_enum(name, table.names)) return *value;
    throw_not_one_of(key, name, ::grpo::detail::joined_names(table.names));
  }
  /// A string or a list of strings (a single string becomes a list of one).
  std::vector<std::string> text_list(std::string_view key, std::vector<std::string> fallback) const;
  /// A nested object's JSON text, or nullopt when absent.
  std::optional<std::string> object(std::string_view key) const;

  /// Marks an option as used without reading it.
  void mark_used(std::string_view key) const;
  /// Throws ConfigError naming the first option nothing read, and the ones that were read.
  void check_all_used() const;

 private:
  const OptionValue* lookup(std::string_view key) const;
  /// ConfigError "option '<key>' must be one of <valid>, got "<got>"".
  [[noreturn]] static void throw_not_one_of(std::string_view key, std::string_view got, const std::string& valid);

  std::string reward_name_;
  std::map<std::string, OptionValue, std::less<>> values_;
  std::string context_;
  mutable std::map<std::string, bool, std::less<>> used_;
};

class RewardRegistry;

/// Builds a reward from its options. The registry is passed so that composite rewards (the "route" router) can
/// build their parts.
using RewardFactory = std::function<RewardPtr(const RewardOptions& options, const RewardRegistry& registry)>;

/// Names → factories. A value type: copy the built-in registry and add your own rewards to the copy.
class RewardRegistry {
 public:
  RewardRegistry() = default;

  /// accuracy, math_steps, format, tag_count, reasoning_steps, cosine, length, repetition, soft_overlong,
  /// stop_properly, and
  /// route (per-tag routing: {"name": "route", "field": "tag", "routes": {"math": {...}}, "default": {...}}),
  /// code_tests (sandboxed test execution), judge (LLM judge over HTTP or local) and reward_model (a learned reward
  /// model's checkpoint directory, scored in-process: rewards/reward_model_reward.hpp).
  static RewardRegistry with_builtins();

  /// Registers a factory; throws ConfigError if the name is taken or empty.
  void add(std::string name, RewardFactory factory);

  bool contains(std::string_view name) const { return factories_.find(name) != factories_.end(); }
  std::vector<std::string> names() const;

  /// Builds options.reward_name(); throws ConfigError for an unknown name (listing the valid ones), for invalid
  /// option values, and for options the factory did not read.
  RewardPtr create(const RewardOptions& options) const;
  /// Parses one JSON object and builds it.
  RewardPtr create(std::string_view json_object) const;

 private:
  std::map<std::string, RewardFactory, std::less<>> factories_;
};

}  // namespace grpo::rewards
