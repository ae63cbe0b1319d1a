// SPDX-License-Identifier: Apache-2.0
// verl's masked_whiten (volcengine/verl b178a3c, verl/utils/torch_functional.py, shift_mean=True), the one whitening
// rule of the batch-level estimators (REINFORCE++ and REINFORCE++-baseline):
//
//   N = Σ w,   mean = Σ w·x / (N + 1e-8),   var = Σ w·(x − mean)² / (N + 1e-8) · N / (N − 1),
//   whitened = (x − mean) · rsqrt(var + eps)
//
// w is verl's response mask (0/1 per token) or, for a value that is constant over a sequence's tokens, the sequence's
// token count (the same sums). verl raises when N ≤ 1; here the variance is 0 there.
#pragma once

#include <grpo/core/error.hpp>
#include <grpo/core/tensor_checks.hpp>

#include <torch/torch.h>

namespace grpo {

/// x and weights of one shape (any), floating; returns x whitened as above in float64 (every entry, weighted or
/// not: multiply by a mask to zero the others). eps > 0: the variance floor (verl 1e-8).
inline torch::Tensor masked_whiten(const torch::Tensor& x, const torch::Tensor& weights, double eps = 1e-8) {
  detail::check_same_shape(x, "x", weights, "weights", "masked_whiten");
  const torch::Tensor v = x.detach().to(torch::kFloat64), w = weights.detach().to(torch::kFloat64);
  const double n = w.sum().item<double>();
  const torch::Tensor mean = (v * w).sum() / (n + 1e-8);
  const torch::Tensor centered = v - mean;
  torch::Tensor var = (centered * centered * w).sum() / (n + 1e-8);
  var = n > 1.0 ? var * (n / (n - 1.0)) : torch::zeros_like(var);
  return centered * torch::rsqrt(var + eps);
}

}  // namespace grpo
