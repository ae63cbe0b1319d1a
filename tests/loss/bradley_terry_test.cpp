// SPDX-License-Identifier: Apache-2.0
// bradley_terry_loss by hand (log 2 at a tie, TRL's margin and centring term), its gradient against the closed form
// −σ(−d)/N and finite differences, micro-batches with the whole batch's pair count, and huge score differences
// without NaN or infinity.
#include <grpo/loss/bradley_terry.hpp>

#include "support/tensor_testing.hpp"

#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cmath>

using grpo::bradley_terry_loss;

TEST_CASE("bradley_terry_loss by hand: a tie costs log 2, the margin shifts the difference, the centring term adds "
          "c·mean((r_c + r_r)²)",
          "[loss][reward_model]") {
  const auto zero = torch::zeros({2}, torch::kFloat64);
  CHECK(bradley_terry_loss(zero, zero).loss.item<double>() == Approx(std::log(2.0)));
  CHECK(bradley_terry_loss(zero, zero).accuracy == 0.0);  // a tie is not a right order
  const auto chosen = torch::tensor({2.0, 0.5}, torch::kFloat64), rejected = torch::tensor({1.0, 1.5}, torch::kFloat64);
  // d = 1, −1: (log(1 + e^−1) + log(1 + e^1)) / 2.
  const auto plain = bradley_terry_loss(chosen, rejected);
  CHECK(plain.loss.item<double>() == Approx((std::log1p(std::exp(-1.0)) + std::log1p(std::exp(1.0))) / 2));
  CHECK(plain.accuracy == 0.5);
  // margin 1 on the first pair: d = 0, −1.
  const auto with_margin = bradley_terry_loss(chosen, rejected, torch::tensor({1.0, 0.0}, torch::kFloat64));
  CHECK(with_margin.loss.item<double>() == Approx((std::log(2.0) + std::log1p(std::exp(1.0))) / 2));
  // centring, c = 0.01: (3² + 2²) / 2 · 0.01 more.
  const auto centred = bradley_terry_loss(chosen, rejected, {}, {.center_rewards_coefficient = 0.01});
  CHECK(centred.loss.item<double>() == Approx(plain.loss.item<double>() + 0.01 * 13.0 / 2));
}

TEST_CASE("bradley_terry_loss gradient: −σ(−d)/N in closed form and by finite differences, and micro-batches sum to the "
          "whole",
          "[loss][reward_model]") {
  torch::manual_seed(8);
  const auto chosen = torch::randn({6}, torch::kFloat64), rejected = torch::randn({6}, torch::kFloat64);
  const auto margin = torch::rand({6}, torch::kFloat64);
  const auto c = chosen.clone().requires_grad_(true);
  const auto loss = bradley_terry_loss(c, rejected, margin).loss;
  const auto grad = torch::autograd::grad({loss}, {c})[0];
  GRPO_REQUIRE_CLOSE(grad, -torch::sigmoid(-(chosen - rejected - margin)) / 6, 1e-12, 1e-15);
  const auto f = [&](const torch::Tensor& x) {
    return bradley_terry_loss(x, rejected, margin, {.center_rewards_coefficient = 0.1}).loss;
  };
  GRPO_REQUIRE_CLOSE(grpo::testing::autograd_grad(f, chosen), grpo::testing::finite_difference_grad(f, chosen), 1e-7,
                     1e-10);
  torch::Tensor parts = torch::zeros({}, torch::kFloat64);
  for (int64_t begin = 0; begin < 6; begin += 3) {
    parts = parts + bradley_terry_loss(chosen.narrow(0, begin, 3), rejected.narrow(0, begin, 3),
                                       margin.narrow(0, begin, 3), {.pairs = 6.0})
                        .loss;
  }
  CHECK(parts.item<double>() == Approx(bradley_terry_loss(chosen, rejected, margin).loss.item<double>()).epsilon(1e-14));
}

TEST_CASE("bradley_terry_loss edge cases: huge differences stay finite, no pairs give 0, bad inputs are errors",
          "[loss][reward_model]") {
  const auto chosen = torch::tensor({1e4, -1e4}, torch::kFloat32).requires_grad_(true);
  const auto rejected = torch::zeros({2}, torch::kFloat32);
  const auto out = bradley_terry_loss(chosen, rejected);
  CHECK(out.loss.item<double>() == Approx(1e4 / 2));  // the wrong pair costs its difference, the right one 0
  const auto grad = torch::autograd::grad({out.loss}, {chosen})[0];
  CHECK(torch::isfinite(grad).all().item<bool>());
  CHECK(grad[0].item<double>() == Approx(0.0).margin(1e-30));
  CHECK(grad[1].item<double>() == Approx(-0.5));
  const auto none = torch::zeros({0}, torch::kFloat64);
  CHECK(bradley_terry_loss(none, none).loss.item<double>() == 0.0);
  CHECK_THROWS_AS(bradley_terry_loss(torch::zeros({2}), torch::zeros({3})), grpo::Error);
  CHECK_THROWS_AS(bradley_terry_loss(torch::zeros({2}), torch::zeros({2}), {}, {.center_rewards_coefficient = -1.0}),
                  grpo::ConfigError);
}
