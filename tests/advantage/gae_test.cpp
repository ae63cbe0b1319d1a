// SPDX-License-Identifier: Apache-2.0
// gae_advantages by hand (Monte-Carlo and TD(0) limits, a skipped hole) and on edge inputs; the comparison with verl's
// compute_gae_advantage_return on random batches is tests/parity/critic_parity_test.cpp.
#include <grpo/advantage/gae.hpp>

#include "support/tensor_testing.hpp"

#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace {

using grpo::gae_advantages;
using grpo::GaeOptions;

}  // namespace

TEST_CASE("gae_advantages by hand: λ = 1, γ = 1 gives reward-to-go minus V, λ = 0 the one-step TD error, and a "
          "hole is skipped",
          "[advantage][gae]") {
  const auto r = torch::tensor({{0.0, 0.0, 1.0}}, torch::kFloat64);
  const auto v = torch::tensor({{0.2, 0.5, 0.7}}, torch::kFloat64);
  const auto full = torch::ones({1, 3}, torch::kInt64);
  const auto mc = gae_advantages(r, v, full, {.gamma = 1.0, .lambda = 1.0, .whiten = false});
  GRPO_REQUIRE_CLOSE(mc.advantages, torch::tensor({{0.8, 0.5, 0.3}}, torch::kFloat64), 0, 1e-15);
  GRPO_REQUIRE_CLOSE(mc.returns, torch::tensor({{1.0, 1.0, 1.0}}, torch::kFloat64), 0, 1e-15);
  const auto td = gae_advantages(r, v, full, {.gamma = 1.0, .lambda = 0.0, .whiten = false});
  // δ_0 = 0 + 0.5 − 0.2, δ_1 = 0 + 0.7 − 0.5, δ_2 = 1 − 0.7.
  GRPO_REQUIRE_CLOSE(td.advantages, torch::tensor({{0.3, 0.2, 0.3}}, torch::kFloat64), 0, 1e-15);
  // Token 1 masked (a tool reply): token 0 bootstraps from token 2, as if token 1 were not there.
  const auto hole = gae_advantages(r, v, torch::tensor({{1, 0, 1}}, torch::kInt64),
                                   {.gamma = 0.5, .lambda = 0.0, .whiten = false});
  GRPO_REQUIRE_CLOSE(hole.advantages, torch::tensor({{0.5 * 0.7 - 0.2, 0.0, 0.3}}, torch::kFloat64), 0, 1e-15);
}

TEST_CASE("gae_advantages edge cases: an all-masked batch gives zeros without NaN, and bad shapes and options are "
          "errors",
          "[advantage][gae]") {
  const auto zeros = torch::zeros({2, 3}, torch::kFloat64);
  const auto none = gae_advantages(torch::randn({2, 3}, torch::kFloat64), zeros, torch::zeros({2, 3}, torch::kInt64));
  CHECK(torch::equal(none.advantages, zeros));
  CHECK(torch::equal(none.returns, zeros));
  const auto empty = gae_advantages(torch::zeros({0, 4}, torch::kFloat64), torch::zeros({0, 4}, torch::kFloat64),
                                    torch::zeros({0, 4}, torch::kInt64));
  CHECK(empty.advantages.sizes() == std::vector<int64_t>{0, 4});
  CHECK_THROWS_AS(gae_advantages(zeros, torch::zeros({2, 4}, torch::kFloat64), torch::ones({2, 3})), grpo::Error);
  CHECK_THROWS_AS(gae_advantages(zeros, zeros, torch::ones({2, 3}), {.gamma = 1.5}), grpo::ConfigError);
  CHECK_THROWS_AS(gae_advantages(zeros, zeros, torch::ones({2, 3}), {.lambda = -0.1}), grpo::ConfigError);
}
