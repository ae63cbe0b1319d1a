// SPDX-License-Identifier: Apache-2.0
// Token-level advantage estimators against verl @ b178a3cd56f58b2d502255daba591e92833930a7
// (verl/trainer/ppo/core_algos.py, verl/utils/torch_functional.py, verl/trainer/ppo/ray_trainer.py apply_kl_penalty),
// transcribed below from the Python. The references see clean inputs (0 at padding, as verl's token_level_rewards);
// the library gets −inf/NaN garbage there.
#include <grpo/advantage/token_advantages.hpp>

#include <catch2/catch.hpp>
#include <support/tensor_testing.hpp>

#include "parity/references.hpp"

#include <cmath>
#include <limits>
#include <map>
#include <vector>

namespace {

const auto kF64 = torch::TensorOptions().dtype(torch::kFloat64);

using parity::ref::verl_masked_whiten;  // verl/utils/torch_functional.py masked_whiten

// core_algos.py compute_reinforce_plus_plus_outcome_advantage.
torch::Tensor verl_reinforce_pp(const torch::Tensor& token_level_rewards, const torch::Tensor& response_mask,
                                double gamma) {
  auto returns = torch::zeros_like(token_level_rewards);
  torch::Tensor running_return = torch::zeros({token_level_rewards.size(0)}, kF64);
  for (int64_t t = token_level_rewards.size(1) - 1; t >= 0; --t) {
    running_return = token_level_rewards.select(1, t) + gamma * running_return;
    returns.select(1, t).copy_(running_return);
    running_return = running_return * response_mask.select(1, t);
  }
  return verl_masked_whiten(returns, response_mask) * response_mask;
}

// core_algos.py compute_remax_outcome_advantage.
torch::Tensor verl_remax(const torch::Tensor& token_level_rewards, const torch::Tensor& reward_baselines,
                         const torch::Tensor& response_mask) {
  auto returns = (token_level_rewards * response_mask).flip({-1}).cumsum(-1).flip({-1});
  return returns - reward_baselines.unsqueeze(-1) * response_mask;
}

// core_algos.py compute_optimal_token_baseline_advantage.
torch::Tensor verl_otb(const torch::Tensor& token_level_rewards, const torch::Tensor& response_mask,
                       const std::vector<int64_t>& index, const torch::Tensor& old_log_probs,
                       const torch::Tensor& sum_pi_squared, const torch::Tensor& rollout_is_weights,
                       bool handle_zero_tail, double epsilon = 1e-8) {
  auto returns = (token_level_rewards * response_mask).flip({-1}).cumsum(-1).flip({-1});
  auto pi_t = torch::exp(old_log_probs);
  auto w_per_timestep = 1 - 2 * pi_t + sum_pi_squared;
  if (rollout_is_weights.defined()) w_per_timestep = w_per_timestep * rollout_is_weights.pow(2);
  auto w_cumulative = (w_per_timestep * response_mask).cumsum(-1);
  std::map<int64_t, std::vector<int64_t>> prompt_groups;
  for (size_t i = 0; i < index.size(); ++i) prompt_groups[index[i]].push_back(static_cast<int64_t>(i));
  auto baselines = torch::zeros_like(returns);
  for (const auto& [key, trajectory_indices] : prompt_groups) {
    const auto N = static_cast<int64_t>(trajectory_indices.size());
    if (N == 1) continue;
    auto traj_idx = torch::tensor(trajectory_indices, torch::TensorOptions().dtype(torch::kLong));
    auto returns_group = returns.index_select(0, traj_idx);
    auto w_cumulative_group = w_cumulative.index_select(0, traj_idx);
    auto mask_group = response_mask.index_select(0, traj_idx);
    auto numerator = (returns_group * w_cumulative_group * mask_group).sum(0);
    auto denominator = (w_cumulative_group * mask_group).sum(0) + epsilon;
    auto baseline_per_step = numerator / denominator;
    baselines.index_copy_(0, traj_idx, baseline_per_step.unsqueeze(0).expand({N, -1}).contiguous());
    if (handle_zero_tail) {
      auto response_lengths = mask_group.sum(-1);
      auto sorted_lengths = std::get<0>(torch::sort(response_lengths));
      const auto max_length = static_cast<int64_t>(sorted_lengths[-1].item<double>());
      const auto second_max_length = static_cast<int64_t>(sorted_lengths[-2].item<double>());
      auto max_length_idx = (response_lengths == static_cast<double>(max_length)).nonzero().reshape({-1});
      if (max_length_idx.numel() == 1 && max_length > second_max_length) {
        const int64_t row = trajectory_indices[static_cast<size_t>(max_length_idx[0].item<int64_t>())];
        baselines[row].slice(0, second_max_length).fill_(0.0);
      }
    }
  }
  return (returns - baselines) * response_mask;
}

struct TokenBatch {
  torch::Tensor mask, maskf, rewards, rewards_lib, old, old_lib, sum_pi2, sum_pi2_lib, is_weights;
  std::vector<int64_t> index;
};

/// 8 sequences of up to 7 tokens in 3 prompt groups (sizes 3, 4, 1), one empty row and one single-token row; dense
/// token rewards (a KL-shaped reward is dense) or outcome rewards.
TokenBatch token_batch(uint64_t seed, bool outcome) {
  torch::manual_seed(seed);
  TokenBatch b;
  const int64_t B = 8, T = 7;
  auto lengths = torch::tensor({7, 3, 0, 5, 1, 7, 4, 6});
  b.mask = torch::arange(T).unsqueeze(0) < lengths.unsqueeze(1);
  b.maskf = b.mask.to(torch::kFloat64);
  auto scores = torch::randn({B}, kF64);
  b.rewards = outcome ? grpo::outcome_token_rewards(scores, b.mask) : torch::randn({B, T}, kF64) * 0.3 * b.maskf;
  b.old = -torch::rand({B, T}, kF64) * 3 * b.maskf;
  auto probs = torch::softmax(torch::randn({B, T, 5}, kF64), -1);
  b.sum_pi2 = (probs * probs).sum(-1) * b.maskf;
  b.is_weights = (torch::rand({B, T}, kF64) + 0.5) * b.maskf;
  b.index = {0, 0, 0, 1, 1, 1, 1, 2};
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  b.rewards_lib = torch::where(b.mask, b.rewards, torch::full({}, nan, kF64));
  b.old_lib = torch::where(b.mask, b.old, torch::full({}, -inf, kF64));
  b.sum_pi2_lib = torch::where(b.mask, b.sum_pi2, torch::full({}, nan, kF64));
  return b;
}

torch::Tensor index_tensor(const std::vector<int64_t>& index) {
  return torch::tensor(index, torch::TensorOptions().dtype(torch::kLong));
}

}  // namespace

TEST_CASE("outcome token rewards put the score on the last valid token", "[parity][token_advantage]") {
  auto mask = torch::tensor({{1, 1, 0}, {0, 0, 0}, {1, 1, 1}});
  auto r = grpo::outcome_token_rewards(torch::tensor({2.0, 5.0, -1.0}, kF64), mask);
  GRPO_REQUIRE_CLOSE(r, torch::tensor({{0.0, 2.0, 0.0}, {0.0, 0.0, 0.0}, {0.0, 0.0, -1.0}}, kF64), 0, 0);
}

TEST_CASE("reinforce_pp_advantages matches verl REINFORCE++", "[parity][token_advantage]") {
  for (bool outcome : {true, false}) {
    for (double gamma : {1.0, 0.9, 0.0}) {
      INFO("outcome " << outcome << " gamma " << gamma);
      const auto b = token_batch(31, outcome);
      GRPO_REQUIRE_CLOSE(grpo::reinforce_pp_advantages(b.rewards_lib, b.mask, gamma),
                         verl_reinforce_pp(b.rewards, b.maskf, gamma), 1e-12, 1e-12);
    }
  }
  // KL in the reward (verl apply_kl_penalty: token_level_scores − β·kld·mask, kld = kl_penalty(old, ref) k1 here).
  const auto b = token_batch(32, true);
  auto ref = b.old + 0.2 * torch::randn(b.old.sizes(), kF64) * b.maskf;
  auto kld = (b.old - ref) * b.maskf;
  auto shaped = grpo::kl_shaped_token_rewards(b.rewards_lib, b.old_lib - torch::where(b.mask, ref, b.old_lib), b.mask,
                                              0.05);
  GRPO_REQUIRE_CLOSE(shaped, b.rewards - 0.05 * kld, 1e-14, 1e-14);
  GRPO_REQUIRE_CLOSE(grpo::reinforce_pp_advantages(shaped, b.mask, 1.0),
                     verl_reinforce_pp(b.rewards - 0.05 * kld, b.maskf, 1.0), 1e-12, 1e-12);
}

TEST_CASE("remax_advantages matches verl ReMax", "[parity][token_advantage]") {
  for (bool outcome : {true, false}) {
    const auto b = token_batch(33, outcome);
    auto baselines = torch::randn({8}, kF64);
    GRPO_REQUIRE_CLOSE(grpo::remax_advantages(b.rewards_lib, baselines, b.mask),
                       verl_remax(b.rewards, baselines, b.maskf), 1e-13, 1e-13);
  }
}

TEST_CASE("optimal_token_baseline_advantages matches verl OTB", "[parity][token_advantage]") {
  for (bool outcome : {true, false}) {
    for (bool with_is : {false, true}) {
      for (bool zero_tail : {false, true}) {
        INFO("outcome " << outcome << " IS " << with_is << " zero tail " << zero_tail);
        const auto b = token_batch(34, outcome);
        const auto is = with_is ? b.is_weights : torch::Tensor();
        GRPO_REQUIRE_CLOSE(grpo::optimal_token_baseline_advantages(b.rewards_lib, b.mask, index_tensor(b.index),
                                                                   b.old_lib, b.sum_pi2_lib, is,
                                                                   {.handle_zero_tail = zero_tail}),
                           verl_otb(b.rewards, b.maskf, b.index, b.old, b.sum_pi2, is, zero_tail), 1e-12, 1e-12);
      }
    }
  }
}

TEST_CASE("token advantage estimators reject bad shapes and options by name", "[parity][token_advantage]") {
  auto mask = torch::ones({2, 3});
  auto r = torch::zeros({2, 3}, kF64);
  CHECK_THROWS_WITH(grpo::reinforce_pp_advantages(r, torch::ones({2, 4})), Catch::Contains("mask"));
  CHECK_THROWS_WITH(grpo::reinforce_pp_advantages(r, mask, 1.5), Catch::Contains("gamma must be in [0, 1]"));
  CHECK_THROWS_WITH(grpo::remax_advantages(r, torch::zeros({3}, kF64), mask),
                    Catch::Contains("baselines must have shape [2]"));
  CHECK_THROWS_WITH(grpo::optimal_token_baseline_advantages(r, mask, torch::zeros({2}, kF64), r, r),
                    Catch::Contains("groups must be an integer tensor"));
  CHECK_THROWS_WITH(grpo::kl_shaped_token_rewards(r, r, mask, -1.0), Catch::Contains("beta must be finite and >= 0"));
}
