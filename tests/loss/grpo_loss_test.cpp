// SPDX-License-Identifier: Apache-2.0
#include <algorithm>
#include <cmath>
#include <grpo/loss/grpo_loss.hpp>
#include <grpo/loss/recipes.hpp>
#include <set>
#include <string>

#include "support/loss_testing.hpp"
#include "support/tensor_testing.hpp"

namespace {

using grpo::GrpoLoss;
using grpo::GrpoLossOptions;
using grpo::LossInputs;
using grpo::LossType;
using grpo::Normaliser;
using grpo::PolicyLossType;
using grpo::SamplerCorrectionMode;
using grpo::testing::autograd_grad;
using grpo::testing::finite_difference_grad;
using grpo::testing::LossBatch;
using grpo::testing::random_loss_batch;

const auto kF64 = torch::TensorOptions().dtype(torch::kFloat64);

double get(const torch::Tensor& t, int64_t i, int64_t j) { return t[i][j].item<double>(); }

// Plain-loop re-derivation of GrpoLoss from the formulas of TRL/verl written out (ppo_clip and cispo surrogates,
// k3 KL, the masks and sampler modes exercised below). `divisor` is N.
double reference_loss(const LossBatch& b, const GrpoLossOptions& o, double divisor, double entropy_threshold) {
  const int64_t B = b.lp.size(0), T = b.lp.size(1);
  const bool seq_means =
      o.loss_type == LossType::grpo || o.loss_type == LossType::sapo || o.loss_type == LossType::seq_mean_token_mean;
  const double el = o.policy.epsilon_low, eh = o.policy.epsilon_high;
  double total = 0.0, entropy_total = 0.0;
  for (int64_t i = 0; i < B; ++i) {
    const bool row_valid = !(o.mask_truncated_completions && b.truncated[i].item<bool>());
    double len = 0.0, seq_delta = 0.0, off_kl = 0.0, sampler_sum = 0.0;
    for (int64_t t = 0; t < T; ++t) {
      if (!row_valid || !b.mask[i][t].item<bool>()) continue;
      len += 1.0;
      seq_delta += get(b.lp, i, t) - get(b.old, i, t);
      off_kl += get(b.sampler, i, t) - get(b.lp, i, t);
      sampler_sum += get(b.old, i, t) - get(b.sampler, i, t);
    }
    const double a = b.adv[i].item<double>();
    const double n = std::max(len, 1.0);
    const bool keep = !o.off_policy_mask_threshold || a >= 0 || off_kl / n <= *o.off_policy_mask_threshold;
    double row = 0.0, entropy_row = 0.0;
    for (int64_t t = 0; t < T; ++t) {
      if (!row_valid || !b.mask[i][t].item<bool>()) continue;
      const double lp = get(b.lp, i, t), old = get(b.old, i, t), ref = get(b.ref, i, t);
      const double log_w = o.policy.importance_level == grpo::ImportanceLevel::token ? lp - old : seq_delta / n;
      const double w = std::exp(std::clamp(log_w, -20.0, 20.0));
      double loss = 0.0;
      if (o.policy.type == PolicyLossType::cispo) {
        loss = -std::min(w, eh) * a * lp;
      } else {
        loss = std::max(-a * w, -a * std::clamp(w, 1 - el, 1 + eh));
      }
      if (!keep) loss = 0.0;
      const double h = get(b.entropy, i, t);
      const double em = o.top_entropy_quantile < 1.0 ? (h >= entropy_threshold ? 1.0 : 0.0) : 1.0;
      loss *= em;
      switch (o.sampler_correction.mode) {
        case SamplerCorrectionMode::token_truncate:
          loss *= std::min(std::exp(old - get(b.sampler, i, t)), o.sampler_correction.clip_max);
          break;
        case SamplerCorrectionMode::sequence_mask: {
          const double rho = std::exp(sampler_sum);
          loss *= rho > o.sampler_correction.clip_max ? 0.0 : rho;
          break;
        }
        default:
          break;
      }
      double kl = std::exp(ref - lp) - (ref - lp) - 1.0;
      if (o.kl_importance_weighted) kl *= w;
      row += loss + o.beta * kl;
      entropy_row += h * em;
    }
    total += seq_means ? row / n : row;
    entropy_total += seq_means ? entropy_row / n : entropy_row;
  }
  return total / divisor - o.entropy_coef * entropy_total / divisor;
}

double loss_value(const GrpoLoss& loss, const LossInputs& in, const Normaliser& n) {
  return loss(in, n).loss.item<double>();
}

}  // namespace

TEST_CASE("GrpoLoss: the recipes against an fp64 loop re-derivation, with finite-difference gradients",
          "[loss][grpo_loss]") {
  const LossBatch b = random_loss_batch(4, 5, 51);
  struct Recipe {
    std::string name;
    GrpoLossOptions options;
  };
  const Recipe recipes[] = {{"grpo", grpo::recipes::grpo()},
                            {"dr_grpo", grpo::recipes::dr_grpo(8)},
                            {"dapo", grpo::recipes::dapo()},
                            {"gspo", grpo::recipes::gspo()},
                            {"cispo", grpo::recipes::cispo()}};
  for (const auto& recipe : recipes) {
    INFO("recipe " << recipe.name);
    GrpoLoss loss(recipe.options);
    auto in = b.inputs();
    const Normaliser n = loss.local_normaliser(in);
    // Local normalisers: grpo/gspo B = 4 sequences; dr_grpo 4·8 = 32; dapo/cispo the valid token count.
    const double tokens = b.mask.sum().item<double>();
    const double expected_divisor = recipe.name == "dr_grpo"                           ? 32.0
                                    : (recipe.name == "grpo" || recipe.name == "gspo") ? 4.0
                                                                                       : tokens;
    REQUIRE(n.divisor() == expected_divisor);
    REQUIRE(loss_value(loss, in, n) == Approx(reference_loss(b, recipe.options, expected_divisor, 0.0)).epsilon(1e-12));
    auto f = [&](const torch::Tensor& x) {
      auto copy = in;
      copy.log_probs = x;
      return loss(copy, n).loss;
    };
    if (recipe.name != "cispo") {
      GRPO_REQUIRE_CLOSE(autograd_grad(f, b.lp), finite_difference_grad(f, b.lp), 1e-5, 1e-8);
      continue;
    }
    // CISPO stops the gradient through its weight, so finite differences do not apply: by hand,
    // ∂L/∂lp_it = −min(w_it, ε_high)·A_i / N on valid tokens.
    auto expected = torch::zeros_like(b.lp);
    for (int64_t i = 0; i < 4; ++i) {
      for (int64_t t = 0; t < 5; ++t) {
        if (!b.mask[i][t].item<bool>()) continue;
        const double w = std::exp(get(b.lp, i, t) - get(b.old, i, t));
        expected[i][t] = -std::min(w, 5.0) * b.adv[i].item<double>() / tokens;
      }
    }
    GRPO_REQUIRE_CLOSE(autograd_grad(f, b.lp), expected, 1e-12, 1e-14);
  }
}

TEST_CASE("GrpoLoss: every mask, sampler correction, IS-weighted KL and the entropy bonus together",
          "[loss][grpo_loss]") {
  const LossBatch b = random_loss_batch(6, 5, 52);
  // (luspo refuses per-token terms; its combinations are in tests/parity.)
  for (auto type : {LossType::dapo, LossType::grpo}) {
    for (auto mode : {SamplerCorrectionMode::token_truncate, SamplerCorrectionMode::sequence_mask}) {
      INFO("loss type " << grpo::to_string(type) << " sampler mode " << grpo::to_string(mode));
      GrpoLossOptions o;
      o.loss_type = type;
      o.entropy_aggregation = grpo::EntropyAggregation::like_loss;  // what reference_loss computes
      o.policy.epsilon_high = 0.28;
      o.beta = 0.1;
      o.kl_importance_weighted = true;
      o.entropy_coef = 0.05;
      o.top_entropy_quantile = 0.6;
      o.off_policy_mask_threshold = 0.05;
      o.sampler_correction = {.mode = mode, .clip_max = 1.5};
      o.mask_truncated_completions = true;
      GrpoLoss loss(o);
      auto in = b.inputs();
      const Normaliser n = loss.local_normaliser(in);
      // The threshold over the valid tokens of non-truncated rows, as top_entropy_threshold computes it.
      auto kept = grpo::truncated_completion_mask(b.mask, b.truncated);
      const double thr = grpo::top_entropy_threshold(b.entropy, kept, 0.6);
      REQUIRE(loss_value(loss, in, n) == Approx(reference_loss(b, o, n.divisor(), thr)).epsilon(1e-12));
      // Gradient with respect to log_probs, and to the entropy through the bonus (−coef · em / N per token).
      auto f = [&](const torch::Tensor& x) {
        auto copy = in;
        copy.log_probs = x;
        copy.entropy_threshold = thr;  // the mask does not move under the finite-difference step
        return loss(copy, n).loss;
      };
      GRPO_REQUIRE_CLOSE(autograd_grad(f, b.lp), finite_difference_grad(f, b.lp), 1e-5, 1e-8);
      auto g = [&](const torch::Tensor& h) {
        auto copy = in;
        copy.entropy = h;
        copy.entropy_threshold = thr;
        return loss(copy, n).loss;
      };
      GRPO_REQUIRE_CLOSE(autograd_grad(g, b.entropy), finite_difference_grad(g, b.entropy), 1e-5, 1e-8);
    }
  }
}

TEST_CASE("GrpoLoss: entropy-bonus gradient by hand", "[loss][grpo_loss]") {
  // dapo, tokens(3): loss −= 0.1 · Σ m·H / 3, so ∂loss/∂H = −0.1/3 on the valid tokens, 0 elsewhere.
  GrpoLossOptions o;
  o.entropy_coef = 0.1;
  GrpoLoss loss(o);
  auto mask = torch::tensor({{1, 1}, {1, 0}});
  auto h = torch::tensor({{1.0, 2.0}, {3.0, 4.0}}, kF64).requires_grad_(true);
  LossInputs in{
      .log_probs = torch::zeros({2, 2}, kF64), .advantages = torch::zeros({2}, kF64), .mask = mask, .entropy = h};
  auto out = loss(in, Normaliser::tokens(3));
  // Advantages 0: the policy term is 0; loss = −0.1 · 6/3 = −0.2.
  REQUIRE(out.loss.item<double>() == Approx(-0.2));
  out.loss.backward();
  GRPO_REQUIRE_CLOSE(h.grad(), torch::tensor({{-0.1 / 3, -0.1 / 3}, {-0.1 / 3, 0.0}}, kF64), 0, 1e-15);
}

TEST_CASE("GrpoLoss: metrics by hand", "[loss][grpo_loss]") {
  // Δ = lp − lp_old: row 0 [ln 1.5, ln 0.5] with A = 1; row 1 [ln 0.5, (masked ln 9)] with A = −1. ε = 0.2.
  auto lp = torch::zeros({2, 2}, kF64);
  auto old = -torch::tensor({{std::log(1.5), std::log(0.5)}, {std::log(0.5), std::log(9.0)}}, kF64);
  auto mask = torch::tensor({{1, 1}, {1, 0}});
  LossInputs in{.log_probs = lp,
                .old_log_probs = old,
                .ref_log_probs = lp.clone(),
                .advantages = torch::tensor({1.0, -1.0}, kF64),
                .mask = mask,
                .entropy = torch::tensor({{1.0, 2.0}, {3.0, 99.0}}, kF64)};
  GrpoLoss loss(GrpoLossOptions{});
  auto out = loss(in, Normaliser::tokens(3));
  const auto& m = out.metrics;
  // L = max(−A·w, −A·clip(w, 0.8, 1.2)): w = 1.5, A = 1 → max(−1.5, −1.2) = −1.2 (clipped high);
  // w = 0.5, A = 1 → max(−0.5, −0.8) = −0.5; w = 0.5, A = −1 → max(0.5, 0.8) = 0.8 (clipped low).
  // Σ = −0.9, / 3 = −0.3.
  REQUIRE(m.loss == Approx(-0.3));
  REQUIRE(m.policy_loss == Approx(-0.3));
  REQUIRE(out.loss.item<double>() == Approx(-0.3));
  REQUIRE(m.num_tokens == 3.0);
  REQUIRE(m.clip_ratio_low_mean == Approx(1.0 / 3));
  REQUIRE(m.clip_ratio_high_mean == Approx(1.0 / 3));
  REQUIRE(m.clip_ratio_region_mean == Approx(2.0 / 3));
  REQUIRE(m.pg_clipfrac == Approx(2.0 / 3));
  REQUIRE(m.pg_clipfrac_lower == 0.0);
  // ppo_kl = mean(lp_old − lp) = −(ln 1.5 + 2 ln 0.5)/3 = −ln(0.375)/3.
  REQUIRE(m.ppo_kl == Approx(-std::log(0.375) / 3));
  REQUIRE(m.ratio_min == Approx(0.5));
  REQUIRE(m.ratio_max == Approx(1.5));
  REQUIRE(m.ratio_mean == Approx(2.5 / 3));
  REQUIRE(m.kl_mean.value() == 0.0);  // ref = lp
  REQUIRE(m.kl_loss == 0.0);
  REQUIRE(m.entropy_mean.value() == Approx(2.0));  // (1 + 2 + 3)/3, the masked 99 ignored
  REQUIRE(m.entropy_loss == Approx(2.0));
  REQUIRE_FALSE(m.sampler_ratio_mean.has_value());
  std::set<std::string> names;
  for (const auto& [name, value] : m.items()) names.insert(name);
  for (const char* name :
       {"loss", "policy_loss", "kl", "entropy", "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean",
        "pg_clipfrac", "pg_clipfrac_lower", "ppo_kl", "ratio/min", "ratio/mean", "ratio/max", "num_tokens"}) {
    INFO(name);
    REQUIRE(names.count(name) == 1);
  }
}

TEST_CASE("GrpoLoss: sampler-ratio metrics and the dual clip fraction", "[loss][grpo_loss]") {
  // One row, A = −1, w = [4, 1]; dual clip c = 3 caps the first token's loss at 3 (−A·w = 4 > 3).
  GrpoLossOptions o;
  o.policy.dual_clip_c = 3.0;
  o.sampler_correction = {.mode = SamplerCorrectionMode::token_truncate, .clip_max = 3.0};
  auto lp = torch::tensor({{std::log(4.0), 0.0}}, kF64);
  LossInputs in{.log_probs = lp,
                .old_log_probs = torch::zeros({1, 2}, kF64),
                .advantages = torch::tensor({-1.0}, kF64),
                .mask = torch::ones({1, 2}),
                // ρ = exp(lp_old − lp_sampler) = [e^{0.5}, e^{2}→3]
                .sampler_log_probs = torch::tensor({{-0.5, -2.0}}, kF64)};
  auto out = GrpoLoss(o)(in, Normaliser::tokens(2));
  REQUIRE(out.metrics.pg_clipfrac_lower == Approx(0.5));
  REQUIRE(out.metrics.sampler_ratio_min.value() == Approx(std::exp(0.5)));
  REQUIRE(out.metrics.sampler_ratio_max.value() == Approx(3.0));
  // L = [min(max(4, 1.2), 3), max(1, 1)] = [3, 1], weighted by ρ: (3·e^{0.5} + 1·3)/2.
  REQUIRE(out.loss.item<double>() == Approx((3.0 * std::exp(0.5) + 3.0) / 2.0));
}

TEST_CASE("GrpoLoss: all-masked batch gives 0 and zero gradients", "[loss][grpo_loss]") {
  const LossBatch b = random_loss_batch(3, 4, 53);
  for (auto type : {LossType::dapo, LossType::grpo, LossType::dr_grpo, LossType::seq_mean_token_mean}) {
    INFO("loss type " << grpo::to_string(type));
    GrpoLossOptions o;
    o.loss_type = type;
    o.max_completion_length = 4;
    o.beta = 0.04;
    o.entropy_coef = 0.01;
    GrpoLoss loss(o);
    auto in = b.inputs();
    in.mask = torch::zeros({3, 4});
    auto n = loss.local_normaliser(in);
    auto lp = b.lp.clone().requires_grad_(true);
    auto h = b.entropy.clone().requires_grad_(true);
    in.log_probs = lp;
    in.entropy = h;
    auto out = loss(in, n);
    REQUIRE(out.loss.item<double>() == 0.0);
    out.loss.backward();
    GRPO_REQUIRE_CLOSE(lp.grad(), torch::zeros({3, 4}, kF64), 0, 0);
    GRPO_REQUIRE_CLOSE(h.grad(), torch::zeros({3, 4}, kF64), 0, 0);
    REQUIRE(out.metrics.num_tokens == 0.0);
    REQUIRE(out.metrics.ratio_mean == 1.0);
  }
}

TEST_CASE("GrpoLoss: log-ratios of ±100 and empty completions stay finite", "[loss][grpo_loss]") {
  // float32, where exp(100) overflows: the surrogate clamps log w at ±20 and low_var_kl clamps too.
  auto lp = torch::tensor({{-1.0, -2.0, -1.0}, {-1.0, -1.0, -1.0}, {-3.0, -1.0, -1.0}}, torch::kFloat32);
  auto old = lp - torch::tensor({{100.0, -100.0, 0.0}, {0.0, 0.0, 0.0}, {-100.0, 100.0, 0.0}}, torch::kFloat32);
  auto mask = torch::tensor({{1, 1, 1}, {0, 0, 0}, {1, 1, 0}});
  for (const auto& options :
       {grpo::recipes::grpo(), grpo::recipes::dapo(), grpo::recipes::gspo(), grpo::recipes::cispo()}) {
    auto o = options;
    o.beta = 0.04;
    o.kl.estimator = grpo::KlEstimator::low_var_kl;
    o.kl_importance_weighted = true;
    GrpoLoss loss(o);
    auto x = lp.clone().requires_grad_(true);
    LossInputs in{.log_probs = x,
                  .old_log_probs = old,
                  .ref_log_probs = old,
                  .advantages = torch::tensor({1.0f, -1.0f, -1.0f}),
                  .mask = mask};
    auto out = loss(in, loss.local_normaliser(in));
    REQUIRE(std::isfinite(out.loss.item<double>()));
    out.loss.backward();
    REQUIRE(torch::isfinite(x.grad()).all().item<bool>());
    // The empty row and the padded token get no gradient.
    REQUIRE(x.grad()[1].abs().sum().item<double>() == 0.0);
    REQUIRE(x.grad()[2][2].item<double>() == 0.0);
    for (const auto& [name, value] : out.metrics.items()) {
      INFO(name);
      REQUIRE(std::isfinite(value));
    }
  }
}

TEST_CASE("GrpoLoss: local_normaliser follows the truncation mask", "[loss][grpo_loss]") {
  GrpoLossOptions o;
  o.mask_truncated_completions = true;
  GrpoLoss loss(o);
  LossInputs in{.log_probs = torch::zeros({2, 3}, kF64),
                .advantages = torch::zeros({2}, kF64),
                .mask = torch::tensor({{1, 1, 0}, {1, 1, 1}}),
                .truncated = torch::tensor({false, true})};
  REQUIRE(loss.local_normaliser(in).value() == 2.0);  // the truncated row's 3 tokens are out
}

TEST_CASE("GrpoLoss: bad inputs and options throw, naming shapes and options", "[loss][grpo_loss]") {
  auto lp = torch::zeros({2, 3}, kF64);
  LossInputs in{.log_probs = lp, .advantages = torch::zeros({2}, kF64), .mask = torch::ones({2, 3})};
  GrpoLoss dapo(GrpoLossOptions{});
  auto bad = in;
  bad.mask = torch::ones({2, 4});
  REQUIRE_THROWS_WITH(dapo(bad, Normaliser::tokens(6)),
                      "GrpoLoss: log_probs has shape [2, 3] but mask has shape [2, 4]");
  bad = in;
  bad.advantages = torch::zeros({3}, kF64);
  REQUIRE_THROWS_WITH(dapo(bad, Normaliser::tokens(6)),
                      "GrpoLoss: advantages must have shape [2] or [2, 3] like log_probs, got [3]");
  bad = in;
  bad.old_log_probs = torch::zeros({3, 2}, kF64);
  REQUIRE_THROWS_WITH(dapo(bad, Normaliser::tokens(6)),
                      "GrpoLoss: log_probs has shape [2, 3] but old_log_probs has shape [3, 2]");
  REQUIRE_THROWS_WITH(GrpoLoss(grpo::recipes::grpo())(in, Normaliser::sequences(2)),
                      "GrpoLoss: beta = 0.04 needs ref_log_probs of shape [2, 3], got undefined");
  REQUIRE_THROWS_AS(dapo(in, Normaliser::sequences(2)), grpo::ConfigError);
  REQUIRE_THROWS_WITH(dapo(in, Normaliser::sequences(2)),
                      "loss_type 'dapo' needs a Normaliser::tokens(...), got Normaliser::sequences(2)");

  GrpoLossOptions o;
  o.policy.epsilon_low = 0.0;
  REQUIRE_THROWS_AS(GrpoLoss(o), grpo::ConfigError);
  REQUIRE_THROWS_WITH(GrpoLoss(o), "PolicyLossOptions.epsilon_low must be > 0 for ppo_clip, got 0");
  o = {};
  o.policy.epsilon_high = -0.1;
  REQUIRE_THROWS_AS(GrpoLoss(o), grpo::ConfigError);
  o = {};
  o.policy.type = PolicyLossType::gmpo;  // with the default loss_type dapo, a token sum
  REQUIRE_THROWS_AS(GrpoLoss(o), grpo::ConfigError);
  REQUIRE_THROWS_WITH(GrpoLoss(o),
                      "GrpoLossOptions: policy.type 'gmpo' averages its per-sequence loss over all B sequences (TRL "
                      "GMPOTrainer, verl geo_mean ignore the loss aggregation): set loss_type 'grpo', got 'dapo'");
  o.loss_type = LossType::luspo;
  o.policy.type = PolicyLossType::ppo_clip;  // token level: TRL would average a [B, T] matrix over B·T
  REQUIRE_THROWS_WITH(GrpoLoss(o), Catch::Matchers::Contains("loss_type 'luspo'") &&
                                       Catch::Matchers::Contains("policy.importance_level != sequence"));
  o.policy.importance_level = grpo::ImportanceLevel::sequence;
  REQUIRE_NOTHROW(GrpoLoss(o));
  o.beta = 0.1;
  REQUIRE_THROWS_WITH(GrpoLoss(o), Catch::Matchers::Contains("beta > 0"));
  o = {};
  o.loss_type = LossType::sapo;
  REQUIRE_THROWS_WITH(GrpoLoss(o),
                      "GrpoLossOptions: loss_type 'sapo' needs policy.type sapo, got policy.type 'ppo_clip'");
  o = {};
  o.loss_type = LossType::dr_grpo;
  REQUIRE_THROWS_WITH(GrpoLoss(o),
                      Catch::Matchers::StartsWith("GrpoLossOptions: loss_type 'dr_grpo' needs max_completion_length"));
  o = {};
  o.top_entropy_quantile = 0.0;
  REQUIRE_THROWS_WITH(GrpoLoss(o), "GrpoLossOptions.top_entropy_quantile must be in (0, 1], got 0");
  o = {};
  o.beta = -1.0;
  REQUIRE_THROWS_WITH(GrpoLoss(o), "GrpoLossOptions.beta must be finite and >= 0, got -1");
  o = {};
  o.top_entropy_quantile = 0.2;
  REQUIRE_THROWS_WITH(GrpoLoss(o)(in, Normaliser::tokens(6)),
                      "GrpoLoss: top_entropy_quantile = 0.2 needs entropy of shape [2, 3], got undefined");
  o = {};
  o.sampler_correction.mode = SamplerCorrectionMode::sequence_mask;
  REQUIRE_THROWS_WITH(GrpoLoss(o)(in, Normaliser::tokens(6)),
                      "GrpoLoss: sampler_correction.mode = sequence_mask needs sampler_log_probs of shape [2, 3], "
                      "got undefined");
  o = {};
  o.mask_truncated_completions = true;
  REQUIRE_THROWS_WITH(GrpoLoss(o)(in, Normaliser::tokens(6)),
                      "GrpoLoss: mask_truncated_completions needs truncated of shape [2], got undefined");
  REQUIRE_THROWS_AS(grpo::parse_loss_type("grpo_plus"), grpo::ConfigError);
}

TEST_CASE("GrpoLoss: gmpo is accepted only with loss_type grpo, and then is mean_i L_i over all B rows",
          "[loss][grpo_loss]") {
  for (auto type : {LossType::grpo, LossType::bnpo, LossType::dr_grpo, LossType::dapo, LossType::luspo,
                    LossType::token_mean, LossType::seq_mean_token_sum, LossType::seq_mean_token_mean,
                    LossType::seq_mean_token_sum_norm}) {
    GrpoLossOptions o;
    o.loss_type = type;
    o.max_completion_length = 8;
    o.policy.type = PolicyLossType::gmpo;
    INFO("loss type " << grpo::to_string(type));
    if (type == LossType::grpo) {
      REQUIRE_NOTHROW(GrpoLoss(o));
    } else {
      REQUIRE_THROWS_WITH(GrpoLoss(o), Catch::Matchers::Contains("policy.type 'gmpo'") &&
                                           Catch::Matchers::EndsWith(fmt::format("got '{}'", grpo::to_string(type))));
    }
  }

  // fp64 loop of TRL's GMPO loss: per sequence, Δ_t = lp − lp_old, Δ'_t = min(Δ, clip(Δ, −ε, ε)) for A > 0 and max(...)
  // otherwise, L_i = −A_i·exp(Σ_t Δ'_t / max(|o_i|, 1)), loss = Σ_i L_i / B with an empty row counting −A_i.
  const LossBatch b = random_loss_batch(5, 4, 57);
  const double eps = 0.1;
  double sum = 0.0, non_empty = 0.0;
  for (int64_t i = 0; i < 5; ++i) {
    double len = 0.0, clipped = 0.0;
    const double a = b.adv[i].item<double>();
    for (int64_t t = 0; t < 4; ++t) {
      if (!b.mask[i][t].item<bool>()) continue;
      const double d = get(b.lp, i, t) - get(b.old, i, t);
      const double in_range = std::clamp(d, -eps, eps);
      clipped += a > 0 ? std::min(d, in_range) : std::max(d, in_range);
      len += 1.0;
    }
    sum += -a * std::exp(clipped / std::max(len, 1.0));
    non_empty += len > 0.0;
  }
  REQUIRE(non_empty == 4.0);  // row 1 is empty
  {
    GrpoLossOptions o;
    o.loss_type = LossType::grpo;
    o.policy.type = PolicyLossType::gmpo;
    o.policy.epsilon_low = o.policy.epsilon_high = eps;
    GrpoLoss loss(o);
    auto in = b.inputs();
    const Normaliser n = loss.local_normaliser(in);
    REQUIRE(n.divisor() == 5.0);
    REQUIRE(loss_value(loss, in, n) == Approx(sum / n.divisor()).epsilon(1e-12));
    auto f = [&](const torch::Tensor& x) {
      auto copy = in;
      copy.log_probs = x;
      return loss(copy, n).loss;
    };
    GRPO_REQUIRE_CLOSE(autograd_grad(f, b.lp), finite_difference_grad(f, b.lp), 1e-5, 1e-8);
  }
}

TEST_CASE("GrpoLoss: per-token advantages equal to a broadcast [B] give the same loss and gradient",
          "[loss][grpo_loss]") {
  const LossBatch b = random_loss_batch(4, 5, 54);
  auto o = grpo::recipes::grpo();
  o.off_policy_mask_threshold = 0.05;
  GrpoLoss loss(o);
  auto per_sequence = b.inputs();
  auto per_token = per_sequence;
  per_token.advantages = b.adv.unsqueeze(1).expand({4, 5}).contiguous();
  const Normaliser n = loss.local_normaliser(per_sequence);
  auto f = [&](const LossInputs& in) {
    return [&loss, &n, in](const torch::Tensor& x) {
      auto copy = in;
      copy.log_probs = x;
      return loss(copy, n).loss;
    };
  };
  REQUIRE(loss_value(loss, per_token, n) == Approx(loss_value(loss, per_sequence, n)).epsilon(1e-14));
  GRPO_REQUIRE_CLOSE(autograd_grad(f(per_token), b.lp), autograd_grad(f(per_sequence), b.lp), 1e-12, 1e-15);
}

TEST_CASE("GrpoLoss's generic composition names an input on another device than log_probs", "[loss][errors]") {
  GrpoLossOptions o;
  o.implementation = grpo::LossImplementation::generic;
  const auto meta = torch::Device(torch::kMeta);  // any device but the CPU
  LossInputs in{.log_probs = torch::zeros({2, 3}), .advantages = torch::zeros({2}), .mask = torch::ones({2, 3})};
  in.advantages = in.advantages.to(meta);
  REQUIRE_THROWS_WITH(GrpoLoss(o)(in, Normaliser::tokens(6)),
                      Catch::Contains("GrpoLoss: advantages is on meta but log_probs is on cpu (put every input on "
                                      "one device)"));
  in.advantages = torch::zeros({2});
  in.old_log_probs = torch::zeros({2, 3}).to(meta);
  REQUIRE_THROWS_WITH(GrpoLoss(o)(in, Normaliser::tokens(6)),
                      Catch::Contains("old_log_probs is on meta but log_probs is on cpu"));
}
