// SPDX-License-Identifier: Apache-2.0
// The built-in advantage estimators (AdvantageEstimator and their names), and estimators added without editing the
// library: register a function under a name, then select it by name (GroupAdvantageOptions::estimator_name,
// select_advantage_estimator). GroupAdvantage calls it in place of its
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

/// How a group's rewards become advantages (the built-in estimators; AdvantageRegistry adds named ones).
/// Notation: group p has the valid (non-NaN) rewards r_1..r_n,
/// μ = their mean, σ = their Bessel std (n − 1, as torch.std), ε = GroupAdvantageOptions::eps.
enum class AdvantageEstimator {
  grpo,     ///< (r − μ)/(σ + ε). TRL scale_rewards="group" (ε 1e-4), verl grpo (ε 1e-6), OpenRLHF group_norm.
  dr_grpo,  ///< r − μ (Dr. GRPO). TRL scale_rewards="none", verl norm_adv_by_std_in_grpo=False.
  group_mean_batch_std,  ///< (r − μ)/(σ_batch + ε), σ_batch = Bessel std of every valid reward in the batch.
                         ///< TRL scale_rewards="batch"; ROLL norm_mean_type=group, norm_std_type=batch (Lite-PPO).
  rloo,                  ///< n/(n − 1)·(r_i − μ) = r_i − mean of the other n − 1. verl rloo, OpenRLHF rloo.
  reinforce_pp_baseline,  ///< c = r − μ, then masked_whiten over the batch: (c − m)·rsqrt(v + whiten_eps), m and v the
                          ///< mean and unbiased variance of c, token-weighted when lengths are given. verl
                          ///< reinforce_plus_plus_baseline.
  gpg,        ///< α·(r − μ), α = B / max(count_nonzero(r), 1) over the batch (B = valid rewards). verl gpg
              ///< (f_norm = 1).
  pass_at_k,  ///< only the group's best sample gets r_max − r_2nd (÷ (σ + ε) when pass_at_k_scale_by_std),
              ///< all others 0. verl grpo_passk.
  opo,        ///< r − b, b = Σ_j |o_j|·r_j / Σ_j |o_j| (length-weighted baseline; needs lengths). verl opo.
};

namespace detail {
inline constexpr EnumNames<AdvantageEstimator, 8> kAdvantageEstimatorNames{{
    {AdvantageEstimator::grpo, "grpo"},
    {AdvantageEstimator::dr_grpo, "dr_grpo"},
    {AdvantageEstimator::group_mean_batch_std, "group_mean_batch_std"},
    {AdvantageEstimator::rloo, "rloo"},
    {AdvantageEstimator::reinforce_pp_baseline, "reinforce_pp_baseline"},
    {AdvantageEstimator::gpg, "gpg"},
    {AdvantageEstimator::pass_at_k, "pass_at_k"},
    {AdvantageEstimator::opo, "opo"},
}};
}  // namespace detail

/// The built-in estimators ("grpo", "dr_grpo", "group_mean_batch_std", "rloo", "reinforce_pp_baseline", "gpg",
/// "pass_at_k", "opo"). For built-in or registered names use select_advantage_estimator (group_advantage.hpp).
GRPO_ENUM_NAMES(AdvantageEstimator, detail::kAdvantageEstimatorNames, "advantage estimator", parse_advantage_estimator);

/// An estimator: rewards [P, G] float64 on the CPU (NaN = no value; after reward_clip and the combination of several
/// reward functions) and completion lengths [P, G] float64 (undefined unless the caller passed lengths) → advantages
/// [P, G] (any floating dtype; entries at NaN rewards are replaced by 0 afterwards).
using AdvantageFunction = std::function<torch::Tensor(const torch::Tensor& rewards, const torch::Tensor& lengths)>;

/// Named estimators beside the built-in AdvantageEstimator ones (NamedRegistry: add, contains, get, names).
/// Thread-safe.
class AdvantageRegistry : public NamedRegistry<AdvantageFunction> {
 public:
  /// The process-wide registry GroupAdvantage looks names up in.
  static AdvantageRegistry& global() {
    static AdvantageRegistry registry;
    return registry;
  }

 private:
  AdvantageRegistry()
      : NamedRegistry("advantage estimator", detail::joined_names(detail::kAdvantageEstimatorNames),
                      [](std::string_view name) {
                        return detail::find_enum(name, detail::kAdvantageEstimatorNames).has_value();
                      }) {}
};

}  // namespace grpo
