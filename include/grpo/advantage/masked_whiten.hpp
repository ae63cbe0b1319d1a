// SPDX-License-Identifier: Apache-2.0
// verl's masked_whiten (volcengine/verl b178a3c, verl/utils/torch_functional.py, shift_mean=True), the one whitening
// rule of the batch-level estimators (REINFORCE++ and REINFORCE++-baseline):
//
//   N = Σ w,   mean = Σ w·x / (N + 1e-8),   var = Σ w·(x − mean)² / (N + 1e-8) · N / (N − 1),
//   whitened = (x − mean) · rsqrt(var + eps)
//
// w is verl's response mask (0/1 per token) or, for a value that is constant over a sequence's tokens, the sequence's
// token count (the same sums). verl raises when N ≤ 1; here the variance is 0 there.
//
// verl whitens the whole batch on its driver. Data-parallel ranks that each hold a share of the batch pass a BatchSum
// (the trainer's all-reduce): the three sums are then over every rank's entries, and each rank's result equals the
// single-process one on the whole batch (to the rounding of the summation order).
#pragma once

#include <grpo/core/error.hpp>
#include <grpo/core/tensor_checks.hpp>

#include <torch/torch.h>

#include <functional>

namespace grpo {

/// Sums a (small, float64, CPU) tensor in place over the processes that share one batch, each holding a share of its
/// rows: a data-parallel all-reduce (train::ProcessGroup::all_reduce_). Empty: this process holds the whole batch.
/// Every process must make the same calls in the same order.
using BatchSum = std::function<void(torch::Tensor&)>;

/// x and weights of one shape (any; a share with no entries joins the sums with zeros), floating; returns x whitened
/// as above in float64 (every entry, weighted or not: multiply by a mask to zero the others). eps > 0: the variance
/// floor (verl 1e-8). batch_sum: see BatchSum.
inline torch::Tensor masked_whiten(const torch::Tensor& x, const torch::Tensor& weights, double eps = 1e-8,
                                   const BatchSum& batch_sum = {}) {
  detail::check_same_shape(x, "x", weights, "weights", "masked_whiten");
  const torch::Tensor v = x.detach().to(torch::kFloat64), w = weights.detach().to(torch::kFloat64);
  torch::Tensor sums = torch::stack({w.sum(), (v * w).sum()}).to(torch::kCPU);
  if (batch_sum) batch_sum(sums);
  const double n = sums[0].item<double>();
  const torch::Tensor mean = sums[1].to(v.device()) / (n + 1e-8);
  const torch::Tensor centered = v - mean;
  torch::Tensor squares = (centered * centered * w).sum().reshape({1}).to(torch::kCPU);
  if (batch_sum) batch_sum(squares);
  torch::Tensor var = squares[0].to(v.device()) / (n + 1e-8);
  var = n > 1.0 ? var * (n / (n - 1.0)) : torch::zeros_like(var);
  return centered * torch::rsqrt(var + eps);
}

}  // namespace grpo
