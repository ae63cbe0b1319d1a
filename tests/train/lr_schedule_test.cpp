// SPDX-License-Identifier: Apache-2.0
#include <grpo/core/error.hpp>
#include <grpo/train/lr_schedule.hpp>

#include <catch2/catch.hpp>

#include <cmath>

using grpo::train::learning_rate_at;
using grpo::train::LrDecay;

TEST_CASE("learning_rate_at: transformers' warm-up and decay formulas", "[train][lr_schedule]") {
  const grpo::train::LrScheduleOptions constant{.base_lr = 1.0, .warmup_steps = 4, .total_steps = 10};
  // Step 1 is transformers' step 0: rate 0; then 1/4, 2/4, 3/4, and the base rate from step 5 on.
  CHECK(learning_rate_at(1, constant) == 0.0);
  CHECK(learning_rate_at(2, constant) == 0.25);
  CHECK(learning_rate_at(4, constant) == 0.75);
  CHECK(learning_rate_at(5, constant) == 1.0);
  CHECK(learning_rate_at(50, constant) == 1.0);

  auto linear = constant;
  linear.decay = LrDecay::linear;
  // After warm-up p = (s − 4)/(10 − 4) with s = step − 1: step 8 → p = 0.5 → 0.5; step 11 → p = 1 → 0.
  CHECK(learning_rate_at(5, linear) == 1.0);
  CHECK(learning_rate_at(8, linear) == Approx(0.5));
  CHECK(learning_rate_at(11, linear) == 0.0);
  CHECK(learning_rate_at(20, linear) == 0.0);

  auto cosine = constant;
  cosine.decay = LrDecay::cosine;
  CHECK(learning_rate_at(8, cosine) == Approx(0.5));  // (1 + cos(π/2))/2
  CHECK(learning_rate_at(6, cosine) == Approx(0.5 * (1 + std::cos(M_PI / 6))));
  CHECK(learning_rate_at(11, cosine) == Approx(0.0).margin(1e-15));

  const grpo::train::LrScheduleOptions no_warmup{.base_lr = 3e-4, .total_steps = 1};
  CHECK(learning_rate_at(1, no_warmup) == 3e-4);
}

TEST_CASE("learning-rate schedule: names and bad options", "[train][lr_schedule]") {
  CHECK(grpo::train::parse_lr_decay("cosine") == LrDecay::cosine);
  CHECK_THROWS_WITH(grpo::train::parse_lr_decay("step"), Catch::Contains("constant, linear, cosine"));
  CHECK_THROWS_AS(learning_rate_at(0, {}), grpo::ConfigError);
  CHECK_THROWS_AS(learning_rate_at(1, {.base_lr = -1.0}), grpo::ConfigError);
  CHECK_THROWS_AS(learning_rate_at(1, {.warmup_steps = -1}), grpo::ConfigError);
}

TEST_CASE("set_learning_rate changes every parameter group", "[train][lr_schedule]") {
  auto a = torch::zeros({2}, torch::requires_grad());
  auto b = torch::zeros({3}, torch::requires_grad());
  torch::optim::AdamW optimizer({a}, torch::optim::AdamWOptions(1.0));
  optimizer.add_param_group(torch::optim::OptimizerParamGroup({b}, std::make_unique<torch::optim::AdamWOptions>(2.0)));
  grpo::train::set_learning_rate(optimizer, 0.125);
  for (auto& group : optimizer.param_groups())
    CHECK(static_cast<torch::optim::AdamWOptions&>(group.options()).lr() == 0.125);
}
