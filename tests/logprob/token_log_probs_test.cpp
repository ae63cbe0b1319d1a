// SPDX-License-Identifier: Apache-2.0
#include <grpo/logprob/token_log_probs.hpp>

#include <catch2/catch.hpp>
#include <support/kernel_path_testing.hpp>
#include <support/tensor_testing.hpp>

#include <cmath>
#include <limits>

using grpo::testing::autograd_grad;
using grpo::testing::finite_difference_grad;

namespace {

/// log softmax(x/temperature)[y] and the entropy, by plain double loops over one row.
struct RowStats {
  double log_prob, entropy;
};
RowStats row_by_hand(const double* x, int64_t vocab, int64_t y, double temperature) {
  double m = -INFINITY;
  for (int64_t v = 0; v < vocab; ++v) m = std::max(m, x[v] / temperature);
  double s = 0;
  for (int64_t v = 0; v < vocab; ++v) s += std::exp(x[v] / temperature - m);
  const double lse = m + std::log(s);
  double h = 0;
  for (int64_t v = 0; v < vocab; ++v) {
    const double lp = x[v] / temperature - lse;
    h -= std::exp(lp) * lp;
  }
  return {x[y] / temperature - lse, h};
}

}  // namespace

TEST_CASE("token_log_probs matches a double-precision loop for every temperature", "[logprob]") {
  GRPO_FOR_EACH_KERNEL_PATH();
  torch::manual_seed(1);
  auto logits = torch::randn({3, 5, 37}, torch::kFloat64) * 3;
  auto ids = torch::randint(0, 37, {3, 5}, torch::kInt64);
  for (double temperature : {1.0, 0.7, 1.3}) {
    auto expected_lp = torch::empty({3, 5}, torch::kFloat64);
    auto expected_h = torch::empty({3, 5}, torch::kFloat64);
    auto x = logits.contiguous();
    for (int64_t b = 0; b < 3; ++b) {
      for (int64_t t = 0; t < 5; ++t) {
        auto r = row_by_hand(x[b][t].data_ptr<double>(), 37, ids[b][t].item<int64_t>(), temperature);
        expected_lp[b][t] = r.log_prob;
        expected_h[b][t] = r.entropy;
      }
    }
    auto out = grpo::token_log_probs(logits, ids, {.temperature = temperature, .with_entropy = true});
    REQUIRE(out.log_probs.scalar_type() == torch::kFloat64);
    GRPO_REQUIRE_CLOSE(out.log_probs, expected_lp, 1e-12, 1e-12);
    GRPO_REQUIRE_CLOSE(out.entropy, expected_h, 1e-12, 1e-12);
    GRPO_REQUIRE_CLOSE(grpo::token_entropy(logits, {.temperature = temperature}), expected_h, 1e-12, 1e-12);
    GRPO_REQUIRE_CLOSE(grpo::token_log_probs_reference(logits, ids, temperature), expected_lp, 1e-12, 1e-12);
    GRPO_REQUIRE_CLOSE(grpo::token_entropy_reference(logits, temperature), expected_h, 1e-12, 1e-12);
  }
}

TEST_CASE("token_log_probs gradient equals finite differences (float64), log-probs and entropy together",
          "[logprob][gradient]") {
  GRPO_FOR_EACH_KERNEL_PATH();
  torch::manual_seed(2);
  auto logits = torch::randn({2, 3, 7}, torch::kFloat64);
  auto ids = torch::randint(0, 7, {2, 3}, torch::kInt64);
  auto w_lp = torch::randn({2, 3}, torch::kFloat64);
  auto w_h = torch::randn({2, 3}, torch::kFloat64);
  for (double temperature : {1.0, 0.6}) {
    auto f = [&](const torch::Tensor& x) {
      auto out = grpo::token_log_probs(x, ids, {.temperature = temperature, .with_entropy = true});
      return (out.log_probs * w_lp).sum() + (out.entropy * w_h).sum();
    };
    GRPO_REQUIRE_CLOSE(autograd_grad(f, logits), finite_difference_grad(f, logits), 1e-6, 1e-8);
    auto f_lp = [&](const torch::Tensor& x) {
      return (grpo::token_log_probs(x, ids, {.temperature = temperature}).log_probs * w_lp).sum();
    };
    GRPO_REQUIRE_CLOSE(autograd_grad(f_lp, logits), finite_difference_grad(f_lp, logits), 1e-6, 1e-8);
    auto f_h = [&](const torch::Tensor& x) {
      return (grpo::token_entropy(x, {.temperature = temperature}) * w_h).sum();
    };
    GRPO_REQUIRE_CLOSE(autograd_grad(f_h, logits), finite_difference_grad(f_h, logits), 1e-6, 1e-8);
  }
}

TEST_CASE("token_log_probs in float32 agrees with the eager reference in values and gradients", "[logprob]") {
  GRPO_FOR_EACH_KERNEL_PATH();
  torch::manual_seed(3);
  auto logits = torch::randn({4, 9, 1000}) * 4;
  auto ids = torch::randint(0, 1000, {4, 9}, torch::kInt64);
  auto g = torch::randn({4, 9});
  auto ours = logits.clone().requires_grad_(true);
  auto ref = logits.clone().requires_grad_(true);
  auto out = grpo::token_log_probs(ours, ids, {.temperature = 0.9});
  auto expected = grpo::token_log_probs_reference(ref, ids, 0.9);
  GRPO_REQUIRE_CLOSE(out.log_probs, expected, 1e-5, 1e-5);
  (out.log_probs * g).sum().backward();
  (expected * g).sum().backward();
  GRPO_REQUIRE_CLOSE(ours.grad(), ref.grad(), 1e-4, 1e-6);
}

TEST_CASE("token_log_probs accepts [N, V], sliced (non-contiguous) and bfloat16 logits", "[logprob]") {
  GRPO_FOR_EACH_KERNEL_PATH();
  torch::manual_seed(4);
  auto full = torch::randn({2, 6, 50});
  auto sliced = full.slice(1, 0, 5);  // the usual logits[:, :-1, :]
  REQUIRE_FALSE(sliced.is_contiguous());
  auto ids = torch::randint(0, 50, {2, 5}, torch::kInt64);
  GRPO_REQUIRE_CLOSE(grpo::token_log_probs(sliced, ids).log_probs, grpo::token_log_probs_reference(sliced, ids),
                     1e-5, 1e-6);
  auto flat = sliced.reshape({10, 50});
  GRPO_REQUIRE_CLOSE(grpo::token_log_probs(flat, ids.reshape({10})).log_probs,
                     grpo::token_log_probs_reference(sliced, ids).reshape({10}), 1e-5, 1e-6);
  auto bf16 = full.to(torch::kBFloat16);
  auto ids6 = torch::randint(0, 50, {2, 6}, torch::kInt64);
  auto out = grpo::token_log_probs(bf16, ids6);
  REQUIRE(out.log_probs.scalar_type() == torch::kFloat32);
  // Computed in fp32 from the bf16 values, so it must equal the fp32 reference on the upcast logits.
  GRPO_REQUIRE_CLOSE(out.log_probs, grpo::token_log_probs_reference(bf16.to(torch::kFloat32), ids6), 1e-5, 1e-6);
  auto leaf = bf16.clone().requires_grad_(true);
  grpo::token_log_probs(leaf, ids6).log_probs.sum().backward();
  REQUIRE(leaf.grad().scalar_type() == torch::kBFloat16);
}

TEST_CASE("token_log_probs stays finite for huge logits and handles empty completions", "[logprob][edge]") {
  GRPO_FOR_EACH_KERNEL_PATH();
  auto logits = torch::tensor({{1e4, -1e4, 0.0}, {-1e30, 1e30, 3.0}}).unsqueeze(0);
  auto ids = torch::tensor({{1, 0}}, torch::kInt64);
  auto leaf = logits.clone().requires_grad_(true);
  auto out = grpo::token_log_probs(leaf, ids, {.with_entropy = true});
  REQUIRE(torch::isfinite(out.log_probs).all().item<bool>());
  REQUIRE(out.log_probs[0][0].item<float>() == Approx(-2e4));
  REQUIRE(torch::isfinite(out.entropy).all().item<bool>());
  (out.log_probs.sum() + out.entropy.sum()).backward();
  REQUIRE(torch::isfinite(leaf.grad()).all().item<bool>());

  // −inf logits (a vocabulary mask): probability 0, no NaN in entropy or gradients. Row: [0, −inf, ln 3, −inf]
  // gives p = (1/4, 0, 3/4, 0), log p(0) = −ln 4, H = −(¼ ln ¼ + ¾ ln ¾).
  const float inf = std::numeric_limits<float>::infinity();
  auto masked = torch::tensor({{0.0f, -inf, std::log(3.0f), -inf}}).unsqueeze(0).requires_grad_(true);
  auto m = grpo::token_log_probs(masked, torch::tensor({{0}}, torch::kInt64), {.with_entropy = true});
  REQUIRE(m.log_probs.item<float>() == Approx(-std::log(4.0)));
  REQUIRE(m.entropy.item<float>() == Approx(-(0.25 * std::log(0.25) + 0.75 * std::log(0.75))));
  (m.log_probs.sum() + m.entropy.sum()).backward();
  REQUIRE(torch::isfinite(masked.grad()).all().item<bool>());

  auto empty = torch::zeros({3, 0, 11}).requires_grad_(true);
  auto none = grpo::token_log_probs(empty, torch::zeros({3, 0}, torch::kInt64), {.with_entropy = true});
  REQUIRE(none.log_probs.sizes() == torch::IntArrayRef({3, 0}));
  none.log_probs.sum().backward();
  REQUIRE(empty.grad().sizes() == empty.sizes());
}

TEST_CASE("token_log_probs rejects bad arguments with messages naming them", "[logprob][errors]") {
  GRPO_FOR_EACH_KERNEL_PATH();
  auto logits = torch::zeros({2, 3, 5});
  REQUIRE_THROWS_WITH(grpo::token_log_probs(logits, torch::zeros({2, 4}, torch::kInt64)),
                      Catch::Contains("ids must have the leading shape of logits [2, 3, 5]") &&
                          Catch::Contains("got shape [2, 4]"));
  auto ids = torch::zeros({2, 3}, torch::kInt64);
  ids[1][2] = 5;
  REQUIRE_THROWS_WITH(grpo::token_log_probs(logits, ids), Catch::Contains("ids[1, 2] = 5 is outside the vocabulary [0, 5)"));
  ids[1][2] = -1;
  REQUIRE_THROWS_AS(grpo::token_log_probs(logits, ids), grpo::Error);
  REQUIRE_THROWS_WITH(grpo::token_log_probs(logits, torch::zeros({2, 3}, torch::kInt32)), Catch::Contains("int64"));
  REQUIRE_THROWS_WITH(grpo::token_log_probs(logits, torch::zeros({2, 3}, torch::kInt64), {.temperature = 0.0}),
                      Catch::Contains("temperature must be > 0"));
  REQUIRE_THROWS_WITH(grpo::token_entropy(torch::zeros({5})), Catch::Contains("got shape [5]"));
  REQUIRE_THROWS_WITH(grpo::token_entropy(torch::zeros({2, 5}, torch::kInt64)), Catch::Contains("floating-point"));
}

TEST_CASE("token_log_probs in float32 is within 1e-4 of float64 for any V, with entropy and masked rows",
          "[logprob][accuracy]") {
  GRPO_FOR_EACH_KERNEL_PATH();
  torch::manual_seed(5);
  // V around the vector width (16) and the kernel's block (2048) exercises the padded tails and the online rescale.
  for (int64_t vocab : {1, 15, 17, 2047, 2049, 5003}) {
    INFO("V = " << vocab);
    auto logits = torch::randn({3, 4, vocab}, torch::kFloat64) * 5;
    logits[1][2] += torch::linspace(-30, 30, vocab, torch::kFloat64);  // a drifting max across blocks
    auto ids = torch::randint(0, vocab, {3, 4}, torch::kInt64);
    auto g = torch::randn({3, 4}, torch::kFloat64);
    auto g_h = torch::randn({3, 4}, torch::kFloat64);
    g[0].zero_();  // a masked sequence: both gradients 0, the kernel writes zeros without the exp pass
    g_h[0].zero_();
    auto run = [&](torch::ScalarType dtype) {
      auto x = logits.to(dtype).requires_grad_(true);
      auto out = grpo::token_log_probs(x, ids, {.temperature = 0.7, .with_entropy = true});
      ((out.log_probs * g.to(out.log_probs.scalar_type())).sum() +
       (out.entropy * g_h.to(out.log_probs.scalar_type())).sum())
          .backward();
      return std::vector<torch::Tensor>{out.log_probs.to(torch::kFloat64), out.entropy.to(torch::kFloat64),
                                        x.grad().to(torch::kFloat64)};
    };
    auto f32 = run(torch::kFloat32), f64 = run(torch::kFloat64);
    GRPO_REQUIRE_CLOSE(f32[0], f64[0], 1e-4, 1e-4);
    GRPO_REQUIRE_CLOSE(f32[1], f64[1], 1e-4, 1e-4);
    GRPO_REQUIRE_CLOSE(f32[2], f64[2], 1e-4, 1e-6);
    REQUIRE(f32[2][0].abs().max().item<double>() == 0.0);
  }
}

TEST_CASE("token_log_probs can write the gradient into the logits themselves", "[logprob][inplace]") {
  GRPO_FOR_EACH_KERNEL_PATH();
  torch::manual_seed(6);
  auto base = torch::randn({2, 3, 101});
  auto ids = torch::randint(0, 101, {2, 3}, torch::kInt64);
  auto g = torch::randn({2, 3});
  auto run = [&](bool overwrite) {
    auto x = base.clone().requires_grad_(true);
    auto logits = x * 2.0;  // an intermediate, like the output of lm_head (mul by a constant does not save it)
    auto out = grpo::token_log_probs(logits, ids, {.temperature = 1.3, .with_entropy = true,
                                                   .overwrite_logits_in_backward = overwrite});
    ((out.log_probs * g).sum() + out.entropy.sum()).backward();
    return std::make_pair(x.grad(), logits.detach());
  };
  auto [grad_copy, logits_kept] = run(false);
  auto [grad_inplace, logits_overwritten] = run(true);
  GRPO_REQUIRE_CLOSE(grad_inplace, grad_copy, 0.0, 0.0);
  GRPO_REQUIRE_CLOSE(logits_kept, base * 2.0, 0.0, 0.0);
  GRPO_REQUIRE_CLOSE(logits_overwritten, grad_copy / 2.0, 1e-6, 1e-7);  // the buffer now holds ∂L/∂logits

  // An op that saved the logits for its own backward fails loudly instead of reading gradients.
  auto x = base.clone().requires_grad_(true);
  auto logits = x * 2.0;
  auto squared = (logits * logits).sum();  // saves logits
  auto lp = grpo::token_log_probs(logits, ids, {.overwrite_logits_in_backward = true}).log_probs.sum();
  REQUIRE_THROWS(torch::autograd::backward({lp + squared}));
}

TEST_CASE("token_log_probs generic path equals the CPU kernels in values and gradients for every dtype",
          "[logprob][generic]") {
  // Sliced (non-contiguous) logits, temperatures 1 and 0.7, log-probs and entropy with a masked sequence (both
  // incoming gradients 0), the gradient into a new buffer and into the logits; float64, float32 and bfloat16 logits.
  torch::manual_seed(7);
  const int64_t B = 3, T = 5;
  for (int64_t vocab : {1, 17, 2049, 5003}) {
    auto base = torch::randn({B, T + 1, vocab}, torch::kFloat64) * 4;
    base[2][1] += torch::linspace(-30, 30, vocab, torch::kFloat64);
    auto ids = torch::randint(0, vocab, {B, T}, torch::kInt64);
    auto g = torch::randn({B, T}, torch::kFloat64);
    auto g_h = torch::randn({B, T}, torch::kFloat64);
    g[1].zero_();
    g_h[1].zero_();
    for (auto dtype : {torch::kFloat64, torch::kFloat32, torch::kBFloat16}) {
      const auto out_dtype = dtype == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
      for (double temperature : {1.0, 0.7}) {
        // float32 results: the CPU kernels (x·fl(1/T), a polynomial exp within 2 ulp, double row sums) against
        // LibTorch's (x/T in float32, its exp and float32 log-sum-exp, whose reduction order follows the vector width):
        // each log-prob and entropy is within a few float32 ulps of the largest |x/T| of its row, so 8·2⁻²⁴ of the
        // largest |x/T| (66 on the shifted row: 3e-5) bounds the difference.
        const double magnitude = std::max(1.0, base.abs().max().item<double>() / temperature);
        const double tol = dtype == torch::kFloat64 ? 1e-12 : 8 * std::ldexp(magnitude, -24);
        // bfloat16 gradients: one rounding to 8 bits of mantissa of values that agree to float32 rounding.
        const double grad_tol = dtype == torch::kBFloat16 ? 1e-2 : tol;
        for (bool overwrite : {false, true}) {
          INFO("V = " << vocab << " " << c10::toString(dtype) << " temperature " << temperature
                      << (overwrite ? " overwrite_logits_in_backward" : ""));
          auto run = [&](grpo::KernelPath path) {
            const grpo::ForceKernelPath force(path);
            auto x = base.to(dtype).detach().requires_grad_(true);
            auto logits = (x * 1.0).slice(1, 0, T);  // an intermediate, so that its buffer may be overwritten
            const grpo::TokenLogProbOptions options{
                .temperature = temperature, .with_entropy = true, .overwrite_logits_in_backward = overwrite};
            auto out = grpo::token_log_probs(logits, ids, options);
            auto entropy = grpo::token_entropy(logits.detach(), {.temperature = temperature});
            ((out.log_probs * g.to(out_dtype)).sum() + (out.entropy * g_h.to(out_dtype)).sum()).backward();
            return std::vector<torch::Tensor>{out.log_probs, out.entropy, entropy, x.grad()};
          };
          const auto cpu = run(grpo::KernelPath::cpu), generic = run(grpo::KernelPath::generic);
          REQUIRE(generic[0].scalar_type() == out_dtype);
          REQUIRE(generic[3].scalar_type() == dtype);
          GRPO_REQUIRE_CLOSE(generic[0], cpu[0], tol, tol);
          GRPO_REQUIRE_CLOSE(generic[1], cpu[1], tol, tol);
          GRPO_REQUIRE_CLOSE(generic[2], cpu[1], tol, tol);
          // Gradients are up to |g|/temperature ≈ 4; the CPU kernels' polynomial exp (≈ 2 ulp) leaves ~1e-6 where the
          // exact value is 0 (V = 1: p = 1).
          GRPO_REQUIRE_CLOSE(generic[3].to(torch::kFloat64), cpu[3].to(torch::kFloat64), grad_tol,
                             dtype == torch::kFloat64 ? 1e-13 : 1e-5);
          REQUIRE(generic[3].select(0, 1).abs().max().item<double>() == 0.0);  // the masked sequence
        }
      }
    }
  }
}

TEST_CASE("token_log_probs backward takes the path of its forward, after the guard is gone", "[logprob][generic]") {
  torch::manual_seed(8);
  auto base = torch::randn({2, 3, 300}) * 3;
  auto ids = torch::randint(0, 300, {2, 3}, torch::kInt64);
  auto gradient = [&](bool backward_under_guard) {
    auto x = base.clone().requires_grad_(true);
    torch::Tensor lp;
    {
      const grpo::ForceKernelPath force(grpo::KernelPath::generic);
      lp = grpo::token_log_probs(x, ids, {.temperature = 0.8, .with_entropy = true}).log_probs;
      if (backward_under_guard) lp.sum().backward();
    }
    if (!backward_under_guard) lp.sum().backward();
    return x.grad();
  };
  GRPO_REQUIRE_CLOSE(gradient(false), gradient(true), 0.0, 0.0);
  REQUIRE_THROWS_WITH(grpo::token_log_probs(base, ids.to(torch::Device(torch::kMeta))),
                      Catch::Contains("ids is on meta but logits is on cpu"));
}

TEST_CASE("token_log_probs generic path over several chunks (whole sequences, parts of one) equals the CPU kernels",
          "[logprob][generic]") {
  // V = 32768 gives 1024 float32 rows per 128 MiB chunk: [1, 1030, V] is cut inside its sequence, [3, 350, V] into
  // chunks of two whole sequences (bfloat16 logits, about 70 MB each).
  torch::manual_seed(9);
  const int64_t vocab = 32768;
  for (const auto& [batch, time] : {std::pair<int64_t, int64_t>{1, 1030}, std::pair<int64_t, int64_t>{3, 350}}) {
    INFO("[" << batch << ", " << time << ", " << vocab << "]");
    const auto logits = (torch::randn({batch, time, vocab}) * 3).to(torch::kBFloat16);
    const auto ids = torch::randint(0, vocab, {batch, time}, torch::kInt64);
    auto g = torch::randn({batch, time});
    auto g_h = torch::randn({batch, time});
    g.select(1, time - 1).zero_();  // masked last tokens
    g_h.select(1, time - 1).zero_();
    auto run = [&](grpo::KernelPath path) {
      const grpo::ForceKernelPath force(path);
      auto x = logits.clone().requires_grad_(true);
      auto out = grpo::token_log_probs(x, ids, {.temperature = 0.9, .with_entropy = true});
      ((out.log_probs * g).sum() + (out.entropy * g_h).sum()).backward();
      return std::vector<torch::Tensor>{out.log_probs, out.entropy, x.grad().to(torch::kFloat32)};
    };
    const auto cpu = run(grpo::KernelPath::cpu), generic = run(grpo::KernelPath::generic);
    GRPO_REQUIRE_CLOSE(generic[0], cpu[0], 1e-5, 1e-5);
    GRPO_REQUIRE_CLOSE(generic[1], cpu[1], 1e-5, 1e-5);
    // bfloat16 gradients (one rounding of values that agree to float32 rounding), compared without a float64 copy.
    REQUIRE((generic[2] - cpu[2]).abs_().le_(cpu[2].abs() * 1e-2 + 1e-5).all().item<bool>());
    REQUIRE(generic[2].select(1, time - 1).abs().max().item<float>() == 0.0f);
  }
}
