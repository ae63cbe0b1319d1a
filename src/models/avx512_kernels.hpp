// SPDX-License-Identifier: Apache-2.0
// Private: the vector helpers of the models' AVX-512 CPU kernels (project.cpp's few-rows bf16 product,
// few_queries_attention.cpp), compiled for AVX-512 whatever the library's baseline (the kernels' own functions are
// compiled under the same target pragma; callers check avx512_bf16_kernels_available() first).
#pragma once

#include <grpo/models/cpu_kernels.hpp>

#include <cstdint>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define GRPO_AVX512_KERNELS 1
#include <immintrin.h>
#else
#define GRPO_AVX512_KERNELS 0
#endif

// The 64-byte vector types never cross a non-inlined call, so the AVX-512 argument-passing ABI note is moot.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace grpo::models::detail {

#if GRPO_AVX512_KERNELS
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16")

/// Lane i of the result: the sum of the 16 lanes of v[i]. A transposing tree (blocks of 4 lanes, then lanes: 15
/// vector additions and 30 shuffles) instead of 16 horizontal sums, which cost as much as a short dot product.
__attribute__((always_inline)) inline __m512 lane_sums(const __m512 (&v)[16]) {
  __m512 halves[8], quarters[4], pairs[2];
#pragma GCC unroll 8
  for (int j = 0; j < 8; ++j) {  // blocks [a0 + a2, a1 + a3, b0 + b2, b1 + b3] of a = v[2j], b = v[2j + 1]
    halves[j] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * j], v[2 * j + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                              _mm512_shuffle_f32x4(v[2 * j], v[2 * j + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  }
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {  // block k: 4 partial sums of v[4j + k]
    quarters[j] = _mm512_add_ps(_mm512_shuffle_f32x4(halves[2 * j], halves[2 * j + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                                _mm512_shuffle_f32x4(halves[2 * j], halves[2 * j + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  }
#pragma GCC unroll 2
  for (int j = 0; j < 2; ++j) {  // block k: 2 partial sums each of v[8j + k] and v[8j + 4 + k]
    pairs[j] = _mm512_add_ps(_mm512_shuffle_ps(quarters[2 * j], quarters[2 * j + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm512_shuffle_ps(quarters[2 * j], quarters[2 * j + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  }
  // lane 4k + m: the sum of v[4m + k]; the permutation puts it in lane 4m + k
  const __m512 sums = _mm512_add_ps(_mm512_shuffle_ps(pairs[0], pairs[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                    _mm512_shuffle_ps(pairs[0], pairs[1], _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), sums);
}

/// The mask of the first n (≤ 16) of 16 lanes.
__attribute__((always_inline)) inline __mmask16 first_lanes(int64_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1);
}

/// n ≤ 16 bf16 values (raw bits) as fp32 lanes (exact), the others 0.
__attribute__((always_inline)) inline __m512 load_bf16(const uint16_t* p, int64_t n) {
  const __m256i bits = _mm256_maskz_loadu_epi16(first_lanes(n), p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
}

/// fp32 lanes rounded to bf16 (to nearest, ties to even, as c10::BFloat16 rounds finite values), as fp32 lanes.
__attribute__((always_inline)) inline __m512 round_to_bf16(__m512 x) {
  const __m512i bits = _mm512_castps_si512(x);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_add_epi32(bits, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7FFF)));
  return _mm512_castsi512_ps(_mm512_and_si512(rounded, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
}

/// Stores the first n (≤ 16) lanes of x, already rounded by round_to_bf16, as bf16 bits.
__attribute__((always_inline)) inline void store_bf16(uint16_t* p, __m512 x, int64_t n) {
  const __m256i bits = _mm512_cvtepi32_epi16(_mm512_srli_epi32(_mm512_castps_si512(x), 16));
  _mm256_mask_storeu_epi16(p, first_lanes(n), bits);
}

#pragma GCC pop_options
#endif  // GRPO_AVX512_KERNELS

}  // namespace grpo::models::detail
