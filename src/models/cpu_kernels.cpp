// SPDX-License-Identifier: Apache-2.0
#include "avx512_kernels.hpp"

#include <grpo/models/cpu_kernels.hpp>

namespace grpo::models {

bool avx512_bf16_kernels_available() {
#if GRPO_AVX512_KERNELS
  static const bool available = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
  }();
  return available;
#else
  return false;
#endif
}

}  // namespace grpo::models
