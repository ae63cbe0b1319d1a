// SPDX-License-Identifier: Apache-2.0
// Per-token policy losses (the surrogate part of the GRPO objective) and the clip statistics TRL and verl log.
//
// Notation: lp = current log-prob of the sampled token, lp_old = behaviour log-prob, m = completion mask,
// |o_i| = Σ_t m_it, A = advantage (per sequence [B] or per token [B, T]), w = importance weight, sg = stop-gradient.
// Every formula below names the system it is taken from, term for term (TRL trl/trainer/grpo_trainer.py, verl
// verl/trainer/ppo/core_algos.py, OpenRLHF openrlhf/models/loss.py, Liger-Kernel chunked_loss/grpo_loss.py).
//
// Aggregation (token mean, sequence mean, LUSPO's length weighting, ...), KL, entropy masks, sampler
// importance-sampling correction and truncation masks are separate components (grpo/loss/aggregation.hpp,
// grpo/kl, ...). This header only produces the per-token loss matrix and the per-token statistics that can
// only be computed here.
#pragma once

#include <grpo/core/enum_names.hpp>
#include <grpo/core/error.hpp>
#include <grpo/core/tensor_checks.hpp>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace grpo {

/// Which surrogate produces the per-token loss. The formulas are documented at policy_loss().
///
/// LUSPO (length-unbiased GSPO, TRL `loss_type="luspo"`) has no type of its own: it is ppo_clip with
/// ImportanceLevel::sequence, and its length weighting `mean_i(L_i·|o_i|)` is an aggregation mode.
/// GSPO is ppo_clip with ImportanceLevel::sequence (TRL) or ImportanceLevel::sequence_token (verl `gspo`).
enum class PolicyLossType {
  ppo_clip,         ///< PPO clipped surrogate, ε_low/ε_high, optional two-sided δ and dual clip c (TRL, verl, OpenRLHF)
  cispo,            ///< CISPO, TRL form: upper cap only, epsilon_high is the absolute cap on w
  cispo_two_sided,  ///< CISPO, verl form: w clipped to [1−ε_low, 1+ε_high]
  sapo,             ///< SAPO soft sigmoid gate (TRL, verl)
  vespo,            ///< VESPO gamma weight on the sequence importance weight (TRL get_gamma_weights)
  gpg,              ///< GPG / plain REINFORCE: −A·lp (verl `gpg`)
  gmpo,             ///< GMPO geometric-mean ratio, sequence-level loss (TRL experimental gmpo, verl `geo_mean`)
  clip_cov,         ///< Clip-Cov: PPO clip plus dropping random high-covariance tokens (verl `clip_cov`)
  kl_cov,           ///< KL-Cov: unclipped surrogate plus |Δ| penalty on top-covariance tokens (verl `kl_cov`)
};

/// Granularity of the importance weight w (TRL `importance_sampling_level`).
enum class ImportanceLevel {
  token,           ///< log w_it = lp_it − lp_old_it
  sequence,        ///< GSPO: log w_i = Σ_t m·(lp − lp_old) / max(|o_i|, 1), broadcast over the tokens of sequence i
  sequence_token,  ///< GSPO-token: log w_it = lp_it − sg(lp_it) + sg(log w_i); value of `sequence`, per-token gradient
};

namespace detail {
/// verl's policy_loss names "vanilla" and "geo_mean" are aliases of ppo_clip and gmpo.
inline constexpr EnumNames<PolicyLossType, 11> kPolicyLossTypeNames{{
    {PolicyLossType::ppo_clip, "ppo_clip"},
    {PolicyLossType::ppo_clip, "vanilla"},
    {PolicyLossType::cispo, "cispo"},
    {PolicyLossType::cispo_two_sided, "cispo_two_sided"},
    {PolicyLossType::sapo, "sapo"},
    {PolicyLossType::vespo, "vespo"},
    {PolicyLossType::gpg, "gpg"},
    {PolicyLossType::gmpo, "gmpo"},
    {PolicyLossType::gmpo, "geo_mean"},
    {PolicyLossType::clip_cov, "clip_cov"},
    {PolicyLossType::kl_cov, "kl_cov"},
}};

inline constexpr EnumNames<ImportanceLevel, 3> kImportanceLevelNames{{
    {ImportanceLevel::token, "token"},
    {ImportanceLevel::sequence, "sequence"},
    {ImportanceLevel::sequence_token, "sequence_token"},
}};
}  // namespace detail

/// "ppo_clip", "cispo", ...; verl's aliases `vanilla` (= ppo_clip) and `geo_mean` (= gmpo) parse too.
GRPO_ENUM_NAMES(PolicyLossType, detail::kPolicyLossTypeNames, "policy loss type", parse_policy_loss_type);

/// "token", "sequence" or "sequence_token".
GRPO_ENUM_NAMES(ImportanceLevel, detail::kImportanceLevelNames, "importance level", parse_importance_level);

/// Bounds [low, high] on a log importance weight before exp (±inf: that side unbounded).
struct LogRatioBounds {
  double low = -std::numeric_limits<double>::infinity();
  double high = std::numeric_limits<double>::infinity();

  /// No clamp (TRL's grpo_trainer.py, GMPO, verl clip_cov/kl_cov).
  static LogRatioBounds none() { return {}; }
  /// [−c, c] (verl vanilla, cispo and sapo use c = 20).
  static LogRatioBounds symmetric(double c) { return {-c, c}; }
  /// (−inf, c] (verl gspo: clamp(max=10.0)).
  static LogRatioBounds at_most(double c) { return {-std::numeric_limits<double>::infinity(), c}; }
};

/// The bounds the cited reference of (type, level) applies to log w: the default of
/// PolicyLossOptions::log_ratio_bounds.
///   ppo_clip, token                      ±20    verl compute_policy_loss_vanilla (TRL: none)
///   ppo_clip, sequence                   none   TRL _compute_loss (GSPO, LUSPO)
///   ppo_clip, sequence_token             none   TRL experimental gspo_token (verl gspo: at_most(10))
///   cispo                                none   TRL _compute_loss
///   cispo_two_sided, sapo                ±20    verl compute_policy_loss_cispo / _sapo (TRL sapo: none)
///   vespo                                ±20    TRL get_gamma_weights (per token, inside S)
///   gpg, gmpo, clip_cov, kl_cov          none   verl (gmpo's clamp is commented out there; TRL GMPO clips to ±ε)
inline LogRatioBounds reference_log_ratio_bounds(PolicyLossType type, ImportanceLevel level) {
  switch (type) {
    case PolicyLossType::ppo_clip:
      return level == ImportanceLevel::token ? LogRatioBounds::symmetric(20.0) : LogRatioBounds::none();
    case PolicyLossType::cispo_two_sided:
    case PolicyLossType::sapo:
    case PolicyLossType::vespo:
      return LogRatioBounds::symmetric(20.0);
    case PolicyLossType::cispo:
    case PolicyLossType::gpg:
    case PolicyLossType::gmpo:
    case PolicyLossType::clip_cov:
    case PolicyLossType::kl_cov:
      return LogRatioBounds::none();
  }
  return LogRatioBounds::none();
}

/// Options of policy_loss(). Defaults are TRL's and verl's (they agree where both have the option).
struct PolicyLossOptions {
  PolicyLossType type = PolicyLossType::ppo_clip;
  /// Granularity of w. ppo_clip, cispo, cispo_two_sided and sapo accept all three levels (TRL computes cispo and
  /// sapo with a sequence-level weight too, warning that a token-sum loss type then weights sequences by length);
  /// vespo, gpg, gmpo, clip_cov and kl_cov are token only (vespo and gmpo build their own sequence weight; the
  /// others are token-level in verl).
  ImportanceLevel importance_level = ImportanceLevel::token;
  /// Clip range of w: [1 − epsilon_low, 1 + epsilon_high] for ppo_clip, clip_cov and cispo_two_sided
  /// (TRL `epsilon`/`epsilon_high`, verl `clip_ratio_low/high`); for gmpo the range of log w, [−ε_low, ε_high]
  /// (the GMPO paper suggests 0.4). For cispo (TRL) epsilon_high is the ABSOLUTE cap on w (ScaleRL uses 5.0)
  /// and epsilon_low is unused. Both must be > 0 for the types with a clip range (ppo_clip, clip_cov,
  /// cispo_two_sided, gmpo), and epsilon_high for cispo; otherwise >= 0.
  double epsilon_low = 0.2, epsilon_high = 0.2;
  /// INTELLECT-2 two-sided clip (TRL `delta`, ppo_clip only): the unclipped branch uses min(w, δ). Must be > 1.
  std::optional<double> delta;
  /// Dual clip (verl `clip_ratio_c`, default there 3.0; OpenRLHF `dual_clip`), ppo_clip only: for A < 0 the loss
  /// is capped at −c·A. Must be > 1. Unset means no dual clip (TRL behaviour).
  std::optional<double> dual_clip_c;
  /// Bounds on log w before exp. Unset (the default): the bounds of the reference the variant follows,
  /// reference_log_ratio_bounds() — verl's ±20 for token-level ppo_clip, cispo_two_sided and sapo, TRL's ±20
  /// inside vespo's S, and none where the cited reference does not clamp (TRL's sequence-level GSPO and LUSPO,
  /// TRL's GSPO-token, TRL's cispo, gmpo, clip_cov, kl_cov). LogRatioBounds::none() gives TRL's unclamped
  /// token-level ppo_clip and sapo; LogRatioBounds::at_most(10) verl's gspo (sequence_token). A clamp cuts the
  /// gradient through w wherever it binds, exactly as torch.clamp does in the references.
  /// Whatever the bounds, |log w| is capped where exp would overflow the compute dtype (80 in float32, 700 in
  /// float64): there the unclamped references give inf or NaN, here a finite loss with no gradient through w.
  std::optional<LogRatioBounds> log_ratio_bounds;

  /// log_ratio_bounds, or the reference's bounds when unset.
  LogRatioBounds effective_log_ratio_bounds() const {
    return log_ratio_bounds.value_or(reference_log_ratio_bounds(type, importance_level));
  }
  /// SAPO gate temperatures τ for A > 0 and A ≤ 0 (TRL `sapo_temperature_pos/neg`, verl `tau_pos/neg`).
  double sapo_tau_pos = 1.0, sapo_tau_neg = 1.05;
  /// VESPO gamma shape k and rate λ for A ≥ 0 and A < 0 (TRL `vespo_k_pos`, `vespo_lambda_pos`, ...).
  double vespo_k_pos = 2, vespo_lambda_pos = 3, vespo_k_neg = 3, vespo_lambda_neg = 2;
  /// Clip-Cov: fraction of valid tokens to drop, and the open covariance band (lb, ub) they are drawn from
  /// (verl `clip_cov_ratio`, `clip_cov_lb`, `clip_cov_ub`).
  double clip_cov_ratio = 2e-4, clip_cov_lb = 1.0, clip_cov_ub = 5.0;
  /// KL-Cov: fraction of valid tokens (top covariance) that get the penalty, and its coefficient
  /// (verl `kl_cov_ratio`, `ppo_kl_coef`: 0.1 in actor.yaml).
  double kl_cov_ratio = 2e-4, kl_cov_coef = 0.1;
  /// Clip-Cov's random token pick. When set, each call draws from a fresh torch::Generator seeded with it, so a
  /// call is a pure function of its inputs (same candidates → same pick). When unset, the pick draws from
  /// LibTorch's default CPU generator (verl behaviour), reproducible through torch::manual_seed.
  std::optional<uint64_t> seed;

  /// Throws ConfigError naming the offending option and value.
  void validate() const {
    const auto type_name = to_string(type);
    const auto level_name = to_string(importance_level);
    // Written as !(x >= 0) so that NaN fails too.
    GRPO_CHECK_CONFIG(epsilon_low >= 0 && std::isfinite(epsilon_low),
                      "PolicyLossOptions.epsilon_low must be finite and >= 0, got {}", epsilon_low);
    GRPO_CHECK_CONFIG(epsilon_high >= 0 && std::isfinite(epsilon_high),
                      "PolicyLossOptions.epsilon_high must be finite and >= 0, got {}", epsilon_high);
    // A clip range with a side of width 0 clips every ratio on that side of 1: the surrogate would carry no
    // gradient there. TRL and verl default to 0.2; GMPO's ε is a log-ratio bound (the paper uses 0.4).
    const bool clip_range = type == PolicyLossType::ppo_clip || type == PolicyLossType::clip_cov ||
                            type == PolicyLossType::cispo_two_sided || type == PolicyLossType::gmpo;
    if (clip_range) {
      GRPO_CHECK_CONFIG(epsilon_low > 0, "PolicyLossOptions.epsilon_low must be > 0 for {}, got {}", type_name,
                        epsilon_low);
      GRPO_CHECK_CONFIG(epsilon_high > 0, "PolicyLossOptions.epsilon_high must be > 0 for {}, got {}", type_name,
                        epsilon_high);
    }
    if (type == PolicyLossType::cispo) {
      GRPO_CHECK_CONFIG(epsilon_high > 0,
                        "PolicyLossOptions.epsilon_high is CISPO's absolute cap on w and must be > 0, got {}",
                        epsilon_high);
    }
    if (delta) {
      GRPO_CHECK_CONFIG(type == PolicyLossType::ppo_clip,
                        "PolicyLossOptions.delta applies only to ppo_clip, but type is {}", type_name);
      GRPO_CHECK_CONFIG(*delta > 1 && std::isfinite(*delta), "PolicyLossOptions.delta must be finite and > 1, got {}",
                        *delta);
    }
    if (dual_clip_c) {
      GRPO_CHECK_CONFIG(type == PolicyLossType::ppo_clip,
                        "PolicyLossOptions.dual_clip_c applies only to ppo_clip, but type is {}", type_name);
      GRPO_CHECK_CONFIG(*dual_clip_c > 1 && std::isfinite(*dual_clip_c),
                        "PolicyLossOptions.dual_clip_c must be finite and > 1, got {}", *dual_clip_c);
    }
    if (log_ratio_bounds) {
      GRPO_CHECK_CONFIG(!std::isnan(log_ratio_bounds->low) && !std::isnan(log_ratio_bounds->high) &&
                            log_ratio_bounds->low < 0 && log_ratio_bounds->high > 0,
                        "PolicyLossOptions.log_ratio_bounds must satisfy low < 0 < high (log w = 0 must stay "
                        "unclamped), got [{}, {}]",
                        log_ratio_bounds->low, log_ratio_bounds->high);
    }
    GRPO_CHECK_CONFIG(sapo_tau_pos > 0 && std::isfinite(sapo_tau_pos),
                      "PolicyLossOptions.sapo_tau_pos must be finite and > 0, got {}", sapo_tau_pos);
    GRPO_CHECK_CONFIG(sapo_tau_neg > 0 && std::isfinite(sapo_tau_neg),
                      "PolicyLossOptions.sapo_tau_neg must be finite and > 0, got {}", sapo_tau_neg);
    GRPO_CHECK_CONFIG(vespo_k_pos >= 0 && std::isfinite(vespo_k_pos),
                      "PolicyLossOptions.vespo_k_pos must be finite and >= 0, got {}", vespo_k_pos);
    GRPO_CHECK_CONFIG(vespo_k_neg >= 0 && std::isfinite(vespo_k_neg),
                      "PolicyLossOptions.vespo_k_neg must be finite and >= 0, got {}", vespo_k_neg);
    GRPO_CHECK_CONFIG(vespo_lambda_pos > 0 && std::isfinite(vespo_lambda_pos),
                      "PolicyLossOptions.vespo_lambda_pos must be finite and > 0, got {}", vespo_lambda_pos);
    GRPO_CHECK_CONFIG(vespo_lambda_neg > 0 && std::isfinite(vespo_lambda_neg),
                      "PolicyLossOptions.vespo_lambda_neg must be finite and > 0, got {}", vespo_lambda_neg);
    GRPO_CHECK_CONFIG(clip_cov_ratio > 0 && clip_cov_ratio <= 1,
                      "PolicyLossOptions.clip_cov_ratio must be in (0, 1], got {}", clip_cov_ratio);
    GRPO_CHECK_CONFIG(clip_cov_lb < clip_cov_ub,
                      "PolicyLossOptions.clip_cov_lb ({}) must be < clip_cov_ub ({})", clip_cov_lb, clip_cov_ub);
    GRPO_CHECK_CONFIG(kl_cov_ratio > 0 && kl_cov_ratio <= 1,
                      "PolicyLossOptions.kl_cov_ratio must be in (0, 1], got {}", kl_cov_ratio);
    GRPO_CHECK_CONFIG(kl_cov_coef >= 0 && std::isfinite(kl_cov_coef),
                      "PolicyLossOptions.kl_cov_coef must be finite and >= 0, got {}", kl_cov_coef);
    switch (type) {
      case PolicyLossType::ppo_clip:
      case PolicyLossType::cispo:
      case PolicyLossType::cispo_two_sided:
      case PolicyLossType::sapo:
        break;
      case PolicyLossType::vespo:
      case PolicyLossType::gpg:
      case PolicyLossType::gmpo:
      case PolicyLossType::clip_cov:
      case PolicyLossType::kl_cov:
        GRPO_CHECK_CONFIG(importance_level == ImportanceLevel::token,
                          "PolicyLossOptions.importance_level = {} is not supported for type {}; it must be token",
                          level_name, type_name);
        break;
    }
  }
};

/// Result of policy_loss(). All [B, T] statistics are false (or 0) at masked positions, so a masked token mean of
/// any of them is the fraction verl logs and TRL logs at token level. At ImportanceLevel::sequence a flag is one
/// value per sequence broadcast over its valid tokens; TRL then averages over sequences (one value each), which
/// differs from the token mean when lengths differ.
struct PolicyLossOutput {
  /// [B, T], dtype of log_probs, zero at masked positions; differentiable with respect to log_probs.
  torch::Tensor per_token_loss;
  /// [B, T] detached log importance weight actually used, after level and clamp (0 at masked positions).
  /// gmpo: the clipped geometric-mean log weight of each sequence, broadcast. gpg, vespo: the clamped token
  /// log ratio (gpg uses no weight; vespo's weight is vespo_phi). verl's `ppo_kl` is mean(lp_old − lp) of the
  /// raw inputs, so compute it from them rather than from this.
  torch::Tensor log_ratio;
  /// [B, T] bool, TRL `clip_ratio/low`: w < 1 − ε_low ∧ A < 0 (ppo_clip, clip_cov, cispo_two_sided);
  /// gmpo: log w_t < −ε_low ∧ A < 0 (TRL GMPO); false for the other types.
  torch::Tensor clipped_low;
  /// [B, T] bool, TRL `clip_ratio/high`: w' > 1 + ε_high ∧ A > 0 with w' = min(w, δ) (TRL compares after δ;
  /// ppo_clip, clip_cov, cispo_two_sided); gmpo: log w_t > ε_high ∧ A > 0; cispo: w > ε_high ∧ A > 0, which is
  /// TRL's `cispo_clip_ratio` mask. False for sapo, vespo, gpg, kl_cov.
  torch::Tensor clipped_high;
  /// [B, T] bool, verl `pg_clipfrac`: ppo_clip: the clipped branch is strictly larger, −A·clip(w) > −A·w';
  /// cispo / cispo_two_sided: w differs from its clipped value; gmpo (verl geo_mean): log w_t outside
  /// [−ε_low, ε_high] ∧ A > 0; clip_cov: the tokens whose loss was dropped (verl logs that as pg_clipfrac).
  /// False for sapo, vespo, gpg, kl_cov (verl logs 0 or nothing).
  torch::Tensor pg_clipped;
  /// [B, T] bool, verl `pg_clipfrac_lower`: ppo_clip with dual_clip_c: A < 0 ∧ max(−A·w', −A·clip(w)) > −A·c;
  /// gmpo (verl geo_mean): log w_t outside [−ε_low, ε_high] ∧ A < 0. False otherwise.
  torch::Tensor dual_clipped;
  /// [B, T] bool: clip_cov: the randomly picked tokens whose loss was set to 0; kl_cov: the top-covariance
  /// tokens that received the |Δ| penalty. False for the other types.
  torch::Tensor cov_selected;
  /// gmpo only (undefined otherwise): the per-sequence loss L_i [B], differentiable; see policy_loss().
  torch::Tensor per_sequence_loss;
  /// vespo only (undefined otherwise): the detached gamma weight φ, shaped like advantages ([B], or [B, T] with 0
  /// at masked positions). TRL logs its mean as `vespo/phi_seq_mean`.
  torch::Tensor vespo_phi;
};

namespace detail {

/// Inputs prepared once: masked positions carry 0 in every tensor, so a pad log-prob of −inf or NaN can
/// neither reach the loss nor its gradient.
struct PolicyLossTensors {
  torch::Tensor lp;     ///< [B, T] compute dtype, differentiable, 0 at masked positions
  torch::Tensor delta;  ///< [B, T] lp − lp_old, differentiable, 0 at masked positions
  torch::Tensor adv;    ///< [B, T] detached, 0 at masked positions
  torch::Tensor valid;  ///< [B, T] bool
  torch::Tensor m;      ///< [B, T] valid as compute dtype
  torch::Tensor len;    ///< [B, 1] max(|o_i|, 1)
};

inline torch::Tensor masked_where(const torch::Tensor& valid, const torch::Tensor& x) {
  return torch::where(valid, x, torch::zeros({}, x.options()));
}

/// Builds PolicyLossTensors in `dtype` (advantages may be undefined: adv is then left undefined).
inline PolicyLossTensors make_policy_loss_tensors(const torch::Tensor& log_probs, const torch::Tensor& old_log_probs,
                                                  const torch::Tensor& advantages, const torch::Tensor& mask,
                                                  torch::ScalarType dtype) {
  const auto opts = log_probs.options().dtype(dtype);
  PolicyLossTensors in;
  in.valid = (mask.to(log_probs.device()) != 0);
  in.m = in.valid.to(dtype);
  in.len = in.m.sum(1, /*keepdim=*/true).clamp_min(1);
  in.lp = masked_where(in.valid, log_probs.to(dtype));
  in.delta = in.lp - masked_where(in.valid, old_log_probs.detach().to(opts));
  if (advantages.defined()) {
    auto adv = advantages.detach().to(opts);
    in.adv = masked_where(in.valid, adv.dim() == 1 ? adv.unsqueeze(1).expand_as(in.lp) : adv);
  }
  return in;
}

/// Throws grpo::Error naming the argument unless log_probs is a floating [B, T] tensor, old_log_probs a floating
/// tensor of the same shape and mask of the same shape.
inline void check_log_prob_inputs(const torch::Tensor& log_probs, const torch::Tensor& old_log_probs,
                                  const torch::Tensor& mask, std::string_view what) {
  check_dim(log_probs, 2, "log_probs", what);
  check_floating(log_probs, "log_probs", what);
  check_same_shape(log_probs, "log_probs", old_log_probs, "old_log_probs", what);
  check_floating(old_log_probs, "old_log_probs", what);
  check_same_shape(log_probs, "log_probs", mask, "mask", what);
}

/// Throws grpo::Error unless advantages is a floating tensor of shape [B] or [B, T] like log_probs [B, T].
inline void check_advantages(const torch::Tensor& advantages, const torch::Tensor& log_probs, std::string_view what) {
  const int64_t batch = log_probs.size(0);
  GRPO_CHECK(advantages.defined() && ((advantages.dim() == 1 && advantages.size(0) == batch) ||
                                      (advantages.dim() == 2 && advantages.sizes() == log_probs.sizes())),
             "{}: advantages must have shape [{}] or {} like log_probs, got {}", what, batch, shape_str(log_probs),
             shape_str(advantages));
  check_floating(advantages, "advantages", what);
}

/// Float32 for half-precision inputs (exp and the sums need its range), the input dtype otherwise.
inline torch::ScalarType policy_loss_compute_dtype(torch::ScalarType dtype) {
  return (dtype == torch::kHalf || dtype == torch::kBFloat16) ? torch::kFloat : dtype;
}

/// |log w| beyond which exp overflows `dtype` (with room to multiply by an advantage): 700 in float64, 80 otherwise
/// (exp(80) ≈ 5.5e34 < 3.4e38, the float32 maximum).
inline double log_ratio_overflow_guard(torch::ScalarType dtype) { return dtype == torch::kDouble ? 700.0 : 80.0; }

/// x clamped to `bounds` intersected with the overflow guard of x's dtype.
inline torch::Tensor bound_log_ratio(const torch::Tensor& x, const LogRatioBounds& bounds) {
  const double guard = log_ratio_overflow_guard(x.scalar_type());
  return x.clamp(std::max(bounds.low, -guard), std::min(bounds.high, guard));
}

/// log w at the requested level, bounded by `bounds` (and the overflow guard); [B, T], differentiable.
inline torch::Tensor log_importance_weight(const PolicyLossTensors& in, ImportanceLevel level,
                                           const LogRatioBounds& bounds) {
  switch (level) {
    case ImportanceLevel::token:
      return bound_log_ratio(in.delta, bounds);
    case ImportanceLevel::sequence: {
      auto seq = (in.delta * in.m).sum(1, /*keepdim=*/true) / in.len;
      return bound_log_ratio(seq, bounds).expand_as(in.delta);
    }
    case ImportanceLevel::sequence_token: {
      auto seq = ((in.delta * in.m).sum(1, /*keepdim=*/true) / in.len).detach();
      return bound_log_ratio(in.lp - in.lp.detach() + seq, bounds);
    }
  }
  return in.delta;
}

inline torch::Tensor log_importance_weight(const PolicyLossTensors& in, const PolicyLossOptions& options) {
  return log_importance_weight(in, options.importance_level, options.effective_log_ratio_bounds());
}

/// Clip-Cov's pick: `count` of the tokens marked in `eligible` ([B, T] bool), uniformly at random without
/// replacement (all of them when there are fewer), as a [B, T] bool mask.
inline torch::Tensor random_pick(const torch::Tensor& eligible, int64_t count, const PolicyLossOptions& options) {
  auto flat = eligible.reshape({-1});
  auto candidates = flat.nonzero().reshape({-1});
  auto picked = torch::zeros_like(flat);
  const int64_t n = candidates.numel();
  if (n > 0) {
    c10::optional<at::Generator> gen;  // c10::optional: LibTorch 1.13's randperm signature
    if (options.seed) gen = at::make_generator<at::CPUGeneratorImpl>(*options.seed);
    auto perm = torch::randperm(n, gen, torch::TensorOptions().dtype(torch::kLong));
    auto chosen = candidates.index_select(0, perm.slice(0, 0, std::min(count, n)).to(candidates.device()));
    picked.index_fill_(0, chosen, true);
  }
  return picked.view_as(eligible);
}

/// Masked mean over all valid tokens of the batch (verl masked_mean), as a 0-d tensor; 0 when nothing is valid.
inline torch::Tensor batch_masked_mean(const torch::Tensor& x, const torch::Tensor& m) {
  return (x * m).sum() / m.sum().clamp_min(1);
}

/// verl's token count max(⌊ratio·N⌋, 1), in double arithmetic like Python's int(ratio * N).
inline int64_t cov_token_count(double ratio, int64_t n_valid) {
  return std::max<int64_t>(static_cast<int64_t>(std::floor(ratio * static_cast<double>(n_valid))), 1);
}

}  // namespace detail

/// Inputs of policy_loss() that only some types read.
struct PolicyLossExtras {
  /// gmpo: [B, T], the subset of the mask its geometric mean runs over (TRL GMPOTrainer: mask · top-entropy mask).
  torch::Tensor mean_mask;
  /// vespo: [B], the sampler importance ratio's log folded into S (TRL get_gamma_weights: Σ_t clamp(log ρ_t,
  /// log 1e-8, 20) for token modes, clamp(log ρ_i, log 1e-8, 20) for sequence modes); GrpoLoss computes it.
  torch::Tensor vespo_log_sampler_ratio;
};

/// Per-token policy loss L_it (to be minimised) of one micro-batch, plus the clip statistics.
///
/// Shapes: log_probs, old_log_probs, mask [B, T]; advantages [B] (broadcast over tokens) or [B, T]. log_probs,
/// old_log_probs and advantages are floating point; mask may be bool or any numeric dtype, non-zero = valid.
/// old_log_probs and advantages are treated as constants (detached). When no old log-probs exist (μ = 1) pass
/// log_probs.detach(), as TRL does. Half-precision inputs are computed in float32 and returned in their dtype.
///
/// With w = exp(clamp(log w, options.effective_log_ratio_bounds())) at the chosen ImportanceLevel:
/// - ppo_clip (TRL `_compute_loss` grpo/dapo/..., verl vanilla, OpenRLHF ppo):
///     w' = min(w, δ) if δ is set else w;  L = max(−A·w', −A·clip(w, 1−ε_low, 1+ε_high));
///     with dual clip c, for A < 0: L = min(L, −A·c).
/// - cispo (TRL): L = −sg(min(w, ε_high))·A·lp.
/// - cispo_two_sided (verl cispo): L = −sg(clip(w, 1−ε_low, 1+ε_high))·A·lp.
/// - sapo (TRL, verl): τ = τ_pos if A > 0 else τ_neg;  L = −(4/τ)·sigmoid(τ·(w − 1))·A.
/// - vespo (TRL get_gamma_weights): S_i = Σ_t m·clamp(lp − lp_old, bounds: ±20), log W = clamp(S_i,
///     log 1e-8, 20), (k, λ) = pos if A ≥ 0 else neg, λ ← max(λ, 1e-4), φ = sg(exp(λ + k·log W − λ·W)) (NaN or
///     inf → 0; φ(1) = 1);  L = −φ·A·lp. With extras.vespo_log_sampler_ratio, S_i += that term before the clamp
///     (TRL folds the sampler ratio into S instead of multiplying the loss by it).
/// - gpg (verl gpg, REINFORCE): L = −A·lp.
/// - gmpo, a per-SEQUENCE loss L_i = −A_i·w_i, in the form of the reference that takes advantages of that shape.
///     Δ = lp − lp_old (bounded only if log_ratio_bounds is set), c = clip(Δ, −ε_low, ε_high), k = m·mean_mask
///     (the tokens the geometric mean runs over: extras.mean_mask, default all; GrpoLoss passes TRL's top-entropy
///     mask).
///     [B] advantages, TRL experimental GMPOTrainer: Δ' = min(Δ, c) if A > 0 else max(Δ, c),
///       w_i = exp(Σ_t k·Δ' / max(Σ_t k, 1)), A_i = A (an empty row gives −A_i, as TRL).
///     [B, T] advantages, verl geo_mean: s = sign(A), Δ' = s·min(s·Δ, s·c), w_i = exp(Σ_t k·Δ' / (Σ_t k + 1e-8)),
///       A_i = Σ_t m·A / (|o_i| + 1e-8) (an empty row gives 0).
///     PolicyLossOutput::per_sequence_loss holds L_i [B]; per_token_loss holds L_i on every valid token of row i (so
///     a row's token mean is L_i for non-empty rows). GrpoLoss averages per_sequence_loss over all B rows, as both
///     references do (it accepts gmpo only with loss_type grpo).
/// - clip_cov (verl): L = max(−A·w, −A·clip(w, 1−ε_low, 1+ε_high)) (no dual clip); with batch means over valid
///     tokens, cov = (A − mean A)·(lp − mean sg(lp)); candidates are valid tokens not already clipped (clipped
///     branch strictly larger) with clip_cov_lb < cov < clip_cov_ub; min(#candidates, max(⌊ratio·N⌋, 1)) of
///     them, N = valid tokens in the batch, are picked uniformly at random (see PolicyLossOptions::seed) and get
///     L = 0 (no gradient).
/// - kl_cov (verl): L = −A·w; the max(⌊ratio·N⌋, 1) valid tokens with the largest cov (same formula, detached)
///     get L = −A·w + kl_cov_coef·|lp − lp_old| (unclamped Δ).
/// clip_cov and kl_cov select over the whole micro-batch passed in, as verl does: splitting a batch differently
/// changes the selection.
///
/// Numerics: masked positions never influence values or gradients (even if their log-probs are ±inf or NaN);
/// |o_i| is guarded with max(·, 1), so empty rows give zero loss rows and zero gradients; the clamp keeps w,
/// the loss and the gradient finite for any finite log ratio.
inline PolicyLossOutput policy_loss(const torch::Tensor& log_probs, const torch::Tensor& old_log_probs,
                                    const torch::Tensor& advantages, const torch::Tensor& mask,
                                    const PolicyLossOptions& options, const PolicyLossExtras& extras = {}) {
  const torch::Tensor& mean_mask = extras.mean_mask;
  constexpr std::string_view kWhat = "policy_loss";
  options.validate();
  detail::check_log_prob_inputs(log_probs, old_log_probs, mask, kWhat);
  detail::check_advantages(advantages, log_probs, kWhat);
  if (mean_mask.defined()) detail::check_same_shape(log_probs, "log_probs", mean_mask, "mean_mask", kWhat);
  if (extras.vespo_log_sampler_ratio.defined()) {
    GRPO_CHECK(extras.vespo_log_sampler_ratio.dim() == 1 && extras.vespo_log_sampler_ratio.size(0) == log_probs.size(0),
               "{}: vespo_log_sampler_ratio must have shape [{}], got {}", kWhat, log_probs.size(0),
               shape_str(extras.vespo_log_sampler_ratio));
  }

  const auto out_dtype = log_probs.scalar_type();
  const auto dtype = detail::policy_loss_compute_dtype(out_dtype);
  const auto opts = log_probs.options().dtype(dtype);
  const detail::PolicyLossTensors in =
      detail::make_policy_loss_tensors(log_probs, old_log_probs, advantages, mask, dtype);

  const auto& A = in.adv;
  const auto positive = A > 0;
  const auto negative = A < 0;
  const auto none = torch::zeros_like(in.valid);
  const double eps_low = options.epsilon_low, eps_high = options.epsilon_high;

  PolicyLossOutput out;
  out.clipped_low = none;
  out.clipped_high = none;
  out.pg_clipped = none;
  out.dual_clipped = none;
  out.cov_selected = none;
  torch::Tensor loss;
  torch::Tensor log_w;

  switch (options.type) {
    case PolicyLossType::ppo_clip:
    case PolicyLossType::clip_cov: {
      log_w = detail::log_importance_weight(in, options);
      auto w = log_w.exp();
      auto w1 = options.delta ? w.clamp_max(*options.delta) : w;
      auto unclipped = -A * w1;
      auto clipped = -A * w.clamp(1 - eps_low, 1 + eps_high);
      loss = torch::maximum(unclipped, clipped);
      out.pg_clipped = clipped > unclipped;
      out.clipped_low = (w < 1 - eps_low) & negative;
      out.clipped_high = (w1 > 1 + eps_high) & positive;
      if (options.dual_clip_c) {
        auto cap = -A * *options.dual_clip_c;
        out.dual_clipped = negative & (loss > cap);
        loss = torch::where(negative, torch::minimum(loss, cap), loss);
      }
      if (options.type == PolicyLossType::clip_cov) {
        auto lp_d = in.lp.detach();
        auto cov = (A - detail::batch_masked_mean(A, in.m)) * (lp_d - detail::batch_masked_mean(lp_d, in.m));
        auto eligible = in.valid & ~out.pg_clipped & (cov > options.clip_cov_lb) & (cov < options.clip_cov_ub);
        const int64_t n_valid = in.valid.sum().item<int64_t>();
        out.cov_selected = detail::random_pick(eligible, detail::cov_token_count(options.clip_cov_ratio, n_valid),
                                               options);
        loss = detail::masked_where(~out.cov_selected, loss);
        out.pg_clipped = out.cov_selected;
      }
      break;
    }
    case PolicyLossType::cispo:
    case PolicyLossType::cispo_two_sided: {
      log_w = detail::log_importance_weight(in, options);
      auto w = log_w.exp().detach();
      torch::Tensor weight;
      if (options.type == PolicyLossType::cispo) {
        weight = w.clamp_max(eps_high);
        out.pg_clipped = w > eps_high;
        out.clipped_high = out.pg_clipped & positive;
      } else {
        weight = w.clamp(1 - eps_low, 1 + eps_high);
        out.pg_clipped = (w < 1 - eps_low) | (w > 1 + eps_high);
        out.clipped_low = (w < 1 - eps_low) & negative;
        out.clipped_high = (w > 1 + eps_high) & positive;
      }
      loss = -weight * A * in.lp;
      break;
    }
    case PolicyLossType::sapo: {
      log_w = detail::log_importance_weight(in, options);
      auto w = log_w.exp();
      auto tau = torch::where(positive, torch::full({}, options.sapo_tau_pos, opts),
                              torch::full({}, options.sapo_tau_neg, opts));
      loss = -(4.0 / tau) * torch::sigmoid(tau * (w - 1)) * A;
      break;
    }
    case PolicyLossType::vespo: {
      log_w = detail::log_importance_weight(in, options);
      torch::Tensor phi;
      {
        torch::NoGradGuard no_grad;
        auto seq_log_ratio = (log_w.detach() * in.m).sum(1, /*keepdim=*/true);
        if (extras.vespo_log_sampler_ratio.defined())
          seq_log_ratio = seq_log_ratio + extras.vespo_log_sampler_ratio.detach().to(opts).unsqueeze(1);
        auto log_big_w = seq_log_ratio.clamp(std::log(1e-8), 20.0);
        auto big_w = log_big_w.exp();
        // TRL picks (k, λ) from the sign of the advantage as given: per sequence for [B], per token for [B, T].
        auto nonneg = (advantages.dim() == 1 ? advantages.detach().to(opts).unsqueeze(1) : A) >= 0;
        auto k = torch::where(nonneg, torch::full({}, options.vespo_k_pos, opts),
                              torch::full({}, options.vespo_k_neg, opts));
        auto lambda = torch::where(nonneg, torch::full({}, options.vespo_lambda_pos, opts),
                                   torch::full({}, options.vespo_lambda_neg, opts))
                          .clamp_min(1e-4);
        phi = torch::nan_to_num(torch::exp(lambda + k * log_big_w - lambda * big_w), 0.0, 0.0, 0.0);
      }
      out.vespo_phi = advantages.dim() == 1 ? phi.squeeze(1) : detail::masked_where(in.valid, phi);
      loss = -phi * A * in.lp;
      break;
    }
    case PolicyLossType::gpg: {
      log_w = detail::log_importance_weight(in, options);
      loss = -A * in.lp;
      break;
    }
    case PolicyLossType::gmpo: {
      // TRL GMPOTrainer for [B] advantages, verl compute_policy_loss_geo_mean for [B, T] (formula above).
      const bool verl_form = advantages.dim() == 2;
      auto token_log_w = detail::bound_log_ratio(in.delta, options.effective_log_ratio_bounds());
      auto in_range = token_log_w.clamp(-eps_low, eps_high);
      torch::Tensor sign_aware;
      if (verl_form) {
        auto sgn = A.sign();
        sign_aware = sgn * torch::minimum(sgn * token_log_w, sgn * in_range);
      } else {
        sign_aware = torch::where(positive, torch::minimum(token_log_w, in_range),
                                  torch::maximum(token_log_w, in_range));
      }
      const torch::Tensor kept = mean_mask.defined() ? in.m * (mean_mask.to(in.m.device()) != 0).to(dtype) : in.m;
      const auto kept_count = kept.sum(1);
      auto seq_log_w = (sign_aware * kept).sum(1) / (verl_form ? kept_count + 1e-8 : kept_count.clamp_min(1.0));
      auto seq_adv = verl_form ? (A * in.m).sum(1) / (in.m.sum(1) + 1e-8) : advantages.detach().to(opts);
      out.per_sequence_loss = -seq_adv * seq_log_w.exp();
      loss = out.per_sequence_loss.unsqueeze(1).expand_as(A);
      log_w = seq_log_w.unsqueeze(1).expand_as(A);
      auto detached = token_log_w.detach();
      out.clipped_low = (detached < -eps_low) & negative;
      out.clipped_high = (detached > eps_high) & positive;
      auto outside = (detached < -eps_low) | (detached > eps_high);
      out.pg_clipped = outside & positive;
      out.dual_clipped = outside & negative;
      break;
    }
    case PolicyLossType::kl_cov: {
      log_w = detail::log_importance_weight(in, options);
      loss = -A * log_w.exp();
      const int64_t n_valid = in.valid.sum().item<int64_t>();
      if (n_valid > 0) {
        auto lp_d = in.lp.detach();
        auto cov = (A - detail::batch_masked_mean(A, in.m)) * (lp_d - detail::batch_masked_mean(lp_d, in.m));
        cov = torch::where(in.valid, cov, torch::full({}, -std::numeric_limits<double>::infinity(), opts));
        auto top = std::get<1>(cov.reshape({-1}).topk(detail::cov_token_count(options.kl_cov_ratio, n_valid)));
        auto selected = torch::zeros({cov.numel()}, in.valid.options());
        selected.index_fill_(0, top, true);
        out.cov_selected = selected.view_as(in.valid);
        loss = loss + options.kl_cov_coef * out.cov_selected.to(dtype) * in.delta.abs();
      }
      break;
    }
  }

  // Every statistic is false at masked positions (A is 0 there, but w-only conditions are not).
  out.pg_clipped = out.pg_clipped & in.valid;
  out.clipped_low = out.clipped_low & in.valid;
  out.clipped_high = out.clipped_high & in.valid;
  out.dual_clipped = out.dual_clipped & in.valid;
  out.log_ratio = detail::masked_where(in.valid, log_w.detach());
  out.per_token_loss = detail::masked_where(in.valid, loss).to(out_dtype);
  if (out.per_sequence_loss.defined()) out.per_sequence_loss = out.per_sequence_loss.to(out_dtype);
  return out;
}

/// The log importance weight log w [B, T] at `level` (token, GSPO sequence, GSPO-token), clamped to `bounds` (and
/// the dtype's overflow guard), 0 at masked positions, differentiable with respect to log_probs (dtype of
/// log_probs). With options.importance_level and options.effective_log_ratio_bounds() it is the weight ppo_clip,
/// sapo and (detached) cispo use; GrpoLoss uses it for TRL's importance-weighted KL (`use_bias_correction_kl`:
/// kl·w, where TRL does not clamp). Shapes and mask as policy_loss().
inline torch::Tensor log_importance_weight(const torch::Tensor& log_probs, const torch::Tensor& old_log_probs,
                                           const torch::Tensor& mask, ImportanceLevel level,
                                           const LogRatioBounds& bounds) {
  constexpr std::string_view kWhat = "log_importance_weight";
  detail::check_log_prob_inputs(log_probs, old_log_probs, mask, kWhat);
  const auto in = detail::make_policy_loss_tensors(log_probs, old_log_probs, torch::Tensor(), mask,
                                                   detail::policy_loss_compute_dtype(log_probs.scalar_type()));
  return detail::masked_where(in.valid, detail::log_importance_weight(in, level, bounds)).to(log_probs.scalar_type());
}

}  // namespace grpo
