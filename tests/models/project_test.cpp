// SPDX-License-Identifier: Apache-2.0
#include <grpo/core/error.hpp>
#include <grpo/models/cpu_kernels.hpp>
#include <grpo/models/project.hpp>

#include <catch2/catch.hpp>
#include <support/kernel_path_testing.hpp>
#include <support/tensor_testing.hpp>

using grpo::models::project;

namespace {

/// |y − (x·wᵀ + b)| allowed for bf16 y: `roundings` roundings of the result to bf16 (each at most 2^-8 of the value
/// rounded, bounded here by Σ|x·w| + |b|) and fp32 sums (2^-20 of Σ|x·w| covers up to a thousand terms).
torch::Tensor tolerance(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b, int roundings) {
  const auto magnitude = torch::mm(x.abs(), w.abs().t());
  const auto bias = b.defined() ? b.abs().unsqueeze(0) : torch::zeros({1, w.size(0)}, torch::kFloat64);
  return roundings * std::ldexp(1.0, -8) * (magnitude + bias) + std::ldexp(1.0, -20) * magnitude;
}

void require_within(const torch::Tensor& actual, const torch::Tensor& expected, const torch::Tensor& allowed) {
  const auto excess = ((actual - expected).abs() - allowed).max().item<double>();
  INFO("largest error beyond the allowed one: " << excess);
  REQUIRE(excess <= 0.0);
}

}  // namespace

TEST_CASE("project equals x·wᵀ + b within bf16 rounding for every row count around the few-rows kernel's range",
          "[models][project]") {
  GRPO_FOR_EACH_KERNEL_PATH();
  if (!grpo::models::avx512_bf16_kernels_available()) WARN("no AVX512-BF16 here: both paths run LibTorch's product");
  torch::manual_seed(11);
  for (int64_t rows : {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17}) {
    for (int64_t in : {1, 31, 32, 33, 100}) {
      for (int64_t out : {1, 3, 4, 5, 9}) {
        for (bool with_bias : {false, true}) {
          INFO("rows " << rows << ", in " << in << ", out " << out << ", bias " << with_bias);
          const auto x = torch::randn({rows, in}).to(torch::kBFloat16);
          const auto w = torch::randn({out, in}).to(torch::kBFloat16);
          const auto b = with_bias ? torch::randn({out}).to(torch::kBFloat16) : torch::Tensor();
          torch::NoGradGuard no_grad;
          const auto y = project(x, w, b);
          REQUIRE(y.scalar_type() == torch::kBFloat16);
          REQUIRE(y.sizes() == torch::IntArrayRef({rows, out}));
          const auto x64 = x.to(torch::kFloat64), w64 = w.to(torch::kFloat64);
          const auto b64 = with_bias ? b.to(torch::kFloat64) : torch::Tensor();
          auto expected = torch::mm(x64, w64.t());
          if (with_bias) expected = expected + b64;
          // The few-rows kernel adds the bias in fp32 and rounds once; LibTorch's product rounds, then the sum.
          const bool one_rounding = grpo_kernel_path_ == grpo::KernelPath::cpu && rows <= grpo::models::kFewRows &&
                                    grpo::models::avx512_bf16_kernels_available();
          require_within(y.to(torch::kFloat64), expected, tolerance(x64, w64, b64, one_rounding ? 1 : 2));
        }
      }
    }
  }
}

TEST_CASE("project reads strided operands and keeps the input's leading dimensions", "[models][project]") {
  GRPO_FOR_EACH_KERNEL_PATH();
  torch::manual_seed(12);
  torch::NoGradGuard no_grad;
  // x [2, 3, 40] as a transposed view, w [6, 40] as a column slice of a wider matrix (row stride 50)
  const auto x = torch::randn({2, 40, 3}).to(torch::kBFloat16).transpose(1, 2);
  const auto w = torch::randn({6, 50}).to(torch::kBFloat16).narrow(1, 5, 40);
  const auto b = torch::randn({6}).to(torch::kBFloat16);
  const auto y = project(x, w, b);
  REQUIRE(y.sizes() == torch::IntArrayRef({2, 3, 6}));
  const auto x64 = x.to(torch::kFloat64).reshape({6, 40}), w64 = w.to(torch::kFloat64), b64 = b.to(torch::kFloat64);
  require_within(y.to(torch::kFloat64).reshape({6, 6}), torch::mm(x64, w64.t()) + b64, tolerance(x64, w64, b64, 2));
}

TEST_CASE("project under autograd differentiates a few bf16 rows (LibTorch's product), in fp32 and fp64 too",
          "[models][project]") {
  torch::manual_seed(13);
  for (auto dtype : {torch::kBFloat16, torch::kFloat32, torch::kFloat64}) {
    INFO(c10::toString(dtype));
    const auto x = torch::randn({4, 24}).to(dtype).requires_grad_(true);
    const auto w = torch::randn({5, 24}).to(dtype).requires_grad_(true);
    const auto weights = torch::randn({4, 5}, torch::kFloat64);
    (project(x, w).to(torch::kFloat64) * weights).sum().backward();
    const auto x64 = x.detach().to(torch::kFloat64), w64 = w.detach().to(torch::kFloat64);
    const double rtol = dtype == torch::kBFloat16 ? 2e-2 : 1e-5;
    GRPO_REQUIRE_CLOSE(x.grad().to(torch::kFloat64), torch::mm(weights, w64), rtol, rtol);
    GRPO_REQUIRE_CLOSE(w.grad().to(torch::kFloat64), torch::mm(weights.t(), x64), rtol, rtol);
  }
}

TEST_CASE("project names the shapes that do not fit", "[models][project]") {
  REQUIRE_THROWS_WITH(project(torch::zeros({3, 7}), torch::zeros({4, 8})),
                      Catch::Contains("got input [3, 7] and weight [4, 8]"));
}
