// SPDX-License-Identifier: Apache-2.0
#include <grpo/loss/grpo_loss.hpp>
#include <grpo/loss/rollout_correction.hpp>

#include <catch2/catch.hpp>
#include <support/tensor_testing.hpp>

#include <cmath>
#include <limits>

using grpo::RolloutStatistic;

namespace {
const auto kF64 = torch::TensorOptions().dtype(torch::kFloat64);
}

TEST_CASE("rollout_rs thresholds parse as verl's: shared, per option, k1 bands", "[loss][rollout]") {
  auto c = grpo::parse_rollout_rejection("token_k1, seq_mean_k3,token_k1", "0.5_2.0,0.01");
  REQUIRE(c.size() == 2);  // the duplicate is dropped
  CHECK(c[0].statistic == RolloutStatistic::token_k1);
  CHECK((c[0].lower == 0.5 && c[0].upper == 2.0));
  CHECK(c[1].statistic == RolloutStatistic::seq_mean_k3);
  CHECK(c[1].upper == 0.01);
  c = grpo::parse_rollout_rejection("seq_sum_k1,seq_max_k2", "4");  // one shared entry; k1 lower = 1/upper
  CHECK((c[0].lower == 0.25 && c[0].upper == 4.0 && c[1].upper == 4.0));
  CHECK_THROWS_WITH(grpo::parse_rollout_rejection("token_k4", "1"),
                    Catch::Contains("rollout_rs: unknown option 'token_k4'"));
  CHECK_THROWS_WITH(grpo::parse_rollout_rejection("token_k1,token_k2", "1,2,3"),
                    Catch::Contains("rollout_rs_threshold: 3 entries for 2 rollout_rs options"));
  CHECK_THROWS_WITH(grpo::parse_rollout_rejection("token_k2", "0.1_2"), Catch::Contains("without '_'"));
  CHECK_THROWS_WITH(grpo::parse_rollout_rejection("token_k3", "-1"), Catch::Contains("'-1' for option 'token_k3'"));
  CHECK_THROWS_WITH(grpo::parse_rollout_rejection("", "1"), Catch::Contains("rollout_rs must name at least one"));
}

TEST_CASE("rollout rejection masks by hand", "[loss][rollout]") {
  // log r = trainer − sampler per token: row 0 [0.1, −1.0, 0.0], row 1 [0.5, 0.5, pad], row 2 empty.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  auto sampler = torch::zeros({3, 3}, kF64);
  auto trainer = torch::tensor({{0.1, -1.0, 0.0}, {0.5, 0.5, nan}, {nan, nan, nan}}, kF64);
  auto mask = torch::tensor({{1, 1, 1}, {1, 1, 0}, {0, 0, 0}}).to(torch::kBool);
  auto keep = [&](const char* rs, const char* threshold) {
    return grpo::rollout_rejection_mask(trainer, sampler, mask, grpo::parse_rollout_rejection(rs, threshold));
  };
  // token_k1 with band [0.5, 2]: k1 = −log r must lie in [log 0.5, log 2] = [−0.693, 0.693]: −1.0 → k1 = 1 fails.
  CHECK(torch::equal(keep("token_k1", "0.5_2"), torch::tensor({{1, 0, 1}, {1, 1, 0}, {0, 0, 0}}).to(torch::kBool)));
  // token_k2 ≤ 0.1: ½·0.01, ½·1 (fails), 0; ½·0.25 = 0.125 (fails) twice.
  CHECK(torch::equal(keep("token_k2", "0.1"), torch::tensor({{1, 0, 1}, {0, 0, 0}, {0, 0, 0}}).to(torch::kBool)));
  // seq_mean_k3 ≤ 0.1: row 0 mean of (e^0.1 − 1.1, e^−1 − 0, 0) = (0.00517 + 0.36788)/3 = 0.1244 (rejected);
  // row 1 mean e^0.5 − 1.5 = 0.1487 (rejected); with 0.13 row 0 passes.
  CHECK(torch::equal(keep("seq_mean_k3", "0.1"), torch::zeros({3, 3}, torch::kBool)));
  CHECK(torch::equal(keep("seq_mean_k3", "0.13"), torch::tensor({{1, 1, 1}, {0, 0, 0}, {0, 0, 0}}).to(torch::kBool)));
  // seq_max_k2 ≤ 0.2: row 0 max ½ fails; row 1 max 0.125 passes. Chained with token_k1 [0.5, 2]: row 1 only.
  CHECK(torch::equal(keep("seq_max_k2,token_k1", "0.2,0.5_2"),
                     torch::tensor({{0, 0, 0}, {1, 1, 0}, {0, 0, 0}}).to(torch::kBool)));
  // seq_sum_k1 band: Σ k1 = −Σ log r: row 0 0.9, row 1 −1.0; [e^−0.95, e^0.95] keeps row 0 only.
  const double e = std::exp(0.95);
  auto c = std::vector<grpo::RolloutRejectionCriterion>{{RolloutStatistic::seq_sum_k1, 1.0 / e, e}};
  CHECK(torch::equal(grpo::rollout_rejection_mask(trainer, sampler, mask.to(torch::kFloat), c),
                     torch::tensor({{1.0f, 1.0f, 1.0f}, {0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f}})));
}

TEST_CASE("GrpoLoss with rollout rejection counts only the kept tokens", "[loss][rollout]") {
  // dapo: the loss is Σ over kept tokens / kept count, with the rejected token's loss left out entirely.
  grpo::GrpoLossOptions o;
  o.rollout_rejection = grpo::parse_rollout_rejection("token_k2", "0.1");
  const grpo::GrpoLoss loss(o);
  auto lp = torch::tensor({{-1.0, -2.0, -0.5}}, kF64).requires_grad_(true);
  auto sampler = torch::tensor({{-1.0, -1.0, -0.5}}, kF64);  // token 1: log r = −1, k2 = 0.5 (rejected)
  grpo::LossInputs in{.log_probs = lp, .advantages = torch::tensor({2.0}, kF64), .mask = torch::ones({1, 3}),
                      .sampler_log_probs = sampler};
  const auto n = loss.local_normaliser(in);
  CHECK(n.value() == 2.0);
  auto out = loss(in, n);
  // μ = 1: w = 1, L = −A = −2 per kept token; mean over the 2 kept tokens.
  CHECK(out.loss.item<double>() == Approx(-2.0));
  out.loss.backward();
  GRPO_REQUIRE_CLOSE(lp.grad(), torch::tensor({{-1.0, 0.0, -1.0}}, kF64), 1e-12, 1e-14);
  grpo::GrpoLossOptions bad;
  bad.rollout_rejection = {{RolloutStatistic::token_k1, 0.0, 1.0}};
  CHECK_THROWS_WITH(grpo::GrpoLoss(bad), Catch::Contains("rollout_rejection: option 'token_k1' needs thresholds"));
  CHECK_THROWS_WITH(loss(grpo::LossInputs{.log_probs = lp, .advantages = torch::tensor({2.0}, kF64),
                                          .mask = torch::ones({1, 3})},
                         n),
                    Catch::Contains("rollout_rejection needs sampler_log_probs"));
}

TEST_CASE("sampler correction with verl's safety bound and batch normalisation by hand", "[loss][rollout]") {
  // token_truncate, cap 2, bound 20: log ρ = [−30, 0.5, 1.0 | 0.2, pad]: weights e^−20, e^0.5, 2 | e^0.2.
  auto t = torch::tensor({{-30.0, 0.5, 1.0}, {0.2, 5.0, 0.0}}, kF64);
  auto s = torch::zeros({2, 3}, kF64);
  auto m = torch::tensor({{1, 1, 1}, {1, 0, 0}});
  grpo::SamplerCorrectionOptions o{.mode = grpo::SamplerCorrectionMode::token_truncate, .clip_max = 2.0,
                                   .log_ratio_bound = 20.0};
  auto w = grpo::sampler_correction_weights(t, s, m, o);
  const double a = std::exp(-20.0), b = std::exp(0.5), c = std::exp(0.2);
  CHECK(w[0][0].item<double>() == Approx(a).epsilon(1e-12));
  CHECK(w[0][1].item<double>() == Approx(b).epsilon(1e-12));
  CHECK(w[0][2].item<double>() == 2.0);
  CHECK(w[1][0].item<double>() == Approx(c).epsilon(1e-12));
  o.batch_normalize = true;  // divided by the mean over the 4 valid tokens (verl masked_mean: / (4 + 1e-8))
  const double mean = (a + b + 2.0 + c) / (4.0 + 1e-8);
  auto wn = grpo::sampler_correction_weights(t, s, m, o);
  CHECK(wn[0][1].item<double>() == Approx(b / mean).epsilon(1e-12));
  // sequence_truncate: row sums 1.0 − 30 + 0.5 = −28.5 → bound −20 → e^−20; row 1 e^0.2; normalised by the mean
  // over the two rows (each row's weight its masked mean, verl: Σ / (|o| + 1e-8)).
  o.mode = grpo::SamplerCorrectionMode::sequence_truncate;
  auto ws = grpo::sampler_correction_weights(t, s, m, o);
  const double row_mean = (a * 3.0 / (3.0 + 1e-8) + c / (1.0 + 1e-8)) / 2.0;
  CHECK(ws[0][2].item<double>() == Approx(a / row_mean).epsilon(1e-12));
  CHECK(ws[1][0].item<double>() == Approx(c / row_mean).epsilon(1e-12));
}
