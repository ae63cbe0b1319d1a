// SPDX-License-Identifier: Apache-2.0
#include <grpo/logprob/fused_grpo_loss.hpp>
#include <grpo/logprob/linear_log_probs.hpp>
#include <grpo/loss/recipes.hpp>

#include <catch2/catch.hpp>
#include <support/kernel_path_testing.hpp>
#include <support/tensor_testing.hpp>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

using grpo::testing::autograd_grad;
using grpo::testing::finite_difference_grad;

namespace {

/// A ragged batch: 4 sequences of up to 6 tokens, the last one empty; old log-probs off by up to ±0.5 so that
/// every clip branch is taken; ref log-probs for the KL term.
struct Batch {
  torch::Tensor lp, old, ref, adv, mask, entropy;
};
Batch make_batch(torch::ScalarType dtype) {
  torch::manual_seed(21);
  Batch b;
  b.lp = (-torch::rand({4, 6}, torch::kFloat64) * 3).to(dtype);
  b.old = (b.lp.to(torch::kFloat64) + (torch::rand({4, 6}, torch::kFloat64) - 0.5)).to(dtype);
  b.ref = (b.lp.to(torch::kFloat64) + (torch::rand({4, 6}, torch::kFloat64) - 0.5) * 0.4).to(dtype);
  b.adv = torch::tensor({1.3, -0.7, 0.4, 2.0}, torch::kFloat64).to(dtype);
  b.mask = torch::tensor({{1, 1, 1, 1, 1, 1}, {1, 1, 1, 0, 0, 0}, {1, 1, 1, 1, 1, 0}, {0, 0, 0, 0, 0, 0}});
  b.entropy = (torch::rand({4, 6}, torch::kFloat64) * 2).to(dtype);
  return b;
}

/// options computed by GrpoLoss's generic tensor composition (GrpoLoss would otherwise run the fused kernel).
grpo::GrpoLossOptions generic(grpo::GrpoLossOptions options) {
  options.implementation = grpo::LossImplementation::generic;
  return options;
}

std::vector<std::pair<std::string, grpo::GrpoLossOptions>> configurations() {
  std::vector<std::pair<std::string, grpo::GrpoLossOptions>> out = {
      {"grpo", grpo::recipes::grpo()},     {"dapo", grpo::recipes::dapo()}, {"dr_grpo", grpo::recipes::dr_grpo(6)},
      {"gspo", grpo::recipes::gspo()},     {"cispo", grpo::recipes::cispo()},
  };
  auto bnpo = grpo::recipes::dapo();
  bnpo.loss_type = grpo::LossType::bnpo;
  bnpo.beta = 0.1;
  bnpo.kl.estimator = grpo::KlEstimator::low_var_kl;
  out.emplace_back("bnpo + low_var_kl", bnpo);
  auto gspo_wide = grpo::recipes::gspo();  // GSPO with a clip range the sequence ratios fall inside
  gspo_wide.policy.epsilon_low = gspo_wide.policy.epsilon_high = 0.3;
  gspo_wide.beta = 0.04;
  out.emplace_back("gspo wide + k3", gspo_wide);
  auto cispo_kl = grpo::recipes::cispo();
  cispo_kl.policy.epsilon_high = 1.1;
  cispo_kl.beta = 0.02;
  cispo_kl.kl.estimator = grpo::KlEstimator::k2;
  out.emplace_back("cispo capped + k2", cispo_kl);
  return out;
}

/// The same metric names in the same order, with values within `tol` (relative and absolute).
void require_same_metrics(const grpo::LossOutput& actual, const grpo::LossOutput& expected, double tol) {
  const auto a = actual.metrics.items(), e = expected.metrics.items();
  REQUIRE(a.size() == e.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO(e[i].first);
    REQUIRE(a[i].first == e[i].first);
    REQUIRE(a[i].second == Approx(e[i].second).epsilon(tol).margin(tol));
  }
}

}  // namespace

TEST_CASE("FusedGrpoLoss equals GrpoLoss in loss, metrics and gradient for every supported loss type",
          "[logprob][fused_loss]") {
  GRPO_FOR_EACH_KERNEL_PATH();
  for (auto dtype : {torch::kFloat64, torch::kFloat32}) {
    const double tol = dtype == torch::kFloat64 ? 1e-12 : 2e-6;
    const auto batch = make_batch(dtype);
    for (const auto& [name, options] : configurations()) {
      for (bool per_token_adv : {false, true}) {
        INFO(name << (per_token_adv ? " per-token advantages" : "") << " " << c10::toString(dtype));
        const grpo::GrpoLoss eager(generic(options));
        const grpo::FusedGrpoLoss fused(options);
        auto run = [&](auto& loss) {
          auto lp = batch.lp.clone().requires_grad_(true);
          grpo::LossInputs in{.log_probs = lp, .old_log_probs = batch.old, .ref_log_probs = batch.ref,
                              .advantages = per_token_adv ? batch.adv.unsqueeze(1).expand({4, 6}) * 0.5 : batch.adv,
                              .mask = batch.mask, .entropy = batch.entropy};
          auto out = loss(in, loss.local_normaliser(in));
          out.loss.backward();
          return std::make_pair(out, lp.grad());
        };
        auto [expected, expected_grad] = run(eager);
        auto [actual, actual_grad] = run(fused);
        REQUIRE(actual.loss.scalar_type() == dtype);
        REQUIRE(actual.metrics.loss == Approx(expected.metrics.loss).epsilon(tol).margin(tol));
        GRPO_REQUIRE_CLOSE(actual_grad, expected_grad, tol, tol);
        require_same_metrics(actual, expected, tol);
      }
    }
  }
}

TEST_CASE("FusedGrpoLoss float32 vector kernel equals the float64 loss on long ragged rows with garbage padding",
          "[logprob][fused_loss]") {
  GRPO_FOR_EACH_KERNEL_PATH();
  // Rows of 37 tokens (two full 16-lane vectors and a tail of 5) with lengths 0, 1, 16, 17 and 37; padding holds
  // −inf/NaN; some log ratios are ±30 (beyond verl's ±20 bound) and some clip. The float32 result of the vector
  // kernel is compared with the float64 generic loss on the same (float32-representable) values.
  const int64_t B = 5, T = 37;
  torch::manual_seed(23);
  auto lp = (-torch::rand({B, T}, torch::kFloat64) * 3).to(torch::kFloat32).to(torch::kFloat64);
  auto old = (lp + (torch::rand({B, T}, torch::kFloat64) - 0.5)).to(torch::kFloat32).to(torch::kFloat64);
  old[2][3] = lp[2][3].item<double>() - 30.0;
  old[4][20] = lp[4][20].item<double>() + 30.0;
  auto ref = (lp + (torch::rand({B, T}, torch::kFloat64) - 0.5) * 0.6).to(torch::kFloat32).to(torch::kFloat64);
  auto entropy = (torch::rand({B, T}, torch::kFloat64) * 2).to(torch::kFloat32).to(torch::kFloat64);
  const auto lengths = torch::tensor({0, 1, 16, 17, 37});
  auto mask = torch::arange(T).unsqueeze(0) < lengths.unsqueeze(1);
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  auto padded = [&](torch::Tensor x, double garbage) {
    return torch::where(mask, x, torch::full({}, garbage, x.options()));
  };
  const auto token_adv_sign = torch::arange(T) % 3 - 1;  // −1, 0, 1, ... along each row
  const auto adv = torch::tensor({0.3, 1.3, -0.7, 0.4, -2.0}, torch::kFloat64);
  for (auto estimator : {grpo::KlEstimator::k1, grpo::KlEstimator::abs, grpo::KlEstimator::k2, grpo::KlEstimator::k3,
                         grpo::KlEstimator::low_var_kl}) {
    for (const auto& [name, base] : configurations()) {
      if (base.policy.importance_level != grpo::ImportanceLevel::token) continue;  // the vector kernel's case
      for (bool per_token_adv : {false, true}) {
        auto options = base;
        options.beta = 0.05;
        options.kl.estimator = estimator;
        INFO(name << " kl " << grpo::to_string(estimator) << (per_token_adv ? " per-token advantages" : ""));
        auto run = [&](const grpo::GrpoLossOptions& o, torch::ScalarType dtype) {
          auto x = padded(lp, -inf).to(dtype).requires_grad_(true);
          grpo::LossInputs in{.log_probs = x, .old_log_probs = padded(old, nan).to(dtype),
                              .ref_log_probs = padded(ref, -inf).to(dtype),
                              .advantages = (per_token_adv ? adv.unsqueeze(1) * token_adv_sign : adv).to(dtype),
                              .mask = mask, .entropy = padded(entropy, nan).to(dtype)};
          grpo::FusedGrpoLoss loss(o);
          auto out = loss(in, loss.local_normaliser(in));
          out.loss.backward();
          return std::make_pair(out, x.grad().to(torch::kFloat64));
        };
        const grpo::GrpoLoss reference(generic(options));
        auto x64 = padded(lp, -inf).requires_grad_(true);
        grpo::LossInputs in64{.log_probs = x64, .old_log_probs = padded(old, nan), .ref_log_probs = padded(ref, -inf),
                              .advantages = per_token_adv ? adv.unsqueeze(1) * token_adv_sign : adv,
                              .mask = mask, .entropy = padded(entropy, nan)};
        auto expected = reference(in64, reference.local_normaliser(in64));
        expected.loss.backward();
        auto [actual, actual_grad] = run(options, torch::kFloat32);
        REQUIRE(actual.loss.scalar_type() == torch::kFloat32);
        GRPO_REQUIRE_CLOSE(actual_grad, x64.grad(), 1e-5, 1e-7);
        REQUIRE(torch::isfinite(actual_grad).all().item<bool>());
        auto a = actual.metrics.items(), e = expected.metrics.items();
        REQUIRE(a.size() == e.size());
        for (size_t i = 0; i < a.size(); ++i) {
          INFO(e[i].first);
          REQUIRE(a[i].second == Approx(e[i].second).epsilon(1e-5).margin(1e-6));
        }
      }
    }
  }
}

TEST_CASE("FusedGrpoLoss gradient equals finite differences (float64)", "[logprob][fused_loss][gradient]") {
  GRPO_FOR_EACH_KERNEL_PATH();
  const auto batch = make_batch(torch::kFloat64);
  for (const auto& [name, options] : configurations()) {
    // CISPO's weight is a stop-gradient (sg(min(w, ε))·A·lp), so its gradient is not the derivative of its value;
    // it is checked against GrpoLoss above.
    if (options.policy.type == grpo::PolicyLossType::cispo) continue;
    INFO(name);
    const grpo::FusedGrpoLoss fused(options);
    auto f = [&](const torch::Tensor& lp) {
      grpo::LossInputs in{.log_probs = lp, .old_log_probs = batch.old, .ref_log_probs = batch.ref,
                          .advantages = batch.adv, .mask = batch.mask};
      return fused(in, fused.local_normaliser(in)).loss;
    };
    GRPO_REQUIRE_CLOSE(autograd_grad(f, batch.lp), finite_difference_grad(f, batch.lp), 1e-6, 1e-8);
  }
}

TEST_CASE("FusedGrpoLoss edge cases: all masked, no old log-probs, log-ratio of ±100", "[logprob][fused_loss][edge]") {
  GRPO_FOR_EACH_KERNEL_PATH();
  const grpo::FusedGrpoLoss fused(grpo::recipes::grpo());
  auto lp = torch::full({2, 3}, -1.0, torch::kFloat64).requires_grad_(true);
  auto zeros_mask = torch::zeros({2, 3});
  grpo::LossInputs none{.log_probs = lp, .ref_log_probs = lp.detach(), .advantages = torch::ones({2}, torch::kFloat64),
                        .mask = zeros_mask};
  auto out = fused(none, grpo::Normaliser::sequences(2));
  REQUIRE(out.loss.item<double>() == 0.0);
  out.loss.backward();
  REQUIRE(lp.grad().abs().max().item<double>() == 0.0);
  REQUIRE(out.metrics.num_tokens == 0.0);

  // μ = 1 (no old log-probs): w = 1, so the per-token loss is −A and the KL (ref = lp) is 0:
  // grpo: mean over 2 sequences of the token mean of −A = −(1 + 3)/2 = −2.
  grpo::LossInputs mu1{.log_probs = lp, .ref_log_probs = lp.detach(), .advantages = torch::tensor({1.0, 3.0}, torch::kFloat64),
                       .mask = torch::ones({2, 3})};
  REQUIRE(fused(mu1, grpo::Normaliser::sequences(2)).loss.item<double>() == Approx(-2.0));

  // Log-ratios of ±100 are clamped to ±20: finite loss and gradient, equal to GrpoLoss.
  auto far_lp = torch::tensor({{-1.0, -101.0, -1.0}, {-1.0, -1.0, -1.0}}, torch::kFloat64);
  auto far_old = torch::tensor({{-101.0, -1.0, -1.0}, {-1.0, -1.0, -1.0}}, torch::kFloat64);
  auto run = [&](const auto& loss) {
    auto x = far_lp.clone().requires_grad_(true);
    grpo::LossInputs in{.log_probs = x, .old_log_probs = far_old, .ref_log_probs = far_old,
                        .advantages = torch::tensor({-1.0, 1.0}, torch::kFloat64), .mask = torch::ones({2, 3})};
    auto o = loss(in, grpo::Normaliser::sequences(2));
    o.loss.backward();
    return std::make_pair(o.loss.template item<double>(), x.grad());
  };
  auto [fused_value, fused_grad] = run(fused);
  auto [eager_value, eager_grad] = run(grpo::GrpoLoss(generic(grpo::recipes::grpo())));
  REQUIRE(std::isfinite(fused_value));
  REQUIRE(fused_value == Approx(eager_value));
  GRPO_REQUIRE_CLOSE(fused_grad, eager_grad, 1e-12, 1e-12);
}

TEST_CASE("hidden states to loss: linear log-probs then FusedGrpoLoss equal the eager chain", "[logprob][fused_loss]") {
  GRPO_FOR_EACH_KERNEL_PATH();
  torch::manual_seed(22);
  auto hidden = torch::randn({4, 6, 8}, torch::kFloat64);
  auto weight = torch::randn({29, 8}, torch::kFloat64) * 0.5;
  auto ref_weight = weight + torch::randn({29, 8}, torch::kFloat64) * 0.05;
  auto ids = torch::randint(0, 29, {4, 6}, torch::kInt64);
  const auto batch = make_batch(torch::kFloat64);
  const auto options = grpo::recipes::grpo();
  auto step = [&](bool fused) {
    auto h = hidden.clone().requires_grad_(true);
    auto w = weight.clone().requires_grad_(true);
    torch::Tensor lp, ref;
    if (fused) {
      lp = grpo::linear_token_log_probs(h, w, ids, {.chunk_rows = 5}).log_probs;
      torch::NoGradGuard no_grad;
      ref = grpo::linear_token_log_probs(hidden, ref_weight, ids).log_probs;
    } else {
      lp = torch::log_softmax(torch::matmul(h, w.t()), -1).gather(-1, ids.unsqueeze(-1)).squeeze(-1);
      ref = torch::log_softmax(torch::matmul(hidden, ref_weight.t()), -1).gather(-1, ids.unsqueeze(-1)).squeeze(-1);
    }
    grpo::LossInputs in{.log_probs = lp, .old_log_probs = batch.old, .ref_log_probs = ref, .advantages = batch.adv,
                        .mask = batch.mask};
    auto out = fused ? grpo::FusedGrpoLoss(options)(in, grpo::Normaliser::sequences(4))
                     : grpo::GrpoLoss(generic(options))(in, grpo::Normaliser::sequences(4));
    out.loss.backward();
    return std::vector<torch::Tensor>{out.loss.detach(), h.grad(), w.grad()};
  };
  auto ours = step(true), eager = step(false);
  for (size_t i = 0; i < ours.size(); ++i) GRPO_REQUIRE_CLOSE(ours[i], eager[i], 1e-10, 1e-12);
}

TEST_CASE("FusedGrpoLoss rejects options it does not fuse, naming them", "[logprob][fused_loss][errors]") {
  GRPO_FOR_EACH_KERNEL_PATH();
  auto options = grpo::recipes::dapo();
  options.entropy_coef = 0.01;
  REQUIRE_THROWS_AS(grpo::FusedGrpoLoss(options), grpo::ConfigError);
  REQUIRE_THROWS_WITH(grpo::FusedGrpoLoss(options), Catch::Contains("entropy_coef = 0.01"));
  options = grpo::recipes::dapo();
  options.policy.type = grpo::PolicyLossType::gpg;
  REQUIRE_THROWS_WITH(grpo::FusedGrpoLoss(options), Catch::Contains("policy.type 'gpg'"));
  options = grpo::recipes::dapo();
  options.policy.dual_clip_c = 3.0;
  REQUIRE(grpo::FusedGrpoLoss::unsupported_reason(options) == "policy.dual_clip_c = 3");
  REQUIRE(grpo::FusedGrpoLoss::unsupported_reason(grpo::recipes::gspo()).empty());
  const grpo::FusedGrpoLoss fused(grpo::recipes::grpo());
  grpo::LossInputs in{.log_probs = torch::zeros({2, 3}), .advantages = torch::zeros({2}), .mask = torch::ones({2, 3})};
  REQUIRE_THROWS_WITH(fused(in, grpo::Normaliser::sequences(2)), Catch::Contains("beta = 0.04 needs ref_log_probs"));
  in.ref_log_probs = torch::zeros({2, 4});
  REQUIRE_THROWS_WITH(fused(in, grpo::Normaliser::sequences(2)), Catch::Contains("ref_log_probs"));
  REQUIRE_THROWS_AS(fused(in, grpo::Normaliser::tokens(6)), grpo::ConfigError);
}

TEST_CASE("FusedGrpoLoss from hidden states (gradients in forward) equals log-probs then loss",
          "[logprob][fused_loss][linear]") {
  GRPO_FOR_EACH_KERNEL_PATH();
  torch::manual_seed(23);
  const auto batch = make_batch(torch::kFloat64);
  auto hidden = torch::randn({4, 6, 8}, torch::kFloat64);
  auto weight = torch::randn({37, 8}, torch::kFloat64) * 0.5;
  auto ids = torch::randint(0, 37, {4, 6}, torch::kInt64);
  for (const auto& [name, options] : configurations()) {
    // chunk_rows 12 = two sequences of 6 per chunk; 0 = all in one chunk.
    for (int64_t chunk : {0, 12, 7}) {
      INFO(name << " chunk_rows " << chunk);
      const grpo::FusedGrpoLoss fused(options);
      const grpo::LinearLogProbOptions linear{.temperature = 0.9, .chunk_rows = chunk};
      auto run = [&](bool one_pass) {
        auto h = hidden.clone().requires_grad_(true);
        auto w = weight.clone().requires_grad_(true);
        grpo::LossInputs in{.old_log_probs = batch.old, .ref_log_probs = batch.ref, .advantages = batch.adv,
                            .mask = batch.mask, .entropy = batch.entropy};
        grpo::LossOutput out;
        if (one_pass) {
          out = fused(h, w, ids, in, grpo::local_normaliser(options.loss_type, batch.mask, {.max_completion_length = 6}),
                      linear);
        } else {
          in.log_probs = grpo::linear_token_log_probs(h, w, ids, linear).log_probs;
          out = fused(in, fused.local_normaliser(in));
        }
        out.loss.backward();
        return std::make_tuple(out, h.grad(), w.grad());
      };
      auto [expected, eh, ew] = run(false);
      auto [actual, ah, aw] = run(true);
      REQUIRE(actual.metrics.loss == Approx(expected.metrics.loss).epsilon(1e-12).margin(1e-12));
      GRPO_REQUIRE_CLOSE(ah, eh, 1e-10, 1e-12);
      GRPO_REQUIRE_CLOSE(aw, ew, 1e-10, 1e-12);
      require_same_metrics(actual, expected, 1e-12);
    }
  }
  // float32 within 1e-4 of float64.
  const grpo::FusedGrpoLoss fused(grpo::recipes::grpo());
  auto grads = [&](torch::ScalarType dtype) {
    auto h = hidden.to(dtype).requires_grad_(true);
    auto w = weight.to(dtype).requires_grad_(true);
    grpo::LossInputs in{.old_log_probs = batch.old.to(dtype), .ref_log_probs = batch.ref.to(dtype),
                        .advantages = batch.adv.to(dtype), .mask = batch.mask};
    fused(h, w, ids, in, grpo::Normaliser::sequences(4), {.chunk_rows = 12}).loss.backward();
    return std::make_pair(h.grad().to(torch::kFloat64), w.grad().to(torch::kFloat64));
  };
  auto [h32, w32] = grads(torch::kFloat32);
  auto [h64, w64] = grads(torch::kFloat64);
  GRPO_REQUIRE_CLOSE(h32, h64, 1e-4, 1e-6);
  GRPO_REQUIRE_CLOSE(w32, w64, 1e-4, 1e-6);
  grpo::LossInputs in{.log_probs = torch::zeros({4, 6}), .ref_log_probs = batch.ref, .advantages = batch.adv,
                      .mask = batch.mask};
  REQUIRE_THROWS_WITH(fused(hidden, weight, ids, in, grpo::Normaliser::sequences(4)),
                      Catch::Contains("inputs.log_probs must be undefined"));
}

TEST_CASE("FusedGrpoLoss generic path equals its CPU kernel in loss, metrics and gradients, from log-probs and hidden "
          "states",
          "[logprob][fused_loss][generic]") {
  torch::manual_seed(24);
  auto hidden = torch::randn({4, 6, 8}, torch::kFloat64);
  auto weight = torch::randn({37, 8}, torch::kFloat64) * 0.5;
  auto ids = torch::randint(0, 37, {4, 6}, torch::kInt64);
  for (auto dtype : {torch::kFloat64, torch::kFloat32, torch::kBFloat16}) {
    const auto batch = make_batch(dtype);
    // float32 (and bf16 inputs computed in float32): the kernel's and LibTorch's log-softmax differ by a few float32
    // ulps of the largest logit |z/τ| ≤ max|h|·max|w|·H/τ, and the loss and metrics are sums of such terms weighted
    // by O(1) advantages: 8·2⁻²⁴ of that magnitude (plus 1 for the O(1) terms) bounds them.
    const double magnitude = 1.0 + (hidden.abs().max() * weight.abs().max()).item<double>() * 8 / 0.9;
    const double tol = dtype == torch::kFloat64 ? 1e-12 : 8 * std::ldexp(magnitude, -24);
    // bfloat16 gradients: rounded to 8 bits of mantissa (and, from hidden states, the weight's gradient is summed
    // over chunks of bfloat16 products): to 1% of the gradient's largest element.
    const bool bf16 = dtype == torch::kBFloat16;
    for (const auto& [name, options] : configurations()) {
      INFO(name << " " << c10::toString(dtype));
      const grpo::FusedGrpoLoss fused(options);
      auto run = [&](grpo::KernelPath path, bool from_hidden) {
        const grpo::ForceKernelPath force(path);
        auto lp = batch.lp.clone().requires_grad_(true);
        auto h = hidden.to(dtype).detach().requires_grad_(true);
        auto w = weight.to(dtype).detach().requires_grad_(true);
        grpo::LossInputs in{.old_log_probs = batch.old, .ref_log_probs = batch.ref, .advantages = batch.adv,
                            .mask = batch.mask, .entropy = batch.entropy};
        const auto normaliser =
            grpo::local_normaliser(options.loss_type, batch.mask, {.max_completion_length = 6});
        grpo::LossOutput out;
        if (from_hidden) {
          out = fused(h, w, ids, in, normaliser, {.temperature = 0.9, .chunk_rows = 12});
        } else {
          in.log_probs = lp;
          out = fused(in, normaliser);
        }
        out.loss.backward();
        std::vector<torch::Tensor> grads;
        for (const auto& x : from_hidden ? std::vector<torch::Tensor>{h, w} : std::vector<torch::Tensor>{lp}) {
          REQUIRE(x.grad().scalar_type() == dtype);
          grads.push_back(x.grad().to(torch::kFloat64));
        }
        return std::make_pair(out, grads);
      };
      for (bool from_hidden : {false, true}) {
        INFO((from_hidden ? "from hidden states" : "from log-probs"));
        auto [expected, expected_grads] = run(grpo::KernelPath::cpu, from_hidden);
        auto [actual, actual_grads] = run(grpo::KernelPath::generic, from_hidden);
        REQUIRE(actual.loss.scalar_type() == expected.loss.scalar_type());
        REQUIRE(actual.loss.item<double>() == Approx(expected.loss.item<double>()).epsilon(tol).margin(tol));
        for (size_t i = 0; i < actual_grads.size(); ++i) {
          const double scale = expected_grads[i].abs().max().item<double>();
          GRPO_REQUIRE_CLOSE(actual_grads[i], expected_grads[i], bf16 ? 1e-2 : tol, bf16 ? 1e-2 * scale : tol);
        }
        require_same_metrics(actual, expected, tol);
      }
    }
  }
}

TEST_CASE("FusedGrpoLoss names an input its CPU kernel cannot read", "[logprob][fused_loss][errors]") {
  const grpo::FusedGrpoLoss fused(grpo::recipes::dapo());
  const auto meta = torch::Device(torch::kMeta);  // any device but the CPU
  grpo::LossInputs in{.log_probs = torch::zeros({2, 3}), .advantages = torch::zeros({2}),
                      .mask = torch::ones({2, 3}).to(meta)};
  REQUIRE_THROWS_WITH(fused(in, grpo::Normaliser::tokens(6)),
                      Catch::Contains("FusedGrpoLoss: mask is on meta, but the CPU kernel path reads CPU tensors"));
  in.mask = torch::ones({2, 3});
  in.log_probs = in.log_probs.to(meta);
  const grpo::ForceKernelPath force(grpo::KernelPath::cpu);
  REQUIRE_THROWS_WITH(fused(in, grpo::Normaliser::tokens(6)),
                      Catch::Contains("the CPU kernel path is forced") && Catch::Contains("log_probs is on meta"));
  REQUIRE_THROWS_WITH(fused(torch::zeros({2, 3, 4}).to(meta), torch::zeros({5, 4}).to(meta),
                            torch::zeros({2, 3}, torch::kInt64), grpo::LossInputs{.advantages = torch::zeros({2}),
                                                                                 .mask = torch::ones({2, 3})},
                            grpo::Normaliser::tokens(6)),
                      Catch::Contains("ids is on cpu but hidden is on meta"));
}
