// SPDX-License-Identifier: Apache-2.0
// Sampler/trainer importance-sampling correction: the completions were sampled by an inference engine (vLLM,
// our own sampler in another precision, ...) whose log-probs differ from the trainer's for the same weights, so
// the per-token loss is reweighted by ρ = π_trainer / π_sampler (truncated importance sampling, Yao et al. 2025;
// TRL vllm_importance_sampling_*, OpenRLHF tis/icepop/seq-mask-tis).
#pragma once

#include <torch/torch.h>

#include <cmath>
#include <grpo/core/enum_names.hpp>
#include <grpo/core/tensor_checks.hpp>
#include <limits>
#include <optional>
#include <string_view>

namespace grpo {

/// How ρ is formed and bounded. With Δ_t = (lp_trainer − lp_sampler)·m_t:
///   none                     weight 1
///   token_truncate           ρ_t = exp(Δ_t) clamped to [clip_min, clip_max]           (TRL; OpenRLHF "tis")
///   token_mask               ρ_t = exp(Δ_t), set to 0 outside [clip_min, clip_max]    (TRL; OpenRLHF "icepop")
///   sequence_truncate        ρ_i = exp(Σ_t Δ_t) clamped, for every token of row i     (TRL)
///   sequence_mask            ρ_i = exp(Σ_t Δ_t), row zeroed outside the bounds        (TRL, the default mode)
///   sequence_geometric_mask  ρ_t = exp(Δ_t) unclamped, row zeroed unless the geometric mean
///                            exp(Σ_t Δ_t / max(|o_i|, 1)) is within the bounds        (OpenRLHF "seq-mask-tis")
/// TRL's sequence modes use the SUM of the log-ratios (a product of token ratios), which is why their default
/// cap of 3 masks most long sequences that drifted at all (trl#4772); OpenRLHF's geometric mean does not scale
/// with length.
enum class SamplerCorrectionMode {
  none,
  token_truncate,
  token_mask,
  sequence_truncate,
  sequence_mask,
  sequence_geometric_mask,
};

namespace detail {
/// TRL's vllm_importance_sampling_mode names where TRL has the mode; OpenRLHF's names as aliases.
inline constexpr EnumNames<SamplerCorrectionMode, 9> kSamplerCorrectionModeNames{{
    {SamplerCorrectionMode::none, "none"},
    {SamplerCorrectionMode::token_truncate, "token_truncate"},
    {SamplerCorrectionMode::token_truncate, "tis"},
    {SamplerCorrectionMode::token_mask, "token_mask"},
    {SamplerCorrectionMode::token_mask, "icepop"},
    {SamplerCorrectionMode::sequence_truncate, "sequence_truncate"},
    {SamplerCorrectionMode::sequence_mask, "sequence_mask"},
    {SamplerCorrectionMode::sequence_geometric_mask, "sequence_geometric_mask"},
    {SamplerCorrectionMode::sequence_geometric_mask, "seq-mask-tis"},
}};
}  // namespace detail

/// TRL's vllm_importance_sampling_mode names, OpenRLHF's ("tis", "icepop", "seq-mask-tis") and "none".
GRPO_ENUM_NAMES(SamplerCorrectionMode, detail::kSamplerCorrectionModeNames, "sampler correction mode",
                parse_sampler_correction_mode);

/// True for the modes whose weight is one value per sequence (sequence_truncate, sequence_mask); false for the
/// token modes and for sequence_geometric_mask, whose kept rows carry per-token ratios.
inline bool sampler_correction_is_per_sequence(SamplerCorrectionMode mode) {
  return mode == SamplerCorrectionMode::sequence_truncate || mode == SamplerCorrectionMode::sequence_mask;
}

/// Options of sampler_correction_weights. Defaults are TRL's (cap 3, no lower bound); OpenRLHF uses
/// [0.5, 5.0] for all three of its modes.
struct SamplerCorrectionOptions {
  SamplerCorrectionMode mode = SamplerCorrectionMode::none;
  /// Lower bound (TRL vllm_importance_sampling_clip_min, default none; OpenRLHF 0.5). Must be in [0, clip_max).
  std::optional<double> clip_min;
  /// Upper bound (TRL vllm_importance_sampling_clip_max / cap, default 3.0; OpenRLHF 5.0). Must be > 0.
  double clip_max = 3.0;
  /// verl's SAFETY_BOUND (rollout_corr_helper.py): log ρ (the sum, at sequence level) is first clamped to
  /// ±log_ratio_bound, which verl sets to 20. Unset: TRL (no such clamp). Token and sequence modes only.
  std::optional<double> log_ratio_bound;
  /// verl rollout_is_batch_normalize: after truncation, divide the weights by their mean over this call's batch
  /// (token modes: over valid tokens; sequence modes: over non-empty sequences, one weight each), when that mean
  /// is > 1e-8. verl takes the mean over the whole (distributed) batch: pass the whole batch to reproduce it.
  bool batch_normalize = false;

  /// Throws ConfigError naming the option and value.
  void validate() const {
    GRPO_CHECK_CONFIG(clip_max > 0.0 && std::isfinite(clip_max),
                      "SamplerCorrectionOptions: clip_max must be finite and > 0, got {}", clip_max);
    GRPO_CHECK_CONFIG(!clip_min || (*clip_min >= 0.0 && *clip_min < clip_max),
                      "SamplerCorrectionOptions: clip_min must be in [0, clip_max = {}), got {}", clip_max,
                      clip_min.value_or(0.0));
    GRPO_CHECK_CONFIG(!log_ratio_bound || (*log_ratio_bound > 0.0 && std::isfinite(*log_ratio_bound)),
                      "SamplerCorrectionOptions: log_ratio_bound must be finite and > 0, got {}",
                      log_ratio_bound.value_or(0.0));
    GRPO_CHECK_CONFIG(!(log_ratio_bound || batch_normalize) || mode != SamplerCorrectionMode::sequence_geometric_mask,
                      "SamplerCorrectionOptions: log_ratio_bound and batch_normalize apply to the token and sequence "
                      "modes, not to {}",
                      "sequence_geometric_mask");
  }
};

/// verl's rollout correction (verl docs/algo/rollout_corr.md: rollout_is_threshold 2.0 by default;
/// verl/trainer/ppo/rollout_corr_helper.py: SAFETY_BOUND 20): truncated importance weights at token or sequence level.
inline SamplerCorrectionOptions verl_rollout_correction(SamplerCorrectionMode mode) {
  return {.mode = mode, .clip_min = std::nullopt, .clip_max = 2.0, .log_ratio_bound = 20.0, .batch_normalize = false};
}

/// Per-token weights ρ that multiply the per-token policy loss (not the KL term, as in TRL). trainer_log_probs:
/// the trainer's log-probs of the sampled tokens under the weights that sampled them (TRL and OpenRLHF use the
/// old log-probs; pass log_probs.detach() when there are none); sampler_log_probs: the sampler's; both [B, T]
/// floating; mask: [B, T], nonzero = valid. Returns [B, T] in trainer_log_probs' dtype, no gradient (ρ is a
/// constant weight). Formulas in SamplerCorrectionMode.
/// Bounds are applied to log ρ (log clip_min ≤ log ρ ≤ log clip_max) before exponentiating, so a log-ratio of any
/// size gives a finite weight in the truncate and TRL mask modes; equal to TRL's exp-then-clamp wherever that is
/// finite. sequence_geometric_mask keeps OpenRLHF's unclamped token ratios.
inline torch::Tensor sampler_correction_weights(const torch::Tensor& trainer_log_probs,
                                                const torch::Tensor& sampler_log_probs, const torch::Tensor& mask,
                                                const SamplerCorrectionOptions& options) {
  constexpr std::string_view kWhat = "sampler_correction_weights";
  options.validate();
  detail::check_dim(trainer_log_probs, 2, "trainer_log_probs", kWhat);
  detail::check_floating(trainer_log_probs, "trainer_log_probs", kWhat);
  detail::check_same_shape(trainer_log_probs, "trainer_log_probs", sampler_log_probs, "sampler_log_probs", kWhat);
  detail::check_same_shape(trainer_log_probs, "trainer_log_probs", mask, "mask", kWhat);
  torch::NoGradGuard no_grad;
  const auto mode = options.mode;
  if (mode == SamplerCorrectionMode::none) return torch::ones_like(trainer_log_probs);
  const torch::Tensor valid = mask != 0;
  const torch::Tensor delta =
      (trainer_log_probs.detach() - sampler_log_probs.detach().to(trainer_log_probs.scalar_type()))
          .masked_fill(~valid, 0.0);
  const double log_max = std::log(options.clip_max);
  const double log_min = options.clip_min && *options.clip_min > 0.0 ? std::log(*options.clip_min)
                                                                     : -std::numeric_limits<double>::infinity();
  const bool sequence =
      mode == SamplerCorrectionMode::sequence_truncate || mode == SamplerCorrectionMode::sequence_mask;
  torch::Tensor log_rho = sequence ? delta.sum(1, /*keepdim=*/true).expand_as(delta) : delta;
  if (options.log_ratio_bound) log_rho = log_rho.clamp(-*options.log_ratio_bound, *options.log_ratio_bound);
  // verl's batch normalisation: the mean weight over valid tokens, or over non-empty rows (one weight each).
  const auto normalized = [&](torch::Tensor w) {
    if (!options.batch_normalize) return w;
    const torch::Tensor m = valid.to(w.scalar_type());
    torch::Tensor mean;
    if (sequence) {
      const torch::Tensor rows = m.sum(1);
      const torch::Tensor row_weight = (w * m).sum(1) / (rows + 1e-8);
      const torch::Tensor non_empty = (rows > 0).to(w.scalar_type());
      mean = (row_weight * non_empty).sum() / non_empty.sum().clamp_min(1e-8);
    } else {
      mean = (w * m).sum() / (m.sum() + 1e-8);
    }
    const double value = mean.item<double>();
    return value > 1e-8 ? w / value : w;
  };
  switch (mode) {
    case SamplerCorrectionMode::token_truncate:
    case SamplerCorrectionMode::sequence_truncate:
      return normalized(torch::exp(log_rho.clamp(log_min, log_max)));
    case SamplerCorrectionMode::token_mask:
    case SamplerCorrectionMode::sequence_mask: {
      const torch::Tensor inside = (log_rho >= log_min) & (log_rho <= log_max);
      return normalized(torch::exp(log_rho.clamp_max(log_max)).masked_fill(~inside, 0.0));
    }
    case SamplerCorrectionMode::sequence_geometric_mask: {
      const torch::Tensor lengths = valid.sum(1, /*keepdim=*/true).to(delta.scalar_type()).clamp_min(1.0);
      const torch::Tensor log_geo = delta.sum(1, /*keepdim=*/true) / lengths;
      const torch::Tensor inside = (log_geo >= log_min) & (log_geo <= log_max);
      return torch::exp(delta).masked_fill(~inside, 0.0);
    }
    case SamplerCorrectionMode::none:
      break;
  }
  return torch::ones_like(trainer_log_probs);
}

}  // namespace grpo
