// SPDX-License-Identifier: Apache-2.0
// Causal grouped-query attention that never holds the [T, S] score matrix of all queries: queries are processed in
// blocks of rows, each block's scores are formed, normalised and multiplied by the values, then dropped. Only the
// per-query logsumexp is kept for backward, which recomputes each block's probabilities from it (the backward of
// FlashAttention-2, Dao 2023, arXiv:2307.08691, §3.1, with query blocks only: on a CPU one block of rows against
// every key it can see is already small, so the online softmax over key blocks is not needed). With causal
// masking a block of queries reads only the keys up to its last position, which also halves the work of a
// training forward.
//
// Shapes: B sequences, T new queries, S keys (S − T cached before them), Hq query heads, Hkv key/value heads
// (Hq a multiple of Hkv: query head h reads key/value head h / (Hq / Hkv), transformers' repeat_kv order), D head
// dim. Scores and softmax are computed in at least fp32 (q and k cast up, as transformers' eager attention does),
// the probabilities cast back to v's dtype for the product with v; backward works in at least fp32 throughout.
//
// Visibility: segments [B, S] int64 labels each key position; query t sits at position S − T + t and sees key s
// iff s ≤ S − T + t and no label changes between s and S − T + t (both lie in one run of equal labels).
// attention_segments(mask) gives 1 for real tokens and 0 for padding (a padding query sees only its run of padding,
// itself at least, so no row is ever empty and nothing is NaN); a packed row labels each example with its own id
// (block-diagonal causal attention), and a block of queries reads only the keys from the earliest start of its
// queries' runs, so packing N tokens costs about Σ Tᵢ² of attention, not N².
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace grpo::models {

/// How the decoder computes attention (as transformers' attn_implementation).
enum class AttentionImplementation {
  blocked,  ///< blocked_attention: memory O(T·D + one block of scores); the default
  eager,    ///< eager_attention: the full [B, Hq, T, S] scores, softmax, product (the plain LibTorch composition)
};

/// Segment labels [B, S] int64 from an attention mask [B, S] (any dtype): 1 where mask ≠ 0, else 0.
torch::Tensor attention_segments(const torch::Tensor& attention_mask);

/// softmax(q·kᵀ/√D + mask)·v, blocked over queries, differentiable in q, k and v with a blocked backward.
/// q [B, Hq, T, D]; k, v [B, Hkv, S, D] (S ≥ T) of q's dtype and device; segments [B, S] int64 (see above).
/// block_rows: queries per block (0 picks blocks of about 4 Mi scores). Returns [B, Hq, T, D] in q's dtype.
/// Throws grpo::Error naming the shapes when they do not fit together. Without gradient, on the CPU, in bf16 or fp32
/// and with at most 16 new queries (decoding), an AVX-512 kernel computes the same (cpu_kernels.hpp,
/// docs/kernels.md §4); ForceKernelPath(KernelPath::generic) keeps the LibTorch composition.
torch::Tensor blocked_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const torch::Tensor& segments, int64_t block_rows = 0);

/// The same attention in plain LibTorch operations over the full [B, Hq, T, S] scores (autograd's backward): the
/// reference blocked_attention is tested against, and AttentionImplementation::eager. Same arguments and result.
torch::Tensor eager_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const torch::Tensor& segments);

/// The attention `implementation` names, with blocked_attention's automatic block size.
torch::Tensor attention(AttentionImplementation implementation, const torch::Tensor& q, const torch::Tensor& k,
                        const torch::Tensor& v, const torch::Tensor& segments);

}  // namespace grpo::models
