// SPDX-License-Identifier: Apache-2.0
// GrpoLoss: the whole GRPO-family objective of one micro-batch, assembled from the components of grpo/loss and
// grpo/kl, with the loss and the metrics TRL and verl log.
//
//   per_token = policy_loss(lp, lp_old, A, m)            surrogate (PPO clip, CISPO, SAPO, VESPO, GSPO, ...)
//             · off_policy_mask · entropy_mask · ρ       optional masks and sampler IS weights (TRL order)
//   loss      = aggregate(per_token, m, loss_type, N)    N passed explicitly (see aggregation.hpp)
//             + β · aggregate(KL(lp, lp_ref) [· w], m, loss_type, N)    KL term, optionally importance-weighted
//             − entropy_coef · entropy term              TRL's mean entropy or verl's like-the-loss (EntropyAggregation)
// where m is the completion mask with truncated rows removed when mask_truncated_completions is on. GMPO is one
// loss per sequence: Σ_i L_i·ρ̄_i / N replaces the first line (ρ̄_i the geometric mean of ρ over row i, as verl).
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
#include <grpo/loss/rollout_correction.hpp>
#include <grpo/loss/token_masks.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace grpo {

/// How the entropy bonus is aggregated (GrpoLossOptions::entropy_aggregation). m_eff is the loss mask times the
/// top-entropy mask when top_entropy_quantile < 1 (else the loss mask).
enum class EntropyAggregation {
  /// TRL _compute_loss (huggingface/trl f2cd577, trl/trainer/grpo_trainer.py): the mean per-token entropy.
  /// Token-normalised loss types other than bnpo (dapo, cispo, vespo, token_mean): Σ H·m_eff / N. The others:
  /// the micro-batch's token mean Σ H·m_eff / max(Σ m_eff, 1), times its share of the normaliser
  /// (local_normaliser / N: 1 for an unsplit batch, 1/GA for GA equal micro-batches, which is TRL's ÷ GA).
  token_mean,
  /// verl dp_actor (volcengine/verl b178a3c): agg_loss(H, mask, loss_agg_mode), i.e. aggregated exactly like the
  /// loss with the same normaliser (H·entropy mask when top_entropy_quantile < 1; verl has no such mask).
  like_loss,
};

namespace detail {
inline constexpr EnumNames<EntropyAggregation, 2> kEntropyAggregationNames{{
    {EntropyAggregation::token_mean, "token_mean"},
    {EntropyAggregation::like_loss, "like_loss"},
}};
}  // namespace detail

/// "token_mean" or "like_loss".
GRPO_ENUM_NAMES(EntropyAggregation, detail::kEntropyAggregationNames, "entropy aggregation", parse_entropy_aggregation);

/// Which code computes GrpoLoss (GrpoLossOptions::implementation).
enum class LossImplementation {
  /// FusedGrpoLoss when it supports the options, the generic composition of tensor operations otherwise.
  /// FusedGrpoLoss runs its CPU kernel (one pass over the tokens with a hand-written gradient) for CPU inputs and
  /// this generic composition on other devices or under ForceKernelPath(KernelPath::generic)
  /// (logprob/kernel_path.hpp).
  automatic,
  /// Always the generic composition of LibTorch operations (any device; autograd through every input).
  generic,
};

namespace detail {
inline constexpr EnumNames<LossImplementation, 2> kLossImplementationNames{{
    {LossImplementation::automatic, "automatic"},
    {LossImplementation::generic, "generic"},
}};
}  // namespace detail

/// "automatic" or "generic".
GRPO_ENUM_NAMES(LossImplementation, detail::kLossImplementationNames, "loss implementation", parse_loss_implementation);

/// Options of GrpoLoss. Defaults are TRL's GRPOConfig where TRL has the option (loss_type dapo, β = 0, ε = 0.2,
/// token-level IS, no entropy bonus or masks); see recipes.hpp for the published configurations.
struct GrpoLossOptions {
  /// Aggregation and normaliser (aggregation.hpp). TRL's cispo, sapo and vespo loss types also fix the surrogate:
  /// they require policy.type cispo (or cispo_two_sided), sapo and vespo respectively. policy.type gmpo requires a
  /// loss_type grpo: TRL's GMPOTrainer and verl's geo_mean both average the sequence losses over all B rows,
  /// whatever their loss_type / loss_agg_mode. luspo needs policy.importance_level sequence and no per-token term
  /// (see validate()).
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
  /// (TRL's coef_1: at policy.importance_level, with its gradient, unclamped as in TRL unless
  /// policy.log_ratio_bounds is set explicitly; the overflow guard of policy_loss.hpp still applies).
  bool kl_importance_weighted = false;
  /// Entropy bonus coefficient (TRL entropy_coef, verl entropy_coeff): loss −= coef · entropy term, the term
  /// aggregated as entropy_aggregation says. Needs LossInputs::entropy (with grad, if the bonus is to train the
  /// policy).
  double entropy_coef = 0.0;
  /// TRL's mean per-token entropy (default) or verl's aggregation like the loss; they agree for dapo, cispo, vespo
  /// and token_mean without a top-entropy mask.
  EntropyAggregation entropy_aggregation = EntropyAggregation::token_mean;
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
  /// verl rollout_rs (rollout_correction.hpp, parse_rollout_rejection): remove the tokens and sequences whose
  /// trainer/sampler mismatch fails a criterion from the loss mask (and so from token counts), with the old
  /// log-probs (log_probs.detach() without them) as the trainer's. Needs LossInputs::sampler_log_probs.
  std::vector<RolloutRejectionCriterion> rollout_rejection;
  /// dr_grpo: TRL max_completion_length, for local_normaliser (required for dr_grpo).
  std::optional<int64_t> max_completion_length;
  /// seq_mean_token_sum_norm: verl loss_scale_factor, for local_normaliser (default: the padded length T).
  std::optional<double> loss_scale_factor;
  /// The fused kernel where it applies (automatic: its CPU kernel for CPU inputs, the generic composition on other
  /// devices), or always the generic tensor composition. Both give the same loss, metrics and gradient with respect
  /// to log_probs (tests/parity); the fused CPU kernel is several times faster, the generic composition also
  /// differentiates through the entropy and runs on any device.
  LossImplementation implementation = LossImplementation::automatic;

  /// Throws ConfigError naming the option and its value.
  void validate() const {
    policy.validate();
    if (!policy_loss_name.empty()) (void)PolicyLossRegistry::global().get(policy_loss_name);  // lists the names
    kl.validate();
    sampler_correction.validate();
    validate_rollout_rejection(rollout_rejection, "GrpoLossOptions.rollout_rejection");
    const auto type = to_string(loss_type);
    const auto policy_type = to_string(policy.type);
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
    if (policy.type == PolicyLossType::gmpo && policy_loss_name.empty()) {
      // GMPO's loss is one value per sequence (policy_loss.hpp); TRL's GMPOTrainer and verl's geo_mean take the
      // plain mean over all B sequences, whatever loss_type / loss_agg_mode say.
      GRPO_CHECK_CONFIG(loss_type == LossType::grpo,
                        "GrpoLossOptions: policy.type 'gmpo' averages its per-sequence loss over all B sequences (TRL "
                        "GMPOTrainer, verl geo_mean ignore the loss aggregation): set loss_type 'grpo', got '{}'",
                        type);
      GRPO_CHECK_CONFIG(!off_policy_mask_threshold,
                        "GrpoLossOptions: off_policy_mask_threshold is not defined for policy.type 'gmpo' (neither TRL's "
                        "GMPOTrainer nor verl's geo_mean has it)");
    }
    if (loss_type == LossType::luspo) {
      // TRL: (per_token_loss * mask.sum(1, keepdim=True)).mean() — mean_i(L_i·|o_i|) for a per-sequence loss (B, 1),
      // but a mean over all B·T positions, padding included, once any term makes the loss per-token.
      const char* per_token = policy.importance_level != ImportanceLevel::sequence ? "policy.importance_level != sequence"
                              : beta > 0.0                                       ? "beta > 0 (a per-token KL)"
                              : top_entropy_quantile < 1.0                       ? "top_entropy_quantile < 1"
                              : sampler_correction.mode != SamplerCorrectionMode::none &&
                                      !sampler_correction_is_per_sequence(sampler_correction.mode)
                                  ? "a token-level sampler_correction.mode"
                                  : nullptr;
      GRPO_CHECK_CONFIG(per_token == nullptr,
                        "GrpoLossOptions: loss_type 'luspo' is defined for a per-sequence loss (policy.importance_level "
                        "sequence); with {} TRL averages its per-token matrix over all B·T positions, padding "
                        "included, which this library does not reproduce. Use importance_level sequence without "
                        "per-token terms, or another loss_type",
                        per_token ? per_token : "");
    }
    // TRL folds the sampler ratio into VESPO's gamma weight (TRL's modes only; OpenRLHF's geometric mask has no
    // VESPO reference).
    GRPO_CHECK_CONFIG(policy.type != PolicyLossType::vespo ||
                          sampler_correction.mode != SamplerCorrectionMode::sequence_geometric_mask,
                      "GrpoLossOptions: sampler_correction.mode '{}' is not supported with policy.type 'vespo' (TRL "
                      "folds only its own modes into the gamma weight)",
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
  /// Σ H and the count over the tokens the entropy bonus acts on (the loss mask, times the top-entropy mask when it
  /// is on): what an adaptive entropy controller measures (train/entropy_controller.hpp). 0 without entropy. Not in
  /// items().
  double bonus_entropy_sum = 0.0, bonus_tokens = 0.0;

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

namespace detail {
/// The entropy term's form (EntropyAggregation): unset when it is aggregated exactly like the loss (like_loss, and
/// TRL's token_mean for the token-normalised types other than bnpo, Σ H·m_eff / N); otherwise the weight of the
/// micro-batch's mean entropy, its share of the normaliser: the local normaliser of loss_mask ([B, T], nonzero =
/// valid, after truncation) over `normaliser` (1 when the normaliser is 0).
inline std::optional<double> entropy_mean_share(const GrpoLossOptions& options, const torch::Tensor& loss_mask,
                                                const Normaliser& normaliser) {
  const LossType type = options.loss_type;
  if (options.entropy_aggregation == EntropyAggregation::like_loss ||
      (aggregation_rule(type).normaliser == Normaliser::Kind::tokens && type != LossType::bnpo))
    return std::nullopt;
  if (normaliser.value() <= 0.0) return 1.0;
  const Normaliser local = local_normaliser(
      type, loss_mask,
      {.max_completion_length = options.max_completion_length, .loss_scale_factor = options.loss_scale_factor});
  return local.value() / normaliser.value();
}

/// FusedGrpoLoss's kernel (src/logprob/fused_grpo_loss.cpp): whether it computes `options` (validated), and the
/// loss with it (its CPU kernel or its generic path, as logprob/kernel_path.hpp resolves for inputs.log_probs);
/// errors name `what` (the caller's class).
bool fused_loss_supports(const GrpoLossOptions& options);
LossOutput fused_loss(const GrpoLossOptions& options, const LossInputs& inputs, const Normaliser& normaliser,
                      const char* what);
}  // namespace detail

/// The GRPO-family loss of one micro-batch (formula at the top of this file), configured once by options.
/// Numerics: masked positions of every input are replaced by 0 before any arithmetic, so padding log-probs of
/// −inf or NaN never reach the loss or its gradient; an all-masked batch gives loss 0 and zero gradients.
class GrpoLoss {
 public:
  explicit GrpoLoss(GrpoLossOptions options) : options_(std::move(options)) {
    options_.validate();
    fused_ = options_.implementation == LossImplementation::automatic && detail::fused_loss_supports(options_);
  }

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
    if (fused_) return detail::fused_loss(options_, inputs, normaliser, "GrpoLoss");
    check_normaliser(options_.loss_type, normaliser);
    const Masks masks = loss_masks(inputs);  // also checks every input's shape
    const auto dtype = detail::policy_loss_compute_dtype(inputs.log_probs.scalar_type());
    const torch::Tensor valid = masks.loss != 0;
    // The tokens before rollout rejection: verl computes the IS weights on them. Every other position is replaced by
    // 0 before any arithmetic (rejected tokens keep their finite values; the loss mask leaves them out).
    const torch::Tensor sampled = masks.before_rejection != 0;
    auto prepare = [&](const torch::Tensor& t, bool keep_grad) {
      auto x = keep_grad ? t.to(dtype) : t.detach().to(dtype);
      return x.masked_fill(~sampled, 0.0);
    };
    const torch::Tensor lp = prepare(inputs.log_probs, true);
    const torch::Tensor old = inputs.old_log_probs.defined() ? prepare(inputs.old_log_probs, false) : lp.detach();
    const torch::Tensor adv = inputs.advantages.detach().to(dtype);
    const LossType type = options_.loss_type;

    torch::Tensor entropy, entropy_mask;
    if (inputs.entropy.defined()) entropy = prepare(inputs.entropy, true);
    if (options_.top_entropy_quantile < 1.0) {
      const double threshold =
          inputs.entropy_threshold.value_or(top_entropy_threshold(entropy, valid, options_.top_entropy_quantile));
      entropy_mask = top_entropy_mask(entropy, valid, threshold);
    }
    torch::Tensor sampler;
    if (inputs.sampler_log_probs.defined()) sampler = prepare(inputs.sampler_log_probs, false);
    torch::Tensor rho;
    if (options_.sampler_correction.mode != SamplerCorrectionMode::none)
      rho = sampler_correction_weights(old, sampler, sampled, options_.sampler_correction);
    const bool vespo = options_.policy_loss_name.empty() && options_.policy.type == PolicyLossType::vespo;

    // GMPO takes the top-entropy mask inside its geometric mean (TRL GMPOTrainer) and returns one loss per sequence;
    // VESPO folds the sampler ratio into its gamma weight instead of multiplying the loss by it (TRL).
    PolicyLossExtras extras;
    extras.mean_mask = entropy_mask;
    if (vespo && rho.defined()) extras.vespo_log_sampler_ratio = vespo_log_sampler_ratio(rho, valid);
    const PolicyLossOutput policy = surrogate(lp, old, adv, valid, extras);
    const bool per_sequence = policy.per_sequence_loss.defined();

    torch::Tensor policy_term, per_token;
    if (per_sequence) {
      // verl geo_mean: rollout IS weights enter as their geometric mean over the sequence.
      torch::Tensor sequence_loss = policy.per_sequence_loss.to(dtype);
      if (rho.defined()) {
        const torch::Tensor m = valid.to(dtype);
        sequence_loss = sequence_loss * ((rho + 1e-10).log() * m).sum(1).div(m.sum(1) + 1e-8).exp();
      }
      policy_term = sequence_loss.sum() / normaliser.divisor();
    } else {
      per_token = policy.per_token_loss.to(dtype);
      if (options_.off_policy_mask_threshold) {
        per_token = per_token * off_policy_sequence_mask(lp, sampler.defined() ? sampler : old, adv, valid,
                                                         *options_.off_policy_mask_threshold);
      }
      if (entropy_mask.defined()) per_token = per_token * entropy_mask;
      if (rho.defined() && !vespo) per_token = per_token * rho;
      policy_term = aggregate_loss(per_token, valid, type, normaliser);
    }

    torch::Tensor kl, kl_term;
    if (inputs.ref_log_probs.defined()) {
      kl = kl_penalty(lp, prepare(inputs.ref_log_probs, false), options_.kl);
      // TRL's coef_1: the importance weight at policy.importance_level, with its gradient, unclamped.
      if (options_.kl_importance_weighted) {
        const auto bounds = options_.policy.log_ratio_bounds.value_or(LogRatioBounds::none());
        const auto log_w = log_importance_weight(lp, old, valid, options_.policy.importance_level, bounds);
        kl = importance_weighted_kl(kl, log_w.exp());
      }
      kl_term = aggregate_loss(kl, valid, type, normaliser);
    }
    torch::Tensor loss = policy_term;
    if (options_.beta > 0.0) loss = loss + options_.beta * kl_term;
    torch::Tensor entropy_term;
    if (entropy.defined()) {
      entropy_term = entropy_bonus_term(entropy, entropy_mask, valid, normaliser);
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
    metrics.policy_loss = policy_term.item<double>();
    metrics.num_tokens = count;
    if (kl.defined()) {
      metrics.kl_loss = kl_term.item<double>();
      metrics.kl_mean = token_mean(kl);
    }
    if (entropy.defined()) {
      metrics.entropy_loss = entropy_term.item<double>();
      metrics.entropy_mean = token_mean(entropy);
      const torch::Tensor kept = entropy_mask.defined() ? entropy_mask * m : m;
      metrics.bonus_entropy_sum = (entropy * kept).sum().item<double>();
      metrics.bonus_tokens = kept.sum().item<double>();
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
  /// The completion mask without truncated rows (mask_truncated_completions), and that mask without the rejected
  /// tokens (rollout_rejection): the loss mask.
  struct Masks {
    torch::Tensor before_rejection, loss;
  };

  /// The loss mask (Masks::loss).
  torch::Tensor loss_mask(const LossInputs& in) const { return loss_masks(in).loss; }

  /// Checks the inputs' shapes against log_probs [B, T] and the options, and returns the masks.
  Masks loss_masks(const LossInputs& in) const {
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
                  options_.sampler_correction.mode != SamplerCorrectionMode::none ||
                      !options_.rollout_rejection.empty(),
                  options_.sampler_correction.mode != SamplerCorrectionMode::none
                      ? fmt::format("sampler_correction.mode = {}", to_string(options_.sampler_correction.mode))
                      : std::string("rollout_rejection"));
    const std::pair<const torch::Tensor*, std::string_view> tensors[] = {
        {&in.old_log_probs, "old_log_probs"}, {&in.ref_log_probs, "ref_log_probs"},
        {&in.advantages, "advantages"},       {&in.mask, "mask"},
        {&in.entropy, "entropy"},             {&in.sampler_log_probs, "sampler_log_probs"},
        {&in.truncated, "truncated"}};
    for (const auto& [t, name] : tensors) {
      GRPO_CHECK(!t->defined() || t->device() == in.log_probs.device(),
                 "{}: {} is on {} but log_probs is on {} (put every input on one device)", kWhat, name,
                 t->device().str(), in.log_probs.device().str());
    }
    torch::Tensor mask = in.mask;
    if (options_.mask_truncated_completions) {
      GRPO_CHECK(in.truncated.defined(), "{}: mask_truncated_completions needs truncated of shape [{}], got undefined",
                 kWhat, in.log_probs.size(0));
      mask = truncated_completion_mask(mask, in.truncated);
    }
    if (options_.rollout_rejection.empty()) return {mask, mask};
    const torch::Tensor trainer = in.old_log_probs.defined() ? in.old_log_probs : in.log_probs.detach();
    return {mask, rollout_rejection_mask(trainer, in.sampler_log_probs, mask, options_.rollout_rejection)};
  }

  /// TRL get_gamma_weights' sampler term, Σ clamp(log ρ, log 1e-8, 20) per row [B]: over the valid tokens for the
  /// token modes (TRL's padded ratios are 1, log 0), once per row for the sequence modes (one ratio per row).
  torch::Tensor vespo_log_sampler_ratio(const torch::Tensor& rho, const torch::Tensor& valid) const {
    const torch::Tensor m = valid.to(rho.scalar_type());
    const torch::Tensor log_rho = rho.log().clamp(std::log(1e-8), 20.0).masked_fill(~valid, 0.0);
    if (!sampler_correction_is_per_sequence(options_.sampler_correction.mode)) return log_rho.sum(1);
    return log_rho.sum(1) / m.sum(1).clamp_min(1.0);  // the row's one value (all its valid entries are equal)
  }

  /// The entropy term of the bonus (EntropyAggregation): entropy [B, T] compute dtype, entropy_mask the top-entropy
  /// mask or undefined, valid the loss mask as bool.
  torch::Tensor entropy_bonus_term(const torch::Tensor& entropy, const torch::Tensor& entropy_mask,
                                   const torch::Tensor& valid, const Normaliser& normaliser) const {
    const torch::Tensor masked = entropy_mask.defined() ? entropy * entropy_mask : entropy;
    const auto share = detail::entropy_mean_share(options_, valid, normaliser);
    if (!share) return aggregate_loss(masked, valid, options_.loss_type, normaliser);
    const torch::Tensor kept = entropy_mask.defined() ? (entropy_mask * valid).sum() : valid.sum();
    return masked.masked_fill(~valid, 0.0).sum() / kept.to(entropy.scalar_type()).clamp_min(1.0) * *share;
  }

  /// The built-in policy_loss() (with its extras), or the registered surrogate named by policy_loss_name.
  PolicyLossOutput surrogate(const torch::Tensor& lp, const torch::Tensor& old, const torch::Tensor& adv,
                             const torch::Tensor& valid, const PolicyLossExtras& extras) const {
    if (options_.policy_loss_name.empty()) return policy_loss(lp, old, adv, valid, options_.policy, extras);
    PolicyLossOutput out = PolicyLossRegistry::global().get(options_.policy_loss_name)(lp, old, adv, valid, options_.policy);
    complete_policy_loss_output(out, lp, old, valid);
    return out;
  }

  GrpoLossOptions options_;
  bool fused_ = false;  ///< the fused kernel computes these options
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
