// SPDX-License-Identifier: Apache-2.0
// The models' linear projection and its few-rows bf16 CPU kernel (project.hpp).
//
// The kernel: y[r, c] = Σ_k x[r, k] · w[c, k] for r < R ≤ kFewRows rows, x and w bf16, sums in fp32. Output columns
// go in blocks of 4 weight rows. A block is read from memory once (prefetched kPrefetchBytes ahead) and multiplied
// into the rows of x: all of them at once in tiles of 8 rows × 2 columns when there are more than 4 rows (so the
// weights' stream from memory overlaps the arithmetic), else 4 × 4; each tile keeps 16 fp32 accumulators of 16 lanes
// and takes 32 values of k per step. vdpbf16ps adds the products of 32 bf16 pairs (exact in fp32) into 16 fp32 lanes,
// with fp32 rounding and, as the instruction defines, subnormal inputs and results flushed to zero: the only other
// rounding is the final one to bf16 (nearest even, after the bias is added in fp32). The 16 accumulators' lanes are
// summed at once by a transposing tree (avx512_kernels.hpp). Blocks are split over the threads
// (detail::parallel_ranges).
//
// GCC 12 inlines its AVX-512 intrinsics with deliberately undefined register halves (_mm512_undefined_*) and then
// warns about them at their definition in its own headers: not this code's.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

#include "../core/parallel_ranges.hpp"
#include "avx512_kernels.hpp"

#include <grpo/core/error.hpp>
#include <grpo/core/tensor_checks.hpp>
#include <grpo/logprob/kernel_path.hpp>
#include <grpo/models/project.hpp>

#include <c10/util/BFloat16.h>

#include <algorithm>
#include <cstdint>

namespace grpo::models {
namespace {

#if GRPO_AVX512_KERNELS

/// The operands of one few-rows product, as raw bf16 bits: x [rows, in] (row stride x_stride), w [out, in] (row
/// stride w_stride), bias [out] or null, y [rows, out] (contiguous).
struct FewRowsProduct {
  const uint16_t* x;
  int64_t x_stride;
  const uint16_t* w;
  int64_t w_stride;
  const uint16_t* bias;
  uint16_t* y;
  int64_t rows, in, out;
};

constexpr int64_t kColumnBlock = 4;
constexpr int64_t kPrefetchBytes = 2048;  // how far ahead of each weight row's loads its lines are prefetched

#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16")

/// y[row .. row + R, col .. col + C] of p (R·C ≤ 16 accumulators).
template <int R, int C>
void product_tile(const FewRowsProduct& p, int64_t row, int64_t col) {
  static_assert(R * C <= 16);
  __m512 acc[16];  // acc[r·C + c]; the unused ones stay 0
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
  const uint16_t* w = p.w + col * p.w_stride;
  const uint16_t* x = p.x + row * p.x_stride;
  for (int64_t k = 0; k < p.in; k += 32) {  // the last step loads only the in − k values left (masked)
    const __mmask32 mask = p.in - k >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((uint64_t{1} << (p.in - k)) - 1);
    __m512i wv[C];
#pragma GCC unroll 8
    for (int c = 0; c < C; ++c) {
      _mm_prefetch(reinterpret_cast<const char*>(w + c * p.w_stride + k) + kPrefetchBytes, _MM_HINT_T0);
      wv[c] = _mm512_maskz_loadu_epi16(mask, w + c * p.w_stride + k);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512i xv = _mm512_maskz_loadu_epi16(mask, x + r * p.x_stride + k);
#pragma GCC unroll 8
      for (int c = 0; c < C; ++c) acc[r * C + c] = _mm512_dpbf16_ps(acc[r * C + c], (__m512bh)xv, (__m512bh)wv[c]);
    }
  }
  alignas(64) float sums[16];
  _mm512_store_ps(sums, detail::lane_sums(acc));
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) {
      float sum = sums[r * C + c];
      if (p.bias != nullptr) sum += static_cast<float>(c10::BFloat16(p.bias[col + c], c10::BFloat16::from_bits()));
      p.y[(row + r) * p.out + col + c] = c10::BFloat16(sum).x;  // rounds to nearest even
    }
  }
}

/// Every row of p for the columns [col, col + C): tiles of up to 8 rows × 2 columns or 4 × 4 (16 accumulators).
template <int C>
void product_columns(const FewRowsProduct& p, int64_t col) {
  constexpr int kTile = C >= 4 ? 4 : 8;
  int64_t row = 0;
  for (; row + kTile <= p.rows; row += kTile) product_tile<kTile, C>(p, row, col);
  switch (p.rows - row) {
    case 7: if constexpr (kTile > 7) product_tile<7, C>(p, row, col); break;
    case 6: if constexpr (kTile > 6) product_tile<6, C>(p, row, col); break;
    case 5: if constexpr (kTile > 5) product_tile<5, C>(p, row, col); break;
    case 4: if constexpr (kTile > 4) product_tile<4, C>(p, row, col); break;
    case 3: product_tile<3, C>(p, row, col); break;
    case 2: product_tile<2, C>(p, row, col); break;
    case 1: product_tile<1, C>(p, row, col); break;
    default: break;
  }
}

#pragma GCC pop_options

void run_few_rows(const FewRowsProduct& p) {
  const int64_t blocks = (p.out + kColumnBlock - 1) / kColumnBlock;
  // At least ~256 KiB of weights per task, so waking a thread pays for itself.
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 18) / std::max<int64_t>(1, kColumnBlock * p.in * 2));
  ::grpo::detail::parallel_ranges(blocks, grain, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const int64_t col = b * kColumnBlock;
      if (col + kColumnBlock > p.out) {
        for (int64_t c = col; c < p.out; ++c) product_columns<1>(p, c);
      } else if (p.rows > 4) {  // all rows in one tile: the weights' stream from memory overlaps the arithmetic
        product_columns<2>(p, col);
        product_columns<2>(p, col + 2);
      } else {
        product_columns<kColumnBlock>(p, col);
      }
    }
  });
}

bool needs_grad(const torch::Tensor& t) { return t.defined() && t.requires_grad(); }

/// Whether project takes the few-rows bf16 kernel for these operands (project.hpp lists the conditions).
bool use_few_rows_kernel(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias, int64_t rows) {
  if (rows < 1 || rows > kFewRows || weight.size(1) == 0) return false;
  if (x.scalar_type() != torch::kBFloat16 || weight.scalar_type() != torch::kBFloat16) return false;
  if (bias.defined() && bias.scalar_type() != torch::kBFloat16) return false;
  if (!x.device().is_cpu() || !weight.device().is_cpu() || (bias.defined() && !bias.device().is_cpu())) return false;
  if (torch::GradMode::is_enabled() && (needs_grad(x) || needs_grad(weight) || needs_grad(bias))) return false;
  if (!avx512_bf16_kernels_available()) return false;
  return resolve_kernel_path(x, "the input", "a linear projection") == KernelPath::cpu;
}

#endif  // GRPO_AVX512_KERNELS

}  // namespace

torch::Tensor project(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  GRPO_CHECK(weight.dim() == 2 && x.dim() >= 1 && x.size(-1) == weight.size(1),
             "linear projection: the input's last dimension must equal the weight's [out, in] second; got input {} "
             "and weight {}",
             shape_str(x), shape_str(weight));
  const int64_t in = weight.size(1);
  const int64_t rows = in == 0 ? 0 : x.numel() / in;
  auto sizes = x.sizes().vec();
  sizes.back() = weight.size(0);
#if GRPO_AVX512_KERNELS
  if (use_few_rows_kernel(x, weight, bias, rows)) {
    auto x2 = x.reshape({rows, in});
    if (x2.stride(1) != 1) x2 = x2.contiguous();
    const auto w = weight.stride(1) == 1 ? weight : weight.contiguous();
    const auto b = bias.defined() ? bias.contiguous() : bias;
    auto y = torch::empty({rows, weight.size(0)}, x.options());
    run_few_rows({.x = reinterpret_cast<const uint16_t*>(x2.data_ptr<at::BFloat16>()),
                  .x_stride = x2.stride(0),
                  .w = reinterpret_cast<const uint16_t*>(w.data_ptr<at::BFloat16>()),
                  .w_stride = w.stride(0),
                  .bias = b.defined() ? reinterpret_cast<const uint16_t*>(b.data_ptr<at::BFloat16>()) : nullptr,
                  .y = reinterpret_cast<uint16_t*>(y.data_ptr<at::BFloat16>()),
                  .rows = rows,
                  .in = in,
                  .out = weight.size(0)});
    return y.view(sizes);
  }
#endif
  const bool half = x.scalar_type() == torch::kBFloat16 || x.scalar_type() == torch::kHalf;
  if (rows == 1 && !half) {  // LibTorch 1.13's CPU mv sums half-precision products in half precision: mm does not
    const auto v = x.reshape({in});
    return (bias.defined() ? torch::addmv(bias, weight, v) : torch::mv(weight, v)).view(sizes);
  }
  auto y = torch::mm(x.reshape({rows, in}), weight.t());
  if (bias.defined()) y = y + bias;
  return y.view(sizes);
}

}  // namespace grpo::models
