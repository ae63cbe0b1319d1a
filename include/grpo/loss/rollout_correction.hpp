// SPDX-License-Identifier: Apache-2.0
// Rejection sampling of tokens or sequences whose trainer/sampler mismatch is too large: verl's rollout correction
// `rollout_rs` (volcengine/verl b178a3c, verl/trainer/ppo/rollout_corr_helper.py compute_rollout_rejection_mask).
//
// With log r_t = clamp(lp_trainer − lp_sampler, ±20) on valid tokens (verl's SAFETY_BOUND):
//   k1_t = −log r_t,   k2_t = ½ (log r_t)²,   k3_t = exp(log r_t) − 1 − log r_t
//   token_kX        keep token t when its statistic passes
//   seq_sum_kX      Σ_t kX_t over the row; seq_mean_kX the masked mean (verl: Σ / (|o| + 1e-8)); seq_max_kX the max
//                   (0 for an empty row); the whole row is kept or rejected
// k1 statistics pass when log(lower) ≤ stat ≤ log(upper) (a ratio band, e.g. "0.5_2.0"); k2 and k3 when stat ≤ upper.
// Several criteria are ANDed. The importance-weight half of verl's rollout correction (rollout_is = token / sequence
// with a threshold, optional batch normalisation) is SamplerCorrectionOptions (importance_correction.hpp:
// token_truncate / sequence_truncate, clip_max = threshold, log_ratio_bound = 20, batch_normalize); verl's
// bypass mode (IS-weighted REINFORCE) is policy type gpg with those weights and the sampler's log-probs as the old
// ones.
#pragma once

#include <grpo/core/ascii_text.hpp>
#include <grpo/core/enum_names.hpp>
#include <grpo/core/error.hpp>
#include <grpo/core/tensor_checks.hpp>

#include <torch/torch.h>

#include <cmath>
#include <string>
#include <string_view>
#include <vector>

namespace grpo {

/// The statistic a rejection criterion tests (verl's rollout_rs option names).
enum class RolloutStatistic {
  token_k1,
  token_k2,
  token_k3,
  seq_sum_k1,
  seq_sum_k2,
  seq_sum_k3,
  seq_mean_k1,
  seq_mean_k2,
  seq_mean_k3,
  seq_max_k2,
  seq_max_k3,
};

namespace detail {
inline constexpr EnumNames<RolloutStatistic, 11> kRolloutStatisticNames{{
    {RolloutStatistic::token_k1, "token_k1"},
    {RolloutStatistic::token_k2, "token_k2"},
    {RolloutStatistic::token_k3, "token_k3"},
    {RolloutStatistic::seq_sum_k1, "seq_sum_k1"},
    {RolloutStatistic::seq_sum_k2, "seq_sum_k2"},
    {RolloutStatistic::seq_sum_k3, "seq_sum_k3"},
    {RolloutStatistic::seq_mean_k1, "seq_mean_k1"},
    {RolloutStatistic::seq_mean_k2, "seq_mean_k2"},
    {RolloutStatistic::seq_mean_k3, "seq_mean_k3"},
    {RolloutStatistic::seq_max_k2, "seq_max_k2"},
    {RolloutStatistic::seq_max_k3, "seq_max_k3"},
}};

inline bool is_k1(RolloutStatistic s) {
  return s == RolloutStatistic::token_k1 || s == RolloutStatistic::seq_sum_k1 || s == RolloutStatistic::seq_mean_k1;
}

/// The positive number `text` (as Python's float() reads it: surrounding spaces, "inf" for no bound) of `option`,
/// or ConfigError.
inline double positive_threshold(std::string_view text, std::string_view option) {
  const std::string number(trim_ascii_space(text));
  std::size_t used = 0;
  double value = 0.0;
  try {
    value = std::stod(number, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  GRPO_CHECK_CONFIG(used == number.size() && !number.empty() && value > 0.0,
                    "rollout_rs_threshold: '{}' for option '{}' must be a positive number", text, option);
  return value;
}

/// `text` split at commas, parts trimmed, empty parts dropped.
inline std::vector<std::string> comma_parts(std::string_view text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = std::min(text.find(',', start), text.size());
    std::string_view part = text.substr(start, end - start);
    part = trim_ascii_space(part);
    if (!part.empty()) out.emplace_back(part);
    start = end + 1;
  }
  return out;
}
}  // namespace detail

/// verl's option names ("token_k1", ...); a rejection option is parsed with its thresholds (parse_rollout_rejection).
GRPO_ENUM_NAMES(RolloutStatistic, detail::kRolloutStatisticNames, "rollout statistic");

/// One criterion: k1 statistics keep log(lower) ≤ stat ≤ log(upper) (lower, upper > 0 are ratio bounds; verl accepts
/// lower > upper, which rejects everything, and +inf for no bound); k2 and k3 keep stat ≤ upper (lower unused).
struct RolloutRejectionCriterion {
  RolloutStatistic statistic = RolloutStatistic::token_k1;
  double lower = 0.0;
  double upper = 0.0;
};

/// Throws ConfigError, prefixed with `what`, unless every criterion's thresholds are > 0 (k1: lower and upper; k2, k3:
/// upper). NaN fails.
inline void validate_rollout_rejection(const std::vector<RolloutRejectionCriterion>& criteria, std::string_view what) {
  for (const auto& c : criteria) {
    GRPO_CHECK_CONFIG(c.upper > 0.0 && (!detail::is_k1(c.statistic) || c.lower > 0.0),
                      "{}: option '{}' needs thresholds > 0, got lower {} and upper {}", what, to_string(c.statistic),
                      c.lower, c.upper);
  }
}

/// verl's rollout_rs ("token_k1,seq_mean_k3": options, duplicates dropped) and rollout_rs_threshold (one entry per
/// option, or one shared by all; a k1 entry is "lower_upper" or "upper", then lower = 1/upper; k2/k3 entries are one
/// upper bound) as criteria. ConfigError naming rollout_rs or rollout_rs_threshold and the entry at fault.
inline std::vector<RolloutRejectionCriterion> parse_rollout_rejection(std::string_view rollout_rs,
                                                                      std::string_view rollout_rs_threshold) {
  std::vector<RolloutStatistic> options;
  for (const auto& name : detail::comma_parts(rollout_rs)) {
    const auto found = detail::find_enum(name, detail::kRolloutStatisticNames);
    GRPO_CHECK_CONFIG(found.has_value(), "rollout_rs: unknown option '{}' (accepted: {})", name,
                      detail::joined_names(detail::kRolloutStatisticNames));
    if (std::find(options.begin(), options.end(), *found) == options.end()) options.push_back(*found);
  }
  GRPO_CHECK_CONFIG(!options.empty(), "rollout_rs must name at least one option, got '{}'", rollout_rs);
  auto specs = detail::comma_parts(rollout_rs_threshold);
  GRPO_CHECK_CONFIG(specs.size() == 1 || specs.size() == options.size(),
                    "rollout_rs_threshold: {} entries for {} rollout_rs options (give one shared entry or one each)",
                    specs.size(), options.size());
  if (specs.size() == 1) specs.assign(options.size(), specs.front());
  std::vector<RolloutRejectionCriterion> out;
  for (std::size_t i = 0; i < options.size(); ++i) {
    const std::string_view name = to_string(options[i]);
    const std::string& spec = specs[i];
    RolloutRejectionCriterion c{.statistic = options[i]};
    const std::size_t bar = spec.find('_');
    if (detail::is_k1(options[i])) {
      c.upper = detail::positive_threshold(bar == std::string::npos ? spec : spec.substr(bar + 1), name);
      c.lower = bar == std::string::npos ? 1.0 / c.upper : detail::positive_threshold(spec.substr(0, bar), name);
    } else {
      GRPO_CHECK_CONFIG(bar == std::string::npos,
                        "rollout_rs_threshold: option '{}' takes one upper bound, without '_', got '{}'", name, spec);
      c.upper = detail::positive_threshold(spec, name);
    }
    out.push_back(c);
  }
  return out;
}

/// The loss mask with rejected tokens and sequences removed (verl's modified_response_mask): mask × Π keep.
/// trainer_log_probs (verl: the old log-probs), sampler_log_probs: [B, T] floating; mask: [B, T], nonzero = valid.
/// Returns [B, T] of mask's dtype (bool stays bool), no gradient. Masked positions never influence the statistics
/// (padding log-probs of −inf or NaN are fine).
inline torch::Tensor rollout_rejection_mask(const torch::Tensor& trainer_log_probs,
                                            const torch::Tensor& sampler_log_probs, const torch::Tensor& mask,
                                            const std::vector<RolloutRejectionCriterion>& criteria) {
  constexpr std::string_view kWhat = "rollout_rejection_mask";
  detail::check_dim(trainer_log_probs, 2, "trainer_log_probs", kWhat);
  detail::check_floating(trainer_log_probs, "trainer_log_probs", kWhat);
  detail::check_same_shape(trainer_log_probs, "trainer_log_probs", sampler_log_probs, "sampler_log_probs", kWhat);
  detail::check_same_shape(trainer_log_probs, "trainer_log_probs", mask, "mask", kWhat);
  torch::NoGradGuard no_grad;
  const auto f64 = trainer_log_probs.options().dtype(torch::kFloat64);
  const torch::Tensor valid = mask != 0;
  const torch::Tensor m = valid.to(torch::kFloat64);
  const torch::Tensor log_r = (trainer_log_probs.to(torch::kFloat64) - sampler_log_probs.to(torch::kFloat64))
                                  .masked_fill(~valid, 0.0)
                                  .clamp(-20.0, 20.0);
  const torch::Tensor k1 = -log_r, k2 = 0.5 * log_r * log_r, k3 = log_r.exp() - 1.0 - log_r;
  validate_rollout_rejection(criteria, kWhat);
  torch::Tensor keep = valid.clone();
  for (const auto& c : criteria) {
    const std::string_view name = to_string(c.statistic);
    const torch::Tensor& token = name.ends_with("k1") ? k1 : name.ends_with("k2") ? k2 : k3;
    torch::Tensor stat;
    if (name.starts_with("token")) {
      stat = token;
    } else if (name.starts_with("seq_sum")) {
      stat = (token * m).sum(1, /*keepdim=*/true);
    } else if (name.starts_with("seq_mean")) {
      stat = (token * m).sum(1, /*keepdim=*/true) / (m.sum(1, /*keepdim=*/true) + 1e-8);
    } else {  // seq_max: −inf over an empty row becomes 0
      const torch::Tensor max =
          token.masked_fill(~valid, -std::numeric_limits<double>::infinity()).amax(1, /*keepdim=*/true);
      stat = torch::where(torch::isinf(max), torch::zeros({}, f64), max);
    }
    const torch::Tensor pass = detail::is_k1(c.statistic)
                                   ? (stat >= std::log(c.lower)) & (stat <= std::log(c.upper))
                                   : stat <= c.upper;
    keep = keep & pass.expand_as(keep);
  }
  return mask.scalar_type() == torch::kBool ? keep : mask * keep.to(mask.scalar_type());
}

}  // namespace grpo
