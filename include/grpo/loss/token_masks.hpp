// SPDX-License-Identifier: Apache-2.0
// Token and sequence masks that select which tokens a GRPO loss learns from: TRL's top-entropy quantile
// (the "80/20" high-entropy-minority-token rule), mask_truncated_completions (DAPO's overlong filtering) and the
// off-policy sequence mask of DeepSeek-V3.2.
//
// They come in two kinds, and the difference matters for the normaliser: the truncation mask changes the LOSS
// mask (truncated rows leave the loss and the token count, TRL excludes them from num_items_in_batch), while the
// entropy and off-policy masks multiply the per-token loss and leave the token count alone (TRL multiplies
// per_token_loss by them after the count is fixed).
#pragma once

#include <torch/torch.h>

#include <cmath>
#include <grpo/core/tensor_checks.hpp>
#include <limits>

namespace grpo {

/// TRL's top-entropy threshold: the (1 − ρ) quantile of the entropies of the valid tokens, with linear
/// interpolation between order statistics (torch.quantile's default), computed in float64. Tokens with H ≥ the
/// threshold are the top ρ fraction (Wang et al. 2025, "Beyond the 80/20 rule"; TRL top_entropy_quantile).
/// entropy: [B, T] floating; mask: [B, T], nonzero = valid; top_quantile ρ ∈ (0, 1] (ρ = 1 keeps every token:
/// the threshold is the minimum). With no valid token the threshold is +inf (nothing is kept; nothing is valid).
/// TRL gathers the entropies of every rank before taking the quantile; to reproduce that for a batch split into
/// micro-batches or across ranks, compute the threshold once over the whole batch and pass it to
/// top_entropy_mask (GrpoLoss takes it in LossInputs::entropy_threshold).
inline double top_entropy_threshold(const torch::Tensor& entropy, const torch::Tensor& mask, double top_quantile) {
  GRPO_CHECK_CONFIG(top_quantile > 0.0 && top_quantile <= 1.0,
                    "top_entropy_threshold: top_quantile must be in (0, 1], got {}", top_quantile);
  detail::check_dim(entropy, 2, "entropy", "top_entropy_threshold");
  detail::check_floating(entropy, "entropy", "top_entropy_threshold");
  detail::check_same_shape(entropy, "entropy", mask, "mask", "top_entropy_threshold");
  const torch::Tensor valid = entropy.detach().to(torch::kFloat64).masked_select(mask != 0);
  if (valid.numel() == 0) return std::numeric_limits<double>::infinity();
  return torch::quantile(valid, 1.0 - top_quantile).item<double>();
}

/// 1 where the token is valid and its entropy is ≥ threshold, else 0; [B, T] in entropy's dtype, no gradient.
/// entropy: [B, T] floating; mask: [B, T], nonzero = valid.
inline torch::Tensor top_entropy_mask(const torch::Tensor& entropy, const torch::Tensor& mask, double threshold) {
  detail::check_dim(entropy, 2, "entropy", "top_entropy_mask");
  detail::check_floating(entropy, "entropy", "top_entropy_mask");
  detail::check_same_shape(entropy, "entropy", mask, "mask", "top_entropy_mask");
  GRPO_CHECK(!std::isnan(threshold), "top_entropy_mask: threshold is NaN");
  return ((entropy.detach().to(torch::kFloat64) >= threshold) & (mask != 0)).to(entropy.scalar_type());
}

/// TRL mask_truncated_completions (DAPO overlong filtering): the loss mask with the rows of truncated completions
/// (generation stopped at max length, not at EOS) set to 0. They still count for their group's rewards and
/// advantages, which were computed before. mask: [B, T] any dtype; truncated: [B] bool (or 0/1).
/// Returns mask's shape and dtype.
inline torch::Tensor truncated_completion_mask(const torch::Tensor& mask, const torch::Tensor& truncated) {
  detail::check_dim(mask, 2, "mask", "truncated_completion_mask");
  GRPO_CHECK(truncated.defined() && truncated.dim() == 1 && truncated.size(0) == mask.size(0),
             "truncated_completion_mask: truncated must have shape [{}] (one flag per row of mask {}), got {}",
             mask.size(0), shape_str(mask), shape_str(truncated));
  const torch::Tensor keep = (truncated == 0).unsqueeze(1);
  return mask.masked_fill(~keep, 0);
}

/// Off-policy sequence mask of DeepSeek-V3.2 (TRL off_policy_mask_threshold): a sequence is kept unless its
/// advantage is negative AND it drifted too far from the policy that sampled it:
///   keep_i = A_i ≥ 0  ∨  Σ_t m·(lp_sampler − lp) / max(|o_i|, 1) ≤ threshold.
/// (The mean is a k1 estimate of KL(π_sampler ‖ π_θ) over the sequence.) log_probs lp (current policy; detached
/// here) and sampler_log_probs (TRL: the inference engine's log-probs, or the old log-probs without one):
/// [B, T] floating; advantages: [B], or [B, T] for per-token advantages (then the sign test is per token, as in
/// TRL); mask: [B, T]. Returns [B, T] 0/1 in log_probs' dtype, no gradient. Masked positions do not count in
/// the mean.
inline torch::Tensor off_policy_sequence_mask(const torch::Tensor& log_probs, const torch::Tensor& sampler_log_probs,
                                              const torch::Tensor& advantages, const torch::Tensor& mask,
                                              double threshold) {
  constexpr std::string_view kWhat = "off_policy_sequence_mask";
  detail::check_dim(log_probs, 2, "log_probs", kWhat);
  detail::check_floating(log_probs, "log_probs", kWhat);
  detail::check_same_shape(log_probs, "log_probs", sampler_log_probs, "sampler_log_probs", kWhat);
  detail::check_same_shape(log_probs, "log_probs", mask, "mask", kWhat);
  GRPO_CHECK(advantages.defined() && ((advantages.dim() == 1 && advantages.size(0) == log_probs.size(0)) ||
                                      (advantages.dim() == 2 && advantages.sizes() == log_probs.sizes())),
             "{}: advantages must have shape [{}] or {} like log_probs, got {}", kWhat, log_probs.size(0),
             shape_str(log_probs), shape_str(advantages));
  GRPO_CHECK(!std::isnan(threshold), "{}: threshold is NaN", kWhat);
  torch::NoGradGuard no_grad;
  const torch::Tensor valid = mask != 0;
  const torch::Tensor m = valid.to(log_probs.scalar_type());
  const torch::Tensor diff = (sampler_log_probs.detach() - log_probs.detach()).masked_fill(~valid, 0.0);
  const torch::Tensor mean_kl = diff.sum(1, /*keepdim=*/true) / m.sum(1, /*keepdim=*/true).clamp_min(1.0);
  const torch::Tensor adv = advantages.dim() == 1 ? advantages.unsqueeze(1) : advantages;
  const torch::Tensor keep = (adv.detach() >= 0) | (mean_kl <= threshold);
  return keep.to(log_probs.scalar_type()).expand_as(log_probs).contiguous();
}

}  // namespace grpo
