// SPDX-License-Identifier: Apache-2.0
// GrpoLossOptions of the published recipes, each with the source of its values. Advantage settings (e.g. Dr. GRPO's
// unscaled group-mean advantage) belong to the advantage estimator and are noted, not set, here. Every function
// returns plain options: change any field before constructing GrpoLoss.
#pragma once

#include <grpo/core/enum_names.hpp>
#include <grpo/core/error.hpp>
#include <grpo/loss/grpo_loss.hpp>

#include <array>
#include <cstdint>
#include <string_view>

namespace grpo::recipes {

/// GRPO as in DeepSeekMath (Shao et al. 2024, §4.1/4.2): PPO clip ε = 0.2, KL to the reference with the k3
/// estimator and β = 0.04 (TRL's default before it became 0), per-sequence token mean then mean over sequences
/// (TRL loss_type "grpo"). Advantages: group z-score.
inline GrpoLossOptions grpo() {
  GrpoLossOptions options;
  options.loss_type = LossType::grpo;
  options.policy.type = PolicyLossType::ppo_clip;
  options.policy.epsilon_low = 0.2;
  options.policy.epsilon_high = 0.2;
  options.beta = 0.04;
  options.kl.estimator = KlEstimator::k3;
  return options;
}

/// Dr. GRPO (Liu et al. 2025, "Understanding R1-Zero-Like Training"): token sum divided by the constant
/// B · max_completion_length (TRL loss_type "dr_grpo"), PPO clip ε = 0.2, no KL term. Advantages: group mean
/// only, no std scaling (TRL scale_rewards = "none").
inline GrpoLossOptions dr_grpo(int64_t max_completion_length) {
  GrpoLossOptions options;
  options.loss_type = LossType::dr_grpo;
  options.max_completion_length = max_completion_length;
  options.policy.epsilon_low = 0.2;
  options.policy.epsilon_high = 0.2;
  options.beta = 0.0;
  options.validate();
  return options;
}

/// DAPO (Yu et al. 2025, §3 and §4.1): clip-higher ε_low = 0.2, ε_high = 0.28; token-level loss over the whole
/// batch (TRL loss_type "dapo"); no KL term (β = 0). Dynamic sampling and the soft overlong punishment are data and
/// reward components; the paper's overlong filtering is available as mask_truncated_completions (off here, as in
/// the paper's final recipe, which uses the soft punishment instead).
inline GrpoLossOptions dapo() {
  GrpoLossOptions options;
  options.loss_type = LossType::dapo;
  options.policy.epsilon_low = 0.2;
  options.policy.epsilon_high = 0.28;
  options.beta = 0.0;
  return options;
}

/// GSPO (Zheng et al. 2025, v2 §5.1, as in TRL's paper index): sequence-level importance weight (length-normalised
/// log-ratio), ε_low = 3e-4, ε_high = 4e-4, β = 0, sequence-mean aggregation (TRL loss_type "grpo"; verl's gspo
/// forces seq-mean-token-mean, the same shape). verl's token form is ImportanceLevel::sequence_token.
inline GrpoLossOptions gspo() {
  GrpoLossOptions options;
  options.loss_type = LossType::grpo;
  options.policy.type = PolicyLossType::ppo_clip;
  options.policy.importance_level = ImportanceLevel::sequence;
  options.policy.epsilon_low = 3e-4;
  options.policy.epsilon_high = 4e-4;
  options.beta = 0.0;
  return options;
}

/// CISPO (MiniMax-M1, 2025) in TRL's form: −sg(min(w, ε_high))·A·lp with only the upper cap, ε_high = 5.0 as
/// ScaleRL (Khatri et al. 2025) suggests; token-level loss over the whole batch (TRL loss_type "cispo"); β = 0.
inline GrpoLossOptions cispo() {
  GrpoLossOptions options;
  options.loss_type = LossType::cispo;
  options.policy.type = PolicyLossType::cispo;
  options.policy.epsilon_high = 5.0;
  options.beta = 0.0;
  return options;
}

/// The names by_name accepts, in this file's order.
inline constexpr std::array<std::string_view, 5> kRecipeNames = {"grpo", "dr_grpo", "dapo", "gspo", "cispo"};

/// The recipe called `name` (one of kRecipeNames), for config-driven programs. max_completion_length is used by
/// dr_grpo only (its constant normaliser). Throws ConfigError listing the names for an unknown one.
inline GrpoLossOptions by_name(std::string_view name, int64_t max_completion_length) {
  if (name == "grpo") return grpo();
  if (name == "dr_grpo") return dr_grpo(max_completion_length);
  if (name == "dapo") return dapo();
  if (name == "gspo") return gspo();
  if (name == "cispo") return cispo();
  ::grpo::detail::throw_formatted<ConfigError>("unknown loss recipe '{}' (known: {})", name,
                                               ::grpo::detail::joined_names(kRecipeNames));
}

}  // namespace grpo::recipes
