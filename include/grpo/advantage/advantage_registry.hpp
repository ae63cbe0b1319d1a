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
#include <grpo/core/named_registry.hpp>

#include <torch/torch.h>

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace grpo {

/// An estimator: rewards [P, G] float64 on the CPU (NaN = no value; after reward_clip and the combination of several
/// reward functions) and completion lengths [P, G] float64 (undefined unless the caller passed lengths) → advantages
/// [P, G] (any floating dtype; entries at NaN rewards are replaced by 0 afterwards).
using AdvantageFunction = std::function<torch::Tensor(const torch::Tensor& rewards, const torch::Tensor& lengths)>;

/// Named estimators beside the built-in AdvantageEstimator ones (NamedRegistry: add, contains, get, names).
/// Thread-safe.
class AdvantageRegistry : public NamedRegistry<AdvantageFunction> {
 public:
  /// The process-wide registry GroupAdvantage looks names up in (defined in group_advantage.hpp, beside the
  /// built-in names).
  static AdvantageRegistry& global();

 private:
  AdvantageRegistry(std::string builtin, std::function<bool(std::string_view)> is_builtin)
      : NamedRegistry("advantage estimator", std::move(builtin), std::move(is_builtin)) {}
};

}  // namespace grpo
