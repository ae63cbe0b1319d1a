// SPDX-License-Identifier: Apache-2.0
// The linear projection of the models (every q/k/v/o, MLP, LoRA and lm_head product): x W^T (+ b), routed by
// shape, dtype and device to the fastest correct implementation.
//
// Decoding multiplies a few rows (one per sequence still being sampled) by every weight matrix, so each step reads
// all weights once and its speed is the memory bandwidth's. LibTorch 1.13's CPU products do not reach it there: on
// 2 cores a bf16 product of one row streamed Qwen2.5-0.5B's lm_head at 11 GB/s and of 8 rows at 12–15 GB/s, against
// the 29 GB/s a 2-thread sum reads. The few-rows bf16 kernel (docs/kernels.md §4) reads each weight row once and
// multiplies it into all rows with the CPU's bf16 dot-product instruction (AVX512-BF16 vdpbf16ps: pairs of bf16
// products accumulated in fp32), split over the threads by output column: 23 and 18 GB/s there.
#pragma once

#include <torch/torch.h>

namespace grpo::models {

/// x W^T (+ b) over the last dimension: x [..., in], weight [out, in], bias [out] or undefined → [..., out], in the
/// common dtype of the arguments (LibTorch's type promotion rules are not applied: they must match). Any device.
///   - one row (decoding a single sequence) in fp32 or fp64: addmv / mv (on OpenBLAS, sgemm packs the whole weight
///     matrix on every call, which at one row costs about 3× a matrix-vector product; in bf16 and fp16, LibTorch
///     1.13's CPU mv accumulates in half precision, so those take mm);
///   - bf16 on the CPU, at most kFewRows rows, no gradient needed, avx512_bf16_kernels_available()
///     (cpu_kernels.hpp) and the CPU kernel path not overridden (grpo/logprob/kernel_path.hpp: KernelPath::generic
///     forces LibTorch's product): the few-rows bf16 kernel, fp32 accumulation and the bias added in fp32, one
///     rounding to bf16;
///   - otherwise mm, with the bias added after (addmm's broadcast bias, an OpenMP copy just before OpenBLAS's own
///     threads start, made a 16-row product up to 3× slower on 2 cores).
/// The paths give the same values up to the order of the fp32 sums (and, with a bias in bf16, one rounding).
torch::Tensor project(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias = {});

/// The most rows the few-rows bf16 kernel takes: above it the product is compute-bound and LibTorch's blocked GEMM
/// (oneDNN's bf16 matrix units) is faster.
inline constexpr int64_t kFewRows = 16;

}  // namespace grpo::models
