// SPDX-License-Identifier: Apache-2.0
#include <algorithm>
#include <cmath>
#include <grpo/loss/importance_correction.hpp>
#include <limits>

#include "support/tensor_testing.hpp"

namespace {

using grpo::SamplerCorrectionMode;
using grpo::SamplerCorrectionOptions;

const auto kF64 = torch::TensorOptions().dtype(torch::kFloat64);
const double e = std::exp(1.0);

// Trainer − sampler: row 0 Δ = [0.5, 1.5, (masked)], row 1 Δ = [−2, 0.1, 0.2].
torch::Tensor trainer() { return torch::tensor({{-1.0, -1.0, 10.0}, {-3.0, -0.9, -0.8}}, kF64); }
torch::Tensor sampler() { return torch::tensor({{-1.5, -2.5, -10.0}, {-1.0, -1.0, -1.0}}, kF64); }
torch::Tensor mask() { return torch::tensor({{1, 1, 0}, {1, 1, 1}}); }

torch::Tensor weights(SamplerCorrectionMode mode, std::optional<double> clip_min = {}, double clip_max = 3.0) {
  return grpo::sampler_correction_weights(
      trainer(), sampler(), mask(), SamplerCorrectionOptions{.mode = mode, .clip_min = clip_min, .clip_max = clip_max});
}

}  // namespace

TEST_CASE("sampler correction: token modes by hand", "[loss][importance]") {
  const double a = std::exp(0.5), b = std::exp(-2.0), c = std::exp(0.1), d = std::exp(0.2);
  // Truncate to cap 3: e^{1.5} = 4.48 → 3; the masked token has Δ = 0 → 1.
  GRPO_REQUIRE_CLOSE(weights(SamplerCorrectionMode::token_truncate), torch::tensor({{a, 3.0, 1.0}, {b, c, d}}, kF64),
                     1e-12, 0);
  // With clip_min 0.5: e^{−2} = 0.135 → 0.5.
  GRPO_REQUIRE_CLOSE(weights(SamplerCorrectionMode::token_truncate, 0.5),
                     torch::tensor({{a, 3.0, 1.0}, {0.5, c, d}}, kF64), 1e-12, 0);
  // Mask: outside [clip_min, 3] → 0.
  GRPO_REQUIRE_CLOSE(weights(SamplerCorrectionMode::token_mask), torch::tensor({{a, 0.0, 1.0}, {b, c, d}}, kF64), 1e-12,
                     0);
  GRPO_REQUIRE_CLOSE(weights(SamplerCorrectionMode::token_mask, 0.5), torch::tensor({{a, 0.0, 1.0}, {0.0, c, d}}, kF64),
                     1e-12, 0);
  GRPO_REQUIRE_CLOSE(weights(SamplerCorrectionMode::none), torch::ones({2, 3}, kF64), 0, 0);
}

TEST_CASE("sampler correction: sequence modes by hand", "[loss][importance]") {
  // Row sums: 0.5 + 1.5 = 2 → e² = 7.389 > 3; −2 + 0.1 + 0.2 = −1.7 → e^{−1.7} = 0.1827.
  const double r1 = std::exp(-1.7);
  GRPO_REQUIRE_CLOSE(weights(SamplerCorrectionMode::sequence_truncate),
                     torch::tensor({{3.0, 3.0, 3.0}, {r1, r1, r1}}, kF64), 1e-12, 0);
  GRPO_REQUIRE_CLOSE(weights(SamplerCorrectionMode::sequence_truncate, 0.5),
                     torch::tensor({{3.0, 3.0, 3.0}, {0.5, 0.5, 0.5}}, kF64), 1e-12, 0);
  GRPO_REQUIRE_CLOSE(weights(SamplerCorrectionMode::sequence_mask),
                     torch::tensor({{0.0, 0.0, 0.0}, {r1, r1, r1}}, kF64), 1e-12, 0);
  GRPO_REQUIRE_CLOSE(weights(SamplerCorrectionMode::sequence_mask, 0.5), torch::zeros({2, 3}, kF64), 0, 0);
  // Geometric mean: row 0 e^{2/2} = e ≤ 3 → token ratios kept; row 1 e^{−1.7/3} = 0.567 ≥ 0.5 → kept, < 0.6 → 0.
  const auto token =
      torch::tensor({{std::exp(0.5), std::exp(1.5), 1.0}, {std::exp(-2.0), std::exp(0.1), std::exp(0.2)}}, kF64);
  GRPO_REQUIRE_CLOSE(weights(SamplerCorrectionMode::sequence_geometric_mask, 0.5), token, 1e-12, 0);
  auto expected = token.clone();
  expected[1].zero_();
  GRPO_REQUIRE_CLOSE(weights(SamplerCorrectionMode::sequence_geometric_mask, 0.6), expected, 1e-12, 0);
  // Cap below e masks row 0.
  expected = token.clone();
  expected[0].zero_();
  GRPO_REQUIRE_CLOSE(weights(SamplerCorrectionMode::sequence_geometric_mask, 0.5, e - 0.01), expected, 1e-12, 0);
}

TEST_CASE("sampler correction: fp64 loop re-derivation of the TRL modes", "[loss][importance]") {
  torch::manual_seed(41);
  auto t = torch::randn({4, 6}, kF64);
  auto s = t + 0.7 * torch::randn({4, 6}, kF64);
  auto m = torch::rand({4, 6}) > 0.3;
  for (auto mode : {SamplerCorrectionMode::token_truncate, SamplerCorrectionMode::token_mask,
                    SamplerCorrectionMode::sequence_truncate, SamplerCorrectionMode::sequence_mask}) {
    INFO("mode " << grpo::to_string(mode));
    const SamplerCorrectionOptions options{.mode = mode, .clip_min = 0.4, .clip_max = 2.0};
    auto expected = torch::empty({4, 6}, kF64);
    for (int64_t b = 0; b < 4; ++b) {
      double row = 0.0;
      for (int64_t k = 0; k < 6; ++k) {
        if (m[b][k].item<bool>()) row += t[b][k].item<double>() - s[b][k].item<double>();
      }
      for (int64_t k = 0; k < 6; ++k) {
        const double delta = m[b][k].item<bool>() ? t[b][k].item<double>() - s[b][k].item<double>() : 0.0;
        const bool seq =
            mode == SamplerCorrectionMode::sequence_truncate || mode == SamplerCorrectionMode::sequence_mask;
        const double rho = std::exp(seq ? row : delta);
        const bool truncate =
            mode == SamplerCorrectionMode::token_truncate || mode == SamplerCorrectionMode::sequence_truncate;
        expected[b][k] = truncate ? std::clamp(rho, 0.4, 2.0) : (rho < 0.4 || rho > 2.0 ? 0.0 : rho);
      }
    }
    GRPO_REQUIRE_CLOSE(grpo::sampler_correction_weights(t, s, m, options), expected, 1e-12, 1e-15);
  }
}

TEST_CASE("sampler correction: log-ratios of ±100 give finite weights, no gradient", "[loss][importance]") {
  auto t = torch::tensor({{100.0, -100.0}}, torch::kFloat32).requires_grad_(true);
  auto s = torch::zeros({1, 2}, torch::kFloat32);
  auto m = torch::ones({1, 2});
  for (auto mode : {SamplerCorrectionMode::token_truncate, SamplerCorrectionMode::token_mask,
                    SamplerCorrectionMode::sequence_truncate, SamplerCorrectionMode::sequence_mask}) {
    auto w = grpo::sampler_correction_weights(t, s, m, {.mode = mode});
    REQUIRE(torch::isfinite(w).all().item<bool>());
    REQUIRE_FALSE(w.requires_grad());
  }
  // Exact values, TRL's default bounds (no lower bound, cap 3): per token ρ = (e^100, e^−100); per sequence
  // Σ Δ = 0, so ρ = 1 for both tokens.
  const auto weights = [&](SamplerCorrectionMode mode) { return grpo::sampler_correction_weights(t, s, m, {.mode = mode}); };
  GRPO_REQUIRE_CLOSE(weights(SamplerCorrectionMode::token_truncate), torch::tensor({{3.0f, 0.0f}}), 0, 1e-30);
  GRPO_REQUIRE_CLOSE(weights(SamplerCorrectionMode::token_mask), torch::tensor({{0.0f, 0.0f}}), 0, 1e-30);
  // A small ρ inside the bounds is kept by token_mask (e^−100 itself is subnormal in fp32, 0 where subnormals flush to
  // zero, so e^−5 shows it): its weight is ρ, not 0.
  const auto small = grpo::sampler_correction_weights(torch::tensor({{-5.0f}}), torch::zeros({1, 1}), torch::ones({1, 1}),
                                                       {.mode = SamplerCorrectionMode::token_mask});
  CHECK(small[0][0].item<float>() == Approx(std::exp(-5.0)).epsilon(1e-6));
  GRPO_REQUIRE_CLOSE(weights(SamplerCorrectionMode::sequence_truncate), torch::tensor({{1.0f, 1.0f}}), 1e-6, 0);
  GRPO_REQUIRE_CLOSE(weights(SamplerCorrectionMode::sequence_mask), torch::tensor({{1.0f, 1.0f}}), 1e-6, 0);
}

TEST_CASE("sampler correction: names and bad options", "[loss][importance]") {
  REQUIRE(grpo::parse_sampler_correction_mode("tis") == SamplerCorrectionMode::token_truncate);
  REQUIRE(grpo::parse_sampler_correction_mode("icepop") == SamplerCorrectionMode::token_mask);
  REQUIRE(grpo::parse_sampler_correction_mode("seq-mask-tis") == SamplerCorrectionMode::sequence_geometric_mask);
  REQUIRE(grpo::parse_sampler_correction_mode("sequence_mask") == SamplerCorrectionMode::sequence_mask);
  for (auto mode : {SamplerCorrectionMode::none, SamplerCorrectionMode::token_truncate,
                    SamplerCorrectionMode::token_mask, SamplerCorrectionMode::sequence_truncate,
                    SamplerCorrectionMode::sequence_mask, SamplerCorrectionMode::sequence_geometric_mask}) {
    REQUIRE(grpo::parse_sampler_correction_mode(grpo::to_string(mode)) == mode);
  }
  REQUIRE_THROWS_WITH(grpo::parse_sampler_correction_mode("seq"),
                      "unknown sampler correction mode 'seq'; valid: none, token_truncate (alias tis), token_mask "
                      "(alias icepop), sequence_truncate, sequence_mask, sequence_geometric_mask (alias seq-mask-tis)");
  REQUIRE_THROWS_WITH((SamplerCorrectionOptions{.clip_max = 0.0}.validate()),
                      "SamplerCorrectionOptions: clip_max must be finite and > 0, got 0");
  REQUIRE_THROWS_WITH((SamplerCorrectionOptions{.clip_min = 3.0, .clip_max = 3.0}.validate()),
                      "SamplerCorrectionOptions: clip_min must be in [0, clip_max = 3), got 3");
  REQUIRE_THROWS_WITH(grpo::sampler_correction_weights(trainer(), torch::zeros({2, 2}, kF64), mask(), {}),
                      "sampler_correction_weights: trainer_log_probs has shape [2, 3] but sampler_log_probs has "
                      "shape [2, 2]");
}
