// SPDX-License-Identifier: Apache-2.0
#include <cmath>
#include <grpo/loss/aggregation.hpp>
#include <limits>

#include "support/tensor_testing.hpp"

namespace {

using grpo::Aggregation;
using grpo::LossType;
using grpo::Normaliser;

const auto kF64 = torch::TensorOptions().dtype(torch::kFloat64);
const double kNaN = std::numeric_limits<double>::quiet_NaN();

double scalar(const torch::Tensor& t) { return t.item<double>(); }

}  // namespace

TEST_CASE("aggregate: both shapes by hand, masked entries ignored even when NaN", "[loss][aggregation]") {
  // Row 0 keeps 1, 2; row 1 keeps 4; row 2 is empty (and NaN where masked).
  auto values = torch::tensor({{1.0, 2.0, 3.0}, {4.0, 5.0, 6.0}, {kNaN, kNaN, kNaN}}, kF64);
  auto mask = torch::tensor({{1, 1, 0}, {1, 0, 0}, {0, 0, 0}});
  // Σ m·L = 1 + 2 + 4 = 7; sequence means 3/2, 4/1, 0/max(0, 1) = 0 → sum 5.5.
  REQUIRE(scalar(grpo::aggregate(values, mask, Aggregation::sum_over_tokens, Normaliser::tokens(3))) ==
          Approx(7.0 / 3.0));
  REQUIRE(scalar(grpo::aggregate(values, mask, Aggregation::sum_of_sequence_means, Normaliser::sequences(3))) ==
          Approx(5.5 / 3.0));
  // Gradient: d/dL of Σ m·L / 3 is m/3 (zero, not NaN, where masked).
  auto grad = grpo::testing::autograd_grad(
      [&](const torch::Tensor& x) {
        return grpo::aggregate(x, mask, Aggregation::sum_over_tokens, Normaliser::tokens(3));
      },
      values);
  GRPO_REQUIRE_CLOSE(grad, mask.to(torch::kFloat64) / 3.0, 0, 1e-15);
}

TEST_CASE("aggregate_loss: every loss type with its local normaliser, by hand", "[loss][aggregation]") {
  auto values = torch::tensor({{1.0, 2.0, 3.0}, {4.0, 5.0, 6.0}, {7.0, 8.0, 9.0}}, kF64);
  auto mask = torch::tensor({{1, 1, 0}, {1, 0, 0}, {0, 0, 0}});
  // B = 3, T = 3, Σ m = 3 tokens, 2 non-empty rows, Σ m·L = 7, Σ of sequence means = 1.5 + 4 + 0 = 5.5.
  const grpo::LocalNormaliserOptions options{.max_completion_length = 4};
  struct Case {
    LossType type;
    double expected;
  };
  const Case cases[] = {
      {LossType::grpo, 5.5 / 3},                     // mean over all 3 rows of the row means (TRL)
      {LossType::sapo, 5.5 / 3},                     //
      {LossType::bnpo, 7.0 / 3},                     // Σ m·L / Σ m
      {LossType::dapo, 7.0 / 3},                     //
      {LossType::cispo, 7.0 / 3},                    //
      {LossType::vespo, 7.0 / 3},                    //
      {LossType::token_mean, 7.0 / 3},               // verl
      {LossType::dr_grpo, 7.0 / (3 * 4)},            // Σ m·L / (B · max_completion_length)
      {LossType::luspo, 7.0 / 3},                    // Σ_b |o_b|·L_b / B with L constant per row
      {LossType::seq_mean_token_sum, 7.0 / 2},       // verl: Σ of row sums / non-empty rows
      {LossType::seq_mean_token_mean, 5.5 / 2},      // verl: Σ of row means / non-empty rows
      {LossType::seq_mean_token_sum_norm, 7.0 / 3},  // verl default factor: T = 3
  };
  for (const auto& c : cases) {
    INFO("loss type " << grpo::to_string(c.type));
    auto n = grpo::local_normaliser(c.type, mask, options);
    REQUIRE(n.kind() == grpo::aggregation_rule(c.type).normaliser);
    REQUIRE(scalar(grpo::aggregate_loss(values, mask, c.type, n)) == Approx(c.expected));
  }
  auto factor = grpo::local_normaliser(LossType::seq_mean_token_sum_norm, mask, {.loss_scale_factor = 10.0});
  REQUIRE(scalar(grpo::aggregate_loss(values, mask, LossType::seq_mean_token_sum_norm, factor)) == Approx(0.7));
}

TEST_CASE("aggregate: fp64 loop re-derivation and finite-difference gradient", "[loss][aggregation]") {
  torch::manual_seed(21);
  const int64_t B = 5, T = 7;
  auto values = torch::randn({B, T}, kF64);
  auto mask = torch::rand({B, T}) > 0.4;
  mask[2].fill_(false);  // one empty row
  const auto tokens = Normaliser::tokens(13.0);
  const auto seqs = Normaliser::sequences(4.0);
  double sum = 0.0, sum_of_means = 0.0;
  for (int64_t b = 0; b < B; ++b) {
    double row = 0.0, len = 0.0;
    for (int64_t t = 0; t < T; ++t) {
      if (mask[b][t].item<bool>()) {
        row += values[b][t].item<double>();
        len += 1.0;
      }
    }
    sum += row;
    sum_of_means += row / std::max(len, 1.0);
  }
  REQUIRE(scalar(grpo::aggregate(values, mask, Aggregation::sum_over_tokens, tokens)) == Approx(sum / 13.0));
  REQUIRE(scalar(grpo::aggregate(values, mask, Aggregation::sum_of_sequence_means, seqs)) ==
          Approx(sum_of_means / 4.0));
  for (auto aggregation : {Aggregation::sum_over_tokens, Aggregation::sum_of_sequence_means}) {
    auto f = [&](const torch::Tensor& x) { return grpo::aggregate(x, mask, aggregation, seqs); };
    GRPO_REQUIRE_CLOSE(grpo::testing::autograd_grad(f, values), grpo::testing::finite_difference_grad(f, values), 1e-6,
                       1e-8);
  }
}

TEST_CASE("aggregate: an all-masked batch gives 0 and zero gradient", "[loss][aggregation]") {
  auto values = torch::randn({2, 3}, kF64);
  auto mask = torch::zeros({2, 3});
  for (auto type : {LossType::grpo, LossType::dapo, LossType::seq_mean_token_mean, LossType::luspo}) {
    auto n = grpo::local_normaliser(type, mask);
    REQUIRE(n.value() == (type == LossType::grpo || type == LossType::luspo ? 2.0 : 0.0));
    auto f = [&](const torch::Tensor& x) { return grpo::aggregate_loss(x, mask, type, n); };
    REQUIRE(scalar(f(values)) == 0.0);
    GRPO_REQUIRE_CLOSE(grpo::testing::autograd_grad(f, values), torch::zeros({2, 3}, kF64), 0, 0);
  }
}

TEST_CASE("Normaliser: kinds, divisor and bad values", "[loss][aggregation]") {
  REQUIRE(Normaliser::tokens(0).divisor() == 1.0);
  REQUIRE(Normaliser::sequences(0.5).divisor() == 1.0);
  REQUIRE(Normaliser::tokens(12).divisor() == 12.0);
  REQUIRE(Normaliser::constant(0.25).divisor() == 0.25);
  REQUIRE(Normaliser::constant(2048).describe() == "constant(2048)");
  REQUIRE_THROWS_WITH(Normaliser::constant(0), "Normaliser::constant: value must be > 0, got 0");
  REQUIRE_THROWS_WITH(Normaliser::tokens(-1), "Normaliser::tokens: count must be >= 0, got -1");
  REQUIRE_THROWS_AS(Normaliser::sequences(kNaN), grpo::ConfigError);
}

TEST_CASE("aggregate_loss checks the normaliser kind against the loss type", "[loss][aggregation]") {
  auto values = torch::zeros({2, 3}, kF64);
  auto mask = torch::ones({2, 3});
  REQUIRE_THROWS_AS(grpo::aggregate_loss(values, mask, LossType::dapo, Normaliser::sequences(2)), grpo::ConfigError);
  REQUIRE_THROWS_WITH(grpo::aggregate_loss(values, mask, LossType::dapo, Normaliser::sequences(2)),
                      "loss_type 'dapo' needs a Normaliser::tokens(...), got Normaliser::sequences(2)");
  REQUIRE_THROWS_WITH(grpo::aggregate_loss(values, mask, LossType::grpo, Normaliser::tokens(6)),
                      "loss_type 'grpo' needs a Normaliser::sequences(...), got Normaliser::tokens(6)");
  REQUIRE_THROWS_WITH(grpo::aggregate_loss(values, mask, LossType::dr_grpo, Normaliser::tokens(6)),
                      "loss_type 'dr_grpo' needs a Normaliser::constant(...), got Normaliser::tokens(6)");
  REQUIRE_THROWS_WITH(grpo::local_normaliser(LossType::dr_grpo, mask),
                      "local_normaliser: loss_type 'dr_grpo' needs max_completion_length > 0, got none");
  REQUIRE_THROWS_WITH(grpo::aggregate(values, torch::ones({2, 4}), Aggregation::sum_over_tokens, Normaliser::tokens(1)),
                      "aggregate: values has shape [2, 3] but mask has shape [2, 4]");
  REQUIRE_THROWS_WITH(
      grpo::aggregate(torch::zeros({6}, kF64), torch::ones({6}), Aggregation::sum_over_tokens, Normaliser::tokens(1)),
      "aggregate: values must have 2 dimensions, got shape [6]");
}

TEST_CASE("parse_loss_type accepts TRL loss types and verl aggregation modes", "[loss][aggregation]") {
  REQUIRE(grpo::parse_loss_type("dapo") == LossType::dapo);
  REQUIRE(grpo::parse_loss_type("dr_grpo") == LossType::dr_grpo);
  REQUIRE(grpo::parse_loss_type("token-mean") == LossType::token_mean);
  REQUIRE(grpo::parse_loss_type("seq-mean-token-sum-norm") == LossType::seq_mean_token_sum_norm);
  REQUIRE(grpo::parse_loss_type("seq_mean_token_mean") == LossType::seq_mean_token_mean);
  REQUIRE(grpo::parse_loss_type("seq-mean-token-sum") == LossType::seq_mean_token_sum);
  REQUIRE(grpo::parse_loss_type("seq-mean-token-mean") == LossType::seq_mean_token_mean);
  for (auto type : {LossType::grpo, LossType::bnpo, LossType::dr_grpo, LossType::dapo, LossType::cispo, LossType::sapo,
                    LossType::luspo, LossType::vespo, LossType::token_mean, LossType::seq_mean_token_sum,
                    LossType::seq_mean_token_mean, LossType::seq_mean_token_sum_norm}) {
    REQUIRE(grpo::parse_loss_type(grpo::to_string(type)) == type);
  }
  REQUIRE_THROWS_AS(grpo::parse_loss_type("ppo"), grpo::ConfigError);
  REQUIRE_THROWS_WITH(grpo::parse_loss_type("ppo"),
                      "unknown loss type 'ppo'; valid: grpo, bnpo, dr_grpo, dapo, cispo, sapo, luspo, vespo, "
                      "token_mean (alias token-mean), seq_mean_token_sum (alias seq-mean-token-sum), "
                      "seq_mean_token_mean (alias seq-mean-token-mean), seq_mean_token_sum_norm (alias "
                      "seq-mean-token-sum-norm)");
}
