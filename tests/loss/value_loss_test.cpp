// SPDX-License-Identifier: Apache-2.0
// clipped_value_loss by hand and against finite differences; a batch split in micro-batches sums to the whole; masked
// NaN and all-masked batches give no NaN. The comparison with verl's compute_value_loss is
// tests/parity/critic_parity_test.cpp.
#include <grpo/loss/value_loss.hpp>

#include "support/tensor_testing.hpp"

#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cstdint>
#include <limits>
#include <optional>

namespace {

using grpo::clipped_value_loss;
using grpo::local_normaliser;
using grpo::LossType;
using grpo::ValueLossOptions;

}  // namespace

TEST_CASE("clipped_value_loss by hand, and its gradient equals finite differences for every verl loss_agg_mode",
          "[loss][value]") {
  // One token each, old value 0, clip 0.5, return 1: V = 0.3 is inside the range (loss ½·0.49); V = 0.9 is outside
  // and moving towards the return, so the clipped term (0.5 − 1)² = 0.25 wins over (0.9 − 1)² (loss ½·0.25, counted
  // as clipped); V = −0.9 is outside and away from it, so the unclipped (1.9)² wins.
  const auto old = torch::zeros({3, 1}, torch::kFloat64), returns = torch::ones({3, 1}, torch::kFloat64);
  const auto values = torch::tensor({{0.3}, {0.9}, {-0.9}}, torch::kFloat64);
  const auto mask = torch::ones({3, 1}, torch::kInt64);
  const auto out = clipped_value_loss(values, old, returns, mask, local_normaliser(LossType::token_mean, mask));
  CHECK(out.loss.item<double>() == Approx(0.5 * (0.49 + 0.25 + 3.61) / 3));
  CHECK(out.clip_fraction == Approx(1.0 / 3));

  torch::manual_seed(5);
  const int64_t B = 5, T = 7;
  const torch::Tensor old_values = torch::randn({B, T}, torch::kFloat64);
  const torch::Tensor new_values = old_values + 0.8 * torch::randn({B, T}, torch::kFloat64);
  const torch::Tensor targets = torch::randn({B, T}, torch::kFloat64);
  torch::Tensor ragged = torch::ones({B, T}, torch::kInt64);
  ragged[1].narrow(0, 4, 3).zero_();  // a masked tail
  ragged[2][2] = 0;                   // a hole (a tool reply)
  ragged[3].zero_();                  // an empty row
  for (const LossType type : {LossType::token_mean, LossType::seq_mean_token_sum, LossType::seq_mean_token_mean,
                              LossType::seq_mean_token_sum_norm}) {
    for (const double c : {0.2, 10.0}) {
      INFO("loss type " << grpo::to_string(type) << " clip " << c);
      const auto normaliser = local_normaliser(type, ragged);
      const ValueLossOptions options{.clip_range = c, .loss_type = type};
      const auto f = [&](const torch::Tensor& v) {
        return clipped_value_loss(v, old_values, targets, ragged, normaliser, options).loss;
      };
      GRPO_REQUIRE_CLOSE(grpo::testing::autograd_grad(f, new_values),
                         grpo::testing::finite_difference_grad(f, new_values), 1e-6, 1e-8);
    }
  }
  // No clipping: ½ · token-mean of (V − R)².
  const auto plain = clipped_value_loss(new_values, old_values, targets, ragged,
                                        local_normaliser(LossType::token_mean, ragged), {.clip_range = std::nullopt});
  CHECK(plain.loss.item<double>() ==
        Approx(0.5 * (new_values - targets).square().masked_select(ragged != 0).mean().item<double>()).epsilon(1e-12));
  CHECK(plain.clip_fraction == 0.0);
}

TEST_CASE("clipped_value_loss: micro-batches with the whole batch's normaliser sum to the whole batch's loss and "
          "gradient",
          "[loss][value]") {
  torch::manual_seed(6);
  const int64_t B = 6, T = 5;
  const torch::Tensor old = torch::randn({B, T}, torch::kFloat64), returns = torch::randn({B, T}, torch::kFloat64);
  const torch::Tensor values = (old + 0.5 * torch::randn({B, T}, torch::kFloat64)).requires_grad_(true);
  torch::Tensor mask = (torch::rand({B, T}) > 0.3).to(torch::kInt64);
  for (const LossType type : {LossType::token_mean, LossType::seq_mean_token_mean}) {
    const auto normaliser = local_normaliser(type, mask);
    const ValueLossOptions options{.loss_type = type};
    const auto whole = clipped_value_loss(values, old, returns, mask, normaliser, options).loss;
    const auto whole_grad = torch::autograd::grad({whole}, {values})[0];
    torch::Tensor parts = torch::zeros({}, torch::kFloat64);
    for (int64_t begin = 0; begin < B; begin += 2) {
      parts = parts + clipped_value_loss(values.narrow(0, begin, 2), old.narrow(0, begin, 2),
                                         returns.narrow(0, begin, 2), mask.narrow(0, begin, 2), normaliser, options)
                          .loss;
    }
    const auto parts_grad = torch::autograd::grad({parts}, {values})[0];
    CHECK(parts.item<double>() == Approx(whole.item<double>()).epsilon(1e-13));
    GRPO_REQUIRE_CLOSE(parts_grad, whole_grad, 1e-12, 1e-14);
  }
}

TEST_CASE("clipped_value_loss edge cases: NaN at masked positions and an all-masked batch give finite results, and "
          "bad inputs are errors",
          "[loss][value]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const auto values = torch::tensor({{0.5, nan}}, torch::kFloat64).requires_grad_(true);
  const auto old = torch::tensor({{0.0, nan}}, torch::kFloat64), returns = torch::tensor({{1.0, nan}}, torch::kFloat64);
  const auto mask = torch::tensor({{1, 0}}, torch::kInt64);
  const auto out = clipped_value_loss(values, old, returns, mask, local_normaliser(LossType::token_mean, mask));
  // Clip range 0.5: V = 0.5 is at the edge, so both terms are (0.5 − 1)² = 0.25 and the loss ½ · 0.25.
  CHECK(out.loss.item<double>() == Approx(0.125));
  const auto grad = torch::autograd::grad({out.loss}, {values})[0];
  CHECK(torch::isfinite(grad).all().item<bool>());
  CHECK(grad[0][1].item<double>() == 0.0);
  const auto none = torch::zeros({2, 3}, torch::kInt64);
  const auto empty = clipped_value_loss(torch::randn({2, 3}, torch::kFloat64), torch::zeros({2, 3}, torch::kFloat64),
                                        torch::zeros({2, 3}, torch::kFloat64), none,
                                        local_normaliser(LossType::token_mean, none));
  CHECK(empty.loss.item<double>() == 0.0);
  CHECK(empty.clip_fraction == 0.0);
  const auto x = torch::zeros({2, 3}, torch::kFloat64);
  CHECK_THROWS_AS(clipped_value_loss(x, torch::zeros({2, 4}, torch::kFloat64), x, none,
                                     local_normaliser(LossType::token_mean, none)),
                  grpo::Error);
  CHECK_THROWS_AS(clipped_value_loss(x, x, x, none, local_normaliser(LossType::token_mean, none), {.clip_range = -1.0}),
                  grpo::ConfigError);
  // The normaliser must be the loss type's kind.
  CHECK_THROWS_AS(clipped_value_loss(x, x, x, none, grpo::Normaliser::sequences(2)), grpo::ConfigError);
}
