// SPDX-License-Identifier: Apache-2.0
// Generalized Advantage Estimation (Schulman et al. 2016, arXiv:1506.02438) on token rewards and a critic's values,
// as verl computes it for PPO (volcengine/verl 012be9d, verl/trainer/ppo/core_algos.py
// compute_gae_advantage_return):
//
//   δ_t = r_t + γ·V_next − V_t          A_t = δ_t + γλ·A_next          R_t = A_t + V_t (the value targets)
//
// running from the last token back, where V_next and A_next are those of the next *valid* token (0 after the last):
// masked tokens inside a row (a multi-turn rollout's tool replies) are skipped, neither bootstrapping nor resetting
// the recursion, as verl's "skip values and TD-error on observation tokens". The advantages are then whitened over
// the batch's valid tokens (verl masked_whiten: mean, Bessel variance, 1e-8 floor), optionally.
#pragma once

#include <grpo/advantage/masked_whiten.hpp>
#include <grpo/core/error.hpp>
#include <grpo/core/tensor_checks.hpp>

#include <torch/torch.h>

#include <cmath>
#include <string_view>

namespace grpo {

struct GaeOptions {
  double gamma = 1.0;   ///< discount γ ∈ [0, 1] (verl algorithm.gamma, default 1)
  double lambda = 1.0;  ///< GAE λ ∈ [0, 1] (verl algorithm.lam, default 1): 1 = Monte-Carlo returns minus V, 0 = TD(0)
  bool whiten = true;   ///< whiten the advantages over the batch's valid tokens (verl always does)

  /// ConfigError naming the option: gamma or lambda outside [0, 1].
  void validate() const {
    GRPO_CHECK_CONFIG(gamma >= 0.0 && gamma <= 1.0, "gae gamma must be in [0, 1], got {}", gamma);
    GRPO_CHECK_CONFIG(lambda >= 0.0 && lambda <= 1.0, "gae lambda must be in [0, 1], got {}", lambda);
  }
};

struct GaeOutput {
  torch::Tensor advantages;  ///< [B, T] float64, whitened when GaeOptions::whiten; 0 at masked positions
  torch::Tensor returns;     ///< [B, T] float64 value targets A + V (before whitening); 0 at masked positions
};

/// token_rewards, values: [B, T] floating (the critic's values of the rollout, V_t of the state before token t);
/// mask: [B, T], nonzero = a token the policy sampled. Masked inputs never reach a result (they may be NaN). Computed
/// in float64 without gradient. batch_sum: the whitening's sums over every rank (BatchSum; empty = this batch alone).
/// Throws grpo::Error for shapes that differ, ConfigError for options out of range.
inline GaeOutput gae_advantages(const torch::Tensor& token_rewards, const torch::Tensor& values,
                                const torch::Tensor& mask, const GaeOptions& options = {},
                                const BatchSum& batch_sum = {}) {
  constexpr std::string_view kWhat = "gae_advantages";
  detail::check_dim(token_rewards, 2, "token_rewards", kWhat);
  detail::check_floating(token_rewards, "token_rewards", kWhat);
  detail::check_floating(values, "values", kWhat);
  detail::check_same_shape(token_rewards, "token_rewards", values, "values", kWhat);
  detail::check_same_shape(token_rewards, "token_rewards", mask, "mask", kWhat);
  options.validate();
  torch::NoGradGuard no_grad;
  const torch::Tensor valid = mask != 0;
  const torch::Tensor m = valid.to(torch::kFloat64);
  const torch::Tensor r = token_rewards.detach().to(torch::kFloat64).masked_fill(~valid, 0.0);
  const torch::Tensor v = values.detach().to(torch::kFloat64).masked_fill(~valid, 0.0);
  torch::Tensor advantages = torch::zeros_like(r);
  torch::Tensor next_value = torch::zeros({r.size(0)}, r.options());
  torch::Tensor next_advantage = torch::zeros({r.size(0)}, r.options());
  for (int64_t t = r.size(1) - 1; t >= 0; --t) {
    const torch::Tensor here = m.select(1, t);
    const torch::Tensor v_t = v.select(1, t);
    const torch::Tensor a_t = r.select(1, t) + options.gamma * next_value - v_t +
                              options.gamma * options.lambda * next_advantage;
    // A masked token keeps the recursion where it was (verl: x·m + (1 − m)·x_next).
    next_value = torch::where(here > 0, v_t, next_value);
    next_advantage = torch::where(here > 0, a_t, next_advantage);
    advantages.select(1, t).copy_(next_advantage);
  }
  GaeOutput out;
  out.returns = (advantages + v) * m;
  out.advantages = options.whiten ? masked_whiten(advantages, m, 1e-8, batch_sum) * m : advantages * m;
  return out;
}

}  // namespace grpo
