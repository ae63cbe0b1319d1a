// SPDX-License-Identifier: Apache-2.0
// PPO's clipped value loss for a critic (volcengine/verl 012be9d, verl/trainer/ppo/core_algos.py compute_value_loss,
// itself TRL's PPO trainer):
//
//   V_clip = clamp(V, V_old − c, V_old + c)
//   L_t    = max((V − R)², (V_clip − R)²)
//   loss   = ½ · aggregate(L, mask)            clip_fraction = masked mean of [(V_clip − R)² > (V − R)²]
//
// V the critic's values now, V_old its values when the batch was generated, R the returns (gae_advantages). The
// aggregation is any LossType's with the whole batch's normaliser (aggregation.hpp), verl's loss_agg_mode: token_mean
// (its default), seq_mean_token_sum, seq_mean_token_mean, seq_mean_token_sum_norm; micro-batch losses then sum to
// the whole batch's.
#pragma once

#include <grpo/core/error.hpp>
#include <grpo/core/tensor_checks.hpp>
#include <grpo/loss/aggregation.hpp>

#include <torch/torch.h>

#include <cmath>
#include <optional>
#include <string_view>

namespace grpo {

struct ValueLossOptions {
  /// c, how far the new values may move from V_old before the loss stops rewarding it (verl critic.cliprange_value,
  /// default 0.5). nullopt: no clipping (L_t = (V − R)²).
  std::optional<double> clip_range = 0.5;
  LossType loss_type = LossType::token_mean;  ///< verl critic.loss_agg_mode (default token-mean)

  /// ConfigError naming the option: a clip range that is negative or not finite.
  void validate() const {
    GRPO_CHECK_CONFIG(!clip_range || (std::isfinite(*clip_range) && *clip_range >= 0.0),
                      "value clip range must be finite and >= 0, got {}", clip_range.value_or(0.0));
  }
};

struct ValueLossOutput {
  torch::Tensor loss;          ///< 0-dim, values' dtype, differentiable in values
  double clip_fraction = 0.0;  ///< of the valid tokens, where the clipped term was the larger (verl vf_clipfrac)
};

/// values: [B, T] floating, the critic's values now (with gradient); old_values, returns: [B, T] (no gradient flows
/// into them); mask: [B, T], nonzero = valid. normaliser: of options.loss_type over the whole batch
/// (local_normaliser(type, mask) when it is not split). Masked positions are ignored, even NaN, and get zero gradient.
/// Throws grpo::Error for shapes that differ, ConfigError for a normaliser of the wrong kind.
inline ValueLossOutput clipped_value_loss(const torch::Tensor& values, const torch::Tensor& old_values,
                                          const torch::Tensor& returns, const torch::Tensor& mask,
                                          const Normaliser& normaliser, const ValueLossOptions& options = {}) {
  constexpr std::string_view kWhat = "clipped_value_loss";
  detail::check_dim(values, 2, "values", kWhat);
  detail::check_floating(values, "values", kWhat);
  detail::check_same_shape(values, "values", old_values, "old_values", kWhat);
  detail::check_same_shape(values, "values", returns, "returns", kWhat);
  detail::check_same_shape(values, "values", mask, "mask", kWhat);
  options.validate();
  const torch::Tensor valid = mask != 0;
  // Masked entries become 0 before any arithmetic, so a NaN there reaches neither the loss nor the gradient.
  const torch::Tensor v = values.masked_fill(~valid, 0.0);
  const torch::Tensor old = old_values.detach().to(values.scalar_type()).masked_fill(~valid, 0.0);
  const torch::Tensor target = returns.detach().to(values.scalar_type()).masked_fill(~valid, 0.0);
  const torch::Tensor unclipped = (v - target).square();
  torch::Tensor per_token = unclipped;
  double clip_fraction = 0.0;
  if (options.clip_range) {
    const double c = *options.clip_range;
    const torch::Tensor clipped = (torch::max(torch::min(v, old + c), old - c) - target).square();
    per_token = torch::max(unclipped, clipped);
    const double tokens = valid.sum().item<double>();
    clip_fraction = tokens > 0 ? ((clipped > unclipped) & valid).sum().item<double>() / tokens : 0.0;
  }
  return {0.5 * aggregate_loss(per_token, mask, options.loss_type, normaliser), clip_fraction};
}

}  // namespace grpo
