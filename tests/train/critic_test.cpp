// SPDX-License-Identifier: Apache-2.0
// Critic: the value of each completion token's state read at the right position of padded batches (against the
// model on each row alone), the first update's loss and clip fraction by hand, the value loss falling towards fixed
// returns, micro-batches giving the step of the whole batch, and errors naming the tensor at fault.
#include <grpo/train/critic.hpp>

#include "support/model_testing.hpp"

#include <catch2/catch.hpp>
#include <torch/torch.h>

namespace {

using grpo::Rollout;
using grpo::models::ValueModel;
using grpo::train::Critic;
using grpo::train::CriticOptions;
using grpo::train::ProcessGroup;
using grpo::train::ProcessGroupOptions;

/// A tiny critic from a tiny policy, the same weights for the same seed.
ValueModel tiny_critic(int seed) {
  torch::manual_seed(seed);
  grpo::models::CausalLM policy(grpo::testing::tiny_model_config({.vocab = 20}));
  ValueModel critic = grpo::models::value_model_from_policy(policy);
  torch::NoGradGuard no_grad;
  critic->head_bias().fill_(0.25);
  return critic;
}

/// Two rows: a left-padded prompt with a full completion, and a full prompt with a completion that ends early.
Rollout two_rows() {
  Rollout r;
  r.prompt_ids = torch::tensor({{0, 0, 3, 4}, {5, 6, 7, 8}}, torch::kInt64);
  r.prompt_mask = torch::tensor({{0, 0, 1, 1}, {1, 1, 1, 1}}, torch::kInt64);
  r.completion_ids = torch::tensor({{9, 10, 11}, {12, 2, 0}}, torch::kInt64);
  r.completion_mask = torch::tensor({{1, 1, 1}, {1, 1, 0}}, torch::kInt64);
  r.truncated = torch::tensor({true, false});
  r.sampler_log_probs = torch::zeros({2, 3});
  return r;
}

}  // namespace

TEST_CASE("Critic::values: V of the state before each completion token, the same in a padded batch as on each row "
          "alone, 0 past the end",
          "[train][critic]") {
  ProcessGroup group{ProcessGroupOptions{}};
  const Rollout rollout = two_rows();
  for (const std::int64_t micro_batches : {1, 2}) {
    ValueModel model = tiny_critic(5);
    Critic critic(model, group, {.micro_batches = micro_batches});
    const torch::Tensor values = critic.values(rollout);
    REQUIRE(values.sizes() == torch::IntArrayRef({2, 3}));
    CHECK(values.scalar_type() == torch::kFloat32);
    torch::NoGradGuard no_grad;
    // Row 0 alone, unpadded: 3 4 | 9 10 11; the state before completion token t is position 1 + t.
    const torch::Tensor alone0 = model->forward(torch::tensor({{3, 4, 9, 10, 11}}, torch::kInt64));
    CHECK(torch::allclose(values[0], alone0[0].narrow(0, 1, 3), 1e-5, 1e-5));
    // Row 1: 5 6 7 8 | 12 2; its third completion position is padding.
    const torch::Tensor alone1 = model->forward(torch::tensor({{5, 6, 7, 8, 12, 2}}, torch::kInt64));
    CHECK(torch::allclose(values[1].narrow(0, 0, 2), alone1[0].narrow(0, 3, 2), 1e-5, 1e-5));
    CHECK(values[1][2].item<float>() == 0.0f);
  }
}

TEST_CASE("Critic::update: the first step's loss is ½·token-mean (V − R)² with V = V_old, no clipping, and the value "
          "loss falls towards fixed returns",
          "[train][critic]") {
  ProcessGroup group{ProcessGroupOptions{}};
  const Rollout rollout = two_rows();
  Critic critic(tiny_critic(7), group, {.learning_rate = 3e-2, .weight_decay = 0.0});
  const torch::Tensor old_values = critic.values(rollout);
  torch::manual_seed(11);
  const torch::Tensor mask = rollout.completion_mask;
  const torch::Tensor returns = (old_values + 0.3 * torch::randn({2, 3})).masked_fill(mask == 0, 0.0f);
  // By hand in fp64: 5 valid tokens.
  const torch::Tensor valid = mask != 0;
  const double expected_loss =
      0.5 * (old_values.to(torch::kFloat64) - returns.to(torch::kFloat64)).square().masked_select(valid).mean().item<double>();
  const double expected_mean = old_values.to(torch::kFloat64).masked_select(valid).mean().item<double>();
  const auto first = critic.update(rollout, old_values, returns, mask);
  CHECK(first.value_loss == Approx(expected_loss).epsilon(1e-5));
  CHECK(first.clip_fraction == 0.0);
  CHECK(first.values_mean == Approx(expected_mean).epsilon(1e-5));
  CHECK(first.tokens == 5.0);
  CHECK(first.grad_norm > 0.0);
  CHECK(first.learning_rate == 3e-2);
  // PPO's loop: V_old of each step is the critic's values before it.
  double last = first.value_loss;
  for (int step = 0; step < 40; ++step) last = critic.update(rollout, critic.values(rollout), returns, mask).value_loss;
  CHECK(last < 0.1 * first.value_loss);
  const auto metrics = first.metrics();
  REQUIRE(metrics.size() == 5);
  CHECK(metrics[0].name == "critic/vf_loss");
  CHECK(metrics[0].value == first.value_loss);
}

TEST_CASE("Critic::update: micro-batches accumulate to the whole batch's step, and clipping bounds the move",
          "[train][critic]") {
  ProcessGroup group{ProcessGroupOptions{}};
  const Rollout rollout = two_rows();
  const torch::Tensor mask = rollout.completion_mask;
  std::vector<torch::Tensor> after;
  std::vector<double> norms;
  for (const std::int64_t micro_batches : {1, 2}) {
    Critic critic(tiny_critic(9), group, {.learning_rate = 1e-2, .micro_batches = micro_batches});
    const torch::Tensor old_values = critic.values(rollout);
    const auto update = critic.update(rollout, old_values, (old_values + 1.0f).masked_fill(mask == 0, 0.0f), mask);
    norms.push_back(update.grad_norm);
    std::vector<torch::Tensor> flat;
    for (const auto& p : critic.model()->parameters()) flat.push_back(p.detach().reshape({-1}));
    after.push_back(torch::cat(flat));
  }
  CHECK(norms[0] == Approx(norms[1]).epsilon(1e-5));
  CHECK(torch::allclose(after[0], after[1], 1e-5, 1e-5));

  // V_old far from V: the clipped term (V_old + clip(V − V_old, ±0.5) − R)² is the larger wherever V − V_old > 0.5
  // points away from R, so every token counts as clipped.
  Critic critic(tiny_critic(9), group);
  const torch::Tensor values = critic.values(rollout);
  const torch::Tensor old_values = (values - 2.0f).masked_fill(mask == 0, 0.0f);
  const torch::Tensor returns = (values + 1.0f).masked_fill(mask == 0, 0.0f);
  const auto clipped = critic.update(rollout, old_values, returns, mask);
  CHECK(clipped.clip_fraction == 1.0);
  // The loss is then ½·(V_old + 0.5 − R)² = ½·2.5².
  CHECK(clipped.value_loss == Approx(0.5 * 2.5 * 2.5).epsilon(1e-5));
}

TEST_CASE("Critic names the tensor whose shape differs, and refuses a rollout without a prompt column",
          "[train][critic]") {
  ProcessGroup group{ProcessGroupOptions{}};
  const Rollout rollout = two_rows();
  Critic critic(tiny_critic(3), group);
  const torch::Tensor good = torch::zeros({2, 3});
  CHECK_THROWS_WITH(critic.update(rollout, good, torch::zeros({2, 2}), rollout.completion_mask),
                    Catch::Contains("returns is [2, 2], the rollout's completions are [2, 3]"));
  CHECK_THROWS_WITH(critic.update(rollout, torch::Tensor(), good, rollout.completion_mask),
                    Catch::Contains("old_values is undefined"));
  Rollout no_prompt = rollout;
  no_prompt.prompt_ids = torch::zeros({2, 0}, torch::kInt64);
  no_prompt.prompt_mask = torch::zeros({2, 0}, torch::kInt64);
  CHECK_THROWS_WITH(critic.values(no_prompt), Catch::Contains("no prompt column"));
  CHECK_THROWS_WITH(Critic(tiny_critic(3), group, {.epochs = 0}), Catch::Contains("critic epochs must be >= 1"));
}
