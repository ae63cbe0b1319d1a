// SPDX-License-Identifier: Apache-2.0
// Private: blocked_attention's CPU kernel for a few queries without gradient (decoding: one new token per sequence
// attends to the whole KV cache). LibTorch's composition spends ~1.6 ms per layer there at Qwen2.5-0.5B's shape
// (8 sequences, 512 keys; batched products of 7 × 64 by 64 × 512, a logsumexp, casts of the cache to fp32) on a
// few MFLOP of work; this kernel does the same arithmetic in one pass per (sequence, key/value head).
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace grpo::models::detail {

/// The most new queries per sequence the kernel takes (decoding has 1).
inline constexpr int64_t kFewQueries = 16;

/// Whether blocked_attention's call without gradient takes the kernel: q, k, v on the CPU, all bf16 or all fp32,
/// T ≤ kFewQueries, avx512_bf16_kernels_available(), and the CPU kernel path not overridden (ForceKernelPath).
bool use_few_queries_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v);

/// blocked_attention's forward (same arguments, checked by it; same formulas: scores q·k·(1/√D) in fp32, the
/// softmax exp(s − logsumexp) in fp32, probabilities rounded to v's dtype, their product with v summed in fp32 and
/// rounded once to q's dtype), for the queries of each (sequence, key/value head) at once.
torch::Tensor few_queries_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    const torch::Tensor& segments);

}  // namespace grpo::models::detail
