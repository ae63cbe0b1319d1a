// SPDX-License-Identifier: Apache-2.0
// Float64 LibTorch transcriptions of the published Python the library claims parity with. Each function names the
// file and commit it transcribes; none of them was written from the library's implementation. Inputs are clean
// (no −inf/NaN at padded positions), as the published code would see them.
//
//   TRL  = huggingface/trl @ f2cd57710ae345ea6428ae95363267fcf38a3dc8
//   verl = volcengine/verl @ b178a3cd56f58b2d502255daba591e92833930a7
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace parity::ref {

inline const auto kF64 = torch::TensorOptions().dtype(torch::kFloat64);
inline constexpr double kInf = std::numeric_limits<double>::infinity();

// ------------------------------------------------------------------------------------------------------------------
// TRL
// ------------------------------------------------------------------------------------------------------------------

/// TRL trl/trainer/grpo_trainer.py @ f2cd577, GRPOTrainer.get_high_entropy_mask (line 1396), one process
/// (pad_across_processes/gather are the identity). Note `.float()`: TRL takes the quantile in float32.
inline torch::Tensor trl_get_high_entropy_mask(const torch::Tensor& entropies, const torch::Tensor& mask,
                                               double threshold) {
  auto local = entropies.detach().masked_select(mask.to(torch::kBool)).to(torch::kFloat32);
  const double pad_value = -1e9;
  auto gathered = local.masked_select(local != pad_value);
  if (gathered.numel() == 0) return torch::zeros_like(entropies, torch::TensorOptions().dtype(torch::kBool));
  auto entropy_threshold = torch::quantile(gathered, threshold);
  auto masked_entropies = entropies.detach() * mask.to(torch::kFloat32);
  auto entropy_mask = masked_entropies >= entropy_threshold;
  return entropy_mask & mask.to(torch::kBool);
}

/// TRL trl/trainer/grpo_trainer.py @ f2cd577, GRPOTrainer.get_off_policy_mask (line 2920). Returns (B, 1), or
/// (B, T) for advantages of shape (B, T).
inline torch::Tensor trl_get_off_policy_mask(const torch::Tensor& advantages, const torch::Tensor& per_token_logps,
                                             const torch::Tensor& sampling_per_token_logps, const torch::Tensor& mask,
                                             double off_policy_threshold) {
  auto kl_div = sampling_per_token_logps - per_token_logps.detach();
  auto seq_kl_sum = (kl_div * mask).sum(1, /*keepdim=*/true);
  auto avg_seq_kl = seq_kl_sum / mask.sum(1, /*keepdim=*/true).clamp_min(1.0);
  auto is_pos_adv = advantages >= 0;
  auto is_low_kl = avg_seq_kl <= off_policy_threshold;
  return (is_pos_adv | is_low_kl).to(mask.scalar_type());
}

/// TRL trl/trainer/grpo_trainer.py @ f2cd577, GRPOTrainer.get_gamma_weights (line 2943), under no_grad.
inline torch::Tensor trl_get_gamma_weights(const torch::Tensor& advantages, const torch::Tensor& log_ratio_per_token,
                                           const torch::Tensor& mask, const torch::Tensor& importance_sampling_ratio,
                                           double k_pos, double lambda_pos, double k_neg, double lambda_neg) {
  torch::NoGradGuard no_grad;
  const double lower_clamp = std::log(1e-8);
  auto log_ratio_clamped = torch::clamp(log_ratio_per_token.detach(), -20.0, 20.0);
  auto seq_log_ratio = torch::sum(log_ratio_clamped * mask, -1, /*keepdim=*/true);
  if (importance_sampling_ratio.defined()) {
    auto log_is_ratio = torch::clamp(torch::log(importance_sampling_ratio), lower_clamp, 20.0);
    seq_log_ratio = seq_log_ratio + torch::sum(log_is_ratio, -1, /*keepdim=*/true);
  }
  auto log_w_seq = torch::clamp(seq_log_ratio, lower_clamp, 20.0);
  auto w_seq = torch::exp(log_w_seq);
  auto is_nonneg_adv = advantages >= 0;
  auto k_seq = torch::where(is_nonneg_adv, torch::full({}, k_pos, kF64), torch::full({}, k_neg, kF64));
  auto lambda_seq =
      torch::where(is_nonneg_adv, torch::full({}, lambda_pos, kF64), torch::full({}, lambda_neg, kF64)).clamp_min(1e-4);
  auto log_phi = lambda_seq + k_seq * log_w_seq - lambda_seq * w_seq;
  return torch::nan_to_num(torch::exp(log_phi), 0.0, 0.0, 0.0);
}

/// TRL trl/trainer/grpo_trainer.py @ f2cd577, _generate_and_score_completions, the vLLM importance sampling ratio
/// (lines 2579-2623): (B, T) for token_* modes, (B, 1) for sequence_* modes. clip_min/clip_max nullopt = None.
inline torch::Tensor trl_vllm_importance_sampling_ratio(const torch::Tensor& old_per_token_logps,
                                                        const torch::Tensor& sampling_per_token_logps,
                                                        const torch::Tensor& mask, const std::string& mode,
                                                        std::optional<double> clip_min,
                                                        std::optional<double> clip_max) {
  torch::NoGradGuard no_grad;
  auto per_token_logps_diff = (old_per_token_logps - sampling_per_token_logps) * mask;
  const bool sequence_level_is = mode == "sequence_mask" || mode == "sequence_truncate";
  auto logps_diff = sequence_level_is ? per_token_logps_diff.sum(-1, /*keepdim=*/true) : per_token_logps_diff;
  auto ratio = torch::exp(logps_diff);
  if (mode == "sequence_truncate" || mode == "token_truncate") {
    ratio = torch::clamp(ratio, clip_min ? c10::optional<c10::Scalar>(*clip_min) : c10::nullopt,
                         clip_max ? c10::optional<c10::Scalar>(*clip_max) : c10::nullopt);
  } else if (mode == "sequence_mask" || mode == "token_mask") {
    const double min_val = clip_min ? *clip_min : -kInf;
    const double max_val = clip_max ? *clip_max : kInf;
    auto invalid_mis_mask = (ratio < min_val) | (ratio > max_val);
    ratio = ratio.masked_fill(invalid_mis_mask, 0.0);
  } else {
    throw std::invalid_argument("Unknown vLLM importance sampling level: " + mode);
  }
  return ratio;
}

/// The GRPOConfig fields _compute_loss reads (TRL defaults).
struct TrlConfig {
  std::string loss_type = "dapo";
  /// "token", "sequence" (grpo_trainer.py) or "sequence_token" (trl/experimental/gspo_token/grpo_trainer.py).
  std::string importance_sampling_level = "token";
  double epsilon_low = 0.2, epsilon_high = 0.2;
  std::optional<double> delta;
  double beta = 0.0;
  bool use_bias_correction_kl = false;
  double top_entropy_quantile = 1.0;
  std::optional<double> off_policy_mask_threshold;
  double entropy_coef = 0.0;
  int64_t max_completion_length = 0;
  double sapo_temperature_pos = 1.0, sapo_temperature_neg = 1.05;
  double vespo_k_pos = 2.0, vespo_lambda_pos = 3.0, vespo_k_neg = 3.0, vespo_lambda_neg = 2.0;
};

/// The `inputs` of _compute_loss plus the model outputs (per_token_logps with grad, entropies).
struct TrlInputs {
  torch::Tensor per_token_logps;            // (B, T), requires grad
  torch::Tensor entropies;                  // (B, T), may require grad
  torch::Tensor old_per_token_logps;        // (B, T) or undefined (None)
  torch::Tensor ref_per_token_logps;        // (B, T)
  torch::Tensor advantages;                 // (B,) or (B, T)
  torch::Tensor completion_mask;            // (B, T) float 0/1, after mask_truncated_completions
  torch::Tensor sampling_per_token_logps;   // (B, T) or undefined
  torch::Tensor importance_sampling_ratio;  // (B, T) / (B, 1) or undefined (use_vllm with IS correction off)
  double num_items_in_batch = 0.0;
};

/// TRL trl/trainer/grpo_trainer.py @ f2cd577, GRPOTrainer._compute_loss (line 2991) from the per-token log-probs on,
/// training mode, gradient_accumulation_steps = 1, one process, non-adaptive entropy bonus; with
/// importance_sampling_level "sequence_token", the GSPO-token branch of trl/experimental/gspo_token/grpo_trainer.py
/// @ f2cd577 (which has no off-policy mask, bias-corrected KL or entropy bonus: callers do not combine them).
inline torch::Tensor trl_compute_loss(const TrlInputs& in, const TrlConfig& c) {
  const auto& mask = in.completion_mask;
  const auto& per_token_logps = in.per_token_logps;
  const auto& entropies = in.entropies;
  const double current_gradient_accumulation_steps = 1.0, num_processes = 1.0;

  torch::Tensor entropy_mask;
  if (c.top_entropy_quantile < 1.0)
    entropy_mask = trl_get_high_entropy_mask(entropies, mask, 1 - c.top_entropy_quantile);

  auto advantages = in.advantages;
  if (advantages.dim() == 1) advantages = advantages.unsqueeze(1);
  auto old_per_token_logps =
      in.old_per_token_logps.defined() ? in.old_per_token_logps : per_token_logps.detach();

  torch::Tensor off_policy_mask;
  if (c.off_policy_mask_threshold) {
    auto sampling_per_token_logps =
        in.sampling_per_token_logps.defined() ? in.sampling_per_token_logps : old_per_token_logps;
    off_policy_mask = trl_get_off_policy_mask(advantages, per_token_logps, sampling_per_token_logps, mask,
                                              *c.off_policy_mask_threshold);
  }

  auto log_ratio = per_token_logps - old_per_token_logps;
  torch::Tensor log_importance_weights;
  if (c.importance_sampling_level == "token") {
    log_importance_weights = log_ratio;
  } else if (c.importance_sampling_level == "sequence") {
    log_importance_weights = (log_ratio * mask).sum(-1) / mask.sum(-1).clamp_min(1.0);
    log_importance_weights = log_importance_weights.unsqueeze(-1);
  } else if (c.importance_sampling_level == "sequence_token") {
    // trl/experimental/gspo_token/grpo_trainer.py: sg[si(θ)] * πθ(yi,t)/sg[πθ(yi,t)]
    auto seq_level_log_weight = (log_ratio * mask).sum(-1) / mask.sum(-1).clamp_min(1.0);
    seq_level_log_weight = seq_level_log_weight.detach().unsqueeze(-1);
    log_importance_weights = per_token_logps - per_token_logps.detach() + seq_level_log_weight;
  } else {
    throw std::invalid_argument("Unknown importance sampling level");
  }
  auto coef_1 = torch::exp(log_importance_weights);

  torch::Tensor per_token_kl;
  if (c.beta != 0.0) {
    const auto& ref_per_token_logps = in.ref_per_token_logps;
    per_token_kl = torch::exp(ref_per_token_logps - per_token_logps) - (ref_per_token_logps - per_token_logps) - 1;
    if (c.use_bias_correction_kl) per_token_kl = per_token_kl * coef_1;
  }

  torch::Tensor per_token_loss;
  const auto& lt = c.loss_type;
  if (lt == "cispo") {
    auto clamped_ratios = torch::clamp(coef_1, c10::nullopt, c.epsilon_high).detach();
    per_token_loss = -clamped_ratios * advantages * per_token_logps;
  } else if (lt == "grpo" || lt == "bnpo" || lt == "dr_grpo" || lt == "dapo" || lt == "luspo") {
    auto coef_2 = torch::clamp(coef_1, 1 - c.epsilon_low, 1 + c.epsilon_high);
    if (c.delta) coef_1 = torch::clamp(coef_1, c10::nullopt, *c.delta);
    auto per_token_loss1 = coef_1 * advantages;
    auto per_token_loss2 = coef_2 * advantages;
    per_token_loss = -torch::min(per_token_loss1, per_token_loss2);
  } else if (lt == "sapo") {
    auto temperatures = torch::where(advantages > 0, torch::full({}, c.sapo_temperature_pos, kF64),
                                     torch::full({}, c.sapo_temperature_neg, kF64));
    auto soft_coef_1 = torch::sigmoid(temperatures * (coef_1 - 1)) * 4 / temperatures;
    per_token_loss = -soft_coef_1 * advantages;
  } else if (lt == "vespo") {
    auto phi_seq = trl_get_gamma_weights(advantages, log_ratio, mask, in.importance_sampling_ratio, c.vespo_k_pos,
                                         c.vespo_lambda_pos, c.vespo_k_neg, c.vespo_lambda_neg);
    per_token_loss = -phi_seq * advantages * per_token_logps;
  } else {
    throw std::invalid_argument("Unknown loss type: " + lt);
  }

  if (c.off_policy_mask_threshold) per_token_loss = per_token_loss * off_policy_mask;
  if (entropy_mask.defined()) per_token_loss = per_token_loss * entropy_mask;
  if (in.importance_sampling_ratio.defined() && lt != "vespo")
    per_token_loss = per_token_loss * in.importance_sampling_ratio;
  if (c.beta != 0.0) per_token_loss = per_token_loss + c.beta * per_token_kl;

  torch::Tensor loss;
  double normalizer = 1.0;
  if (lt == "grpo" || lt == "sapo") {
    loss = ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp_min(1.0)).mean();
    normalizer = current_gradient_accumulation_steps;
    loss = loss / normalizer;
  } else if (lt == "bnpo") {
    loss = (per_token_loss * mask).sum() / mask.sum().clamp_min(1.0);
    normalizer = current_gradient_accumulation_steps;
    loss = loss / normalizer;
  } else if (lt == "dr_grpo") {
    loss = (per_token_loss * mask).sum() /
           static_cast<double>(per_token_loss.size(0) * c.max_completion_length);
    normalizer = current_gradient_accumulation_steps;
    loss = loss / normalizer;
  } else if (lt == "cispo" || lt == "dapo" || lt == "vespo") {
    normalizer = std::max(in.num_items_in_batch, 1.0) / num_processes;
    loss = (per_token_loss * mask).sum() / normalizer;
  } else if (lt == "luspo") {
    loss = (per_token_loss * mask.sum(1, /*keepdim=*/true)).mean();
    normalizer = current_gradient_accumulation_steps;
    loss = loss / normalizer;
  }

  if (c.entropy_coef != 0.0) {
    auto effective_mask = entropy_mask.defined() ? mask * entropy_mask : mask;
    torch::Tensor entropy_loss;
    if (lt == "cispo" || lt == "dapo" || lt == "vespo")
      entropy_loss = (entropies * effective_mask).sum() / normalizer;
    else
      entropy_loss = (entropies * effective_mask).sum() / effective_mask.sum().clamp_min(1.0) / normalizer;
    loss = loss - c.entropy_coef * entropy_loss;
  }
  return loss;
}

/// TRL trl/experimental/gmpo/gmpo_trainer.py @ f2cd577, GMPOTrainer._compute_loss, training mode, GA = 1.
inline torch::Tensor trl_gmpo_loss(const TrlInputs& in, const TrlConfig& c) {
  const auto& mask = in.completion_mask;
  const auto& per_token_logps = in.per_token_logps;
  torch::Tensor entropy_mask;
  if (c.top_entropy_quantile < 1.0)
    entropy_mask = trl_get_high_entropy_mask(in.entropies, mask, 1 - c.top_entropy_quantile);
  const auto& advantages = in.advantages;  // (B,)
  auto old_per_token_logps =
      in.old_per_token_logps.defined() ? in.old_per_token_logps : per_token_logps.detach();
  auto log_ratio = per_token_logps - old_per_token_logps;
  auto clamped_log_ratio = torch::clamp(log_ratio, -c.epsilon_low, c.epsilon_high);
  auto advantages_col = advantages.unsqueeze(1);
  auto clipped_log_ratio = torch::where(advantages_col > 0, torch::minimum(log_ratio, clamped_log_ratio),
                                        torch::maximum(log_ratio, clamped_log_ratio));
  auto seq_mask = entropy_mask.defined() ? mask * entropy_mask : mask;
  auto log_importance_weights = (clipped_log_ratio * seq_mask).sum(-1) / seq_mask.sum(-1).clamp_min(1.0);
  auto coef = torch::exp(log_importance_weights);
  auto per_sequence_loss = -coef * advantages;
  if (c.beta != 0.0) {
    const auto& ref = in.ref_per_token_logps;
    auto per_token_kl = torch::exp(ref - per_token_logps) - (ref - per_token_logps) - 1;
    auto seq_kl = (per_token_kl * mask).sum(-1) / mask.sum(-1).clamp_min(1.0);
    per_sequence_loss = per_sequence_loss + c.beta * seq_kl;
  }
  auto loss = per_sequence_loss.mean();
  return loss / 1.0;
}

/// TRL trl/utils.py @ f2cd577 nanstd (Bessel-corrected, NaN-aware), over all elements or along dim.
inline torch::Tensor trl_nanstd(const torch::Tensor& tensor, std::optional<int64_t> dim = std::nullopt) {
  torch::Tensor mean, variance, count;
  if (dim) {
    mean = torch::nanmean(tensor, *dim, /*keepdim=*/true);
    variance = torch::nanmean((tensor - mean).pow(2), *dim, /*keepdim=*/true);
    count = torch::sum(~torch::isnan(tensor), *dim, /*keepdim=*/true).to(torch::kFloat64);
  } else {
    mean = torch::nanmean(tensor);
    variance = torch::nanmean((tensor - mean).pow(2));
    count = torch::sum(~torch::isnan(tensor)).to(torch::kFloat64);
  }
  auto correction = count / (count - 1);
  correction = torch::where(count > 1, correction, torch::full_like(correction, std::nan("")));
  variance = variance * correction;
  auto std = torch::sqrt(variance);
  return dim ? std.squeeze(*dim) : std.squeeze();
}

/// TRL trl/trainer/grpo_trainer.py @ f2cd577, _generate_and_score_completions, advantages (lines 2680-2730), one
/// process. rewards_per_func: (B, K) with NaN = None; weights: (K,). scale_rewards "group" | "batch" | "none";
/// aggregation "sum_then_normalize" | "normalize_then_sum".
inline torch::Tensor trl_advantages(const torch::Tensor& rewards_per_func, const torch::Tensor& reward_weights,
                                    int64_t num_generations, const std::string& scale_rewards,
                                    const std::string& multi_objective_aggregation) {
  auto unscorable_mask = torch::isnan(rewards_per_func).all(1);
  torch::Tensor advantages, rewards, std_rewards;
  const int64_t K = rewards_per_func.size(1);
  if (multi_objective_aggregation == "sum_then_normalize") {
    rewards = (rewards_per_func * reward_weights.unsqueeze(0)).nansum(1);
    rewards.index_put_({unscorable_mask}, std::nan(""));
    auto mean_grouped_rewards = torch::nanmean(rewards.view({-1, num_generations}), 1);
    mean_grouped_rewards = mean_grouped_rewards.repeat_interleave(num_generations, 0);
    if (scale_rewards == "group" || scale_rewards == "none") {
      if (num_generations > 1) {
        std_rewards = trl_nanstd(rewards.view({-1, num_generations}), 1);
        std_rewards = std_rewards.repeat_interleave(num_generations, 0);
      } else {
        std_rewards = torch::zeros_like(rewards);
      }
    } else if (scale_rewards == "batch") {
      std_rewards = rewards.numel() > 1 ? trl_nanstd(rewards).expand_as(rewards) : torch::zeros_like(rewards);
    }
    advantages = rewards - mean_grouped_rewards;
    if (scale_rewards != "none") advantages = advantages / (std_rewards + 1e-4);
  } else {
    auto grouped = rewards_per_func.view({-1, num_generations, K});
    auto mean_k = torch::nanmean(grouped, 1, /*keepdim=*/true);
    torch::Tensor std_k;
    if (num_generations > 1) {
      std_k = trl_nanstd(grouped, 1).unsqueeze(1);  // nanstd(grouped, dim=1, keepdim=True)
    } else {
      std_k = torch::zeros_like(mean_k);
    }
    auto reward_k = (grouped - mean_k) / (std_k + 1e-4);
    reward_k = reward_k.view({-1, K});
    rewards = (reward_k * reward_weights.unsqueeze(0)).nansum(1);
    rewards.index_put_({unscorable_mask}, std::nan(""));
    std_rewards = rewards.numel() > 1 ? trl_nanstd(rewards).expand_as(rewards) : torch::zeros_like(rewards);
    advantages = (rewards - torch::nanmean(rewards)) / (std_rewards + 1e-4);
  }
  return torch::nan_to_num(advantages, 0.0);
}

// ------------------------------------------------------------------------------------------------------------------
// verl
// ------------------------------------------------------------------------------------------------------------------

/// verl verl/utils/torch_functional.py @ b178a3c masked_sum.
inline torch::Tensor verl_masked_sum(const torch::Tensor& values, const torch::Tensor& mask,
                                     std::optional<int64_t> axis = std::nullopt) {
  auto valid_values = torch::where(mask.to(torch::kBool), values, torch::zeros({}, values.options()));
  auto prod = valid_values * mask;
  return axis ? prod.sum(*axis) : prod.sum();
}

/// verl verl/utils/torch_functional.py @ b178a3c masked_mean (denominator mask.sum() + 1e-8).
inline torch::Tensor verl_masked_mean(const torch::Tensor& values, const torch::Tensor& mask,
                                      std::optional<int64_t> axis = std::nullopt) {
  auto s = verl_masked_sum(values, mask, axis);
  return s / ((axis ? mask.sum(*axis) : mask.sum()) + 1e-8);
}

/// verl verl/utils/torch_functional.py @ b178a3c masked_var (unbiased).
inline torch::Tensor verl_masked_var(const torch::Tensor& values, const torch::Tensor& mask) {
  auto mean = verl_masked_mean(values, mask);
  auto centered_values = values - mean;
  auto variance = verl_masked_mean(centered_values.pow(2), mask);
  auto mask_sum = mask.sum();
  if (mask_sum.item<double>() == 0) throw std::invalid_argument("At least one element in the mask has to be 1.");
  if (mask_sum.item<double>() == 1) throw std::invalid_argument("The sum of the mask is one");
  auto bessel_correction = mask_sum / (mask_sum - 1);
  return variance * bessel_correction;
}

/// verl verl/utils/torch_functional.py @ b178a3c masked_whiten (shift_mean=True).
inline torch::Tensor verl_masked_whiten(const torch::Tensor& values, const torch::Tensor& mask) {
  auto mean = verl_masked_mean(values, mask);
  auto var = verl_masked_var(values, mask);
  return (values - mean) * torch::rsqrt(var + 1e-8);
}

/// verl verl/trainer/ppo/core_algos.py @ b178a3c agg_loss, dp_size = 1, batch_num_tokens and global_batch_size None.
/// loss_agg_mode as verl spells it ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean",
/// "seq-mean-token-sum-norm").
inline torch::Tensor verl_agg_loss(const torch::Tensor& loss_mat, const torch::Tensor& loss_mask,
                                   const std::string& loss_agg_mode,
                                   std::optional<double> loss_scale_factor = std::nullopt) {
  const double dp_size = 1.0;
  if (loss_agg_mode == "token-mean") {
    auto batch_num_tokens = loss_mask.sum();
    return verl_masked_sum(loss_mat, loss_mask) / batch_num_tokens * dp_size;
  }
  if (loss_agg_mode == "seq-mean-token-sum") {
    auto seq_losses = torch::sum(loss_mat * loss_mask, -1);
    auto seq_mask = (torch::sum(loss_mask, -1) > 0).to(torch::kFloat64);
    auto global_batch_size = seq_mask.sum();
    return verl_masked_sum(seq_losses, seq_mask) / global_batch_size * dp_size;
  }
  if (loss_agg_mode == "seq-mean-token-mean") {
    auto seq_mask = torch::sum(loss_mask, -1);
    auto seq_losses = torch::sum(loss_mat * loss_mask, -1) / (seq_mask + 1e-8);
    seq_mask = (seq_mask > 0).to(torch::kFloat64);
    auto global_batch_size = seq_mask.sum();
    return verl_masked_sum(seq_losses, seq_mask) / global_batch_size * dp_size;
  }
  if (loss_agg_mode == "seq-mean-token-sum-norm") {
    auto seq_losses = torch::sum(loss_mat * loss_mask, -1);
    const double factor = loss_scale_factor ? *loss_scale_factor : static_cast<double>(loss_mask.size(-1));
    return torch::sum(seq_losses) / factor;
  }
  throw std::invalid_argument("Invalid loss_agg_mode: " + loss_agg_mode);
}

/// The ActorConfig fields the verl policy losses read.
struct VerlActorConfig {
  double clip_ratio_low = 0.2, clip_ratio_high = 0.2, clip_ratio_c = 3.0;
  double tau_pos = 1.0, tau_neg = 1.05;
  double clip_cov_ratio = 0.0002, clip_cov_lb = 1.0, clip_cov_ub = 5.0;
  double kl_cov_ratio = 0.0002, ppo_kl_coef = 1.0;
};

/// verl core_algos.py @ b178a3c compute_policy_loss_vanilla: the loss matrix pg_losses (times rollout_is_weights),
/// before agg_loss.
inline torch::Tensor verl_vanilla_pg_losses(const torch::Tensor& old_log_prob, const torch::Tensor& log_prob,
                                            const torch::Tensor& advantages, const VerlActorConfig& config,
                                            const torch::Tensor& rollout_is_weights = {}) {
  auto negative_approx_kl = log_prob - old_log_prob;
  negative_approx_kl = torch::clamp(negative_approx_kl, -20.0, 20.0);
  auto ratio = torch::exp(negative_approx_kl);
  auto pg_losses1 = -advantages * ratio;
  auto pg_losses2 = -advantages * torch::clamp(ratio, 1 - config.clip_ratio_low, 1 + config.clip_ratio_high);
  auto clip_pg_losses1 = torch::maximum(pg_losses1, pg_losses2);
  auto pg_losses3 = -advantages * config.clip_ratio_c;
  auto clip_pg_losses2 = torch::min(pg_losses3, clip_pg_losses1);
  auto pg_losses = torch::where(advantages < 0, clip_pg_losses2, clip_pg_losses1);
  if (rollout_is_weights.defined()) pg_losses = pg_losses * rollout_is_weights;
  return pg_losses;
}

/// verl core_algos.py @ b178a3c compute_policy_loss_gspo: pg_losses (verl then aggregates seq-mean-token-mean).
inline torch::Tensor verl_gspo_pg_losses(const torch::Tensor& old_log_prob, const torch::Tensor& log_prob,
                                         const torch::Tensor& advantages, const torch::Tensor& response_mask,
                                         const VerlActorConfig& config, const torch::Tensor& rollout_is_weights = {}) {
  auto negative_approx_kl = log_prob - old_log_prob;
  auto seq_lengths = torch::sum(response_mask, -1).clamp_min(1);
  auto negative_approx_kl_seq = torch::sum(negative_approx_kl * response_mask, -1) / seq_lengths;
  auto log_seq_importance_ratio = log_prob - log_prob.detach() + negative_approx_kl_seq.detach().unsqueeze(-1);
  log_seq_importance_ratio = torch::clamp(log_seq_importance_ratio, c10::nullopt, 10.0);
  auto seq_importance_ratio = torch::exp(log_seq_importance_ratio);
  auto pg_losses1 = -advantages * seq_importance_ratio;
  auto pg_losses2 =
      -advantages * torch::clamp(seq_importance_ratio, 1 - config.clip_ratio_low, 1 + config.clip_ratio_high);
  auto pg_losses = torch::maximum(pg_losses1, pg_losses2);
  if (rollout_is_weights.defined()) pg_losses = pg_losses * rollout_is_weights;
  return pg_losses;
}

/// verl core_algos.py @ b178a3c compute_policy_loss_sapo: pg_losses (verl then aggregates seq-mean-token-mean).
inline torch::Tensor verl_sapo_pg_losses(const torch::Tensor& old_log_prob, const torch::Tensor& log_prob,
                                         const torch::Tensor& advantages, const VerlActorConfig& config,
                                         const torch::Tensor& rollout_is_weights = {}) {
  auto tau_pos = torch::full({}, config.tau_pos, kF64);
  auto tau_neg = torch::full({}, config.tau_neg, kF64);
  auto gate_function = [](const torch::Tensor& x, const torch::Tensor& tau) {
    return torch::sigmoid(tau * (x - 1.0)) * (4.0 / tau);
  };
  auto negative_approx_kl = log_prob - old_log_prob;
  negative_approx_kl = torch::clamp(negative_approx_kl, -20.0, 20.0);
  auto ratio = torch::exp(negative_approx_kl);
  auto taus = torch::where(advantages > 0, tau_pos, tau_neg);
  auto gates = gate_function(ratio, taus);
  auto pg_losses = -gates * advantages;
  if (rollout_is_weights.defined()) pg_losses = pg_losses * rollout_is_weights;
  return pg_losses;
}

/// verl core_algos.py @ b178a3c compute_policy_loss_gpg: pg_losses before agg_loss.
inline torch::Tensor verl_gpg_pg_losses(const torch::Tensor& log_prob, const torch::Tensor& advantages,
                                        const torch::Tensor& rollout_is_weights = {}) {
  auto pg_losses = -log_prob * advantages;
  if (rollout_is_weights.defined()) pg_losses = pg_losses * rollout_is_weights;
  return pg_losses;
}

/// verl core_algos.py @ b178a3c compute_policy_loss_clip_cov: pg_losses before agg_loss. The random pick draws from
/// the default generator (torch.randperm), as verl does.
inline torch::Tensor verl_clip_cov_pg_losses(const torch::Tensor& old_log_prob, const torch::Tensor& log_prob,
                                             const torch::Tensor& advantages, const torch::Tensor& response_mask,
                                             const VerlActorConfig& config,
                                             const torch::Tensor& rollout_is_weights = {}) {
  auto negative_approx_kl = log_prob - old_log_prob;
  auto ratio = torch::exp(negative_approx_kl);
  auto pg_losses1 = -advantages * ratio;
  auto corr = torch::ones_like(advantages);
  auto pg_losses2 = -advantages * torch::clamp(ratio, 1 - config.clip_ratio_low, 1 + config.clip_ratio_high);
  auto clip_by_origin = (pg_losses2 > pg_losses1) & (response_mask > 0);
  auto cov_all = ((advantages - verl_masked_mean(advantages, response_mask)) *
                  (log_prob - verl_masked_mean(log_prob.detach(), response_mask)))
                     .detach()
                     .clone();
  cov_all.masked_fill_(response_mask == 0, -kInf);
  cov_all.masked_fill_(clip_by_origin, -kInf);
  const int64_t clip_num = std::max<int64_t>(
      static_cast<int64_t>(config.clip_cov_ratio * response_mask.sum().item<double>()), 1);
  auto top_k_idx = (cov_all < config.clip_cov_ub) & (cov_all > config.clip_cov_lb) & (response_mask > 0);
  top_k_idx = torch::nonzero(top_k_idx);
  if (top_k_idx.size(0) > 0) {
    auto perm = torch::randperm(top_k_idx.size(0));
    top_k_idx = top_k_idx.index_select(0, perm.slice(0, 0, std::min<int64_t>(clip_num, top_k_idx.size(0))));
  } else {
    top_k_idx = torch::empty({0, 2}, torch::TensorOptions().dtype(torch::kLong));
  }
  corr.index_put_({top_k_idx.select(1, 0), top_k_idx.select(1, 1)}, 0.0);
  auto pg_losses = torch::maximum(pg_losses1, pg_losses2) * corr;
  if (rollout_is_weights.defined()) pg_losses = pg_losses * rollout_is_weights;
  return pg_losses;
}

/// verl core_algos.py @ b178a3c compute_policy_loss_kl_cov: pg_losses before agg_loss.
inline torch::Tensor verl_kl_cov_pg_losses(const torch::Tensor& old_log_prob, const torch::Tensor& log_prob,
                                           const torch::Tensor& advantages, const torch::Tensor& response_mask,
                                           const VerlActorConfig& config,
                                           const torch::Tensor& rollout_is_weights = {}) {
  auto negative_approx_kl = log_prob - old_log_prob;
  auto abs_kl = negative_approx_kl.abs();
  auto ratio = torch::exp(negative_approx_kl);
  auto pg_losses1 = -advantages * ratio;
  auto pg_losses_kl = -advantages * ratio + config.ppo_kl_coef * abs_kl;
  auto pg_losses = pg_losses1;
  auto all_valid = response_mask > 0;
  auto all_valid_idx = torch::nonzero(all_valid.reshape({-1})).reshape({-1});
  auto all_valid_adv = advantages.masked_select(all_valid).detach().reshape({-1});
  auto all_valid_logp = log_prob.masked_select(all_valid).detach().reshape({-1});
  const double k = std::min(config.kl_cov_ratio, static_cast<double>(all_valid_adv.size(0)));
  if (k != 0) {
    auto cov_lst_all = (all_valid_adv - all_valid_adv.mean()) * (all_valid_logp - all_valid_logp.mean());
    const int64_t k_percent_nums =
        std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(cov_lst_all.size(0)) * config.kl_cov_ratio));
    auto large_cov_idxs = std::get<1>(torch::topk(cov_lst_all, k_percent_nums, -1, /*largest=*/true));
    if (large_cov_idxs.size(0) != 0) {
      large_cov_idxs = all_valid_idx.index_select(0, large_cov_idxs);
      const int64_t T = advantages.size(1);
      auto rows = large_cov_idxs.div(T, "floor"), cols = large_cov_idxs.remainder(T);
      // pg_losses[rows, cols] = pg_losses_kl[rows, cols] (an in-place index_put on the shared tensor)
      pg_losses = pg_losses.index_put({rows, cols}, pg_losses_kl.index({rows, cols}));
    }
  }
  if (rollout_is_weights.defined()) pg_losses = pg_losses * rollout_is_weights;
  return pg_losses;
}

/// verl core_algos.py @ b178a3c compute_policy_loss_geo_mean: the scalar pg_loss (torch.mean over all rows).
inline torch::Tensor verl_geo_mean_loss(const torch::Tensor& old_log_prob, const torch::Tensor& log_prob,
                                        const torch::Tensor& advantages, const torch::Tensor& response_mask,
                                        const VerlActorConfig& config, const torch::Tensor& rollout_is_weights = {}) {
  const double cliprange_low = config.clip_ratio_low, cliprange_high = config.clip_ratio_high;
  auto negative_approx_kl = log_prob - old_log_prob;
  auto sgn_advantage = torch::sign(advantages);
  auto negative_approx_kl_clamp = torch::clamp(negative_approx_kl, -cliprange_low, cliprange_high);
  auto negative_approx_kl_min =
      torch::min(sgn_advantage * negative_approx_kl, sgn_advantage * negative_approx_kl_clamp);
  negative_approx_kl_min = sgn_advantage * negative_approx_kl_min;
  auto response_mask_sum = response_mask.sum(-1);
  auto ratio = torch::exp((negative_approx_kl_min * response_mask).sum(-1) / (response_mask_sum + 1e-8));
  auto advantage = (advantages * response_mask).sum(-1) / (response_mask_sum + 1e-8);
  auto pg_losses = -advantage * ratio;
  if (rollout_is_weights.defined()) {
    auto seq_is_weights =
        torch::exp((torch::log(rollout_is_weights + 1e-10) * response_mask).sum(-1) / (response_mask_sum + 1e-8));
    pg_losses = pg_losses * seq_is_weights;
  }
  return torch::mean(pg_losses);
}

/// verl core_algos.py @ b178a3c compute_policy_loss_cispo: pg_losses before agg_loss.
inline torch::Tensor verl_cispo_pg_losses(const torch::Tensor& old_log_prob, const torch::Tensor& log_prob,
                                          const torch::Tensor& advantages, const VerlActorConfig& config,
                                          const torch::Tensor& rollout_is_weights = {}) {
  auto negative_approx_kl = log_prob - old_log_prob;
  negative_approx_kl = torch::clamp(negative_approx_kl, -20.0, 20.0);
  auto ratio = torch::exp(negative_approx_kl);
  auto clipped_ratio = torch::clamp(ratio, 1 - config.clip_ratio_low, 1 + config.clip_ratio_high);
  auto clipped_ratio_sg = clipped_ratio.detach();
  auto pg_losses = -clipped_ratio_sg * advantages * log_prob;
  if (rollout_is_weights.defined()) pg_losses = pg_losses * rollout_is_weights;
  return pg_losses;
}

/// verl core_algos.py @ b178a3c kl_penalty_forward.
inline torch::Tensor verl_kl_penalty_forward(const torch::Tensor& logprob, const torch::Tensor& ref_logprob,
                                             const std::string& kl_penalty) {
  if (kl_penalty == "kl" || kl_penalty == "k1") return logprob - ref_logprob;
  if (kl_penalty == "abs") return (logprob - ref_logprob).abs();
  if (kl_penalty == "mse" || kl_penalty == "k2") return 0.5 * (logprob - ref_logprob).square();
  if (kl_penalty == "low_var_kl" || kl_penalty == "k3") {
    auto kl = ref_logprob - logprob;
    kl = torch::clamp(kl, -20, 20);
    auto ratio = torch::exp(kl);
    auto kld = (ratio - kl - 1).contiguous();
    return torch::clamp(kld, -10, 10);
  }
  throw std::invalid_argument("NotImplementedError: " + kl_penalty);
}

/// verl core_algos.py @ b178a3c kl_penalty (with the "+" straight-through suffix).
inline torch::Tensor verl_kl_penalty(const torch::Tensor& logprob, const torch::Tensor& ref_logprob,
                                     const std::string& kl_penalty) {
  const bool plus = !kl_penalty.empty() && kl_penalty.back() == '+';
  const std::string base = plus ? kl_penalty.substr(0, kl_penalty.size() - 1) : kl_penalty;
  // verl @ b178a3c calls kl_penalty_forward(logprob, ref_logprob, kl_penalty) with the suffixed name ("k3+"), which
  // kl_penalty_forward does not match: it raises NotImplementedError there (line 1853). The straight-through lines
  // below (1854-1865) are transcribed with the forward value of the base estimator, which is what the "+" forms are
  // documented to compute (the docstring of kl_penalty).
  auto forward_score = verl_kl_penalty_forward(logprob, ref_logprob, base);
  if (!plus || kl_penalty == "mse+" || kl_penalty == "k2+") return forward_score;
  auto backward_score = 0.5 * (logprob - ref_logprob).square();
  return backward_score - backward_score.detach() + forward_score.detach();
}

/// TRL trl/trainer/grpo_trainer.py @ f2cd577 _compute_loss per_token_kl (unclamped k3), line ~3040.
inline torch::Tensor trl_per_token_kl(const torch::Tensor& per_token_logps, const torch::Tensor& ref_per_token_logps) {
  return torch::exp(ref_per_token_logps - per_token_logps) - (ref_per_token_logps - per_token_logps) - 1;
}

// verl advantage estimators: scores (bs,) are the summed token-level rewards; index (bs,) the group ids. Each returns
// the per-sequence advantage (verl broadcasts it over response_mask; callers compare the rows).

/// verl core_algos.py @ b178a3c compute_grpo_outcome_advantage (norm_adv_by_std_in_grpo as given).
inline torch::Tensor verl_grpo_advantage(torch::Tensor scores, const std::vector<int64_t>& index, double epsilon,
                                         bool norm_adv_by_std_in_grpo) {
  scores = scores.clone();
  std::map<int64_t, std::vector<torch::Tensor>> id2score;
  std::map<int64_t, torch::Tensor> id2mean, id2std;
  const int64_t bsz = scores.size(0);
  for (int64_t i = 0; i < bsz; ++i) id2score[index[i]].push_back(scores[i].clone());
  for (auto& [idx, list] : id2score) {
    if (list.size() == 1) {
      id2mean[idx] = torch::tensor(0.0);
      id2std[idx] = torch::tensor(1.0);
    } else {
      auto scores_tensor = torch::stack(list);
      id2mean[idx] = torch::mean(scores_tensor);
      id2std[idx] = torch::std(scores_tensor);
    }
  }
  for (int64_t i = 0; i < bsz; ++i) {
    if (norm_adv_by_std_in_grpo)
      scores[i] = (scores[i] - id2mean[index[i]]) / (id2std[index[i]] + epsilon);
    else
      scores[i] = scores[i] - id2mean[index[i]];
  }
  return scores;
}

/// verl core_algos.py @ b178a3c compute_grpo_passk_outcome_advantage.
inline torch::Tensor verl_grpo_passk_advantage(const torch::Tensor& scores, const std::vector<int64_t>& index,
                                               double epsilon, bool norm_adv_by_std_in_grpo) {
  auto advantages = torch::zeros_like(scores);
  std::map<int64_t, std::vector<torch::Tensor>> id2scores;
  std::map<int64_t, std::vector<int64_t>> id2indices;
  for (int64_t i = 0; i < scores.size(0); ++i) {
    id2scores[index[i]].push_back(scores[i]);
    id2indices[index[i]].push_back(i);
  }
  for (auto& [idx, list] : id2scores) {
    auto rewards = torch::stack(list);
    if (rewards.numel() < 2) throw std::invalid_argument("Pass@k requires at least 2 samples per group.");
    auto [topk, topk_idx] = torch::topk(rewards, 2);
    auto r_max = topk[0], r_second_max = topk[1];
    const int64_t i_max = id2indices[idx][topk_idx[0].item<int64_t>()];
    auto advantage = r_max - r_second_max;
    if (norm_adv_by_std_in_grpo) advantage = advantage / (torch::std(rewards) + epsilon);
    advantages[i_max] = advantage;
  }
  return advantages;
}

/// verl core_algos.py @ b178a3c compute_reinforce_plus_plus_baseline_outcome_advantage: returns the (bs, T) matrix.
inline torch::Tensor verl_reinforce_pp_baseline_advantage(torch::Tensor scores, const torch::Tensor& response_mask,
                                                          const std::vector<int64_t>& index) {
  scores = scores.clone();
  const int64_t response_length = response_mask.size(-1);
  std::map<int64_t, std::vector<torch::Tensor>> id2score;
  std::map<int64_t, torch::Tensor> id2mean;
  const int64_t bsz = scores.size(0);
  for (int64_t i = 0; i < bsz; ++i) id2score[index[i]].push_back(scores[i].clone());
  for (auto& [idx, list] : id2score)
    id2mean[idx] = list.size() == 1 ? torch::tensor(0.0) : torch::mean(torch::stack(list));
  for (int64_t i = 0; i < bsz; ++i) scores[i] = scores[i] - id2mean[index[i]];
  scores = scores.unsqueeze(-1).tile({1, response_length}) * response_mask;
  return verl_masked_whiten(scores, response_mask) * response_mask;
}

/// verl core_algos.py @ b178a3c compute_rloo_outcome_advantage.
inline torch::Tensor verl_rloo_advantage(torch::Tensor scores, const std::vector<int64_t>& index) {
  scores = scores.clone();
  std::map<int64_t, std::vector<torch::Tensor>> id2score;
  std::map<int64_t, torch::Tensor> id2mean;
  const int64_t bsz = scores.size(0);
  for (int64_t i = 0; i < bsz; ++i) id2score[index[i]].push_back(scores[i].clone());
  for (auto& [idx, list] : id2score)
    id2mean[idx] = list.size() == 1 ? torch::tensor(0.0) : torch::mean(torch::stack(list));
  for (int64_t i = 0; i < bsz; ++i) {
    const double response_num = static_cast<double>(id2score[index[i]].size());
    if (response_num > 1)
      scores[i] = scores[i] * response_num / (response_num - 1) - id2mean[index[i]] * response_num / (response_num - 1);
  }
  return scores;
}

/// verl core_algos.py @ b178a3c compute_opo_outcome_advantage (response_length = response_mask.sum(-1)).
inline torch::Tensor verl_opo_advantage(torch::Tensor scores, const torch::Tensor& response_length,
                                        const std::vector<int64_t>& index) {
  scores = scores.clone();
  std::map<int64_t, std::vector<torch::Tensor>> id2score, id2len;
  std::map<int64_t, torch::Tensor> id2bsl;
  const int64_t bsz = scores.size(0);
  for (int64_t i = 0; i < bsz; ++i) {
    id2score[index[i]].push_back(scores[i].clone());
    id2len[index[i]].push_back(response_length[i]);
  }
  for (auto& [idx, list] : id2score) {
    if (list.size() == 1) {
      id2bsl[idx] = torch::tensor(0.0);
    } else {
      auto score_tensor = torch::stack(list);
      auto len_tensor = torch::stack(id2len[idx]);
      id2bsl[idx] = (len_tensor * score_tensor).sum() / len_tensor.sum();
    }
  }
  for (int64_t i = 0; i < bsz; ++i) scores[i] = scores[i] - id2bsl[index[i]];
  return scores;
}

/// verl core_algos.py @ b178a3c compute_gpg_outcome_advantage (f_norm = 1).
inline torch::Tensor verl_gpg_advantage(torch::Tensor scores, const std::vector<int64_t>& index) {
  scores = scores.clone();
  const double f_norm = 1.0;
  std::map<int64_t, std::vector<torch::Tensor>> id2score;
  std::map<int64_t, torch::Tensor> id2mean;
  const int64_t bsz = scores.size(0);
  auto m = torch::count_nonzero(scores);
  auto alpha = static_cast<double>(bsz) / m.clamp_min(1).to(torch::kFloat64);
  for (int64_t i = 0; i < bsz; ++i) id2score[index[i]].push_back(scores[i].clone());
  for (auto& [idx, list] : id2score)
    id2mean[idx] = list.size() == 1 ? torch::tensor(0.0) : torch::mean(torch::stack(list));
  for (int64_t i = 0; i < bsz; ++i) scores[i] = alpha * (scores[i] - id2mean[index[i]]) / f_norm;
  return scores;
}


// verl rollout correction (verl/trainer/ppo/rollout_corr_helper.py @ b178a3c): rejection sampling (rollout_rs) and
// truncated importance weights (rollout_is). log_ratio = old_log_prob − rollout_log_prob (line 779).

/// verl rollout_corr_helper.py @ b178a3c SAFETY_BOUND (line 75).
inline constexpr double kVerlSafetyBound = 20.0;

/// Python's float(str) for the forms a threshold takes: surrounding whitespace stripped; decimal digits with an
/// optional sign, point and exponent; '_' only between digits; "inf"/"infinity"/"nan" in any case. Throws
/// std::invalid_argument (Python's ValueError) otherwise.
inline double python_float(std::string text) {
  const auto is_space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; };
  while (!text.empty() && is_space(text.front())) text.erase(text.begin());
  while (!text.empty() && is_space(text.back())) text.pop_back();
  const std::string original = text;
  const auto fail = [&]() -> double {
    throw std::invalid_argument("could not convert string to float: '" + original + "'");
  };
  if (text.empty()) return fail();
  std::string lower;
  for (char c : text) lower.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  std::string body = lower;
  double sign = 1.0;
  if (!body.empty() && (body[0] == '+' || body[0] == '-')) {
    sign = body[0] == '-' ? -1.0 : 1.0;
    body.erase(body.begin());
  }
  if (body == "inf" || body == "infinity") return sign * kInf;
  if (body == "nan") return std::numeric_limits<double>::quiet_NaN();
  std::string digits;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '_') {
      const bool between = i > 0 && i + 1 < text.size() && std::isdigit(static_cast<unsigned char>(text[i - 1])) &&
                           std::isdigit(static_cast<unsigned char>(text[i + 1]));
      if (!between) return fail();
      continue;
    }
    digits.push_back(text[i]);
  }
  // Python's grammar: [sign] (digits [. [digits]] | . digits) [(e|E) [sign] digits].
  size_t i = 0;
  if (i < digits.size() && (digits[i] == '+' || digits[i] == '-')) ++i;
  size_t int_digits = 0, frac_digits = 0;
  while (i < digits.size() && std::isdigit(static_cast<unsigned char>(digits[i]))) ++i, ++int_digits;
  if (i < digits.size() && digits[i] == '.') {
    ++i;
    while (i < digits.size() && std::isdigit(static_cast<unsigned char>(digits[i]))) ++i, ++frac_digits;
  }
  if (int_digits + frac_digits == 0) return fail();
  if (i < digits.size() && (digits[i] == 'e' || digits[i] == 'E')) {
    ++i;
    if (i < digits.size() && (digits[i] == '+' || digits[i] == '-')) ++i;
    size_t exp_digits = 0;
    while (i < digits.size() && std::isdigit(static_cast<unsigned char>(digits[i]))) ++i, ++exp_digits;
    if (exp_digits == 0) return fail();
  }
  if (i != digits.size()) return fail();
  return std::strtod(digits.c_str(), nullptr);  // correctly rounded, as Python's float()
}

/// Python's str.strip() (whitespace) of one part.
inline std::string python_strip(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

/// [part.strip() for part in text.split(",") if part.strip()].
inline std::vector<std::string> python_comma_parts(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string part = python_strip(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (!part.empty()) out.push_back(part);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

/// verl rollout_corr_helper.py @ b178a3c SUPPORTED_ROLLOUT_RS_OPTIONS (lines 77-89).
inline const std::vector<std::string>& verl_supported_rollout_rs_options() {
  static const std::vector<std::string> options{"token_k1",   "token_k2",    "token_k3",    "seq_sum_k1",
                                                "seq_sum_k2", "seq_sum_k3",  "seq_mean_k1", "seq_mean_k2",
                                                "seq_mean_k3", "seq_max_k2", "seq_max_k3"};
  return options;
}

/// One entry of _parse_rollout_rs_thresholds' result (lower None = nullopt).
struct VerlRsThreshold {
  std::string option;
  std::optional<double> lower;
  double upper = 0.0;
};

/// verl rollout_corr_helper.py @ b178a3c compute_rollout_rejection_mask lines 198-217: the rollout_rs string to the
/// deduplicated option list (first occurrence order). Throws std::invalid_argument (ValueError).
inline std::vector<std::string> verl_rollout_rs_options(const std::string& rollout_rs) {
  const auto option_modes = python_comma_parts(rollout_rs);
  if (option_modes.empty()) throw std::invalid_argument("rollout_rs must contain at least one valid option.");
  std::vector<std::string> normalized_options;
  for (const auto& opt : option_modes) {
    const auto& supported = verl_supported_rollout_rs_options();
    if (std::find(supported.begin(), supported.end(), opt) == supported.end())
      throw std::invalid_argument("Invalid rollout_rs option: " + opt + ".");
    if (std::find(normalized_options.begin(), normalized_options.end(), opt) == normalized_options.end())
      normalized_options.push_back(opt);
  }
  return normalized_options;
}

/// verl rollout_corr_helper.py @ b178a3c _parse_rollout_rs_thresholds (lines 93-153), threshold_spec a str. Python's
/// ZeroDivisionError (k1 single "0", line 125) and ValueErrors are std::invalid_argument.
inline std::vector<VerlRsThreshold> verl_parse_rollout_rs_thresholds(const std::vector<std::string>& options,
                                                                     const std::string& threshold_spec) {
  auto raw_specs = python_comma_parts(threshold_spec);
  if (raw_specs.empty()) throw std::invalid_argument("rollout_rs_threshold must contain at least one threshold value.");
  if (raw_specs.size() != 1 && raw_specs.size() != options.size())
    throw std::invalid_argument("rollout_rs_threshold expects either one threshold shared by all options or exactly " +
                                std::to_string(options.size()) + " thresholds");
  if (raw_specs.size() == 1 && options.size() > 1) raw_specs.assign(options.size(), raw_specs[0]);
  std::vector<VerlRsThreshold> thresholds;
  for (size_t i = 0; i < options.size(); ++i) {  // zip(options, raw_specs)
    const auto& option = options[i];
    const auto& spec = raw_specs[i];
    const bool k1 = option.size() >= 2 && option.compare(option.size() - 2, 2, "k1") == 0;
    if (k1) {
      std::string lower_str, upper_str;
      double lower = 0.0, upper = 0.0;
      const size_t us = spec.find('_');
      if (us != std::string::npos) {
        lower_str = spec.substr(0, us), upper_str = spec.substr(us + 1);
        lower = python_float(lower_str);
        upper = python_float(upper_str);
      } else {
        upper_str = spec;
        const double u = python_float(upper_str);  // float(upper_str) outside the try (line 125)
        if (u == 0.0) throw std::invalid_argument("ZeroDivisionError: float division by zero");
        lower = 1.0 / u;  // float(str(1.0 / u)) == 1.0 / u (repr round-trips)
        upper = u;
      }
      if (lower <= 0 || upper <= 0)
        throw std::invalid_argument("Thresholds for option '" + option + "' must be positive, got " + spec + ".");
      thresholds.push_back({option, lower, upper});
    } else {
      if (spec.find('_') != std::string::npos)
        throw std::invalid_argument("rollout_rs_threshold for option '" + option +
                                    "' must provide a single upper bound without '_'. Received '" + spec + "'.");
      const double upper = python_float(spec);
      if (upper <= 0)
        throw std::invalid_argument("Threshold for option '" + option + "' must be positive, got " + spec + ".");
      thresholds.push_back({option, std::nullopt, upper});
    }
  }
  return thresholds;
}

/// verl rollout_corr_helper.py @ b178a3c compute_rollout_rejection_mask (lines 156-372): modified_response_mask
/// (response_mask's dtype). log_ratio = old_log_prob − rollout_log_prob; metrics are not computed (they do not feed
/// the mask).
inline torch::Tensor verl_compute_rollout_rejection_mask(const torch::Tensor& log_ratio,
                                                         const torch::Tensor& response_mask,
                                                         const std::string& rollout_rs,
                                                         const std::string& rollout_rs_threshold) {
  if (log_ratio.size(0) == 0) return response_mask;
  const auto normalized_options = verl_rollout_rs_options(rollout_rs);
  const auto threshold_specs = verl_parse_rollout_rs_thresholds(normalized_options, rollout_rs_threshold);

  auto log_ratio_safe = torch::clamp(log_ratio, -kVerlSafetyBound, kVerlSafetyBound);
  auto token_k1 = -log_ratio_safe;
  auto token_k2 = 0.5 * log_ratio_safe.pow(2);
  auto token_k3 = torch::exp(log_ratio_safe) - 1.0 - log_ratio_safe;

  auto response_mask_bool = response_mask.to(torch::kBool);
  auto combined_mask = torch::ones_like(response_mask, log_ratio.options());

  const auto sequence_sum = [&](const torch::Tensor& v) { return verl_masked_sum(v, response_mask, -1); };
  const auto sequence_mean = [&](const torch::Tensor& v) { return verl_masked_mean(v, response_mask, -1); };
  const auto sequence_max = [&](const torch::Tensor& v) {
    auto masked_values = v.masked_fill(~response_mask_bool, -kInf);
    auto max_values = std::get<0>(masked_values.max(-1));
    return torch::where(max_values == -kInf, torch::zeros_like(max_values), max_values);
  };
  const auto ends_with = [](const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  const auto starts_with = [](const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; };

  for (const auto& spec : threshold_specs) {
    const auto& option_name = spec.option;
    const bool is_k1_option = ends_with(option_name, "k1");
    const double upper_value = spec.upper;
    double lower_log = 0.0, upper_log = 0.0;
    if (is_k1_option) {
      lower_log = std::log(*spec.lower);  // math.log
      upper_log = std::log(spec.upper);
    }
    torch::Tensor token_keep_bool;
    if (option_name == "token_k1") {
      token_keep_bool = (token_k1 >= lower_log) & (token_k1 <= upper_log);
    } else if (option_name == "token_k2") {
      token_keep_bool = token_k2 <= upper_value;
    } else if (option_name == "token_k3") {
      token_keep_bool = token_k3 <= upper_value;
    } else {
      torch::Tensor seq_stat, seq_keep_bool_direct;
      std::function<torch::Tensor(const torch::Tensor&)> reduce;
      if (starts_with(option_name, "seq_sum")) reduce = sequence_sum;
      else if (starts_with(option_name, "seq_mean")) reduce = sequence_mean;
      else if (starts_with(option_name, "seq_max")) reduce = sequence_max;
      else throw std::invalid_argument("Unsupported rollout_rs option: " + option_name);
      if (ends_with(option_name, "k1")) {
        if (starts_with(option_name, "seq_max")) throw std::invalid_argument("Unsupported rollout_rs option");
        seq_stat = reduce(token_k1);
        seq_keep_bool_direct = (seq_stat >= lower_log) & (seq_stat <= upper_log);
      } else if (ends_with(option_name, "k2")) {
        seq_stat = reduce(token_k2);
        seq_keep_bool_direct = seq_stat <= upper_value;
      } else {
        seq_stat = reduce(token_k3);
        seq_keep_bool_direct = seq_stat <= upper_value;
      }
      token_keep_bool = seq_keep_bool_direct.unsqueeze(-1).expand_as(response_mask_bool);
    }
    auto token_keep_mask = token_keep_bool.to(log_ratio.scalar_type());
    combined_mask = combined_mask * token_keep_mask;
  }
  auto final_mask = combined_mask;
  return (response_mask * final_mask).to(response_mask.scalar_type());
}

/// verl rollout_corr_helper.py @ b178a3c compute_rollout_correction_weights (lines 481-598), torch.distributed not
/// initialised: rollout_is "token" | "sequence". Returns rollout_is_weights (0 at padding), detached.
inline torch::Tensor verl_compute_rollout_correction_weights(const torch::Tensor& log_ratio,
                                                             const torch::Tensor& response_mask,
                                                             const std::string& rollout_is,
                                                             double rollout_is_threshold,
                                                             bool rollout_is_batch_normalize) {
  if (rollout_is != "token" && rollout_is != "sequence") throw std::invalid_argument("Invalid rollout_is");
  if (rollout_is_threshold <= 0) throw std::invalid_argument("rollout_is_threshold must be positive");
  torch::Tensor rollout_is_weights;
  if (rollout_is == "token") {
    auto log_ratio_safe = torch::clamp(log_ratio, -kVerlSafetyBound, kVerlSafetyBound);
    rollout_is_weights = torch::exp(log_ratio_safe);
  } else {
    auto log_ratio_sum = verl_masked_sum(log_ratio, response_mask, -1).unsqueeze(-1);
    auto log_ratio_sum_safe = torch::clamp(log_ratio_sum, -kVerlSafetyBound, kVerlSafetyBound);
    rollout_is_weights = torch::exp(log_ratio_sum_safe).expand_as(log_ratio);
  }
  rollout_is_weights = rollout_is_weights * response_mask;
  rollout_is_weights = rollout_is_weights.clamp_max(rollout_is_threshold);
  rollout_is_weights = rollout_is_weights.detach();
  if (rollout_is_batch_normalize) {
    torch::Tensor weights_mean;
    if (rollout_is == "token") {
      weights_mean = verl_masked_mean(rollout_is_weights, response_mask);
    } else {
      auto seq_weights = verl_masked_mean(rollout_is_weights, response_mask, -1);
      auto seq_mask = (response_mask.sum(-1) > 0).to(rollout_is_weights.scalar_type());
      weights_mean = (seq_weights * seq_mask).sum() / seq_mask.sum().clamp_min(1e-8);
    }
    if (weights_mean.item<double>() > 1e-8) rollout_is_weights = rollout_is_weights / weights_mean;
  }
  return rollout_is_weights;
}

}  // namespace parity::ref
