// SPDX-License-Identifier: Apache-2.0
// Private: the per-row kernels behind token_log_probs and linear_token_log_probs. One pass over each row of logits
// computes the online max and Σ exp, the target logit and (optionally) Σ p·log p; the backward pass writes
// g·(onehot − softmax)/temperature (plus the entropy term) into a gradient buffer, which may be the logits
// themselves. See row_kernels.cpp for the vectorisation and the CPU dispatch.
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>

namespace grpo::detail {

/// Where row r of a [B, T, V] tensor starts: (r / rows_per_batch)·batch_stride + (r % rows_per_batch)·row_stride
/// elements from the data pointer; elements of a row are contiguous.
struct RowLayout {
  int64_t rows_per_batch = 1;
  int64_t batch_stride = 0;
  int64_t row_stride = 0;
  int64_t offset(int64_t row) const { return (row / rows_per_batch) * batch_stride + (row % rows_per_batch) * row_stride; }
};

/// Forward of rows [begin, end). logits of dtype `dtype` (float, double, bfloat16, half); ids int64 in [0, vocab).
/// Outputs are contiguous arrays of the compute type (double for double logits, float otherwise), indexed by row:
/// lse = logsumexp(z), log_probs = z[id] − lse, entropy = −Σ softmax(z)·log softmax(z) (skipped when null),
/// where z = logits · inv_temperature.
struct RowForwardArgs {
  const void* logits = nullptr;
  c10::ScalarType dtype = c10::ScalarType::Float;
  RowLayout layout;
  int64_t vocab = 0;
  const int64_t* ids = nullptr;
  double inv_temperature = 1.0;
  void* lse = nullptr;
  void* log_probs = nullptr;
  void* entropy = nullptr;
};

/// Backward of rows [begin, end): grad[v] = [g_lp·(1[v = id] − p_v) − g_h·p_v·(log p_v + H)] · inv_temperature,
/// p = exp(z − lse), written in the logits' dtype at `grad` with `grad_layout` (which may alias the logits: each
/// element is read before it is written). g_lp, g_h, entropy: compute-type arrays per row, g_h/entropy null when
/// the entropy has no gradient, g_lp null when only the entropy has one. Rows whose gradients are both zero (masked
/// tokens) are written as zeros without touching the logits.
struct RowBackwardArgs {
  const void* logits = nullptr;
  c10::ScalarType dtype = c10::ScalarType::Float;
  RowLayout layout;
  int64_t vocab = 0;
  const int64_t* ids = nullptr;
  double inv_temperature = 1.0;
  const void* lse = nullptr;
  const void* entropy = nullptr;
  const void* grad_log_probs = nullptr;
  const void* grad_entropy = nullptr;
  void* grad = nullptr;
  RowLayout grad_layout;
};

void row_forward(const RowForwardArgs& args, int64_t begin, int64_t end);
void row_backward(const RowBackwardArgs& args, int64_t begin, int64_t end);

}  // namespace grpo::detail
