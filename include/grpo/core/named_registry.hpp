// SPDX-License-Identifier: Apache-2.0
// A thread-safe map from names to functions, beside a set of built-in names: what the policy-loss and
// advantage-estimator registries share. Unknown names are ConfigErrors that list every valid name.
#pragma once

#include <grpo/core/error.hpp>

#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace grpo {

template <typename FunctionType>
class NamedRegistry {
 public:
  /// `what` names the kind in messages ("policy loss"); `builtin` lists the built-in names for messages and
  /// `is_builtin` recognises one (a built-in name cannot be registered).
  NamedRegistry(std::string what, std::string builtin, std::function<bool(std::string_view)> is_builtin)
      : what_(std::move(what)), builtin_(std::move(builtin)), is_builtin_(std::move(is_builtin)) {}

  /// Registers `function` as `name`. ConfigError for an empty name, a built-in name, a name registered already, or a
  /// null function.
  void add(std::string name, FunctionType function) {
    GRPO_CHECK_CONFIG(!name.empty(), "registering a {}: empty name", what_);
    GRPO_CHECK_CONFIG(function != nullptr, "registering {} '{}': null function", what_, name);
    GRPO_CHECK_CONFIG(!is_builtin_(name), "registering {} '{}': '{}' is a built-in {}", what_, name, name, what_);
    const std::lock_guard lock(mutex_);
    GRPO_CHECK_CONFIG(functions_.emplace(name, std::move(function)).second, "registering {} '{}': registered already",
                      what_, name);
  }

  bool contains(std::string_view name) const {
    const std::lock_guard lock(mutex_);
    return functions_.find(name) != functions_.end();
  }

  /// The function registered as `name`; ConfigError "unknown <what> '<name>'; valid: <built-in>, <registered>".
  FunctionType get(std::string_view name) const {
    const std::lock_guard lock(mutex_);
    const auto it = functions_.find(name);
    if (it != functions_.end()) return it->second;
    std::string registered;
    for (const auto& [known, function] : functions_) registered += ", " + known;
    detail::throw_formatted<ConfigError>("unknown {} '{}'; valid: {}{}", what_, name, builtin_,
                                         registered.empty() ? std::string(" (none registered)") : registered);
  }

  /// The registered names, sorted.
  std::vector<std::string> names() const {
    const std::lock_guard lock(mutex_);
    std::vector<std::string> out;
    for (const auto& [name, function] : functions_) out.push_back(name);
    return out;
  }

 private:
  std::string what_, builtin_;
  std::function<bool(std::string_view)> is_builtin_;
  mutable std::mutex mutex_;
  std::map<std::string, FunctionType, std::less<>> functions_;
};

}  // namespace grpo
