// SPDX-License-Identifier: Apache-2.0
// The critic's maths against verl @ 012be9d9dcb7c38499f23616142870d2682757fc (verl/trainer/ppo/core_algos.py
// compute_gae_advantage_return and compute_value_loss, verl/utils/torch_functional.py clip_by_value), transcribed
// below from the Python; agg_loss and masked_whiten are references.hpp's. The references see clean inputs; the
// library gets NaN at masked positions. Values and gradients (w.r.t. the new values) in float64.
#include <grpo/advantage/gae.hpp>
#include <grpo/loss/value_loss.hpp>

#include <catch2/catch.hpp>
#include <support/tensor_testing.hpp>

#include "parity/references.hpp"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace {

const auto kF64 = torch::TensorOptions().dtype(torch::kFloat64);
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

/// core_algos.py compute_gae_advantage_return: (advantages, returns).
std::pair<torch::Tensor, torch::Tensor> verl_gae(const torch::Tensor& token_level_rewards, const torch::Tensor& values,
                                                 const torch::Tensor& response_mask, double gamma, double lam) {
  torch::NoGradGuard no_grad;
  torch::Tensor nextvalues = torch::zeros({values.size(0)}, kF64);
  torch::Tensor lastgaelam = torch::zeros({values.size(0)}, kF64);
  std::vector<torch::Tensor> advantages_reversed;
  const int64_t gen_len = token_level_rewards.size(-1);
  for (int64_t t = gen_len - 1; t >= 0; --t) {
    auto delta = token_level_rewards.select(1, t) + gamma * nextvalues - values.select(1, t);
    auto lastgaelam_ = delta + gamma * lam * lastgaelam;
    // skip values and TD-error on observation tokens
    nextvalues = values.select(1, t) * response_mask.select(1, t) + (1 - response_mask.select(1, t)) * nextvalues;
    lastgaelam = lastgaelam_ * response_mask.select(1, t) + (1 - response_mask.select(1, t)) * lastgaelam;
    advantages_reversed.push_back(lastgaelam);
  }
  std::reverse(advantages_reversed.begin(), advantages_reversed.end());
  auto advantages = torch::stack(advantages_reversed, 1);
  auto returns = advantages + values;
  advantages = parity::ref::verl_masked_whiten(advantages, response_mask);
  return {advantages, returns};
}

/// core_algos.py compute_value_loss: (vf_loss, vf_clipfrac).
std::pair<torch::Tensor, double> verl_value_loss(const torch::Tensor& vpreds, const torch::Tensor& returns,
                                                 const torch::Tensor& values, const torch::Tensor& response_mask,
                                                 double cliprange_value, const std::string& loss_agg_mode) {
  // torch_functional.py clip_by_value: torch.max(torch.min(x, tensor_max), tensor_min).
  auto vpredclipped = torch::max(torch::min(vpreds, values + cliprange_value), values - cliprange_value);
  auto vf_losses1 = (vpreds - returns).pow(2);
  auto vf_losses2 = (vpredclipped - returns).pow(2);
  auto clipped_vf_losses = torch::max(vf_losses1, vf_losses2);
  auto vf_loss = 0.5 * parity::ref::verl_agg_loss(clipped_vf_losses, response_mask, loss_agg_mode);
  auto vf_clipfrac = parity::ref::verl_masked_mean(torch::gt(vf_losses2, vf_losses1).to(torch::kFloat64), response_mask);
  return {vf_loss, vf_clipfrac.item<double>()};
}

/// [6, 9] rows: full, a masked tail, a hole (a tool reply) and a tail, empty, one token, two holes.
torch::Tensor ragged_mask() {
  return torch::tensor({{1, 1, 1, 1, 1, 1, 1, 1, 1}, {1, 1, 1, 1, 0, 0, 0, 0, 0}, {1, 1, 0, 0, 1, 1, 1, 0, 0},
                        {0, 0, 0, 0, 0, 0, 0, 0, 0}, {1, 0, 0, 0, 0, 0, 0, 0, 0}, {1, 0, 1, 1, 0, 0, 1, 1, 1}},
                       kF64);
}

}  // namespace

TEST_CASE("gae_advantages equals verl's compute_gae_advantage_return (advantages and returns) on rows with holes, "
          "tails and an empty row, for gamma and lambda at 0, 1 and between",
          "[parity][gae]") {
  torch::manual_seed(11);
  const torch::Tensor mask = ragged_mask();
  const torch::Tensor rewards = torch::randn(mask.sizes(), kF64) * mask;
  const torch::Tensor values = torch::randn(mask.sizes(), kF64) * mask;
  const torch::Tensor garbage_values = values.masked_fill(mask == 0, kNaN);
  const torch::Tensor garbage_rewards = rewards.masked_fill(mask == 0, kNaN);
  for (const auto [gamma, lambda] :
       std::vector<std::pair<double, double>>{{1, 1}, {1, 0}, {1, 0.95}, {0.99, 0.95}, {0.9, 1}, {0, 0.5}}) {
    INFO("gamma " << gamma << " lambda " << lambda);
    const auto [advantages, returns] = verl_gae(rewards, values, mask, gamma, lambda);
    const auto out = grpo::gae_advantages(garbage_rewards, garbage_values, mask, {.gamma = gamma, .lambda = lambda});
    GRPO_REQUIRE_CLOSE(out.advantages, advantages * mask, 1e-10, 1e-12);
    GRPO_REQUIRE_CLOSE(out.returns, returns * mask, 1e-10, 1e-12);
  }
}

TEST_CASE("clipped_value_loss equals verl's compute_value_loss (loss, gradient, vf_clipfrac) for every "
          "loss_agg_mode",
          "[parity][value]") {
  torch::manual_seed(5);
  const torch::Tensor mask = ragged_mask();
  const torch::Tensor old = torch::randn(mask.sizes(), kF64) * mask;
  // New values within, at and beyond the clip range of the old ones, so both branches are taken.
  const torch::Tensor vpreds = (old + 0.8 * torch::randn(mask.sizes(), kF64)) * mask;
  const torch::Tensor returns = torch::randn(mask.sizes(), kF64) * mask;
  const std::vector<std::pair<std::string, grpo::LossType>> modes{
      {"token-mean", grpo::LossType::token_mean},
      {"seq-mean-token-sum", grpo::LossType::seq_mean_token_sum},
      {"seq-mean-token-mean", grpo::LossType::seq_mean_token_mean},
      {"seq-mean-token-sum-norm", grpo::LossType::seq_mean_token_sum_norm}};
  for (const auto& [mode, type] : modes) {
    for (const double clip : {0.2, 0.5, 10.0}) {
      INFO(mode << " cliprange_value " << clip);
      const auto x = vpreds.clone().requires_grad_(true);
      const auto [reference, clipfrac] = verl_value_loss(x, returns, old, mask, clip, mode);
      const auto reference_grad = torch::autograd::grad({reference}, {x})[0];
      const auto y = vpreds.masked_fill(mask == 0, kNaN).requires_grad_(true);
      const auto out = grpo::clipped_value_loss(y, old.masked_fill(mask == 0, kNaN), returns.masked_fill(mask == 0, kNaN),
                                                mask, grpo::local_normaliser(type, mask),
                                                {.clip_range = clip, .loss_type = type});
      const auto grad = torch::autograd::grad({out.loss}, {y})[0];
      CHECK(out.loss.item<double>() == Approx(reference.item<double>()).epsilon(1e-12));
      CHECK(out.clip_fraction == Approx(clipfrac).epsilon(1e-6));
      if (clip == 0.2) CHECK(out.clip_fraction > 0.0);
      GRPO_REQUIRE_CLOSE(grad, reference_grad * mask, 1e-10, 1e-14);
    }
  }
}
