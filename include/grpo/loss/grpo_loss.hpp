// SPDX-License-Identifier: Apache-2.0
// GrpoLoss: the whole GRPO-family objective of one micro-batch, assembled from the components of grpo/loss and
// grpo/kl, with the loss and the metrics TRL and verl log.
//
//   per_token = policy_loss(lp, lp_old, A, m)            surrogate (PPO clip, CISPO, SAPO, VESPO, GSPO, ...)
//             · off_policy_mask · entropy_mask · ρ       optional masks and sampler IS weights (TRL order)
//             + β · KL(lp, lp_ref) [· w]                  KL term, optionally importance-weighted
//   loss      = aggregate(per_token, m, loss_type, N)    N passed explicitly (see aggregation.hpp)
//             − entropy_coef · aggregate(H · entropy_mask, m, loss_type, N)
// where m is the completion mask with truncated rows removed when mask_truncated_completions is on.
#pragma once

#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <grpo/core/tensor_checks.hpp>
#include <grpo/kl/kl_penalty.hpp>
#include <grpo/loss/aggregation.hpp>
#include <grpo/loss/importance_correction.hpp>
#include <grpo/loss/policy_loss.hpp>
#include <grpo/loss/policy_loss_registry.hpp>
#include <grpo/loss/token_masks.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace grpo {

/// Options of GrpoLoss. Defaults are TRL's GRPOConfig where TRL has the option (loss_type dapo, β = 0, ε = 0.2,
/// token-level IS, no entropy bonus or masks); see recipes.hpp for the published configurations.
struct GrpoLossOptions {
  /// Aggregation and normaliser (aggregation.hpp). TRL's cispo, sapo and vespo loss types also fix the surrogate:
  /// they require policy.type cispo (or cispo_two_sided), sapo and vespo respectively. policy.type gmpo requires a
  /// sequence-mean loss_type (grpo or seq_mean_token_mean), TRL's and verl's plain mean over sequences.
  LossType loss_type = LossType::dapo;
  /// The surrogate: type, importance level (token / GSPO sequence / GSPO-token), ε_low/ε_high, δ, dual clip, ...
  PolicyLossOptions policy;
  /// When not empty, the surrogate registered under this name in PolicyLossRegistry::global() replaces the built-in
  /// policy.type (whose other fields it may read); see select_policy_loss.
  std::string policy_loss_name;
  /// KL coefficient (TRL beta, verl kl_loss_coef). 0 skips the KL term and the reference log-probs.
  double beta = 0.0;
  /// KL estimator (kl_penalty.hpp): TRL's unclamped k3 by default; verl's default is low_var_kl.
  KlOptions kl;
  /// TRL use_bias_correction_kl (DeepSeek-V3.2): multiply the per-token KL by the policy importance weight w
  /// (at policy.importance_level, with its gradient, log w clamped to ±policy.log_ratio_clamp; TRL does not
  /// clamp, which is the same whenever |log w| ≤ log_ratio_clamp and stays finite when it is not).
  bool kl_importance_weighted = false;
  /// Entropy bonus coefficient (TRL entropy_coef, verl entropy_coeff): loss −= coef · aggregated entropy. Needs
  /// LossInputs::entropy (with grad, if the bonus is to train the policy). The entropy is aggregated exactly like
  /// the loss, with the same normaliser (verl: agg_loss(entropy, mask, loss_agg_mode)), so the bonus is
  /// split-invariant too. TRL does the same for dapo, cispo, vespo (Σ H·m / normaliser) and bnpo, but uses the
  /// micro-batch token mean (÷ GA) for grpo, dr_grpo, sapo and luspo; there we follow verl.
  double entropy_coef = 0.0;
  /// TRL top_entropy_quantile ρ: keep the policy loss (and entropy bonus) only on the top ρ fraction of tokens by
  /// entropy. 1 disables it. Needs LossInputs::entropy.
  double top_entropy_quantile = 1.0;
  /// TRL off_policy_mask_threshold (DeepSeek-V3.2): drop negative-advantage sequences whose mean
  /// lp_sampler − lp exceeds it. Uses LossInputs::sampler_log_probs, or the old log-probs without them (TRL).
  std::optional<double> off_policy_mask_threshold;
  /// Sampler/trainer importance-sampling correction (importance_correction.hpp); needs sampler_log_probs.
  SamplerCorrectionOptions sampler_correction;
  /// TRL mask_truncated_completions: remove truncated rows from the loss mask (and so from token counts).
  /// Needs LossInputs::truncated.
  bool mask_truncated_completions = false;
  /// dr_grpo: TRL max_completion_length, for local_normaliser (required for dr_grpo).
  std::optional<int64_t> max_completion_length;
  /// seq_mean_token_sum_norm: verl loss_scale_factor, for local_normaliser (default: the padded length T).
  std::optional<double> loss_scale_factor;

  /// Throws ConfigError naming the option and its value.
  void validate() const {
    policy.validate();
    if (!policy_loss_name.empty()) (void)PolicyLossRegistry::global().get(policy_loss_name);  // lists the names
    kl.validate();
    sampler_correction.validate();
    const auto type = to_string(loss_type);
    const auto policy_type = policy_loss_type_name(policy.type);
    GRPO_CHECK_CONFIG(beta >= 0.0 && std::isfinite(beta), "GrpoLossOptions.beta must be finite and >= 0, got {}", beta);
    GRPO_CHECK_CONFIG(std::isfinite(entropy_coef), "GrpoLossOptions.entropy_coef must be finite, got {}", entropy_coef);
    GRPO_CHECK_CONFIG(top_entropy_quantile > 0.0 && top_entropy_quantile <= 1.0,
                      "GrpoLossOptions.top_entropy_quantile must be in (0, 1], got {}", top_entropy_quantile);
    GRPO_CHECK_CONFIG(!off_policy_mask_threshold || std::isfinite(*off_policy_mask_threshold),
                      "GrpoLossOptions.off_policy_mask_threshold must be finite, got {}",
                      off_policy_mask_threshold.value_or(0.0));
    GRPO_CHECK_CONFIG(!max_completion_length || *max_completion_length > 0,
                      "GrpoLossOptions.max_completion_length must be > 0, got {}", max_completion_length.value_or(0));
    GRPO_CHECK_CONFIG(loss_type != LossType::dr_grpo || max_completion_length.has_value(),
                      "GrpoLossOptions: loss_type 'dr_grpo' needs max_completion_length (its normaliser is "
                      "B · max_completion_length)");
    GRPO_CHECK_CONFIG(!loss_scale_factor || (*loss_scale_factor > 0.0 && std::isfinite(*loss_scale_factor)),
                      "GrpoLossOptions.loss_scale_factor must be finite and > 0, got {}",
                      loss_scale_factor.value_or(0.0));
    const bool policy_matches = (loss_type != LossType::cispo || policy.type == PolicyLossType::cispo ||
                                 policy.type == PolicyLossType::cispo_two_sided) &&
                                (loss_type != LossType::sapo || policy.type == PolicyLossType::sapo) &&
                                (loss_type != LossType::vespo || policy.type == PolicyLossType::vespo);
    GRPO_CHECK_CONFIG(policy_matches, "GrpoLossOptions: loss_type '{}' needs policy.type {}, got policy.type '{}'",
                      type, loss_type == LossType::cispo ? "cispo or cispo_two_sided" : type, policy_type);
    // GMPO's loss is one value per sequence, written on each valid token of its row (policy_loss.hpp); only a
    // per-row token mean turns it back into L_i, so that the loss is mean_i L_i as in TRL and verl. A token sum
    // would weight each sequence by its length.
    GRPO_CHECK_CONFIG(policy.type != PolicyLossType::gmpo ||
                          aggregation_rule(loss_type).aggregation == Aggregation::sum_of_sequence_means,
                      "GrpoLossOptions: policy.type 'gmpo' gives one loss per sequence and needs a loss_type that "
                      "averages each sequence's tokens (grpo or seq_mean_token_mean), got loss_type '{}'",
                      type);
    // TRL folds the sampler ratio into VESPO's gamma weight instead of multiplying the loss; not implemented.
    GRPO_CHECK_CONFIG(policy.type != PolicyLossType::vespo || sampler_correction.mode == SamplerCorrectionMode::none,
                      "GrpoLossOptions: sampler_correction.mode '{}' is not supported with policy.type 'vespo'",
                      to_string(sampler_correction.mode));
  }
};

/// The tensors of one micro-batch. B sequences, T completion tokens; all [B, T] tensors share one floating dtype
/// except mask and truncated.
struct LossInputs {
  /// [B, T] current policy log-probs of the sampled tokens, with grad.
  torch::Tensor log_probs;
  /// [B, T] behaviour log-probs, no grad. Undefined → log_probs.detach() (μ = 1: ratio 1, TRL's shortcut).
  torch::Tensor old_log_probs;
  /// [B, T] reference log-probs; required when beta > 0 (with beta = 0 they only feed the `kl` metric).
  torch::Tensor ref_log_probs;
  /// [B] per-sequence or [B, T] per-token advantages.
  torch::Tensor advantages;
  /// [B, T] completion mask, any dtype, nonzero = valid token.
  torch::Tensor mask;
  /// [B, T] per-token entropy of the policy (with grad for the bonus to train it); required for entropy_coef ≠ 0
  /// or top_entropy_quantile < 1; otherwise it only feeds the `entropy` metric.
  torch::Tensor entropy;
  /// [B, T] log-probs of the sampler that generated the completions; required for sampler_correction.
  torch::Tensor sampler_log_probs;
  /// [B] bool, completion hit the length limit; required for mask_truncated_completions.
  torch::Tensor truncated;
  /// Top-entropy threshold computed over the whole batch with top_entropy_threshold() (what TRL gathers across
  /// ranks). Unset → computed from this micro-batch, which is TRL's single-process behaviour.
  std::optional<double> entropy_threshold;
};

/// What GrpoLoss reports, as plain numbers of this micro-batch (token means are over its valid tokens, after the
/// truncation mask). To combine micro-batches, weight token means by num_tokens.
struct LossMetrics {
  double loss = 0.0;                    ///< the value of LossOutput::loss
  double policy_loss = 0.0;             ///< aggregated surrogate term, after masks and IS weights (same normaliser)
  double kl_loss = 0.0;                 ///< aggregated KL term before β (verl actor/kl_loss); 0 without ref_log_probs
  double entropy_loss = 0.0;            ///< aggregated entropy term before entropy_coef (verl actor/entropy)
  std::optional<double> kl_mean;        ///< TRL `kl`: token mean of the per-token KL (with ref_log_probs)
  std::optional<double> entropy_mean;   ///< TRL `entropy`: token mean of the entropy (with entropy)
  double clip_ratio_low_mean = 0.0;     ///< TRL clip_ratio/low_mean: w < 1 − ε_low ∧ A < 0
  double clip_ratio_high_mean = 0.0;    ///< TRL clip_ratio/high_mean: w > 1 + ε_high ∧ A > 0
  double clip_ratio_region_mean = 0.0;  ///< TRL clip_ratio/region_mean: either of the two
  double pg_clipfrac = 0.0;             ///< verl actor/pg_clipfrac: the clipped branch is the active one
  double pg_clipfrac_lower = 0.0;       ///< verl actor/pg_clipfrac_lower: the dual clip is active
  double ppo_kl = 0.0;                  ///< verl actor/ppo_kl: token mean of lp_old − lp
  double ratio_min = 1.0, ratio_mean = 1.0, ratio_max = 1.0;  ///< importance weight w over valid tokens (ROLL)
  std::optional<double> sampler_ratio_min, sampler_ratio_mean, sampler_ratio_max;  ///< ρ with sampler correction
  double num_tokens = 0.0;                                                         ///< valid tokens of this micro-batch

  /// (name, value) pairs under TRL's names (kl, entropy, clip_ratio/...), verl's (pg_clipfrac, ppo_kl, ...) and
  /// TRL's sampling/importance_sampling_ratio/*; optional metrics appear only when computed.
  std::vector<std::pair<std::string, double>> items() const {
    std::vector<std::pair<std::string, double>> out = {
        {"loss", loss},
        {"policy_loss", policy_loss},
        {"kl_loss", kl_loss},
        {"entropy_loss", entropy_loss},
        {"clip_ratio/low_mean", clip_ratio_low_mean},
        {"clip_ratio/high_mean", clip_ratio_high_mean},
        {"clip_ratio/region_mean", clip_ratio_region_mean},
        {"pg_clipfrac", pg_clipfrac},
        {"pg_clipfrac_lower", pg_clipfrac_lower},
        {"ppo_kl", ppo_kl},
        {"ratio/min", ratio_min},
        {"ratio/mean", ratio_mean},
        {"ratio/max", ratio_max},
        {"num_tokens", num_tokens},
    };
    if (kl_mean) out.emplace_back("kl", *kl_mean);
    if (entropy_mean) out.emplace_back("entropy", *entropy_mean);
    if (sampler_ratio_mean) {
      out.emplace_back("sampling/importance_sampling_ratio/min", *sampler_ratio_min);
      out.emplace_back("sampling/importance_sampling_ratio/mean", *sampler_ratio_mean);
      out.emplace_back("sampling/importance_sampling_ratio/max", *sampler_ratio_max);
    }
    return out;
  }
};

/// The result of GrpoLoss: the scalar to backpropagate and the metrics.
struct LossOutput {
  torch::Tensor loss;  ///< 0-dim, dtype of log_probs (float32 for half-precision inputs), differentiable
  LossMetrics metrics;
};

/// The GRPO-family loss of one micro-batch (formula at the top of this file), configured once by options.
/// Numerics: masked positions of every input are replaced by 0 before any arithmetic, so padding log-probs of
/// −inf or NaN never reach the loss or its gradient; an all-masked batch gives loss 0 and zero gradients.
class GrpoLoss {
 public:
  explicit GrpoLoss(GrpoLossOptions options) : options_(std::move(options)) { options_.validate(); }

  const GrpoLossOptions& options() const { return options_; }

  /// The normaliser of this batch alone (aggregation.hpp local_normaliser, on the mask after truncation): what
  /// to pass when the batch is not split. For a batch split into micro-batches or across ranks, pass every part
  /// the normaliser of the whole batch instead, so that the summed gradient equals the unsplit one: token and
  /// sequence counts summed over the parts (dr_grpo's B·max_completion_length likewise, with the whole B);
  /// verl's loss_scale_factor is the same constant for every part.
  Normaliser local_normaliser(const LossInputs& inputs) const {
    return grpo::local_normaliser(
        options_.loss_type, loss_mask(inputs),
        {.max_completion_length = options_.max_completion_length, .loss_scale_factor = options_.loss_scale_factor});
  }

  /// Loss and metrics of one micro-batch. Throws grpo::Error naming the input and its shape when inputs do not
  /// fit, ConfigError when the normaliser's kind does not fit loss_type.
  LossOutput operator()(const LossInputs& inputs, const Normaliser& normaliser) const {
    check_normaliser(options_.loss_type, normaliser);
    const torch::Tensor mask = loss_mask(inputs);  // also checks every input's shape
    const auto dtype = detail::policy_loss_compute_dtype(inputs.log_probs.scalar_type());
    const torch::Tensor valid = mask != 0;
    const torch::Tensor invalid = ~valid;
    auto prepare = [&](const torch::Tensor& t, bool keep_grad) {
      auto x = keep_grad ? t.to(dtype) : t.detach().to(dtype);
      return x.masked_fill(invalid, 0.0);
    };
    const torch::Tensor lp = prepare(inputs.log_probs, true);
    const torch::Tensor old = inputs.old_log_probs.defined() ? prepare(inputs.old_log_probs, false) : lp.detach();
    const torch::Tensor adv = inputs.advantages.detach().to(dtype);
    const LossType type = options_.loss_type;

    const PolicyLossOutput policy = surrogate(lp, old, adv, valid);
    torch::Tensor per_token = policy.per_token_loss.to(dtype);

    torch::Tensor sampler;
    if (inputs.sampler_log_probs.defined()) sampler = prepare(inputs.sampler_log_probs, false);
    if (options_.off_policy_mask_threshold) {
      per_token = per_token * off_policy_sequence_mask(lp, sampler.defined() ? sampler : old, adv, valid,
                                                       *options_.off_policy_mask_threshold);
    }
    torch::Tensor entropy, entropy_mask;
    if (inputs.entropy.defined()) entropy = prepare(inputs.entropy, true);
    if (options_.top_entropy_quantile < 1.0) {
      const double threshold =
          inputs.entropy_threshold.value_or(top_entropy_threshold(entropy, valid, options_.top_entropy_quantile));
      entropy_mask = top_entropy_mask(entropy, valid, threshold);
      per_token = per_token * entropy_mask;
    }
    torch::Tensor rho;
    if (options_.sampler_correction.mode != SamplerCorrectionMode::none) {
      rho = sampler_correction_weights(old, sampler, valid, options_.sampler_correction);
      per_token = per_token * rho;
    }

    torch::Tensor kl;
    if (inputs.ref_log_probs.defined()) {
      kl = kl_penalty(lp, prepare(inputs.ref_log_probs, false), options_.kl);
      // The surrogate's own log w (at policy.importance_level, clamped), with its gradient, as TRL's coef_1.
      if (options_.kl_importance_weighted)
        kl = importance_weighted_kl(kl, log_importance_weight(lp, old, valid, options_.policy).exp());
    }
    torch::Tensor total = per_token;
    if (options_.beta > 0.0) total = total + options_.beta * kl;
    torch::Tensor loss = aggregate_loss(total, valid, type, normaliser);
    torch::Tensor entropy_term;
    if (entropy.defined()) {
      entropy_term = aggregate_loss(entropy_mask.defined() ? entropy * entropy_mask : entropy, valid, type, normaliser);
      if (options_.entropy_coef != 0.0) loss = loss - options_.entropy_coef * entropy_term;
    }

    LossOutput out;
    out.loss = loss;
    torch::NoGradGuard no_grad;
    LossMetrics& metrics = out.metrics;
    const torch::Tensor m = valid.to(dtype);
    const double count = m.sum().item<double>();
    auto token_mean = [&](const torch::Tensor& x) {
      return (x.to(dtype) * m).sum().item<double>() / std::max(count, 1.0);
    };
    metrics.loss = loss.item<double>();
    metrics.policy_loss = aggregate_loss(per_token, valid, type, normaliser).item<double>();
    metrics.num_tokens = count;
    if (kl.defined()) {
      metrics.kl_loss = aggregate_loss(kl, valid, type, normaliser).item<double>();
      metrics.kl_mean = token_mean(kl);
    }
    if (entropy.defined()) {
      metrics.entropy_loss = entropy_term.item<double>();
      metrics.entropy_mean = token_mean(entropy);
    }
    metrics.clip_ratio_low_mean = token_mean(policy.clipped_low);
    metrics.clip_ratio_high_mean = token_mean(policy.clipped_high);
    metrics.clip_ratio_region_mean = token_mean(policy.clipped_low | policy.clipped_high);
    metrics.pg_clipfrac = token_mean(policy.pg_clipped);
    metrics.pg_clipfrac_lower = token_mean(policy.dual_clipped);
    metrics.ppo_kl = token_mean(old - lp);
    if (count > 0) {
      const torch::Tensor ratio = policy.log_ratio.to(dtype).masked_select(valid).exp();
      metrics.ratio_min = ratio.min().item<double>();
      metrics.ratio_max = ratio.max().item<double>();
      metrics.ratio_mean = ratio.mean().item<double>();
      if (rho.defined()) {
        const torch::Tensor r = rho.masked_select(valid);
        metrics.sampler_ratio_min = r.min().item<double>();
        metrics.sampler_ratio_max = r.max().item<double>();
        metrics.sampler_ratio_mean = r.mean().item<double>();
      }
    }
    return out;
  }

 private:
  /// Checks the inputs' shapes against log_probs [B, T] and the options, and returns the loss mask (the
  /// completion mask without truncated rows when mask_truncated_completions is on).
  torch::Tensor loss_mask(const LossInputs& in) const {
    constexpr std::string_view kWhat = "GrpoLoss";
    detail::check_dim(in.log_probs, 2, "log_probs", kWhat);
    detail::check_floating(in.log_probs, "log_probs", kWhat);
    detail::check_same_shape(in.log_probs, "log_probs", in.mask, "mask", kWhat);
    detail::check_advantages(in.advantages, in.log_probs, kWhat);
    auto optional_like = [&](const torch::Tensor& t, std::string_view name, bool required, std::string_view why) {
      GRPO_CHECK(t.defined() || !required, "{}: {} needs {} of shape {}, got undefined", kWhat, why, name,
                 shape_str(in.log_probs));
      if (!t.defined()) return;
      detail::check_same_shape(in.log_probs, "log_probs", t, name, kWhat);
      detail::check_floating(t, name, kWhat);
    };
    optional_like(in.old_log_probs, "old_log_probs", false, "");
    optional_like(in.ref_log_probs, "ref_log_probs", options_.beta > 0.0, fmt::format("beta = {}", options_.beta));
    optional_like(in.entropy, "entropy", options_.entropy_coef != 0.0 || options_.top_entropy_quantile < 1.0,
                  options_.entropy_coef != 0.0
                      ? fmt::format("entropy_coef = {}", options_.entropy_coef)
                      : fmt::format("top_entropy_quantile = {}", options_.top_entropy_quantile));
    optional_like(in.sampler_log_probs, "sampler_log_probs",
                  options_.sampler_correction.mode != SamplerCorrectionMode::none,
                  fmt::format("sampler_correction.mode = {}", to_string(options_.sampler_correction.mode)));
    if (!options_.mask_truncated_completions) return in.mask;
    GRPO_CHECK(in.truncated.defined(), "{}: mask_truncated_completions needs truncated of shape [{}], got undefined",
               kWhat, in.log_probs.size(0));
    return truncated_completion_mask(in.mask, in.truncated);
  }

  /// The built-in policy_loss(), or the registered surrogate named by policy_loss_name.
  PolicyLossOutput surrogate(const torch::Tensor& lp, const torch::Tensor& old, const torch::Tensor& adv,
                             const torch::Tensor& valid) const {
    if (options_.policy_loss_name.empty()) return policy_loss(lp, old, adv, valid, options_.policy);
    PolicyLossOutput out = PolicyLossRegistry::global().get(options_.policy_loss_name)(lp, old, adv, valid, options_.policy);
    complete_policy_loss_output(out, lp, old, valid);
    return out;
  }

  GrpoLossOptions options_;
};

/// Selects the surrogate called `name`: a built-in PolicyLossType name (policy.type, policy_loss_name cleared) or a
/// name registered in PolicyLossRegistry::global(). ConfigError listing both kinds for an unknown name.
inline void select_policy_loss(GrpoLossOptions& options, std::string_view name) {
  if (const auto type = detail::find_enum(name, detail::kPolicyLossTypeNames)) {
    options.policy.type = *type;
    options.policy_loss_name.clear();
    return;
  }
  (void)PolicyLossRegistry::global().get(name);
  options.policy_loss_name = std::string(name);
}

}  // namespace grpo
