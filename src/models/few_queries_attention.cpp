// SPDX-License-Identifier: Apache-2.0
// The few-queries attention kernel (few_queries_attention.hpp).
//
// One task per (sequence b, key/value head h). The keys a new query at position p sees are one interval
// [start(p), p], start(p) the first position of p's run of equal segment labels, shared by the G = Hq / Hkv query
// heads of h. Keys are read in blocks of 16 rows, converted to fp32 once into a scratch block, and each of the G
// queries forms its 16 scores with 16 accumulators and one transposing sum (lane_sums). The softmax runs over each
// row of scores with the vectorised exp of the log-prob kernels (≈ 2 ulp); the values are then read once, each row
// adding p·v into the G fp32 output rows.
//
// GCC 12 inlines its AVX-512 intrinsics with deliberately undefined register halves (_mm512_undefined_*) and then
// warns about them at their definition in its own headers: not this code's.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "few_queries_attention.hpp"

#include "../core/parallel_ranges.hpp"
#include "../logprob/vec_float.hpp"
#include "avx512_kernels.hpp"

#include <grpo/core/error.hpp>
#include <grpo/logprob/kernel_path.hpp>
#include <grpo/models/cpu_kernels.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace grpo::models::detail {
namespace {

#if GRPO_AVX512_KERNELS

/// The operands of one call: q, out [B, Hq, T, D]; k, v [B, Hkv, S, D] (all contiguous, all bf16 or all fp32);
/// run_start [B, S] (the first position of each position's run of equal segment labels).
struct FewQueries {
  const void* q;
  const void* k;
  const void* v;
  void* out;
  const int64_t* run_start;
  int64_t heads, kv_heads, time, total, dim;
  float scale;
  bool bf16;
};

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16")

namespace avx512 {
#include "../logprob/vec_float_ops.inc"
}  // namespace avx512

/// n ≤ 16 elements of a bf16 or fp32 array at `offset`, as fp32 lanes (the others 0).
__attribute__((always_inline)) inline __m512 load_lanes(const void* base, int64_t offset, int64_t n, bool bf16) {
  if (bf16) return load_bf16(static_cast<const uint16_t*>(base) + offset, n);
  return _mm512_maskz_loadu_ps(first_lanes(n), static_cast<const float*>(base) + offset);
}

/// Every new query of sequence b for key/value head h.
void attend(const FewQueries& a, int64_t b, int64_t h) {
  const int64_t groups = a.heads / a.kv_heads, dim = a.dim, chunks = (dim + 15) / 16, padded = chunks * 16;
  const int64_t past = a.total - a.time, row_stride = a.total + 16;  // a score row, with room for a block's tail
  std::vector<float> queries(static_cast<size_t>(groups * padded)), outputs(queries.size());
  std::vector<float> key_block(static_cast<size_t>(16 * padded)), scores(static_cast<size_t>(groups * row_stride));
  const int64_t kv_base = (b * a.kv_heads + h) * a.total * dim;
  for (int64_t t = 0; t < a.time; ++t) {
    const int64_t position = past + t, first = a.run_start[b * a.total + position], keys = position - first + 1;
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t offset = ((b * a.heads + h * groups + g) * a.time + t) * dim;
      for (int64_t c = 0; c < chunks; ++c) {
        _mm512_storeu_ps(&queries[g * padded + 16 * c], load_lanes(a.q, offset + 16 * c, dim - 16 * c, a.bf16));
      }
    }
    // scores[g][s] = (q_g · k_{first + s}) · scale
    for (int64_t s0 = 0; s0 < keys; s0 += 16) {
      const int64_t rows = std::min<int64_t>(16, keys - s0);
      for (int64_t i = 0; i < 16; ++i) {
        const int64_t offset = kv_base + (first + s0 + i) * dim;
        for (int64_t c = 0; c < chunks; ++c) {
          _mm512_storeu_ps(&key_block[i * padded + 16 * c],
                           i < rows ? load_lanes(a.k, offset + 16 * c, dim - 16 * c, a.bf16) : _mm512_setzero_ps());
        }
      }
      for (int64_t g = 0; g < groups; ++g) {
        __m512 acc[16];
#pragma GCC unroll 16
        for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
        for (int64_t c = 0; c < chunks; ++c) {
          const __m512 query = _mm512_loadu_ps(&queries[g * padded + 16 * c]);
#pragma GCC unroll 16
          for (int i = 0; i < 16; ++i) {
            acc[i] = _mm512_fmadd_ps(query, _mm512_loadu_ps(&key_block[i * padded + 16 * c]), acc[i]);
          }
        }
        _mm512_storeu_ps(&scores[g * row_stride + s0], _mm512_mul_ps(lane_sums(acc), _mm512_set1_ps(a.scale)));
      }
    }
    // probabilities exp(s − logsumexp), rounded to v's dtype as the LibTorch composition rounds them
    for (int64_t g = 0; g < groups; ++g) {
      float* row = &scores[g * row_stride];
      const auto lanes = [&](int64_t s0) {
        const int64_t n = std::min<int64_t>(16, keys - s0);
        return _mm512_mask_loadu_ps(_mm512_set1_ps(-std::numeric_limits<float>::infinity()), first_lanes(n), row + s0);
      };
      __m512 top = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
      for (int64_t s0 = 0; s0 < keys; s0 += 16) top = _mm512_max_ps(top, lanes(s0));
      const float max = _mm512_reduce_max_ps(top);
      __m512 total = _mm512_setzero_ps();
      for (int64_t s0 = 0; s0 < keys; s0 += 16) {
        total = _mm512_add_ps(total, avx512::fast_exp(lanes(s0) - max));
      }
      const float lse = max + std::log(_mm512_reduce_add_ps(total));
      for (int64_t s0 = 0; s0 < keys; s0 += 16) {
        const __m512 p = avx512::fast_exp(lanes(s0) - lse);
        _mm512_storeu_ps(row + s0, a.bf16 ? round_to_bf16(p) : p);
      }
    }
    // outputs[g] = Σ_s p[g][s] · v_{first + s}, in fp32
    std::fill(outputs.begin(), outputs.end(), 0.0f);
    for (int64_t s = 0; s < keys; ++s) {
      const int64_t offset = kv_base + (first + s) * dim;
      for (int64_t c = 0; c < chunks; ++c) {
        const __m512 value = load_lanes(a.v, offset + 16 * c, dim - 16 * c, a.bf16);
        for (int64_t g = 0; g < groups; ++g) {
          float* o = &outputs[g * padded + 16 * c];
          _mm512_storeu_ps(o, _mm512_fmadd_ps(_mm512_set1_ps(scores[g * row_stride + s]), value, _mm512_loadu_ps(o)));
        }
      }
    }
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t offset = ((b * a.heads + h * groups + g) * a.time + t) * dim;
      for (int64_t c = 0; c < chunks; ++c) {
        const __m512 o = _mm512_loadu_ps(&outputs[g * padded + 16 * c]);
        const int64_t n = std::min<int64_t>(16, dim - 16 * c);
        if (a.bf16) {
          store_bf16(static_cast<uint16_t*>(a.out) + offset + 16 * c, round_to_bf16(o), n);
        } else {
          _mm512_mask_storeu_ps(static_cast<float*>(a.out) + offset + 16 * c, first_lanes(n), o);
        }
      }
    }
  }
}

#pragma GCC pop_options

#endif  // GRPO_AVX512_KERNELS

}  // namespace

bool use_few_queries_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  if (!q.device().is_cpu() || !k.device().is_cpu() || !v.device().is_cpu()) return false;
  const auto dtype = q.scalar_type();
  if ((dtype != torch::kBFloat16 && dtype != torch::kFloat32) || k.scalar_type() != dtype || v.scalar_type() != dtype) {
    return false;
  }
  if (q.size(2) > kFewQueries || q.size(3) == 0 || !avx512_bf16_kernels_available()) return false;
  return resolve_kernel_path(q, "q", "blocked_attention") == KernelPath::cpu;
}

torch::Tensor few_queries_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    const torch::Tensor& segments) {
  GRPO_CHECK(use_few_queries_attention(q, k, v), "few_queries_attention: called for operands it does not take");
  const int64_t batch = q.size(0), total = k.size(2);
  const auto labels = segments.to(torch::kCPU).contiguous();
  std::vector<int64_t> run_start(static_cast<size_t>(batch * total));
  const int64_t* label = labels.data_ptr<int64_t>();
  for (int64_t i = 0; i < batch * total; ++i) {
    const bool continues = i % total != 0 && label[i] == label[i - 1];
    run_start[static_cast<size_t>(i)] = continues ? run_start[static_cast<size_t>(i - 1)] : i % total;
  }
  const auto qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  auto out = torch::empty_like(qc);
#if GRPO_AVX512_KERNELS
  const FewQueries args{.q = qc.data_ptr(),
                        .k = kc.data_ptr(),
                        .v = vc.data_ptr(),
                        .out = out.data_ptr(),
                        .run_start = run_start.data(),
                        .heads = q.size(1),
                        .kv_heads = k.size(1),
                        .time = q.size(2),
                        .total = total,
                        .dim = q.size(3),
                        .scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(q.size(3)))),
                        .bf16 = q.scalar_type() == torch::kBFloat16};
  const int64_t tasks = batch * args.kv_heads;
  const int64_t work = std::max<int64_t>(1, args.time * (args.heads / args.kv_heads) * total * args.dim);
  ::grpo::detail::parallel_ranges(tasks, std::max<int64_t>(1, (int64_t{1} << 18) / work), [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) attend(args, task / args.kv_heads, task % args.kv_heads);
  });
#endif
  return out;
}

}  // namespace grpo::models::detail
