// SPDX-License-Identifier: Apache-2.0
// Per-token log-probabilities and entropy of sampled tokens, without a full-vocabulary log-softmax.
//
// Shapes: logits [B, T, V] (or [N, V]); ids [B, T] (or [N]) int64 in [0, V). B sequences, T tokens, V vocabulary.
// Temperature is applied exactly as the sampler applies it: z = logits / temperature (a division, as TRL does).
//
// The training path works on row chunks: per chunk it computes max, logsumexp, the target logit and, when asked,
// Σ softmax(z)·z, so extra memory is O(chunk_rows · V) instead of the O(B·T·V) of log_softmax + gather. A custom
// autograd function backpropagates with
//   ∂ log p(y)/∂x = (onehot(y) − softmax(z)) / temperature
//   ∂ H/∂x        = −softmax(z) ⊙ (log softmax(z) + H) / temperature
// recomputing softmax chunk by chunk from the saved per-row logsumexp.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace grpo {

struct TokenLogProbOptions {
  /// Sampling temperature (> 0); logits are divided by it before the softmax.
  double temperature = 1.0;
  /// Rows per chunk; 0 picks a chunk of about 4 MiB of fp32 logits (at least one row).
  int64_t chunk_rows = 0;
  /// Also return the per-token entropy H = logsumexp(z) − Σ softmax(z)·z (differentiable).
  bool with_entropy = false;
};

/// Result of token_log_probs: log_probs [B, T]; entropy [B, T] when requested, else undefined.
/// Both are float32 for float32/bfloat16/float16 logits (computed in fp32) and float64 for float64 logits.
struct TokenLogProbs {
  torch::Tensor log_probs;
  torch::Tensor entropy;
};

/// log softmax(logits / temperature) gathered at ids, computed chunk by chunk with a memory-bounded backward.
/// logits [B, T, V] or [N, V], floating point; ids of the leading shape, int64 in [0, V) (put any valid id, e.g. 0,
/// at padded positions and mask them later). Throws grpo::Error naming the shapes or the first out-of-range id.
TokenLogProbs token_log_probs(const torch::Tensor& logits, const torch::Tensor& ids,
                              const TokenLogProbOptions& options = {});

/// Entropy of softmax(logits / temperature) per row: [B, T] (or [N]); chunked, differentiable, fp32 or fp64.
torch::Tensor token_entropy(const torch::Tensor& logits, const TokenLogProbOptions& options = {});

/// Plain eager reference: log_softmax(logits / temperature) then gather (materialises [B, T, V]). For tests and
/// benchmarks. Computes in the dtype given by the same rule as token_log_probs.
torch::Tensor token_log_probs_reference(const torch::Tensor& logits, const torch::Tensor& ids,
                                        double temperature = 1.0);

/// Plain eager reference entropy: −Σ softmax(z)·log_softmax(z), z = logits / temperature (materialises [B, T, V]).
torch::Tensor token_entropy_reference(const torch::Tensor& logits, double temperature = 1.0);

}  // namespace grpo
