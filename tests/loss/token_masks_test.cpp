// SPDX-License-Identifier: Apache-2.0
#include <algorithm>
#include <cmath>
#include <grpo/loss/token_masks.hpp>
#include <vector>

#include "support/tensor_testing.hpp"

namespace {
const auto kF64 = torch::TensorOptions().dtype(torch::kFloat64);
}  // namespace

TEST_CASE("top_entropy_threshold and mask by hand", "[loss][masks]") {
  // Valid entropies 0.1, 0.5, 0.9, 1.3, 2.0; the masked 100s must not count.
  auto entropy = torch::tensor({{0.9, 0.1, 100.0}, {2.0, 1.3, 0.5}, {100.0, 100.0, 100.0}}, kF64);
  auto mask = torch::tensor({{1, 1, 0}, {1, 1, 1}, {0, 0, 0}});
  // ρ = 0.4: quantile 0.6 of 5 sorted values at position 4·0.6 = 2.4 → 0.9 + 0.4·(1.3 − 0.9) = 1.06.
  const double thr = grpo::top_entropy_threshold(entropy, mask, 0.4);
  REQUIRE(thr == Approx(1.06));
  GRPO_REQUIRE_CLOSE(grpo::top_entropy_mask(entropy, mask, thr),
                     torch::tensor({{0.0, 0.0, 0.0}, {1.0, 1.0, 0.0}, {0.0, 0.0, 0.0}}, kF64), 0, 0);
  // ρ = 0.2: position 3.2 → 1.3 + 0.2·0.7 = 1.44, keeps only 2.0.
  REQUIRE(grpo::top_entropy_threshold(entropy, mask, 0.2) == Approx(1.44));
  // ρ = 1: the minimum, every valid token kept (ties count: H ≥ threshold).
  const double all = grpo::top_entropy_threshold(entropy, mask, 1.0);
  REQUIRE(all == Approx(0.1));
  GRPO_REQUIRE_CLOSE(grpo::top_entropy_mask(entropy, mask, all), mask.to(torch::kFloat64), 0, 0);
}

TEST_CASE("top_entropy_threshold: fp64 loop re-derivation of the interpolated quantile", "[loss][masks]") {
  torch::manual_seed(31);
  auto entropy = torch::rand({6, 9}, torch::kFloat32) * 3.0;
  auto mask = torch::rand({6, 9}) > 0.3;
  std::vector<double> values;
  for (int64_t b = 0; b < 6; ++b) {
    for (int64_t t = 0; t < 9; ++t) {
      if (mask[b][t].item<bool>()) values.push_back(entropy[b][t].item<double>());
    }
  }
  std::sort(values.begin(), values.end());
  for (double rho : {0.2, 0.5, 0.8}) {
    const double pos = (1.0 - rho) * static_cast<double>(values.size() - 1);
    const auto lo = static_cast<size_t>(std::floor(pos));
    const size_t hi = std::min(lo + 1, values.size() - 1);
    const double expected = values[lo] + (pos - static_cast<double>(lo)) * (values[hi] - values[lo]);
    const double thr = grpo::top_entropy_threshold(entropy, mask, rho);
    REQUIRE(thr == Approx(expected).epsilon(1e-12));
    auto kept = grpo::top_entropy_mask(entropy, mask, thr);
    REQUIRE(kept.scalar_type() == torch::kFloat32);
    int64_t count = 0;
    for (double v : values) count += v >= thr ? 1 : 0;
    REQUIRE(kept.sum().item<double>() == static_cast<double>(count));
  }
}

TEST_CASE("top_entropy_threshold: no valid token and bad arguments", "[loss][masks]") {
  auto entropy = torch::ones({2, 3}, kF64);
  auto none = torch::zeros({2, 3});
  const double thr = grpo::top_entropy_threshold(entropy, none, 0.2);
  REQUIRE(std::isinf(thr));
  REQUIRE(grpo::top_entropy_mask(entropy, none, thr).sum().item<double>() == 0.0);
  REQUIRE_THROWS_WITH(grpo::top_entropy_threshold(entropy, none, 0.0),
                      "top_entropy_threshold: top_quantile must be in (0, 1], got 0");
  REQUIRE_THROWS_AS(grpo::top_entropy_threshold(entropy, none, 1.5), grpo::ConfigError);
  REQUIRE_THROWS_WITH(grpo::top_entropy_mask(entropy, torch::ones({3, 2}), 0.5),
                      "top_entropy_mask: entropy has shape [2, 3] but mask has shape [3, 2]");
}

TEST_CASE("truncated_completion_mask zeroes the truncated rows", "[loss][masks]") {
  auto mask = torch::tensor({{1, 1, 0}, {1, 1, 1}, {1, 0, 0}});
  auto truncated = torch::tensor({false, true, false});
  GRPO_REQUIRE_CLOSE(grpo::truncated_completion_mask(mask, truncated), torch::tensor({{1, 1, 0}, {0, 0, 0}, {1, 0, 0}}),
                     0, 0);
  REQUIRE(grpo::truncated_completion_mask(mask.to(torch::kFloat32), truncated).scalar_type() == torch::kFloat32);
  REQUIRE_THROWS_WITH(grpo::truncated_completion_mask(mask, torch::tensor({true, false})),
                      "truncated_completion_mask: truncated must have shape [3] (one flag per row of mask [3, 3]), got "
                      "[2]");
}

TEST_CASE("off_policy_sequence_mask by hand", "[loss][masks]") {
  auto lp = torch::tensor({{-1.0, -1.0}, {-1.0, -2.0}, {-1.0, -1.0}, {-1.0, -1.0}}, kF64);
  auto sampler = torch::tensor({{0.0, 0.0}, {-0.9, 5.0}, {-0.5, -0.5}, {9.0, 9.0}}, kF64);
  auto mask = torch::tensor({{1, 1}, {1, 0}, {1, 1}, {0, 0}});
  auto adv = torch::tensor({1.0, -1.0, -1.0, -1.0}, kF64);
  // Row 0: A ≥ 0 → kept although mean(sampler − lp) = 1.
  // Row 1: A < 0, mean over the one valid token = −0.9 − (−1) = 0.1 ≤ 0.1 → kept (the masked 5.0 is ignored).
  // Row 2: A < 0, mean = 0.5 > 0.1 → dropped. Row 3: empty, mean 0 ≤ 0.1 → kept.
  GRPO_REQUIRE_CLOSE(grpo::off_policy_sequence_mask(lp, sampler, adv, mask, 0.1),
                     torch::tensor({{1.0, 1.0}, {1.0, 1.0}, {0.0, 0.0}, {1.0, 1.0}}, kF64), 0, 0);
  // Per-token advantages: the sign test is per token; row 2 keeps the token with A = 0.
  auto adv_tok = torch::tensor({{1.0, -1.0}, {-1.0, -1.0}, {0.0, -3.0}, {-1.0, -1.0}}, kF64);
  GRPO_REQUIRE_CLOSE(grpo::off_policy_sequence_mask(lp, sampler, adv_tok, mask, 0.1),
                     torch::tensor({{1.0, 0.0}, {1.0, 1.0}, {1.0, 0.0}, {1.0, 1.0}}, kF64), 0, 0);
  REQUIRE_THROWS_WITH(grpo::off_policy_sequence_mask(lp, sampler, torch::zeros({3}, kF64), mask, 0.1),
                      "off_policy_sequence_mask: advantages must have shape [4] or [4, 2] like log_probs, got [3]");
}
