// SPDX-License-Identifier: Apache-2.0
// Whether the models' hand-written CPU kernels run here. Decoding multiplies a few rows by every weight and attends
// a few queries to the whole KV cache; LibTorch 1.13's CPU operators are slow at both shapes (see project.hpp and
// attention.hpp), so two kernels written with AVX-512 take them: the few-rows bf16 projection and the few-queries
// attention. Where they do not run (another CPU, compiler or device, a gradient needed, or the generic kernel path
// forced with grpo::ForceKernelPath), LibTorch's operators compute the same values up to the order of fp32 sums.
#pragma once

namespace grpo::models {

/// Whether this CPU has AVX-512 F/BW/VL and AVX512-BF16 and the library was built with the kernels (x86-64 Linux,
/// GCC). Checked once.
bool avx512_bf16_kernels_available();

}  // namespace grpo::models
