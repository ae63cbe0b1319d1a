// SPDX-License-Identifier: Apache-2.0
// The Bradley–Terry loss of a reward model on preference pairs, as TRL's RewardTrainer computes it
// (huggingface/trl, trl/trainer/reward_trainer.py compute_loss):
//
//   loss = Σ_i −log σ(r_chosen,i − r_rejected,i − margin_i) / N  +  c · Σ_i (r_chosen,i + r_rejected,i)² / N
//
// with N the pair count of the whole batch (TRL's mean over the batch; pass the whole batch's count when it is split
// into micro-batches, and the parts' losses sum to the whole's), the optional per-pair margin of TRL's datasets, and
// TRL's center_rewards_coefficient c (Eisenstein et al. 2023), which keeps the scores centred on 0. accuracy is TRL's:
// the fraction of pairs with r_chosen > r_rejected.
#pragma once

#include <grpo/core/error.hpp>
#include <grpo/core/tensor_checks.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string_view>

namespace grpo {

struct BradleyTerryOptions {
  /// c ≥ 0, TRL's center_rewards_coefficient; nullopt (TRL's default None): no centring term.
  std::optional<double> center_rewards_coefficient;
  /// N, the pair count the sums are divided by; nullopt: these pairs' count (the batch is not split).
  std::optional<double> pairs;

  /// ConfigError naming the option.
  void validate() const {
    GRPO_CHECK_CONFIG(!center_rewards_coefficient ||
                          (std::isfinite(*center_rewards_coefficient) && *center_rewards_coefficient >= 0.0),
                      "center_rewards_coefficient must be finite and >= 0, got {}", center_rewards_coefficient.value_or(0));
    GRPO_CHECK_CONFIG(!pairs || (std::isfinite(*pairs) && *pairs > 0.0), "the pair count must be > 0, got {}",
                      pairs.value_or(0));
  }
};

struct BradleyTerryOutput {
  torch::Tensor loss;    ///< 0-dim, the scores' dtype, differentiable in both score tensors
  double accuracy = 0.0;  ///< fraction of these pairs with chosen > rejected (0 for no pairs)
};

/// chosen, rejected: [P] floating scores of each pair's two completions (a reward model's sequence_scores); margin:
/// [P] or undefined. Numerically stable for any score difference (log σ by softplus). Throws grpo::Error for shapes
/// that differ, ConfigError for options out of range.
inline BradleyTerryOutput bradley_terry_loss(const torch::Tensor& chosen, const torch::Tensor& rejected,
                                             const torch::Tensor& margin = {}, const BradleyTerryOptions& options = {}) {
  constexpr std::string_view kWhat = "bradley_terry_loss";
  detail::check_dim(chosen, 1, "chosen", kWhat);
  detail::check_floating(chosen, "chosen", kWhat);
  detail::check_same_shape(chosen, "chosen", rejected, "rejected", kWhat);
  if (margin.defined()) detail::check_same_shape(chosen, "chosen", margin, "margin", kWhat);
  options.validate();
  const double n = options.pairs.value_or(std::max<double>(1.0, static_cast<double>(chosen.size(0))));
  torch::Tensor difference = chosen - rejected;
  if (margin.defined()) difference = difference - margin.detach().to(chosen.scalar_type());
  torch::Tensor loss = torch::nn::functional::softplus(-difference).sum() / n;  // −log σ(d) = softplus(−d)
  if (options.center_rewards_coefficient) {
    loss = loss + *options.center_rewards_coefficient * (chosen + rejected).square().sum() / n;
  }
  const double accuracy =
      chosen.size(0) > 0 ? (chosen.detach() > rejected.detach()).to(torch::kFloat64).mean().item<double>() : 0.0;
  return {loss, accuracy};
}

}  // namespace grpo
