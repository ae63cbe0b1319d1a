// SPDX-License-Identifier: Apache-2.0
// Private: tensor-level wrappers of the row kernels, shared by token_log_probs and linear_token_log_probs.
#pragma once

#include "row_kernels.hpp"

#include <torch/torch.h>

#include <cstdint>
#include <functional>

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

/// Rows per task: about 32 K logits.
int64_t row_grain(int64_t vocab);

/// fn(begin, end) over [0, n) split into at most at::get_num_threads() contiguous ranges of at least `grain`, the
/// first on the calling thread, the others on std::threads. Why not at::parallel_for: in LibTorch 1.13 it is an
/// inline template that only runs in parallel when the calling translation unit is compiled with -fopenmp (it
/// expands to `#pragma omp parallel`), which this library is not (and should not force on its users); without it
/// every call silently runs on one thread. Thread start-up (~20 µs) is negligible against the ≥ 32 K-element tasks
/// this is used for. fn must not throw.
void parallel_ranges(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

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
