// SPDX-License-Identifier: Apache-2.0
// Private: 16-lane float vectors (GCC/Clang vector extensions), a Cephes-style exp on them, and the target_clones
// dispatch of the vectorised CPU kernels (row_kernels.cpp, loss_kernel.cpp). See row_kernels.cpp for why.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define GRPO_ROW_KERNEL_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#define GRPO_ROW_KERNEL_DISPATCH 1
#else
#define GRPO_ROW_KERNEL_CLONES
#define GRPO_ROW_KERNEL_DISPATCH 0
#endif
#define GRPO_ALWAYS_INLINE inline __attribute__((always_inline))

// The 64-byte vector types never cross a non-inlined call, so the AVX-512 argument-passing ABI note is moot.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace grpo::detail {

namespace vec {
#include "vec_float_ops.inc"
}  // namespace vec

/// The widest vector instruction set this CPU runs: the target_clones variants (and loss_kernel.cpp's copies).
enum class VectorIsa { baseline, x86_64_v3, x86_64_v4 };
inline VectorIsa vector_isa() {
#if GRPO_ROW_KERNEL_DISPATCH
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512cd"))
    return VectorIsa::x86_64_v4;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return VectorIsa::x86_64_v3;
#endif
  return VectorIsa::baseline;
}

}  // namespace grpo::detail
