// SPDX-License-Identifier: Apache-2.0
// GrpoTrainer::advantages: the group-relative estimator on the kept groups' totals (less β_r·Σ_t KL_t with KL in the
// reward), or a token-level estimator on the token rewards, then optional whitening over the batch's tokens.
#include <grpo/train/grpo_trainer.hpp>

#include <grpo/advantage/masked_whiten.hpp>

namespace grpo::train {

AdvantageOutput GrpoTrainer::advantages(const StepBatch& batch) const {
  if (batch.rows() == 0) return {};
  const std::int64_t groups = batch.rows() / batch.group_size;
  const torch::Tensor totals = torch::tensor(rewards::with_nan(batch.totals)).to(torch::kFloat64);
  // A step that does not train needs only the logged group statistics.
  if (!batch.train) return advantage_(totals.view({groups, batch.group_size}));
  const TokenAdvantageOptions& token = options_.token_advantage;
  const bool kl_in_reward = options_.kl_in_reward.enabled();
  const bool otb = token.estimator == TokenAdvantageEstimator::optimal_token_baseline;
  GRPO_CHECK(!(kl_in_reward || otb) || (batch.old_log_probs.defined() && batch.old_log_probs.sizes() ==
                                                                              batch.rollout.completion_mask.sizes()),
             "GrpoTrainer::advantages: {} needs the batch's old_log_probs [rows, T] (collect_groups computes them)",
             kl_in_reward ? "KL in the reward" : "optimal_token_baseline");
  GRPO_CHECK(!kl_in_reward || (batch.reward_kl.defined() && batch.reward_kl.sizes() == batch.rollout.completion_mask.sizes()),
             "GrpoTrainer::advantages: KL in the reward needs the batch's reward_kl [rows, T] (collect_groups computes "
             "it)");
  GRPO_CHECK(!otb || batch.sum_pi_squared.defined(),
             "GrpoTrainer::advantages: optimal_token_baseline needs the batch's sum_pi_squared (collect_groups computes "
             "it)");
  GRPO_CHECK(token.estimator != TokenAdvantageEstimator::remax ||
                 (batch.greedy_baselines.defined() && batch.greedy_baselines.numel() == batch.rows()),
             "GrpoTrainer::advantages: remax needs the batch's greedy_baselines [rows] (collect_groups computes them)");
  const double beta = reward_kl_.beta();
  const torch::Tensor& kl = batch.reward_kl;
  // Group-relative: the sequence reward, less β_r·Σ_t KL_t with KL in the reward (the sum of the token rewards).
  const torch::Tensor sequence_rewards = kl_in_reward ? totals - beta * kl.sum(1) : totals;
  AdvantageOutput out = advantage_(sequence_rewards.view({groups, batch.group_size}));
  const torch::Tensor tokens = (batch.rollout.completion_mask != 0).to(torch::kFloat64);
  if (token.estimator == TokenAdvantageEstimator::none) {
    if (options_.whiten_advantages) {  // each sequence weighs its token count; rows without a reward stay 0
      const torch::Tensor weights = tokens.sum(1) * out.valid.reshape({-1}).to(torch::kFloat64);
      out.advantages = masked_whiten(out.advantages, weights) * (weights > 0);
    }
    return out;
  }

  // Token-level: completions without a total (or, for ReMax, without a baseline) take no part and get 0.
  torch::Tensor scored = totals.isfinite();
  if (token.estimator == TokenAdvantageEstimator::remax) scored = scored & batch.greedy_baselines.isfinite();
  const torch::Tensor mask = (batch.rollout.completion_mask != 0) & scored.unsqueeze(1);
  torch::Tensor rewards = outcome_token_rewards(totals.nan_to_num(0.0), mask);
  if (kl_in_reward) rewards = kl_shaped_token_rewards(rewards, kl, mask, beta);
  switch (token.estimator) {
    case TokenAdvantageEstimator::reinforce_pp:
      out.advantages = reinforce_pp_advantages(rewards, mask, token.gamma);
      break;
    case TokenAdvantageEstimator::remax:
      out.advantages = remax_advantages(rewards, batch.greedy_baselines.nan_to_num(0.0), mask);
      break;
    case TokenAdvantageEstimator::optimal_token_baseline:
      out.advantages = optimal_token_baseline_advantages(
          rewards, mask, torch::arange(batch.rows(), torch::kLong).div(batch.group_size, "floor"), batch.old_log_probs,
          batch.sum_pi_squared, {}, {.handle_zero_tail = token.handle_zero_tail});
      break;
    case TokenAdvantageEstimator::none:
      break;
  }
  if (options_.whiten_advantages) out.advantages = masked_whiten(out.advantages, mask) * mask;
  return out;
}

}  // namespace grpo::train
