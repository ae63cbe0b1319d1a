// SPDX-License-Identifier: Apache-2.0
// Test helpers: tensor comparison that reports where tensors differ, and double-precision finite differences.
#pragma once

#include <grpo/core/tensor_checks.hpp>

#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <functional>
#include <sstream>
#include <string>

namespace grpo::testing {

/// Describes the worst element of |actual − expected| > atol + rtol·|expected|, or "" when all are close.
/// NaNs compare equal only to NaNs; infinities only to the same infinity.
std::string tensor_mismatch(const torch::Tensor& actual, const torch::Tensor& expected, double rtol, double atol);

/// Catch2 check: tensors have the same shape and are elementwise close.
#define GRPO_REQUIRE_CLOSE(actual, expected, rtol, atol)                                          \
  do {                                                                                            \
    const std::string grpo_mismatch_ = ::grpo::testing::tensor_mismatch((actual), (expected), (rtol), (atol)); \
    INFO(grpo_mismatch_);                                                                         \
    REQUIRE(grpo_mismatch_.empty());                                                              \
  } while (false)

/// Central finite differences of the scalar function f at x (any shape), in float64:
/// grad[i] = (f(x + h·e_i) − f(x − h·e_i)) / 2h. x must be float64.
torch::Tensor finite_difference_grad(const std::function<torch::Tensor(const torch::Tensor&)>& f,
                                     const torch::Tensor& x, double h = 1e-6);

/// Autograd gradient of the scalar function f at x (float64); zeros when f does not depend on x.
torch::Tensor autograd_grad(const std::function<torch::Tensor(const torch::Tensor&)>& f, const torch::Tensor& x);

}  // namespace grpo::testing
