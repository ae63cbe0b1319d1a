// SPDX-License-Identifier: Apache-2.0
#include <grpo/loss/recipes.hpp>

#include "support/tensor_testing.hpp"

using grpo::ImportanceLevel;
using grpo::LossType;
using grpo::PolicyLossType;

TEST_CASE("recipes carry the published settings", "[loss][recipes]") {
  const auto grpo_options = grpo::recipes::grpo();  // DeepSeekMath: ε 0.2, β 0.04, k3, sequence mean
  REQUIRE(grpo_options.loss_type == LossType::grpo);
  REQUIRE(grpo_options.policy.type == PolicyLossType::ppo_clip);
  REQUIRE(grpo_options.policy.epsilon_low == 0.2);
  REQUIRE(grpo_options.policy.epsilon_high == 0.2);
  REQUIRE(grpo_options.beta == 0.04);
  REQUIRE(grpo_options.kl.estimator == grpo::KlEstimator::k3);
  REQUIRE_FALSE(grpo_options.kl.straight_through);

  const auto dr = grpo::recipes::dr_grpo(1024);  // Dr. GRPO: constant normaliser B · L_max, no KL
  REQUIRE(dr.loss_type == LossType::dr_grpo);
  REQUIRE(dr.max_completion_length == 1024);
  REQUIRE(dr.beta == 0.0);
  REQUIRE_THROWS_AS(grpo::recipes::dr_grpo(0), grpo::ConfigError);

  const auto dapo = grpo::recipes::dapo();  // DAPO: clip-higher 0.2/0.28, token-level, no KL
  REQUIRE(dapo.loss_type == LossType::dapo);
  REQUIRE(dapo.policy.epsilon_low == 0.2);
  REQUIRE(dapo.policy.epsilon_high == 0.28);
  REQUIRE(dapo.beta == 0.0);

  const auto gspo = grpo::recipes::gspo();  // GSPO: sequence IS, ε 3e-4/4e-4, sequence mean, no KL
  REQUIRE(gspo.loss_type == LossType::grpo);
  REQUIRE(gspo.policy.importance_level == ImportanceLevel::sequence);
  REQUIRE(gspo.policy.epsilon_low == 3e-4);
  REQUIRE(gspo.policy.epsilon_high == 4e-4);
  REQUIRE(gspo.beta == 0.0);

  const auto cispo = grpo::recipes::cispo();  // CISPO (TRL form): cap 5.0, token-level
  REQUIRE(cispo.loss_type == LossType::cispo);
  REQUIRE(cispo.policy.type == PolicyLossType::cispo);
  REQUIRE(cispo.policy.epsilon_high == 5.0);
  REQUIRE(cispo.beta == 0.0);

  for (const auto& options : {grpo_options, dr, dapo, gspo, cispo}) REQUIRE_NOTHROW(grpo::GrpoLoss(options));
}

TEST_CASE("recipes: each normalises as its paper does", "[loss][recipes]") {
  // B = 2 rows with 2 and 1 valid tokens, T = 3.
  grpo::LossInputs in{.log_probs = torch::zeros({2, 3}, torch::kFloat64),
                      .ref_log_probs = torch::zeros({2, 3}, torch::kFloat64),
                      .advantages = torch::zeros({2}, torch::kFloat64),
                      .mask = torch::tensor({{1, 1, 0}, {1, 0, 0}})};
  REQUIRE(grpo::GrpoLoss(grpo::recipes::grpo()).local_normaliser(in).describe() == "sequences(2)");
  REQUIRE(grpo::GrpoLoss(grpo::recipes::dr_grpo(16)).local_normaliser(in).describe() == "constant(32)");
  REQUIRE(grpo::GrpoLoss(grpo::recipes::dapo()).local_normaliser(in).describe() == "tokens(3)");
  REQUIRE(grpo::GrpoLoss(grpo::recipes::gspo()).local_normaliser(in).describe() == "sequences(2)");
  REQUIRE(grpo::GrpoLoss(grpo::recipes::cispo()).local_normaliser(in).describe() == "tokens(3)");
}

TEST_CASE("recipes::by_name returns the named recipe and lists the names otherwise", "[loss][recipes]") {
  CHECK(grpo::recipes::by_name("dapo", 64).policy.epsilon_high == grpo::recipes::dapo().policy.epsilon_high);
  CHECK(grpo::recipes::by_name("gspo", 64).policy.importance_level == grpo::recipes::gspo().policy.importance_level);
  CHECK(grpo::recipes::by_name("dr_grpo", 64).max_completion_length == 64);
  CHECK(grpo::recipes::by_name("grpo", 64).beta == grpo::recipes::grpo().beta);
  CHECK(grpo::recipes::by_name("cispo", 64).loss_type == grpo::LossType::cispo);
  CHECK_THROWS_WITH(grpo::recipes::by_name("ppo", 64), Catch::Contains("grpo, dr_grpo, dapo, gspo, cispo"));
}
