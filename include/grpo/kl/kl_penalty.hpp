// SPDX-License-Identifier: Apache-2.0
// Per-token estimators of KL(π_θ ‖ π_ref) from the log-probs of the sampled tokens, as used for the KL term of
// GRPO-style losses (Schulman's k1/k2/k3, "Approximating KL divergence", 2020), in the variants of TRL, verl and
// OpenRLHF, plus verl's straight-through "+" forms and TRL's importance-weighted (bias-corrected) form.
#pragma once

#include <torch/torch.h>

#include <grpo/core/enum_names.hpp>
#include <grpo/core/tensor_checks.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace grpo {

/// Which per-token KL estimator. With Δ = lp − lp_ref (policy minus reference log-prob of the sampled token):
///   k1          Δ                                   (verl "kl"/"k1", OpenRLHF "k1", ROLL "kl")
///   abs         |Δ|                                 (verl, ROLL "abs")
///   k2          ½Δ²                                 (verl "mse"/"k2", OpenRLHF "k2")
///   k3          exp(−Δ) + Δ − 1, unclamped          (TRL, Liger; OpenRLHF "k3" when combined with clamp = 10)
///   low_var_kl  d = clamp(−Δ, −20, 20); clamp(exp(d) − d − 1, −10, 10)   (verl "low_var_kl" and verl's "k3")
/// Note the one name clash between systems: verl's "k3" is its clamped low_var_kl, TRL's k3 is unclamped. Here
/// `k3` is TRL's form; verl users who wrote "k3" want `low_var_kl`. Unclamped k3 overflows once −Δ exceeds the
/// exp range of the dtype (≈ 88 in float32); low_var_kl is finite for every input.
enum class KlEstimator { k1, abs, k2, k3, low_var_kl };

/// Options of kl_penalty.
struct KlOptions {
  KlEstimator estimator = KlEstimator::k3;
  /// verl's "+" suffix (k1+, k3+, low_var_kl+ ...): the value of the estimator with the gradient of k2,
  /// computed as k2 − sg(k2) + sg(estimator). k2's gradient Δ·∇lp is the unbiased gradient of KL(π_θ‖π_ref)
  /// when tokens are sampled from π_θ, which k1 and k3 are not (their value is unbiased, their gradient is not).
  bool straight_through = false;
  /// Clamp the estimate to [−clamp, clamp] (OpenRLHF clamps every estimator to ±10). Applied before the
  /// straight-through combination, so it limits the value only.
  std::optional<double> clamp;

  /// Throws ConfigError unless clamp (if set) is > 0.
  void validate() const {
    GRPO_CHECK_CONFIG(!clamp || *clamp > 0.0, "KlOptions: clamp must be > 0, got {}", clamp.value_or(0.0));
  }
};

namespace detail {
/// verl's spellings "kl" (k1) and "mse" (k2) are aliases; verl's "k3" is NOT an alias of low_var_kl here (see
/// KlEstimator), it parses as TRL's unclamped k3.
inline constexpr EnumNames<KlEstimator, 7> kKlEstimatorNames{{
    {KlEstimator::k1, "k1"},
    {KlEstimator::k1, "kl"},
    {KlEstimator::abs, "abs"},
    {KlEstimator::k2, "k2"},
    {KlEstimator::k2, "mse"},
    {KlEstimator::k3, "k3"},
    {KlEstimator::low_var_kl, "low_var_kl"},
}};
}  // namespace detail

/// "k1", "abs", "k2", "k3", "low_var_kl" (aliases "kl", "mse"); parsed with verl's '+' by parse_kl_estimator.
GRPO_ENUM_NAMES(KlEstimator, detail::kKlEstimatorNames, "KL estimator");

/// Parses a KL estimator name as TRL, verl, OpenRLHF and ROLL spell them: "k1"/"kl", "abs", "k2"/"mse", "k3",
/// "low_var_kl", each optionally followed by "+" (straight-through, verl). "k3" means TRL's unclamped k3 (see
/// KlEstimator). Throws ConfigError naming the unknown value and the accepted names.
inline KlOptions parse_kl_estimator(std::string_view name) {
  KlOptions options;
  std::string_view base = name;
  if (!base.empty() && base.back() == '+') {
    options.straight_through = true;
    base.remove_suffix(1);
  }
  const auto estimator = detail::find_enum(base, detail::kKlEstimatorNames);
  if (!estimator) {
    detail::throw_unknown_name("KL estimator", name, detail::kKlEstimatorNames,
                               ", each optionally followed by '+' (verl's straight-through form)");
  }
  options.estimator = *estimator;
  return options;
}

/// Per-token KL estimate between the policy and the reference, from the log-probs of the sampled tokens.
/// log_probs (lp, with grad) and ref_log_probs (lp_ref, usually without grad): same shape (normally [B, T]),
/// same floating dtype. Returns that shape and dtype; masking and aggregation are the caller's (see
/// aggregation.hpp). Formulas in KlEstimator and KlOptions.
inline torch::Tensor kl_penalty(const torch::Tensor& log_probs, const torch::Tensor& ref_log_probs,
                                const KlOptions& options = {}) {
  options.validate();
  detail::check_floating(log_probs, "log_probs", "kl_penalty");
  detail::check_same_shape(log_probs, "log_probs", ref_log_probs, "ref_log_probs", "kl_penalty");
  GRPO_CHECK(log_probs.scalar_type() == ref_log_probs.scalar_type(),
             "kl_penalty: log_probs is {} but ref_log_probs is {}", c10::toString(log_probs.scalar_type()),
             c10::toString(ref_log_probs.scalar_type()));
  const torch::Tensor delta = log_probs - ref_log_probs;
  torch::Tensor value;
  switch (options.estimator) {
    case KlEstimator::k1:
      value = delta;
      break;
    case KlEstimator::abs:
      value = delta.abs();
      break;
    case KlEstimator::k2:
      value = 0.5 * delta.square();
      break;
    case KlEstimator::k3:
      value = torch::exp(-delta) + delta - 1.0;
      break;
    case KlEstimator::low_var_kl: {
      // Clamping the log-ratio first keeps exp finite, so the outer clamp never multiplies 0 by inf in backward.
      const torch::Tensor d = torch::clamp(-delta, -20.0, 20.0);
      value = torch::clamp(torch::exp(d) - d - 1.0, -10.0, 10.0);
      break;
    }
  }
  if (options.clamp) value = torch::clamp(value, -*options.clamp, *options.clamp);
  if (!options.straight_through) return value;
  const torch::Tensor k2 = 0.5 * delta.square();
  return k2 - k2.detach() + value.detach();
}

/// Importance-weighted ("bias-corrected") KL of TRL's use_bias_correction_kl (DeepSeek-V3.2): KL_t · w_t, with
/// w = π_θ/π_old the policy importance weight (with its gradient, as TRL multiplies by coef_1). The per-token
/// estimate is of KL under π_old's samples; weighting by w makes it an estimate under π_θ.
/// kl: [B, T]; importance_weight: [B, T] (token level) or [B, 1] (sequence level). Returns [B, T].
inline torch::Tensor importance_weighted_kl(const torch::Tensor& kl, const torch::Tensor& importance_weight) {
  detail::check_dim(kl, 2, "kl", "importance_weighted_kl");
  detail::check_dim(importance_weight, 2, "importance_weight", "importance_weighted_kl");
  GRPO_CHECK(importance_weight.size(0) == kl.size(0) &&
                 (importance_weight.size(1) == kl.size(1) || importance_weight.size(1) == 1),
             "importance_weighted_kl: importance_weight has shape {} but kl has shape {} (expected [B, T] or [B, 1])",
             shape_str(importance_weight), shape_str(kl));
  return kl * importance_weight;
}

}  // namespace grpo
