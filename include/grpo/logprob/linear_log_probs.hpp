// SPDX-License-Identifier: Apache-2.0
// Per-token log-probabilities (and entropy) straight from final hidden states and the lm_head weight, without ever
// holding the full [N, V] logits: the fused-linear cross-entropy of Liger-Kernel / Cut Cross-Entropy (Wijmans et
// al. 2025), chunked over rows for a CPU.
//
//   z_n = h_n · Wᵀ / temperature,   log p_n = z_n[y_n] − logsumexp(z_n),   H_n = −Σ_v softmax(z_n)_v · log softmax(z_n)_v
//
// Forward: per chunk of C rows, one GEMM [C, H] × [H, V] into a reused [C, V] buffer, then the fused row kernel
// of token_log_probs (one pass per row: online max/sum, target logit, entropy); only the per-row logsumexp (and
// entropy) is kept. Backward: per chunk, recompute the GEMM, overwrite the buffer with
//   dZ = [g_lp·(onehot(y) − p) − g_H·p·(log p + H)] / temperature
// and accumulate grad_hidden[chunk] = dZ·W and grad_weight += dZᵀ·h. Cost 8·N·H·V FLOPs for forward+backward
// (2 forward, 6 backward including the recompute), extra memory one [C, V] chunk plus the gradients themselves.
// Vocabulary blocking is not used: on a CPU the [C, V] chunk costs 8 bytes of memory traffic per 2·H FLOPs of
// GEMM (224 FLOP/B at H = 896), far above the machine's ridge point, so splitting V would only add GEMM calls.
//
// Devices (kernel_path.hpp): the GEMMs are LibTorch's on every device; the row computation of each chunk is the
// fused CPU row kernel for CPU hidden states and token_log_probs' generic path (the same formulas as LibTorch
// operations) on any other device, or on the CPU under ForceKernelPath(KernelPath::generic). The chunking, the
// memory bound and the results (to rounding) are the same on both paths.
#pragma once

#include <grpo/logprob/token_log_probs.hpp>

#include <torch/torch.h>

#include <cstdint>

namespace grpo {

struct LinearLogProbOptions {
  /// Sampling temperature (> 0); logits are divided by it before the softmax.
  double temperature = 1.0;
  /// Rows of hidden states per chunk: at most chunk_rows × V logits are alive at once. 0 picks about 128 MiB of
  /// logits (at least 64 rows: smaller GEMMs lose efficiency).
  int64_t chunk_rows = 0;
  /// Also return the per-token entropy (differentiable).
  bool with_entropy = false;
  /// Also return Σ_v softmax(z)_v² per token (no gradient; the optimal token baseline's weights need it), computed
  /// from each chunk of logits while it is alive: one more exp per logit.
  bool with_sum_pi_squared = false;
};

/// log softmax(h·Wᵀ / temperature) gathered at ids, and optionally the entropy and Σ softmax², without materialising
/// the logits.
/// hidden [B, T, H] or [N, H]; weight [V, H] of the same floating dtype (the lm_head weight; the embedding matrix
/// when tied); ids of hidden's leading shape, int64 in [0, V); all three on one device (the path is chosen by
/// resolve_kernel_path(hidden)). Results have ids' shape, on that device, float32 (float64 for
/// float64 inputs). Differentiable with respect to hidden and weight (either may not require grad); under
/// torch::NoGradGuard it is the memory-bounded no-grad pass for old and reference log-probs. Throws grpo::Error
/// naming the argument and its shape when the inputs do not fit.
TokenLogProbs linear_token_log_probs(const torch::Tensor& hidden, const torch::Tensor& weight,
                                     const torch::Tensor& ids, const LinearLogProbOptions& options = {});

/// The rows per chunk linear_token_log_probs uses for vocabulary size `vocab` and element size `element_bytes`
/// (options.chunk_rows when set), for memory bounds in benchmarks and docs.
int64_t linear_log_prob_chunk_rows(const LinearLogProbOptions& options, int64_t vocab, int64_t element_bytes);

}  // namespace grpo
