// SPDX-License-Identifier: Apache-2.0
// GrpoTrainer::advantages: the group-relative estimator on the kept groups' totals (less β_r·Σ_t KL_t with KL in the
// reward), or a token-level estimator on the token rewards (GAE on the critic's values, with the critic's targets),
// then optional whitening over the batch's tokens. A total
// holds the generator's token rewards (a multi-turn environment's turn rewards, add_environment_rewards); the
// token-level estimators see each of them at its own token and the rest of the total at the last one.
//
// Every batch-level statistic is the whole batch's, over every rank, as verl computes it on its driver: the
// group-relative estimator runs on every rank's sequence rewards (gathered: two numbers per completion), so its batch
// step (TRL's batch std, GPG's α, REINFORCE++-baseline's whitening, GDPO's z-score, a registered estimator) sees the
// batch one process would; the token-level whitening sums over every rank's tokens (masked_whiten's BatchSum). The
// advantages of a rank's rows equal those rows' advantages in one process on the whole batch.
#include <grpo/train/grpo_trainer.hpp>

#include <grpo/advantage/gae.hpp>
#include <grpo/advantage/masked_whiten.hpp>

namespace grpo::train {
namespace {

/// The groups [first, first + count) of `whole` (G completions each).
AdvantageOutput groups_of(const AdvantageOutput& whole, std::int64_t first, std::int64_t count, std::int64_t group_size) {
  AdvantageOutput out = whole;
  out.advantages = whole.advantages.narrow(0, first * group_size, count * group_size).clone();
  out.group_mean = whole.group_mean.narrow(0, first, count).clone();
  out.group_std = whole.group_std.narrow(0, first, count).clone();
  out.group_count = whole.group_count.narrow(0, first, count).clone();
  out.valid = whole.valid.narrow(0, first, count).clone();
  return out;
}

}  // namespace

torch::Tensor GrpoTrainer::estimator_mask(const StepBatch& batch) const {
  const torch::Tensor totals = torch::tensor(rewards::with_nan(batch.totals)).to(torch::kFloat64).reshape({batch.rows()});
  torch::Tensor scored = totals.isfinite();
  if (options_.token_advantage.estimator == TokenAdvantageEstimator::remax) {
    scored = scored & batch.greedy_baselines.isfinite();
  }
  return (batch.rollout.completion_mask != 0) & scored.unsqueeze(1);
}

AdvantageOutput GrpoTrainer::advantages(const StepBatch& batch) const {
  const BatchSum batch_sum = [this](torch::Tensor& t) { group_.all_reduce_(t); };
  const std::int64_t rows = batch.rows(), groups = rows / batch.group_size;
  const TokenAdvantageOptions& token = options_.token_advantage;
  const bool kl_in_reward = batch.train && options_.kl_in_reward.enabled();
  const bool otb = token.estimator == TokenAdvantageEstimator::optimal_token_baseline;
  const torch::Tensor totals = torch::tensor(rewards::with_nan(batch.totals)).to(torch::kFloat64).reshape({rows});
  if (batch.train && rows > 0) {
    GRPO_CHECK(!(kl_in_reward || otb) || (batch.old_log_probs.defined() && batch.old_log_probs.sizes() ==
                                                                                batch.rollout.completion_mask.sizes()),
               "GrpoTrainer::advantages: {} needs the batch's old_log_probs [rows, T] (collect_groups computes them)",
               kl_in_reward ? "KL in the reward" : "optimal_token_baseline");
    GRPO_CHECK(!kl_in_reward ||
                   (batch.reward_kl.defined() && batch.reward_kl.sizes() == batch.rollout.completion_mask.sizes()),
               "GrpoTrainer::advantages: KL in the reward needs the batch's reward_kl [rows, T] (collect_groups "
               "computes it)");
    GRPO_CHECK(!otb || batch.sum_pi_squared.defined(),
               "GrpoTrainer::advantages: optimal_token_baseline needs the batch's sum_pi_squared (collect_groups "
               "computes it)");
    GRPO_CHECK(token.estimator != TokenAdvantageEstimator::remax ||
                   (batch.greedy_baselines.defined() && batch.greedy_baselines.numel() == rows),
               "GrpoTrainer::advantages: remax needs the batch's greedy_baselines [rows] (collect_groups computes "
               "them)");
    GRPO_CHECK(token.estimator != TokenAdvantageEstimator::gae ||
                   (batch.old_values.defined() && batch.old_values.sizes() == batch.rollout.completion_mask.sizes()),
               "GrpoTrainer::advantages: gae needs the batch's old_values [rows, T] (collect_groups computes them "
               "with the critic)");
  }
  const double beta = reward_kl_.beta();
  const torch::Tensor& kl = batch.reward_kl;
  // Group-relative: the sequence reward, less β_r·Σ_t KL_t with KL in the reward (the sum of the token rewards), with
  // each completion's token count (the whitening weight), gathered from every rank.
  const torch::Tensor sequence_rewards = kl_in_reward && rows > 0 ? totals - beta * kl.sum(1) : totals;
  const torch::Tensor token_counts = rows > 0 ? (batch.rollout.completion_mask != 0).sum(1).to(torch::kFloat64)
                                             : torch::zeros({0}, torch::kFloat64);
  const auto [whole, offset] = all_gather_rows(group_, torch::stack({sequence_rewards, token_counts}, 1));
  if (whole.size(0) == 0) return {};
  const std::int64_t whole_groups = whole.size(0) / batch.group_size;
  AdvantageOutput whole_out = advantage_(whole.select(1, 0).reshape({whole_groups, batch.group_size}));
  // A step that does not train needs only the logged group statistics.
  if (!batch.train) return groups_of(whole_out, offset / batch.group_size, groups, batch.group_size);
  if (token.estimator == TokenAdvantageEstimator::none) {
    if (options_.whiten_advantages) {  // each sequence weighs its token count; rows without a reward stay 0
      const torch::Tensor weights = whole.select(1, 1) * whole_out.valid.reshape({-1}).to(torch::kFloat64);
      whole_out.advantages = masked_whiten(whole_out.advantages, weights) * (weights > 0);
    }
    return groups_of(whole_out, offset / batch.group_size, groups, batch.group_size);
  }

  // Token-level: completions without a total (or, for ReMax, without a baseline) take no part and get 0. The batch's
  // whitening sums over every rank's tokens; a rank that kept no group joins those sums with none.
  AdvantageOutput out = groups_of(whole_out, offset / batch.group_size, groups, batch.group_size);
  if (rows == 0) {
    const torch::Tensor none = torch::zeros({0}, torch::kFloat64);
    if (token.estimator == TokenAdvantageEstimator::reinforce_pp || token.estimator == TokenAdvantageEstimator::gae) {
      masked_whiten(none, none, 1e-8, batch_sum);
    }
    if (options_.whiten_advantages) masked_whiten(none, none, 1e-8, batch_sum);
    return out;
  }
  const torch::Tensor mask = estimator_mask(batch);
  // The generator's token rewards (a multi-turn environment's, per turn) stay on their tokens; the rest of the total
  // (the scorer's) goes on the last token.
  torch::Tensor rewards;
  const torch::Tensor& placed = batch.rollout.completion_rewards;
  if (placed.defined()) {
    GRPO_CHECK(placed.sizes() == batch.rollout.completion_mask.sizes(),
               "GrpoTrainer::advantages: the rollout's completion_rewards {} and completion_mask {} differ in shape",
               shape_str(placed), shape_str(batch.rollout.completion_mask));
    const torch::Tensor on_tokens = placed.to(torch::kFloat64).masked_fill(~mask, 0.0);
    rewards = outcome_token_rewards((totals - on_tokens.sum(1)).nan_to_num(0.0), mask) + on_tokens;
  } else {
    rewards = outcome_token_rewards(totals.nan_to_num(0.0), mask);
  }
  if (kl_in_reward) rewards = kl_shaped_token_rewards(rewards, kl, mask, beta);
  switch (token.estimator) {
    case TokenAdvantageEstimator::reinforce_pp:
      out.advantages = reinforce_pp_advantages(rewards, mask, token.gamma, batch_sum);
      break;
    case TokenAdvantageEstimator::remax:
      out.advantages = remax_advantages(rewards, batch.greedy_baselines.nan_to_num(0.0), mask);
      break;
    case TokenAdvantageEstimator::optimal_token_baseline: {
      // verl scales W by the squared rollout importance weights when rollout correction is on: here the sampler
      // correction's weights of the rollout policy against the sampler (the loss's ρ for these tokens).
      torch::Tensor is_weights;
      const SamplerCorrectionOptions& correction = options_.loss.sampler_correction;
      if (correction.mode != SamplerCorrectionMode::none) {
        GRPO_CHECK(batch.rollout.sampler_log_probs.defined() &&
                       batch.rollout.sampler_log_probs.sizes() == batch.rollout.completion_mask.sizes(),
                   "GrpoTrainer::advantages: optimal_token_baseline with a sampler correction needs the rollout's "
                   "sampler_log_probs [rows, T] (the generator gives none)");
        is_weights = sampler_correction_weights(batch.old_log_probs.to(torch::kFloat64), batch.rollout.sampler_log_probs,
                                                batch.rollout.completion_mask, correction);
      }
      out.advantages = optimal_token_baseline_advantages(
          rewards, mask, torch::arange(rows, torch::kLong).div(batch.group_size, "floor"), batch.old_log_probs,
          batch.sum_pi_squared, is_weights, {.handle_zero_tail = token.handle_zero_tail});
      break;
    }
    case TokenAdvantageEstimator::gae: {
      // verl compute_gae_advantage_return: GAE on the critic's values of the rollout, its advantages whitened over
      // the batch's tokens (every rank's), its returns (before whitening) the critic's targets.
      const GaeOutput gae = gae_advantages(rewards, batch.old_values, mask,
                                           {.gamma = token.gamma, .lambda = token.lambda, .whiten = true}, batch_sum);
      out.advantages = gae.advantages;
      out.returns = gae.returns;
      break;
    }
    case TokenAdvantageEstimator::none:
      break;
  }
  if (options_.whiten_advantages) out.advantages = masked_whiten(out.advantages, mask, 1e-8, batch_sum) * mask;
  return out;
}

}  // namespace grpo::train
