// SPDX-License-Identifier: Apache-2.0
#include <algorithm>
#include <cmath>
#include <grpo/kl/kl_penalty.hpp>
#include <vector>

#include "support/tensor_testing.hpp"

namespace {

using grpo::KlEstimator;
using grpo::KlOptions;
using grpo::testing::autograd_grad;
using grpo::testing::finite_difference_grad;

const auto kF64 = torch::TensorOptions().dtype(torch::kFloat64);

// Plain scalar re-derivation of each estimator from its formula, Δ = lp − ref.
double expected_kl(KlEstimator estimator, double delta, std::optional<double> clamp) {
  double v = 0.0;
  switch (estimator) {
    case KlEstimator::k1:
      v = delta;
      break;
    case KlEstimator::abs:
      v = std::fabs(delta);
      break;
    case KlEstimator::k2:
      v = 0.5 * delta * delta;
      break;
    case KlEstimator::k3:
      v = std::exp(-delta) + delta - 1.0;
      break;
    case KlEstimator::low_var_kl: {
      const double d = std::clamp(-delta, -20.0, 20.0);
      v = std::clamp(std::exp(d) - d - 1.0, -10.0, 10.0);
      break;
    }
  }
  if (clamp) v = std::clamp(v, -*clamp, *clamp);
  return v;
}

const std::vector<KlEstimator> kAll = {KlEstimator::k1, KlEstimator::abs, KlEstimator::k2, KlEstimator::k3,
                                       KlEstimator::low_var_kl};

}  // namespace

TEST_CASE("kl_penalty: every estimator by hand", "[kl]") {
  // Δ = lp − ref = [0.5, −1, 0].
  auto lp = torch::tensor({{-1.0, -2.0, -0.5}}, kF64);
  auto ref = torch::tensor({{-1.5, -1.0, -0.5}}, kF64);
  // k1 = Δ; abs = |Δ|; k2 = Δ²/2 = [0.125, 0.5, 0];
  // k3 = e^{−Δ} + Δ − 1 = [e^{−0.5} − 0.5, e − 2, 0] = [0.1065306597, 0.7182818285, 0]; low_var_kl equal here.
  GRPO_REQUIRE_CLOSE(grpo::kl_penalty(lp, ref, {.estimator = KlEstimator::k1}), torch::tensor({{0.5, -1.0, 0.0}}, kF64),
                     1e-12, 1e-12);
  GRPO_REQUIRE_CLOSE(grpo::kl_penalty(lp, ref, {.estimator = KlEstimator::abs}), torch::tensor({{0.5, 1.0, 0.0}}, kF64),
                     1e-12, 1e-12);
  GRPO_REQUIRE_CLOSE(grpo::kl_penalty(lp, ref, {.estimator = KlEstimator::k2}),
                     torch::tensor({{0.125, 0.5, 0.0}}, kF64), 1e-12, 1e-12);
  const auto k3 = torch::tensor({{0.1065306597126334, 0.7182818284590451, 0.0}}, kF64);
  GRPO_REQUIRE_CLOSE(grpo::kl_penalty(lp, ref, {.estimator = KlEstimator::k3}), k3, 1e-12, 1e-12);
  GRPO_REQUIRE_CLOSE(grpo::kl_penalty(lp, ref, {.estimator = KlEstimator::low_var_kl}), k3, 1e-12, 1e-12);
}

TEST_CASE("kl_penalty: clamps of verl's low_var_kl and OpenRLHF's ±10", "[kl]") {
  // Δ = [−5, 30, −30, 12].
  auto ref = torch::zeros({1, 4}, kF64);
  auto lp = torch::tensor({{-5.0, 30.0, -30.0, 12.0}}, kF64);
  // k3 unclamped: e^5 − 6 = 142.4131591025766; e^{−30} + 29; e^{30} − 31; e^{−12} + 11.
  auto k3 = grpo::kl_penalty(lp, ref, {.estimator = KlEstimator::k3});
  GRPO_REQUIRE_CLOSE(
      k3,
      torch::tensor({{142.4131591025766, 29.000000000000000093576, 1.0686474581524463e13 - 31.0, 11.000006144212353}},
                    kF64),
      1e-12, 1e-9);
  // low_var_kl: every one of these exceeds 10 → 10 (d = −Δ clamped to ±20 first).
  GRPO_REQUIRE_CLOSE(grpo::kl_penalty(lp, ref, {.estimator = KlEstimator::low_var_kl}), torch::full({1, 4}, 10.0, kF64),
                     0, 1e-12);
  // OpenRLHF: k1 clamped to ±10 → [−5, 10, −10, 10].
  GRPO_REQUIRE_CLOSE(grpo::kl_penalty(lp, ref, {.estimator = KlEstimator::k1, .clamp = 10.0}),
                     torch::tensor({{-5.0, 10.0, -10.0, 10.0}}, kF64), 0, 1e-12);
}

TEST_CASE("kl_penalty: fp64 loop re-derivation and finite-difference gradients", "[kl]") {
  torch::manual_seed(11);
  auto lp = torch::randn({4, 5}, kF64) * 3.0;  // some |Δ| beyond the ±10 value clamp
  auto ref = torch::randn({4, 5}, kF64) * 3.0;
  for (auto estimator : kAll) {
    for (std::optional<double> clamp : {std::optional<double>{}, std::optional<double>{10.0}}) {
      INFO("estimator " << grpo::to_string(estimator) << " clamp " << clamp.value_or(0.0));
      const KlOptions options{.estimator = estimator, .clamp = clamp};
      auto value = grpo::kl_penalty(lp, ref, options);
      auto expected = torch::empty_like(lp);
      for (int64_t b = 0; b < 4; ++b) {
        for (int64_t t = 0; t < 5; ++t) {
          expected[b][t] = expected_kl(estimator, lp[b][t].item<double>() - ref[b][t].item<double>(), clamp);
        }
      }
      GRPO_REQUIRE_CLOSE(value, expected, 1e-12, 1e-12);
      auto f = [&](const torch::Tensor& x) { return grpo::kl_penalty(x, ref, options).sum(); };
      GRPO_REQUIRE_CLOSE(autograd_grad(f, lp), finite_difference_grad(f, lp), 1e-6, 1e-6);
    }
  }
}

TEST_CASE("kl_penalty: straight-through '+' forms have the estimator's value and k2's gradient", "[kl]") {
  torch::manual_seed(12);
  auto lp = torch::randn({3, 4}, kF64) * 2.0;
  auto ref = torch::randn({3, 4}, kF64) * 2.0;
  for (auto estimator : kAll) {
    for (std::optional<double> clamp : {std::optional<double>{}, std::optional<double>{1.0}}) {
      INFO("estimator " << grpo::to_string(estimator));
      const KlOptions plain{.estimator = estimator, .clamp = clamp};
      const KlOptions plus{.estimator = estimator, .straight_through = true, .clamp = clamp};
      GRPO_REQUIRE_CLOSE(grpo::kl_penalty(lp, ref, plus), grpo::kl_penalty(lp, ref, plain), 1e-12, 1e-12);
      // d/dlp ½(lp − ref)² = lp − ref, element by element; the clamp limits the value only.
      auto expected_grad = torch::empty_like(lp);
      for (int64_t b = 0; b < 3; ++b) {
        for (int64_t t = 0; t < 4; ++t) expected_grad[b][t] = lp[b][t].item<double>() - ref[b][t].item<double>();
      }
      auto f = [&](const torch::Tensor& x) { return grpo::kl_penalty(x, ref, plus).sum(); };
      GRPO_REQUIRE_CLOSE(autograd_grad(f, lp), expected_grad, 1e-12, 1e-12);
    }
  }
}

TEST_CASE("kl_penalty: log-ratios of ±100 stay finite where the formula is", "[kl]") {
  auto lp = torch::tensor({{100.0, -100.0}}, torch::kFloat32);
  auto ref = torch::zeros({1, 2}, torch::kFloat32);
  for (auto estimator : {KlEstimator::k1, KlEstimator::abs, KlEstimator::k2, KlEstimator::low_var_kl}) {
    for (bool plus : {false, true}) {
      INFO("estimator " << grpo::to_string(estimator) << " plus " << plus);
      const KlOptions options{.estimator = estimator, .straight_through = plus};
      auto x = lp.clone().requires_grad_(true);
      auto value = grpo::kl_penalty(x, ref, options);
      value.sum().backward();
      REQUIRE(torch::isfinite(value).all().item<bool>());
      REQUIRE(torch::isfinite(x.grad()).all().item<bool>());
    }
  }
  // Exact values at r = lp − ref = (100, −100): k1 = r, abs = |r|, k2 = r²/2; low_var_kl (verl) clamps ref − lp to
  // ±20 and the result to ±10, so both saturate at 10 with zero gradient. Gradients: d k1 = 1, d|r| = sign r,
  // d k2 = r; the straight-through ("+") variants keep the value and take k2's gradient r.
  struct Expected {
    KlEstimator estimator;
    std::vector<float> value, gradient;
  };
  for (const auto& e : {Expected{KlEstimator::k1, {100, -100}, {1, 1}}, Expected{KlEstimator::abs, {100, 100}, {1, -1}},
                        Expected{KlEstimator::k2, {5000, 5000}, {100, -100}},
                        Expected{KlEstimator::low_var_kl, {10, 10}, {0, 0}}}) {
    for (bool plus : {false, true}) {
      INFO("estimator " << grpo::to_string(e.estimator) << " plus " << plus);
      auto x = lp.clone().requires_grad_(true);
      auto value = grpo::kl_penalty(x, ref, {.estimator = e.estimator, .straight_through = plus});
      value.sum().backward();
      GRPO_REQUIRE_CLOSE(value, torch::tensor(e.value).reshape({1, 2}), 1e-6, 0);
      GRPO_REQUIRE_CLOSE(x.grad(), plus ? torch::tensor({{100.0f, -100.0f}}) : torch::tensor(e.gradient).reshape({1, 2}),
                         1e-6, 0);
    }
  }
  // TRL's unclamped k3 in float64 is finite at ±100: e^{−100} + 99 and e^{100} − 101.
  auto k3 = grpo::kl_penalty(lp.to(torch::kFloat64), ref.to(torch::kFloat64), {.estimator = KlEstimator::k3});
  GRPO_REQUIRE_CLOSE(k3, torch::tensor({{99.0, std::exp(100.0) - 101.0}}, kF64), 1e-12, 0);
}

TEST_CASE("importance_weighted_kl multiplies by the token or sequence weight", "[kl]") {
  auto kl = torch::tensor({{1.0, 2.0}, {3.0, 4.0}}, kF64);
  // Token weights: elementwise [[0.5, 2], [1, 0]] → [[0.5, 4], [3, 0]].
  GRPO_REQUIRE_CLOSE(grpo::importance_weighted_kl(kl, torch::tensor({{0.5, 2.0}, {1.0, 0.0}}, kF64)),
                     torch::tensor({{0.5, 4.0}, {3.0, 0.0}}, kF64), 0, 1e-12);
  // Sequence weights [2, 0.5] broadcast over the row → [[2, 4], [1.5, 2]].
  GRPO_REQUIRE_CLOSE(grpo::importance_weighted_kl(kl, torch::tensor({{2.0}, {0.5}}, kF64)),
                     torch::tensor({{2.0, 4.0}, {1.5, 2.0}}, kF64), 0, 1e-12);
  REQUIRE_THROWS_WITH(grpo::importance_weighted_kl(kl, torch::ones({3, 1}, kF64)),
                      "importance_weighted_kl: importance_weight has shape [3, 1] but kl has shape [2, 2] (expected "
                      "[B, T] or [B, 1])");
}

TEST_CASE("parse_kl_estimator accepts the names of TRL, verl, OpenRLHF and ROLL", "[kl]") {
  REQUIRE(grpo::parse_kl_estimator("kl").estimator == KlEstimator::k1);
  REQUIRE(grpo::parse_kl_estimator("k1").estimator == KlEstimator::k1);
  REQUIRE(grpo::parse_kl_estimator("abs").estimator == KlEstimator::abs);
  REQUIRE(grpo::parse_kl_estimator("mse").estimator == KlEstimator::k2);
  REQUIRE(grpo::parse_kl_estimator("k2").estimator == KlEstimator::k2);
  REQUIRE(grpo::parse_kl_estimator("k3").estimator == KlEstimator::k3);
  auto plus = grpo::parse_kl_estimator("low_var_kl+");
  REQUIRE(plus.estimator == KlEstimator::low_var_kl);
  REQUIRE(plus.straight_through);
  REQUIRE_FALSE(grpo::parse_kl_estimator("k3").straight_through);
  for (auto estimator : kAll) REQUIRE(grpo::parse_kl_estimator(grpo::to_string(estimator)).estimator == estimator);
  REQUIRE_THROWS_AS(grpo::parse_kl_estimator("full"), grpo::ConfigError);
  REQUIRE_THROWS_WITH(grpo::parse_kl_estimator("k4"),
                      "unknown KL estimator 'k4'; valid: k1 (alias kl), abs, k2 (alias mse), k3, low_var_kl, each "
                      "optionally followed by '+' (verl's straight-through form)");
  REQUIRE_THROWS_WITH(grpo::parse_kl_estimator("k4+"), Catch::Matchers::StartsWith("unknown KL estimator 'k4+'"));
}

TEST_CASE("kl_penalty rejects bad arguments naming them", "[kl]") {
  auto a = torch::zeros({2, 3}, kF64);
  REQUIRE_THROWS_WITH(grpo::kl_penalty(a, torch::zeros({2, 4}, kF64)),
                      "kl_penalty: log_probs has shape [2, 3] but ref_log_probs has shape [2, 4]");
  REQUIRE_THROWS_WITH(grpo::kl_penalty(a, torch::zeros({2, 3}, torch::kFloat32)),
                      "kl_penalty: log_probs is Double but ref_log_probs is Float");
  REQUIRE_THROWS_WITH(grpo::kl_penalty(torch::zeros({2, 3}, torch::kLong), a),
                      "kl_penalty: log_probs must be a floating-point tensor, got Long");
  REQUIRE_THROWS_AS(grpo::kl_penalty(a, a, {.clamp = 0.0}), grpo::ConfigError);
}
