// SPDX-License-Identifier: Apache-2.0
#include <grpo/logprob/linear_log_probs.hpp>

#include <catch2/catch.hpp>
#include <support/kernel_path_testing.hpp>
#include <support/tensor_testing.hpp>

#include <cmath>

using grpo::testing::autograd_grad;
using grpo::testing::finite_difference_grad;

namespace {

/// log softmax(h·Wᵀ/temperature)[y] and the entropy per row, by plain double loops (logits never formed as a tensor).
struct Expected {
  torch::Tensor log_probs, entropy, sum_pi_squared;
};
Expected by_hand(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& ids,
                 double temperature) {
  auto h = hidden.to(torch::kFloat64).contiguous();
  auto w = weight.to(torch::kFloat64).contiguous();
  const int64_t n = h.size(0), dim = h.size(1), vocab = w.size(0);
  const double* hp = h.data_ptr<double>();
  const double* wp = w.data_ptr<double>();
  Expected e{torch::empty({n}, torch::kFloat64), torch::empty({n}, torch::kFloat64), torch::empty({n}, torch::kFloat64)};
  std::vector<double> z(static_cast<size_t>(vocab));
  for (int64_t r = 0; r < n; ++r) {
    double m = -INFINITY;
    for (int64_t v = 0; v < vocab; ++v) {
      double dot = 0;
      for (int64_t k = 0; k < dim; ++k) dot += hp[r * dim + k] * wp[v * dim + k];
      z[v] = dot / temperature;
      m = std::max(m, z[v]);
    }
    double s = 0;
    for (int64_t v = 0; v < vocab; ++v) s += std::exp(z[v] - m);
    const double lse = m + std::log(s);
    double ent = 0, squares = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      ent -= std::exp(z[v] - lse) * (z[v] - lse);
      squares += std::exp(z[v] - lse) * std::exp(z[v] - lse);
    }
    e.sum_pi_squared[r] = squares;
    e.log_probs[r] = z[ids[r].item<int64_t>()] - lse;
    e.entropy[r] = ent;
  }
  return e;
}

}  // namespace

TEST_CASE("linear_token_log_probs matches a double loop for any chunk size, temperature and odd V", "[logprob][linear]") {
  GRPO_FOR_EACH_KERNEL_PATH();
  torch::manual_seed(11);
  // V = 37 and H = 5 are not multiples of any vector width; N = 7 is not a multiple of the chunks 2 and 3.
  auto hidden = torch::randn({7, 5}, torch::kFloat64);
  auto weight = torch::randn({37, 5}, torch::kFloat64);
  auto ids = torch::randint(0, 37, {7}, torch::kInt64);
  for (double temperature : {1.0, 0.7}) {
    auto expected = by_hand(hidden, weight, ids, temperature);
    for (int64_t chunk : {0, 1, 2, 3, 100}) {
      auto out = grpo::linear_token_log_probs(hidden, weight, ids,
                                              {.temperature = temperature, .chunk_rows = chunk, .with_entropy = true});
      REQUIRE(out.log_probs.scalar_type() == torch::kFloat64);
      GRPO_REQUIRE_CLOSE(out.log_probs, expected.log_probs, 1e-12, 1e-12);
      GRPO_REQUIRE_CLOSE(out.entropy, expected.entropy, 1e-12, 1e-12);
    }
  }
  // [B, T, H] input gives [B, T] results.
  auto out = grpo::linear_token_log_probs(hidden.narrow(0, 0, 6).view({2, 3, 5}), weight, ids.narrow(0, 0, 6).view({2, 3}));
  GRPO_REQUIRE_CLOSE(out.log_probs, by_hand(hidden, weight, ids, 1.0).log_probs.narrow(0, 0, 6).view({2, 3}), 1e-12,
                     1e-12);
}

TEST_CASE("linear_token_log_probs: Σ softmax² per row equals a double loop, and asking for it changes no gradient",
          "[logprob][linear]") {
  GRPO_FOR_EACH_KERNEL_PATH();
  torch::manual_seed(12);
  auto hidden = torch::randn({7, 5}, torch::kFloat64).mul(3.0);
  auto weight = torch::randn({37, 5}, torch::kFloat64);
  auto ids = torch::randint(0, 37, {7}, torch::kInt64);
  for (const bool entropy : {false, true}) {
    for (int64_t chunk : {0, 2, 3}) {
      const auto expected = by_hand(hidden, weight, ids, 0.7);
      const auto out = grpo::linear_token_log_probs(
          hidden, weight, ids, {.temperature = 0.7, .chunk_rows = chunk, .with_entropy = entropy, .with_sum_pi_squared = true});
      GRPO_REQUIRE_CLOSE(out.sum_pi_squared, expected.sum_pi_squared, 1e-12, 1e-12);
      GRPO_REQUIRE_CLOSE(out.log_probs, expected.log_probs, 1e-12, 1e-12);
      if (entropy) GRPO_REQUIRE_CLOSE(out.entropy, expected.entropy, 1e-12, 1e-12);
    }
  }
  // float32: computed in float32 from each chunk, within float rounding of the float64 loop.
  const auto f32 = grpo::linear_token_log_probs(hidden.to(torch::kFloat32), weight.to(torch::kFloat32), ids,
                                                {.chunk_rows = 3, .with_sum_pi_squared = true});
  GRPO_REQUIRE_CLOSE(f32.sum_pi_squared.to(torch::kFloat64), by_hand(hidden, weight, ids, 1.0).sum_pi_squared, 1e-5,
                     1e-6);
  // The same gradients with and without it (it has none of its own).
  auto grads = [&](bool with_squares) {
    auto h = hidden.clone().requires_grad_(true);
    auto out = grpo::linear_token_log_probs(h, weight, ids, {.chunk_rows = 2, .with_sum_pi_squared = with_squares});
    CHECK(!(with_squares && out.sum_pi_squared.requires_grad()));
    out.log_probs.sum().backward();
    return h.grad();
  };
  GRPO_REQUIRE_CLOSE(grads(true), grads(false), 0.0, 0.0);
}

TEST_CASE("linear_token_log_probs gradients (hidden and weight) equal finite differences in float64",
          "[logprob][linear][gradient]") {
  GRPO_FOR_EACH_KERNEL_PATH();
  torch::manual_seed(12);
  auto hidden = torch::randn({5, 4}, torch::kFloat64);
  auto weight = torch::randn({19, 4}, torch::kFloat64);
  auto ids = torch::randint(0, 19, {5}, torch::kInt64);
  auto w_lp = torch::randn({5}, torch::kFloat64);
  auto w_h = torch::randn({5}, torch::kFloat64);
  w_lp[2] = 0.0;  // a masked token: its rows take the zero-gradient path
  w_h[2] = 0.0;
  for (double temperature : {1.0, 0.6}) {
    for (bool entropy : {false, true}) {
      auto loss = [&](const torch::Tensor& h, const torch::Tensor& w) {
        auto out = grpo::linear_token_log_probs(
            h, w, ids, {.temperature = temperature, .chunk_rows = 2, .with_entropy = entropy});
        auto total = (out.log_probs * w_lp).sum();
        return entropy ? total + (out.entropy * w_h).sum() : total;
      };
      auto f_h = [&](const torch::Tensor& h) { return loss(h, weight); };
      auto f_w = [&](const torch::Tensor& w) { return loss(hidden, w); };
      GRPO_REQUIRE_CLOSE(autograd_grad(f_h, hidden), finite_difference_grad(f_h, hidden), 1e-6, 1e-8);
      GRPO_REQUIRE_CLOSE(autograd_grad(f_w, weight), finite_difference_grad(f_w, weight), 1e-6, 1e-8);
    }
  }
}

TEST_CASE("linear_token_log_probs in float32 is within 1e-4 of float64 in values and gradients", "[logprob][linear]") {
  GRPO_FOR_EACH_KERNEL_PATH();
  torch::manual_seed(13);
  // V = 1003 (not a multiple of 16), N = 45 with chunks of 16 (last chunk partial), scale giving logits of a few units.
  auto hidden = torch::randn({45, 32}, torch::kFloat64);
  auto weight = torch::randn({1003, 32}, torch::kFloat64) * 0.4;
  auto ids = torch::randint(0, 1003, {45}, torch::kInt64);
  auto g = torch::randn({45}, torch::kFloat64);
  auto g_h = torch::randn({45}, torch::kFloat64);
  g.narrow(0, 16, 16).zero_();  // one whole masked chunk: its GEMMs are skipped
  g_h.narrow(0, 16, 16).zero_();
  const grpo::LinearLogProbOptions options{.temperature = 0.8, .chunk_rows = 16, .with_entropy = true};
  auto run = [&](torch::ScalarType dtype) {
    auto h = hidden.to(dtype).requires_grad_(true);
    auto w = weight.to(dtype).requires_grad_(true);
    auto out = grpo::linear_token_log_probs(h, w, ids, options);
    ((out.log_probs * g.to(dtype)).sum() + (out.entropy * g_h.to(dtype)).sum()).backward();
    return std::vector<torch::Tensor>{out.log_probs.to(torch::kFloat64), out.entropy.to(torch::kFloat64),
                                      h.grad().to(torch::kFloat64), w.grad().to(torch::kFloat64)};
  };
  auto f32 = run(torch::kFloat32);
  auto f64 = run(torch::kFloat64);
  auto expected = by_hand(hidden, weight, ids, 0.8);
  GRPO_REQUIRE_CLOSE(f64[0], expected.log_probs, 1e-12, 1e-12);
  GRPO_REQUIRE_CLOSE(f32[0], f64[0], 1e-4, 1e-4);
  GRPO_REQUIRE_CLOSE(f32[1], f64[1], 1e-4, 1e-4);
  GRPO_REQUIRE_CLOSE(f32[2], f64[2], 1e-4, 1e-5);
  GRPO_REQUIRE_CLOSE(f32[3], f64[3], 1e-4, 1e-5);
  REQUIRE(f64[2].narrow(0, 16, 16).abs().max().item<double>() == 0.0);
}

TEST_CASE("linear_token_log_probs no-grad pass, bfloat16 inputs and huge logits", "[logprob][linear][edge]") {
  GRPO_FOR_EACH_KERNEL_PATH();
  torch::manual_seed(14);
  auto hidden = torch::randn({6, 8}).requires_grad_(true);
  auto weight = torch::randn({50, 8}).requires_grad_(true);
  auto ids = torch::randint(0, 50, {6}, torch::kInt64);
  auto with_grad = grpo::linear_token_log_probs(hidden, weight, ids);
  {
    torch::NoGradGuard no_grad;
    auto ref = grpo::linear_token_log_probs(hidden, weight, ids);
    REQUIRE_FALSE(ref.log_probs.requires_grad());
    GRPO_REQUIRE_CLOSE(ref.log_probs, with_grad.log_probs.detach(), 0.0, 0.0);
  }
  auto bf16 = grpo::linear_token_log_probs(hidden.detach().to(torch::kBFloat16), weight.detach().to(torch::kBFloat16), ids);
  REQUIRE(bf16.log_probs.scalar_type() == torch::kFloat32);
  // The bf16 GEMM rounds the logits to 8 bits of mantissa: agreement to bf16 precision.
  GRPO_REQUIRE_CLOSE(bf16.log_probs, with_grad.log_probs.detach(), 0.05, 0.1);

  // Logits of ±1e4: finite log-probs (−2e4 for the far token) and finite gradients.
  auto h = torch::tensor({{100.0f}, {-100.0f}}).requires_grad_(true);
  auto w = torch::tensor({{100.0f}, {-100.0f}, {0.0f}}).requires_grad_(true);
  auto out = grpo::linear_token_log_probs(h, w, torch::tensor({1, 1}, torch::kInt64), {.with_entropy = true});
  REQUIRE(out.log_probs[0].item<float>() == Approx(-2e4));
  REQUIRE(out.log_probs[1].item<float>() == Approx(0.0).margin(1e-6));
  (out.log_probs.sum() + out.entropy.sum()).backward();
  REQUIRE(torch::isfinite(h.grad()).all().item<bool>());
  REQUIRE(torch::isfinite(w.grad()).all().item<bool>());
}

TEST_CASE("linear_token_log_probs rejects bad arguments with messages naming them", "[logprob][linear][errors]") {
  GRPO_FOR_EACH_KERNEL_PATH();
  auto hidden = torch::zeros({2, 3, 4});
  auto weight = torch::zeros({10, 4});
  auto ids = torch::zeros({2, 3}, torch::kInt64);
  REQUIRE_THROWS_WITH(grpo::linear_token_log_probs(hidden, torch::zeros({10, 5}), ids),
                      Catch::Contains("weight must be [V, H] with H = 4") && Catch::Contains("[10, 5]"));
  REQUIRE_THROWS_WITH(grpo::linear_token_log_probs(hidden, weight, torch::zeros({2, 4}, torch::kInt64)),
                      Catch::Contains("ids must have the leading shape of hidden [2, 3, 4]"));
  REQUIRE_THROWS_WITH(grpo::linear_token_log_probs(hidden, weight.to(torch::kFloat64), ids),
                      Catch::Contains("weight dtype Double differs from hidden dtype Float"));
  REQUIRE_THROWS_WITH(grpo::linear_token_log_probs(hidden, weight.to(torch::Device(torch::kMeta)), ids),
                      Catch::Contains("weight is on meta but hidden is on cpu"));
  ids[1][1] = 10;
  REQUIRE_THROWS_WITH(grpo::linear_token_log_probs(hidden, weight, ids),
                      Catch::Contains("ids[1, 1] = 10 is outside the vocabulary [0, 10)"));
  REQUIRE_THROWS_WITH(grpo::linear_token_log_probs(torch::zeros({4}), weight, torch::zeros({}, torch::kInt64)),
                      Catch::Contains("hidden must be [B, T, H] or [N, H], got shape [4]"));
  REQUIRE_THROWS_WITH(grpo::linear_token_log_probs(hidden, weight, torch::zeros({2, 3}, torch::kInt64),
                                                   {.temperature = -1.0}),
                      Catch::Contains("temperature must be > 0"));
}

TEST_CASE("linear_token_log_probs generic path equals the CPU kernels in values and gradients for every dtype",
          "[logprob][linear][generic]") {
  // N = 45 in chunks of 16 (the last partial), one whole masked chunk, V = 1003, temperature 0.8, entropy and
  // Σ softmax²; float64, float32 and bfloat16 hidden states and weight.
  torch::manual_seed(15);
  auto hidden = torch::randn({45, 32}, torch::kFloat64);
  auto weight = torch::randn({1003, 32}, torch::kFloat64) * 0.4;
  auto ids = torch::randint(0, 1003, {45}, torch::kInt64);
  auto g = torch::randn({45}, torch::kFloat64);
  auto g_h = torch::randn({45}, torch::kFloat64);
  g.narrow(0, 16, 16).zero_();
  g_h.narrow(0, 16, 16).zero_();
  const grpo::LinearLogProbOptions options{
      .temperature = 0.8, .chunk_rows = 16, .with_entropy = true, .with_sum_pi_squared = true};
  for (auto dtype : {torch::kFloat64, torch::kFloat32, torch::kBFloat16}) {
    INFO(c10::toString(dtype));
    const auto out_dtype = dtype == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
    auto run = [&](grpo::KernelPath path) {
      const grpo::ForceKernelPath force(path);
      auto h = hidden.to(dtype).detach().requires_grad_(true);
      auto w = weight.to(dtype).detach().requires_grad_(true);
      auto out = grpo::linear_token_log_probs(h, w, ids, options);
      ((out.log_probs * g.to(out_dtype)).sum() + (out.entropy * g_h.to(out_dtype)).sum()).backward();
      return std::vector<torch::Tensor>{out.log_probs, out.entropy, out.sum_pi_squared,
                                        h.grad().to(torch::kFloat64), w.grad().to(torch::kFloat64)};
    };
    const auto cpu = run(grpo::KernelPath::cpu), generic = run(grpo::KernelPath::generic);
    const double tol = dtype == torch::kFloat64 ? 1e-12 : 1e-5;
    for (size_t i = 0; i < 3; ++i) {
      REQUIRE(generic[i].scalar_type() == out_dtype);
      GRPO_REQUIRE_CLOSE(generic[i], cpu[i], tol, tol);
    }
    // bfloat16: each chunk's ∂loss/∂logits is rounded to bfloat16 before the gradient GEMMs.
    const double grad_tol = dtype == torch::kBFloat16 ? 2e-2 : tol;
    GRPO_REQUIRE_CLOSE(generic[3], cpu[3], grad_tol, grad_tol);
    GRPO_REQUIRE_CLOSE(generic[4], cpu[4], grad_tol, grad_tol);
    REQUIRE(generic[3].narrow(0, 16, 16).abs().max().item<double>() == 0.0);
  }
}
