// SPDX-License-Identifier: Apache-2.0
// Per-token log-probabilities and entropy of sampled tokens, without a full-vocabulary log-softmax.
//
// Shapes: logits [B, T, V] (or [N, V]); ids [B, T] (or [N]) int64 in [0, V). B sequences, T tokens, V vocabulary.
// Temperature is applied exactly as the sampler applies it: z = logits / temperature (a division, as TRL does).
//
// One fused pass per row (src/logprob/row_kernels.cpp): the row is read once, in L1-sized blocks, computing the
// online max and Σ exp(z − m) (Milakov & Gimelshein 2018, "Online normalizer calculation for softmax"), the target
// logit and, when asked, Σ p·log p, with a vectorised polynomial exp; rows run in parallel on at::get_num_threads() threads.
// Extra memory is O(rows) (the per-row logsumexp), never O(B·T·V). A custom autograd function backpropagates with
//   ∂ log p(y)/∂x = (onehot(y) − softmax(z)) / temperature
//   ∂ H/∂x        = −softmax(z) ⊙ (log softmax(z) + H) / temperature
// in one more pass per row (softmax recomputed from the saved logsumexp), into a new buffer or, when asked, into
// the logits themselves. Rows whose incoming gradients are zero (masked tokens) skip the exp pass.
//
// Devices (kernel_path.hpp): the fused kernels above run for CPU logits. For logits on any other device, or under
// ForceKernelPath(KernelPath::generic), the generic path computes the same quantities with LibTorch operations over
// chunks of rows (about 128 MiB of z per chunk, z in the compute dtype): logsumexp, the gathered target logit and
// the entropy; its backward recomputes softmax from the saved logsumexp chunk by chunk with the two formulas above,
// into a new buffer or the logits (overwrite_logits_in_backward). Both paths keep O(rows) between forward and
// backward and never hold more than one chunk of the log-softmax; results agree to rounding
// (tests/logprob/token_log_probs_test.cpp runs every test on both). ForceKernelPath(KernelPath::cpu) on non-CPU
// logits throws grpo::Error naming the device.
#pragma once

#include <grpo/logprob/kernel_path.hpp>

#include <torch/torch.h>

#include <cstdint>

namespace grpo {

struct TokenLogProbOptions {
  /// Sampling temperature (> 0); logits are divided by it before the softmax.
  double temperature = 1.0;
  /// Also return the per-token entropy H = logsumexp(z) − Σ softmax(z)·z (differentiable).
  bool with_entropy = false;
  /// Write the logits' gradient into the logits tensor itself during backward (Liger's and flash-attn's
  /// `inplace_backward`): saves one [B, T, V] buffer. The logits are destroyed, so use it only when nothing reads
  /// them after the backward, e.g. logits that come straight out of a matmul (whose backward does not need its
  /// output). Their version counter is bumped, so another op that saved them fails loudly instead of reading
  /// gradients.
  bool overwrite_logits_in_backward = false;
};

/// Result of token_log_probs: log_probs [B, T]; entropy [B, T] when requested, else undefined; sum_pi_squared
/// [B, T] (Σ_v softmax(z)_v², no gradient) when a producer that offers it was asked for it, else undefined.
/// All are float32 for float32/bfloat16/float16 logits (computed in fp32) and float64 for float64 logits.
struct TokenLogProbs {
  torch::Tensor log_probs;
  torch::Tensor entropy;
  torch::Tensor sum_pi_squared;
};

/// log softmax(logits / temperature) gathered at ids, fused (one pass per row), with a memory-bounded backward.
/// logits [B, T, V] or [N, V], floating point, on any device (the path is chosen by resolve_kernel_path(logits));
/// ids of the leading shape, int64 in [0, V), on the logits' device (put any valid id, e.g. 0, at padded positions
/// and mask them later). Throws grpo::Error naming the shapes, the devices or the first out-of-range id.
TokenLogProbs token_log_probs(const torch::Tensor& logits, const torch::Tensor& ids,
                              const TokenLogProbOptions& options = {});

/// Entropy of softmax(logits / temperature) per row: [B, T] (or [N]); fused, differentiable, fp32 or fp64. Same
/// paths as token_log_probs.
torch::Tensor token_entropy(const torch::Tensor& logits, const TokenLogProbOptions& options = {});

/// Plain eager reference: log_softmax(logits / temperature) then gather (materialises [B, T, V]). For tests and
/// benchmarks. Computes in the dtype given by the same rule as token_log_probs.
torch::Tensor token_log_probs_reference(const torch::Tensor& logits, const torch::Tensor& ids,
                                        double temperature = 1.0);

/// Plain eager reference entropy: −Σ softmax(z)·log_softmax(z), z = logits / temperature (materialises [B, T, V]).
torch::Tensor token_entropy_reference(const torch::Tensor& logits, double temperature = 1.0);

/// The instruction set the fused float kernels were dispatched to on this CPU: "x86-64-v4 (AVX-512)",
/// "x86-64-v3 (AVX2+FMA)" or "baseline" (the library's compile flags). For benchmark and bug reports.
const char* log_prob_kernel_isa();

}  // namespace grpo
