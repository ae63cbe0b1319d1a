// SPDX-License-Identifier: Apache-2.0
// Token-level rewards and the advantage estimators that work on them (verl, volcengine/verl b178a3c,
// verl/trainer/ppo/core_algos.py and ray_trainer.py apply_kl_penalty):
//
//   outcome_token_rewards          the sequence score on its last valid token, 0 elsewhere (verl's reward managers)
//   kl_shaped_token_rewards        r_t − β·KL_t (verl compute_rewards / use_kl_in_reward; TRL RLOO puts β·Σ_t KL_t
//                                  into the sequence reward, the same sum)
//   reinforce_pp_advantages        REINFORCE++ without baseline: G_t = r_t + γ·G_{t+1} (reset after the last valid
//                                  token), whitened over the batch's valid tokens
//   remax_advantages               ReMax: A_t = Σ_{t'≥t} r_t' − b_i, b_i the reward of prompt i's greedy completion
//   optimal_token_baseline_advantages   OTB: per group and step, B_t = Σ_i G_it·W_it / (Σ_i W_it + ε) with
//                                  W_t = Σ_{j≤t} (1 − 2π_j + Σ_v π_v²)·m_j (× ρ_j² with IS weights); A = (G − B)·m
//   (gae)                          GAE on a critic's values: advantage/gae.hpp
//
// All take [B, T] tensors (B sequences, T completion tokens) and a [B, T] mask (nonzero = valid), compute in float64
// without gradient, and return [B, T] float64 advantages that are 0 at masked positions; GrpoLoss takes them as
// LossInputs::advantages. Masked positions of the inputs never reach a result (they may hold −inf or NaN).
#pragma once

#include <grpo/advantage/masked_whiten.hpp>
#include <grpo/core/enum_names.hpp>
#include <grpo/core/error.hpp>
#include <grpo/core/tensor_checks.hpp>

#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string_view>
#include <vector>

namespace grpo {

/// The token-level estimators a trainer can schedule instead of a group-relative one (GroupAdvantage).
enum class TokenAdvantageEstimator {
  none,                    ///< no token-level estimator: the sequence rewards go to GroupAdvantage
  reinforce_pp,            ///< reinforce_pp_advantages (verl adv_estimator=reinforce_plus_plus)
  remax,                   ///< remax_advantages, the baseline from a greedy completion per prompt (verl remax)
  optimal_token_baseline,  ///< optimal_token_baseline_advantages (verl optimal_token_baseline; alias "otb")
  gae,                     ///< gae_advantages (gae.hpp) on a critic's values: PPO (verl and ROLL adv_estimator=gae)
};

/// Options of the token-level estimator a trainer runs.
struct TokenAdvantageOptions {
  TokenAdvantageEstimator estimator = TokenAdvantageEstimator::none;
  double gamma = 1.0;   ///< reinforce_pp's and gae's discount (verl algorithm.gamma, default 1)
  double lambda = 1.0;  ///< gae's λ (verl algorithm.lam, ROLL lambd; default 1)
  /// optimal_token_baseline: verl's handle_zero_tail (see OptimalTokenBaselineOptions).
  bool handle_zero_tail = false;

  /// ConfigError naming the field: gamma or lambda outside [0, 1].
  void validate() const {
    GRPO_CHECK_CONFIG(gamma >= 0.0 && gamma <= 1.0, "advantage gamma must be in [0, 1], got {}", gamma);
    GRPO_CHECK_CONFIG(lambda >= 0.0 && lambda <= 1.0, "gae lambda must be in [0, 1], got {}", lambda);
  }
};

namespace detail {
/// `none` has no name: it is what a group-relative estimator's name selects.
inline constexpr EnumNames<TokenAdvantageEstimator, 6> kTokenAdvantageEstimatorNames{{
    {TokenAdvantageEstimator::reinforce_pp, "reinforce_pp"},
    {TokenAdvantageEstimator::reinforce_pp, "reinforce_plus_plus"},
    {TokenAdvantageEstimator::remax, "remax"},
    {TokenAdvantageEstimator::optimal_token_baseline, "optimal_token_baseline"},
    {TokenAdvantageEstimator::optimal_token_baseline, "otb"},
    {TokenAdvantageEstimator::gae, "gae"},
}};
static_assert(names_are_unique(kTokenAdvantageEstimatorNames));
}  // namespace detail

/// "reinforce_pp", "remax", "optimal_token_baseline", "gae" as written in configs ("none" for none).
inline std::string_view to_string(TokenAdvantageEstimator value) {
  if (value == TokenAdvantageEstimator::none) return "none";
  return detail::enum_name(value, detail::kTokenAdvantageEstimatorNames);
}

/// The token-level estimator called `name` (verl's spellings reinforce_plus_plus and otb included), or nullopt when
/// `name` names none (it may name a group-relative estimator).
inline std::optional<TokenAdvantageEstimator> find_token_advantage_estimator(std::string_view name) {
  return detail::find_enum(name, detail::kTokenAdvantageEstimatorNames);
}

namespace detail {
/// t as float64 with masked positions replaced by 0; [B, T] like mask.
inline torch::Tensor masked_f64(const torch::Tensor& t, const torch::Tensor& valid) {
  return t.detach().to(torch::kFloat64).masked_fill(~valid, 0.0);
}

inline void check_token_inputs(const torch::Tensor& values, std::string_view name, const torch::Tensor& mask,
                               std::string_view what) {
  check_dim(values, 2, name, what);
  check_floating(values, name, what);
  check_same_shape(values, name, mask, "mask", what);
}
}  // namespace detail

/// scores [B] floating (NaN allowed only for rows without a valid token); mask [B, T]. Returns [B, T] float64: the
/// score at each row's last valid token, 0 elsewhere (a row without valid tokens is all 0).
inline torch::Tensor outcome_token_rewards(const torch::Tensor& scores, const torch::Tensor& mask) {
  constexpr std::string_view kWhat = "outcome_token_rewards";
  detail::check_dim(mask, 2, "mask", kWhat);
  GRPO_CHECK(scores.defined() && scores.dim() == 1 && scores.size(0) == mask.size(0),
             "{}: scores must have shape [{}] like mask {}, got {}", kWhat, mask.size(0), shape_str(mask),
             shape_str(scores));
  const torch::Tensor valid = mask != 0;
  const int64_t T = mask.size(1);
  // Index of the last valid token: the largest t with valid, via (t + 1)·valid.
  const torch::Tensor positions = torch::arange(1, T + 1, torch::TensorOptions().dtype(torch::kLong)).unsqueeze(0);
  const torch::Tensor last = (positions * valid.to(torch::kLong)).amax(1, /*keepdim=*/true);  // 0 = no valid token
  const torch::Tensor at_last = (positions == last) & valid;
  const torch::Tensor s = scores.detach().to(torch::kFloat64).unsqueeze(1);
  return torch::where(at_last, s.expand({mask.size(0), T}), torch::zeros({}, torch::kFloat64));
}

/// verl compute_rewards: token_rewards − beta·kl on valid tokens (kl [B, T], e.g. kl_penalty(old, ref) — verl uses
/// the rollout's old log-probs against the reference), 0 elsewhere. beta ≥ 0.
inline torch::Tensor kl_shaped_token_rewards(const torch::Tensor& token_rewards, const torch::Tensor& kl,
                                             const torch::Tensor& mask, double beta) {
  constexpr std::string_view kWhat = "kl_shaped_token_rewards";
  detail::check_token_inputs(token_rewards, "token_rewards", mask, kWhat);
  detail::check_token_inputs(kl, "kl", mask, kWhat);
  GRPO_CHECK_CONFIG(beta >= 0.0 && std::isfinite(beta), "{}: beta must be finite and >= 0, got {}", kWhat, beta);
  const torch::Tensor valid = mask != 0;
  return detail::masked_f64(token_rewards, valid) - beta * detail::masked_f64(kl, valid);
}

/// REINFORCE++ (Hu 2025; verl compute_reinforce_plus_plus_outcome_advantage): returns G_t = r_t + γ·G_{t+1} with the
/// running return reset after every masked position, whitened over the valid tokens of the batch (every rank's with
/// a batch_sum: masked_whiten.hpp). gamma in [0, 1].
inline torch::Tensor reinforce_pp_advantages(const torch::Tensor& token_rewards, const torch::Tensor& mask,
                                             double gamma = 1.0, const BatchSum& batch_sum = {}) {
  constexpr std::string_view kWhat = "reinforce_pp_advantages";
  detail::check_token_inputs(token_rewards, "token_rewards", mask, kWhat);
  GRPO_CHECK_CONFIG(gamma >= 0.0 && gamma <= 1.0, "{}: gamma must be in [0, 1], got {}", kWhat, gamma);
  torch::NoGradGuard no_grad;
  const torch::Tensor valid = mask != 0;
  const torch::Tensor m = valid.to(torch::kFloat64);
  const torch::Tensor r = detail::masked_f64(token_rewards, valid);
  torch::Tensor returns = torch::zeros_like(r);
  torch::Tensor running = torch::zeros({r.size(0)}, r.options());
  for (int64_t t = r.size(1) - 1; t >= 0; --t) {
    running = r.select(1, t) + gamma * running;
    returns.select(1, t).copy_(running);
    running = running * m.select(1, t);  // verl: reset after EOS
  }
  return masked_whiten(returns, m, 1e-8, batch_sum) * m;
}

/// ReMax (Li et al. 2023; verl compute_remax_outcome_advantage): A_t = Σ_{t' ≥ t} m·r_t' − b_i·m_t, baselines [B] the
/// reward of each sequence's prompt's greedy completion (the caller generates it).
inline torch::Tensor remax_advantages(const torch::Tensor& token_rewards, const torch::Tensor& baselines,
                                      const torch::Tensor& mask) {
  constexpr std::string_view kWhat = "remax_advantages";
  detail::check_token_inputs(token_rewards, "token_rewards", mask, kWhat);
  GRPO_CHECK(baselines.defined() && baselines.dim() == 1 && baselines.size(0) == mask.size(0),
             "{}: baselines must have shape [{}], got {}", kWhat, mask.size(0), shape_str(baselines));
  torch::NoGradGuard no_grad;
  const torch::Tensor valid = mask != 0;
  const torch::Tensor m = valid.to(torch::kFloat64);
  const torch::Tensor returns = detail::masked_f64(token_rewards, valid).flip({1}).cumsum(1).flip({1});
  return (returns - baselines.detach().to(torch::kFloat64).unsqueeze(1) * m) * m;
}

/// Options of optimal_token_baseline_advantages.
struct OptimalTokenBaselineOptions {
  /// verl handle_zero_tail: in a group whose longest completion is the only one that long, its baseline is 0 from
  /// the second-longest length on (the steps no other completion reaches).
  bool handle_zero_tail = false;
  double epsilon = 1e-8;  ///< added to Σ_i W_it
};

/// The optimal token baseline (verl compute_optimal_token_baseline_advantage). token_rewards, old_log_probs (the
/// sampled tokens' log-probs under the sampling policy) and sum_pi_squared (Σ_v π_v² at each step) [B, T]; groups
/// [B] int64 (sequences with the same value share a baseline; a group of one gets B = 0); rollout_is_weights [B, T]
/// or undefined (then W is not scaled by ρ²).
inline torch::Tensor optimal_token_baseline_advantages(const torch::Tensor& token_rewards, const torch::Tensor& mask,
                                                       const torch::Tensor& groups, const torch::Tensor& old_log_probs,
                                                       const torch::Tensor& sum_pi_squared,
                                                       const torch::Tensor& rollout_is_weights = {},
                                                       const OptimalTokenBaselineOptions& options = {}) {
  constexpr std::string_view kWhat = "optimal_token_baseline_advantages";
  detail::check_token_inputs(token_rewards, "token_rewards", mask, kWhat);
  detail::check_token_inputs(old_log_probs, "old_log_probs", mask, kWhat);
  detail::check_token_inputs(sum_pi_squared, "sum_pi_squared", mask, kWhat);
  if (rollout_is_weights.defined()) detail::check_token_inputs(rollout_is_weights, "rollout_is_weights", mask, kWhat);
  GRPO_CHECK(groups.defined() && groups.dim() == 1 && groups.size(0) == mask.size(0) &&
                 !c10::isFloatingType(groups.scalar_type()),
             "{}: groups must be an integer tensor of shape [{}], got {} {}", kWhat, mask.size(0),
             c10::toString(groups.scalar_type()), shape_str(groups));
  torch::NoGradGuard no_grad;
  const torch::Tensor valid = mask != 0;
  const torch::Tensor m = valid.to(torch::kFloat64);
  const torch::Tensor returns = detail::masked_f64(token_rewards, valid).flip({1}).cumsum(1).flip({1});
  const torch::Tensor pi = detail::masked_f64(old_log_probs, valid).exp();
  torch::Tensor w = 1.0 - 2.0 * pi + detail::masked_f64(sum_pi_squared, valid);
  if (rollout_is_weights.defined()) w = w * detail::masked_f64(rollout_is_weights, valid).pow(2);
  const torch::Tensor w_cumulative = (w * m).cumsum(1);
  torch::Tensor baselines = torch::zeros_like(returns);
  std::map<int64_t, std::vector<int64_t>> members;
  const auto ids = groups.to(torch::kLong).contiguous();
  for (int64_t i = 0; i < ids.size(0); ++i) members[ids[i].item<int64_t>()].push_back(i);
  for (const auto& [group, rows] : members) {
    if (rows.size() < 2) continue;
    const torch::Tensor index = torch::tensor(rows, torch::TensorOptions().dtype(torch::kLong));
    const torch::Tensor g = returns.index_select(0, index), wc = w_cumulative.index_select(0, index);
    const torch::Tensor mg = m.index_select(0, index);
    const torch::Tensor baseline = (g * wc * mg).sum(0) / ((wc * mg).sum(0) + options.epsilon);
    for (const int64_t row : rows) baselines[row].copy_(baseline);
    if (options.handle_zero_tail) {
      const torch::Tensor lengths = mg.sum(1);
      const torch::Tensor sorted = std::get<0>(lengths.sort());
      const auto longest = static_cast<int64_t>(sorted[-1].item<double>());
      const auto second = static_cast<int64_t>(sorted[-2].item<double>());
      const torch::Tensor at_longest = (lengths == static_cast<double>(longest)).nonzero().reshape({-1});
      if (at_longest.numel() == 1 && longest > second) {
        baselines[rows[static_cast<size_t>(at_longest[0].item<int64_t>())]].slice(0, second).zero_();
      }
    }
  }
  return (returns - baselines) * m;
}

}  // namespace grpo
