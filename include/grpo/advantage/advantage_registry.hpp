// SPDX-License-Identifier: Apache-2.0
// Advantage estimators added without editing the library: register a function under a name, then select it by name
// (GroupAdvantageOptions::estimator_name, select_advantage_estimator). GroupAdvantage calls it in place of its
// built-in per-group estimator and does everything else as for a built-in one: reward clipping and the combination
// of K reward functions before it; advantage clipping, zeros where a reward is missing and the group statistics
// (group_mean, group_std, frac_reward_zero_std) after it.
//
//   grpo::AdvantageRegistry::global().add("max_baseline", [](const torch::Tensor& r, const torch::Tensor&) {
//     return r - std::get<0>(r.nan_to_num(-1e30).max(1, true));     // each reward minus its group's best
//   });
#pragma once

#include <grpo/core/enum_names.hpp>
#include <grpo/core/error.hpp>

#include <torch/torch.h>

#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace grpo {

/// An estimator: rewards [P, G] float64 on the CPU (NaN = no value; after reward_clip and the combination of several
/// reward functions) and completion lengths [P, G] float64 (undefined unless the caller passed lengths) → advantages
/// [P, G] (any floating dtype; entries at NaN rewards are replaced by 0 afterwards).
using AdvantageFunction = std::function<torch::Tensor(const torch::Tensor& rewards, const torch::Tensor& lengths)>;

/// Named estimators beside the built-in AdvantageEstimator ones. Thread-safe.
class AdvantageRegistry {
 public:
  /// The process-wide registry GroupAdvantage looks names up in.
  static AdvantageRegistry& global() {
    static AdvantageRegistry registry;
    return registry;
  }

  /// Registers `function` as `name`. ConfigError for an empty name, a name registered already (built-in names are
  /// checked by select_advantage_estimator, which prefers them) or a null function.
  void add(std::string name, AdvantageFunction function) {
    GRPO_CHECK_CONFIG(!name.empty(), "AdvantageRegistry::add: empty name");
    GRPO_CHECK_CONFIG(function != nullptr, "AdvantageRegistry::add: null function for '{}'", name);
    const std::lock_guard lock(mutex_);
    GRPO_CHECK_CONFIG(functions_.emplace(name, std::move(function)).second,
                      "AdvantageRegistry::add: '{}' is registered already", name);
  }

  bool contains(std::string_view name) const {
    const std::lock_guard lock(mutex_);
    return functions_.find(name) != functions_.end();
  }

  /// The function registered as `name`; ConfigError "unknown advantage estimator '<name>'; valid: <builtin>,
  /// <registered>" otherwise (`builtin`: the built-in names, for the message).
  AdvantageFunction get(std::string_view name, std::string_view builtin) const {
    const std::lock_guard lock(mutex_);
    const auto it = functions_.find(name);
    if (it != functions_.end()) return it->second;
    std::string registered;
    for (const auto& [known, function] : functions_) registered += ", " + known;
    detail::throw_formatted<ConfigError>("unknown advantage estimator '{}'; valid: {}{}", name, builtin,
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
  mutable std::mutex mutex_;
  std::map<std::string, AdvantageFunction, std::less<>> functions_;
};

}  // namespace grpo
