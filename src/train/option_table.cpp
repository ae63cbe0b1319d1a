// SPDX-License-Identifier: Apache-2.0
#include <grpo/train/option_table.hpp>

#include <grpo/core/error.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <type_traits>

namespace grpo::train {
namespace {

/// A name with '_' for '-' (flags and keys are looked up in this form).
std::string underscored(std::string_view name) {
  std::string out(name);
  std::replace(out.begin(), out.end(), '-', '_');
  return out;
}

/// The whole text as a number (strtod's syntax), or nullopt.
std::optional<double> number_in(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size()) return std::nullopt;
  return value;
}

[[noreturn]] void expected(std::string_view what, const std::string& text) {
  throw ConfigError(fmt::format("expected {}, got '{}'", what, text));
}

/// `text` as a T, with the type's own check ("an integer", "a number", ...), then `check`.
template <typename T>
T parse_number(const std::string& text, const OptionCheck<double>& check) {
  const auto x = number_in(text);
  double value = 0.0;
  if constexpr (std::is_same_v<T, double>) {
    if (!x || std::isnan(*x)) expected("a number", text);
    value = *x;
  } else {
    constexpr bool unsigned_type = std::is_unsigned_v<T>;
    const bool integral = x && std::isfinite(*x) && std::floor(*x) == *x;
    // Doubles represent every integer below 2^53 exactly; past that a value is a range error, as it would overflow.
    const bool in_range = integral && *x >= static_cast<double>(std::numeric_limits<T>::lowest()) &&
                          *x <= static_cast<double>(std::numeric_limits<T>::max()) && std::fabs(*x) < 9.007e15;
    if (!integral || (unsigned_type && *x < 0)) expected(unsigned_type ? "an integer >= 0" : "an integer", text);
    if (!in_range) expected(fmt::format("an integer of at most {} digits", 15), text);
    value = *x;
  }
  if (check) {
    if (const std::string what = check(value); !what.empty()) expected(what, text);
  }
  return static_cast<T>(value);
}

bool parse_bool(const std::string& text) {
  if (text == "true" || text == "True" || text == "TRUE") return true;
  if (text == "false" || text == "False" || text == "FALSE") return false;
  expected("true or false", text);
}

std::string yaml_number(double value) { return fmt::format("{}", value); }

}  // namespace

OptionSpec custom_option(std::string key, std::string help, std::string value_name, OptionSpec::Arity arity) {
  OptionSpec option;
  option.key = std::move(key);
  option.help = std::move(help);
  option.value_name = std::move(value_name);
  option.arity = arity;
  return option;
}

double option_number(const std::string& text, const OptionCheck<double>& check) {
  return parse_number<double>(text, check);
}

std::string flag_of(std::string_view key) {
  std::string flag = "--" + std::string(key);
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

OptionCheck<double> positive() {
  return [](const double& x) { return x > 0 ? std::string() : std::string("a number > 0"); };
}
OptionCheck<double> at_least_zero() {
  return [](const double& x) { return x >= 0 ? std::string() : std::string("a number >= 0"); };
}
OptionCheck<double> within(double low, double high) {
  return [low, high](const double& x) {
    return x >= low && x <= high ? std::string() : fmt::format("a number in [{}, {}]", low, high);
  };
}
OptionCheck<std::string> one_of(std::vector<std::string> names) {
  return [names = std::move(names)](const std::string& value) {
    return std::find(names.begin(), names.end(), value) != names.end()
               ? std::string()
               : fmt::format("one of {}", fmt::join(names, ", "));
  };
}

template <typename T>
OptionSpec make_option(std::string key, T& value, std::string help, OptionCheck<double> check) {
  OptionSpec option = custom_option(std::move(key), std::move(help), "");
  if constexpr (std::is_same_v<T, bool>) {
    option.arity = OptionSpec::Arity::flag;
    option.assign = [&value](const std::vector<std::string>& v) { value = parse_bool(v.at(0)); };
    option.yaml = [&value] { return std::string(value ? "true" : "false"); };
  } else if constexpr (std::is_same_v<T, std::string>) {
    option.value_name = "TEXT";
    option.assign = [&value](const std::vector<std::string>& v) { value = v.at(0); };
    option.yaml = [&value] { return json_quoted(value); };
  } else if constexpr (std::is_same_v<T, std::filesystem::path>) {
    option.value_name = "PATH";
    option.assign = [&value](const std::vector<std::string>& v) { value = v.at(0); };
    option.yaml = [&value] { return json_quoted(value.string()); };
  } else if constexpr (std::is_same_v<T, std::optional<std::string>>) {
    option.value_name = "NAME";
    option.assign = [&value](const std::vector<std::string>& v) { value = v.at(0); };
    option.yaml = [&value] { return value ? json_quoted(*value) : std::string(); };
  } else if constexpr (std::is_same_v<T, std::optional<double>>) {
    option.value_name = "NUMBER";
    option.assign = [&value, check](const std::vector<std::string>& v) { value = parse_number<double>(v.at(0), check); };
    option.yaml = [&value] { return value ? yaml_number(*value) : std::string(); };
  } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
    option.arity = OptionSpec::Arity::list;
    option.value_name = "LIST";
    option.assign = [&value](const std::vector<std::string>& v) { value = v; };
    option.yaml = [&value] {
      std::vector<std::string> items;
      for (const auto& item : value) items.push_back(json_quoted(item));
      return fmt::format("[{}]", fmt::join(items, ", "));
    };
  } else if constexpr (std::is_same_v<T, std::vector<double>>) {
    option.arity = OptionSpec::Arity::list;
    option.value_name = "NUMBERS";
    option.assign = [&value, check](const std::vector<std::string>& v) {
      std::vector<double> parsed;
      for (const auto& text : v) parsed.push_back(parse_number<double>(text, check));
      value = std::move(parsed);
    };
    option.yaml = [&value] { return fmt::format("[{}]", fmt::join(value, ", ")); };
  } else {
    option.value_name = std::is_same_v<T, double> ? "NUMBER" : "INT";
    option.assign = [&value, check](const std::vector<std::string>& v) { value = parse_number<T>(v.at(0), check); };
    option.yaml = [&value] { return fmt::format("{}", value); };
  }
  return option;
}

template OptionSpec make_option(std::string, bool&, std::string, OptionCheck<double>);
template OptionSpec make_option(std::string, std::int64_t&, std::string, OptionCheck<double>);
template OptionSpec make_option(std::string, std::uint64_t&, std::string, OptionCheck<double>);
template OptionSpec make_option(std::string, int&, std::string, OptionCheck<double>);
template OptionSpec make_option(std::string, double&, std::string, OptionCheck<double>);
template OptionSpec make_option(std::string, std::string&, std::string, OptionCheck<double>);
template OptionSpec make_option(std::string, std::filesystem::path&, std::string, OptionCheck<double>);
template OptionSpec make_option(std::string, std::optional<double>&, std::string, OptionCheck<double>);
template OptionSpec make_option(std::string, std::optional<std::string>&, std::string, OptionCheck<double>);
template OptionSpec make_option(std::string, std::vector<std::string>&, std::string, OptionCheck<double>);
template OptionSpec make_option(std::string, std::vector<double>&, std::string, OptionCheck<double>);

OptionSpec make_option(std::string key, std::string& value, std::string help, OptionCheck<std::string> check) {
  OptionSpec option = make_option(std::move(key), value, std::move(help), OptionCheck<double>{});
  option.value_name = "NAME";
  option.assign = [&value, check](const std::vector<std::string>& v) {
    if (check) {
      if (const std::string what = check(v.at(0)); !what.empty()) expected(what, v.at(0));
    }
    value = v.at(0);
  };
  return option;
}

void OptionTable::add(OptionSpec option) {
  GRPO_CHECK(option.assign && option.yaml, "OptionTable::add: option '{}' has no assign or yaml function", option.key);
  std::vector<std::string> names = {option.key};
  names.insert(names.end(), option.aliases.begin(), option.aliases.end());
  for (const std::string& name : names) {
    GRPO_CHECK(by_name_.emplace(underscored(name), options_.size()).second, "OptionTable::add: '{}' is declared twice",
               name);
  }
  options_.push_back(std::move(option));
}

const OptionSpec* OptionTable::find(std::string_view name) const {
  const auto it = by_name_.find(underscored(name));
  return it == by_name_.end() ? nullptr : &options_[it->second];
}

CommandLine OptionTable::parse_command_line(std::span<const std::string> args) const {
  CommandLine out;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--help" || arg == "-h") {
      out.help = true;
      continue;
    }
    GRPO_CHECK_CONFIG(arg.starts_with("--") && arg.size() > 2,
                      "unexpected argument '{}' (options are --name VALUE; run with --help for them)", arg);
    const auto equals = arg.find('=');
    const std::string name = arg.substr(2, equals == std::string::npos ? std::string::npos : equals - 2);
    std::optional<std::string> inline_value;
    if (equals != std::string::npos) inline_value = arg.substr(equals + 1);
    const std::string flag = "--" + name;
    auto value = [&]() -> std::string {
      if (inline_value) return *inline_value;
      GRPO_CHECK_CONFIG(i + 1 < args.size(), "{} needs a value", flag);
      return args[++i];
    };
    if (name == "config") {
      out.config = value();
      continue;
    }
    if (name == "set") {
      out.overrides.push_back(value());
      continue;
    }
    const OptionSpec* option = find(name);
    std::vector<std::string> values;
    if (option == nullptr && name.starts_with("no-") && (option = find(name.substr(3))) != nullptr &&
        option->arity == OptionSpec::Arity::flag) {
      GRPO_CHECK_CONFIG(!inline_value, "{} takes no value", flag);
      values = {"false"};
    } else {
      GRPO_CHECK_CONFIG(option != nullptr, "unknown option '{}' (run with --help for the options)", flag);
      if (option->arity == OptionSpec::Arity::flag) {
        values = {inline_value.value_or("true")};
      } else if (option->arity == OptionSpec::Arity::list) {
        const std::string text = value();
        for (std::size_t start = 0;;) {
          const auto comma = text.find(',', start);
          values.push_back(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
          if (comma == std::string::npos) break;
          start = comma + 1;
        }
      } else {
        values = {value()};
      }
    }
    GRPO_CHECK_CONFIG(!out.given.contains(option->key), "{}: given twice on the command line",
                      out.given.at(option->key).source);
    out.given[option->key] = GivenValue{std::move(values), flag, "", 3};
  }
  return out;
}

void OptionTable::add_config(const io::ConfigNode& root, std::map<std::string, GivenValue>& given,
                             const std::function<bool(const std::string&, const io::ConfigNode&)>& section) const {
  std::function<void(const io::ConfigNode&, const std::string&)> walk = [&](const io::ConfigNode& map,
                                                                           const std::string& prefix) {
    for (const auto& [key, node] : map.entries()) {
      if (prefix.empty() && section && section(key, node)) continue;  // the section marks what it reads
      const std::string name = prefix + underscored(key);
      node.mark_read();
      if (node.is_map()) {
        walk(node, name + "_");
        continue;
      }
      const OptionSpec* option = find(name);
      if (option == nullptr && name.starts_with("no_")) {
        const OptionSpec* negated = find(name.substr(3));
        GRPO_CHECK_CONFIG(negated == nullptr || negated->arity != OptionSpec::Arity::flag,
                          "{}: field '{}': write '{}: false' (a config names a setting, not its --no- flag)",
                          node.source(), node.path(), negated ? negated->key : "");
      }
      GRPO_CHECK_CONFIG(option != nullptr, "{}: unknown field '{}' (run with --help for the flags)", node.source(),
                        node.path());
      GRPO_CHECK_CONFIG(!node.is_null(), "{}: field '{}' is null", node.source(), node.path());
      const int rank = node.source().starts_with("--set") ? 2 : 1;
      if (const auto it = given.find(option->key); it != given.end()) {
        const GivenValue& earlier = it->second;
        if (earlier.rank > rank) continue;  // the command line (or a --set over a file) stands
        GRPO_CHECK_CONFIG(rank > earlier.rank, "{}: '{}' and {}: '{}' set the same setting ({}); keep one of them",
                          node.source(), node.path(), earlier.source, earlier.field, flag_of(option->key));
      }
      given[option->key] = GivenValue{node.texts(), node.source(), node.path(), rank};
    }
  };
  walk(root, "");
}

void OptionTable::add_fallback(std::map<std::string, GivenValue>& given, const std::string& key,
                               std::vector<std::string> values, std::string source) const {
  const OptionSpec* option = find(key);
  GRPO_CHECK_CONFIG(option != nullptr, "{}: no option '{}'", source, key);
  if (given.contains(option->key)) return;
  given[option->key] = GivenValue{std::move(values), std::move(source), key, 0};
}

void OptionTable::apply(const std::map<std::string, GivenValue>& given, std::optional<int> only_phase) const {
  std::vector<int> phases;
  for (const OptionSpec& option : options_) phases.push_back(option.phase);
  std::sort(phases.begin(), phases.end());
  phases.erase(std::unique(phases.begin(), phases.end()), phases.end());
  for (const int phase : phases) {
    if (only_phase && phase != *only_phase) continue;
    for (const OptionSpec& option : options_) {
      if (option.phase != phase) continue;
      const auto it = given.find(option.key);
      if (it == given.end()) continue;
      const GivenValue& value = it->second;
      try {
        GRPO_CHECK_CONFIG(!value.values.empty(), "expected a value, got an empty list");
        GRPO_CHECK_CONFIG(option.arity == OptionSpec::Arity::list || value.values.size() == 1,
                          "expected one value, got a list of {}", value.values.size());
        option.assign(value.values);
      } catch (const ConfigError& e) {
        if (value.rank == 3) throw ConfigError(fmt::format("{}: {}", value.source, e.what()));
        throw ConfigError(fmt::format("{}: field '{}': {}", value.source, value.field, e.what()));
      }
    }
  }
}

std::string OptionTable::help(std::string_view usage) const {
  std::string out = fmt::format("{}\n\nOptions:\n", usage);
  for (const OptionSpec& option : options_) {
    std::string flags = flag_of(option.key);
    for (const std::string& alias : option.aliases) flags += ", " + flag_of(alias);
    if (option.arity == OptionSpec::Arity::flag) flags += ", --no-" + flag_of(option.key).substr(2);
    if (!option.value_name.empty()) flags += " " + option.value_name;
    const std::string value = option.yaml();
    out += fmt::format("  {}\n      {}{}\n", flags, option.help,
                       value.empty() || value == "[]" || value == "\"\"" ? "" : fmt::format(" (default: {})", value));
  }
  out += "  --config PATH\n      YAML or JSON run config: options by key (nested sections join: kl: {target: 0.1} is "
         "kl_target), 'extends: base.yaml' to inherit\n"
         "  --set KEY=VALUE\n      override one config key, e.g. --set kl.target=0.05 (repeatable)\n";
  return out;
}

}  // namespace grpo::train
