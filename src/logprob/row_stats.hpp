// SPDX-License-Identifier: Apache-2.0
// Private: tensor-level wrappers of the row kernels, shared by token_log_probs and linear_token_log_probs.
#pragma once

#include "row_kernels.hpp"

#include <torch/torch.h>

#include <cstdint>

namespace grpo::detail {

/// float64 for float64 logits, float32 for everything else (half-precision logits are computed in float32).
inline torch::ScalarType log_prob_compute_dtype(const torch::Tensor& logits) {
  return logits.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
}

/// Throws grpo::Error unless ids is int64 with every value in [0, vocab), naming the first bad index.
void check_token_ids(const torch::Tensor& ids, int64_t vocab, const char* what);

/// A [B, T, V] tensor (last dimension contiguous) seen as B·T rows.
struct LogitsRows {
  int64_t rows = 0;
  RowLayout layout;
};
LogitsRows view_logits_rows(const torch::Tensor& logits);

/// at::parallel_for grain: about 32 K logits per task.
int64_t row_grain(int64_t vocab);

/// Per-row results of the forward kernel, [B·T] in the compute dtype; entropy undefined unless requested.
struct RowStats {
  torch::Tensor log_probs, lse, entropy;
};

/// Runs row_forward over logits [B, T, V] (last dim contiguous) and ids [B, T] int64, in parallel over rows.
RowStats rows_forward(const torch::Tensor& logits, const torch::Tensor& ids, double temperature, bool with_entropy);

/// Runs row_backward, writing into grad ([B, T, V] like logits, last dim contiguous; may be logits itself).
/// grad_log_probs / grad_entropy: [B, T] or [B·T], either may be undefined.
void rows_backward(const torch::Tensor& logits, const torch::Tensor& ids, const RowStats& stats,
                   const torch::Tensor& grad_log_probs, const torch::Tensor& grad_entropy, double temperature,
                   const torch::Tensor& grad);

}  // namespace grpo::detail
