// SPDX-License-Identifier: Apache-2.0
// Private: tensor-level wrappers of the row kernels, shared by token_log_probs, linear_token_log_probs and
// FusedGrpoLoss: on KernelPath::cpu the raw-pointer row kernels (row_kernels.hpp), on KernelPath::generic the same
// formulas as LibTorch operations over chunks of rows (any device).
#pragma once

#include "../core/parallel_ranges.hpp"
#include "row_kernels.hpp"

#include <grpo/core/error.hpp>
#include <grpo/logprob/kernel_path.hpp>

#include <torch/torch.h>

#include <cstdint>

namespace grpo::detail {

/// float64 for float64 logits, float32 for everything else (half-precision logits are computed in float32).
inline torch::ScalarType log_prob_compute_dtype(const torch::Tensor& logits) {
  return logits.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
}

/// Throws grpo::Error unless ids is int64 with every value in [0, vocab), naming the first bad index.
void check_token_ids(const torch::Tensor& ids, int64_t vocab, const char* what);

/// Throws grpo::Error unless `t` is on the device of `like`, naming both and their devices.
inline void check_same_device(const torch::Tensor& t, const char* name, const torch::Tensor& like,
                              const char* like_name, const char* what) {
  GRPO_CHECK(t.device() == like.device(), "{}: {} is on {} but {} is on {}", what, name, t.device().str(), like_name,
             like.device().str());
}

/// A [B, T, V] tensor (last dimension contiguous) seen as B·T rows.
struct LogitsRows {
  int64_t rows = 0;
  RowLayout layout;
};
LogitsRows view_logits_rows(const torch::Tensor& logits);

/// Logits per chunk of the chunked passes, in bytes: linear_token_log_probs' GEMM chunks (of the inputs' dtype)
/// and the generic row path's chunks (of the compute dtype).
inline constexpr int64_t kLogitChunkBytes = int64_t{128} << 20;

/// Rows per task: about 32 K logits.
int64_t row_grain(int64_t vocab);

/// Per-row results of the forward kernel, [B·T] in the compute dtype; entropy undefined unless requested.
struct RowStats {
  torch::Tensor log_probs, lse, entropy;
};

/// The forward of every row of logits [B, T, V] (last dim contiguous) with ids [B, T] int64 (same device), on
/// `path` (cpu or generic, as resolve_kernel_path gave it): cpu runs row_forward in parallel over rows; generic
/// computes z = logits / temperature in the compute dtype, logsumexp, the gathered target and the entropy per chunk
/// of about kLogitChunkBytes of z (never the whole [B, T, V] log-softmax).
RowStats rows_forward(const torch::Tensor& logits, const torch::Tensor& ids, double temperature, bool with_entropy,
                      KernelPath path);

/// The backward of every row (row_backward's formula, softmax recomputed from stats.lse), writing into grad
/// ([B, T, V] like logits, last dim contiguous; may be logits itself: each chunk is read before it is written), on
/// `path` as rows_forward. grad_log_probs / grad_entropy: [B, T] or [B·T], either may be undefined.
void rows_backward(const torch::Tensor& logits, const torch::Tensor& ids, const RowStats& stats,
                   const torch::Tensor& grad_log_probs, const torch::Tensor& grad_entropy, double temperature,
                   const torch::Tensor& grad, KernelPath path);

}  // namespace grpo::detail
