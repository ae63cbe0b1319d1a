// SPDX-License-Identifier: Apache-2.0
// The per-row log-prob kernels (row_kernels.hpp).
//
// Why hand-written: eager log_softmax in LibTorch 1.13 reads a row three times and its exp is the bottleneck, not
// memory. Here each row is read from memory once: it is processed in blocks of kBlock elements that stay in L1;
// per block, one sweep takes the max and one sweep sums exp(z − m) (and exp(z − m)·(z − m) for the entropy),
// rescaling the running sums whenever the max grows (online softmax, Milakov & Gimelshein 2018).
//
// Vectorisation: the exp is a Cephes-style polynomial (range reduction by ln 2, degree-6 polynomial, 2^n built in
// the exponent bits; max relative error ≈ 2 ulp) written as plain arithmetic with selects, and every reduction keeps
// kLanes independent partial sums, so the compiler vectorises the loops without -ffast-math. The float entry points
// are compiled three times with GCC's target_clones (x86-64-v4 = AVX-512, x86-64-v3 = AVX2+FMA, and the baseline
// the library is built for) and the loader picks the best one for the CPU at run time, so a library built on one
// machine runs everywhere and uses the wide units where they exist. Other compilers or targets get one baseline
// build (still vectorised at the baseline width). LibTorch's at::vec::Vectorized<float> was not used: its AVX2 and
// AVX-512 specialisations are only compiled when CPU_CAPABILITY_* is defined, which would tie the library to one
// instruction set, and its Sleef exp is not part of the installed headers' inline code.
#include "row_kernels.hpp"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define GRPO_ROW_KERNEL_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#define GRPO_ROW_KERNEL_DISPATCH 1
#else
#define GRPO_ROW_KERNEL_CLONES
#define GRPO_ROW_KERNEL_DISPATCH 0
#endif
#define GRPO_ALWAYS_INLINE inline __attribute__((always_inline))

namespace grpo::detail {
namespace {

constexpr int kLanes = 16;
constexpr int64_t kBlock = 2048;

/// exp(x) for float, ≈ 2 ulp: exp(x) = 2^n · exp(r), n = round(x / ln 2), |r| ≤ ln 2 / 2 (Cephes expf
/// coefficients). Below −87.3 the result is 0 (not a denormal), above 88.3 it saturates at exp(88.3); NaN stays NaN.
GRPO_ALWAYS_INLINE float fast_exp(float x) {
  const float xc = x < -87.3f ? -87.3f : (x > 88.3f ? 88.3f : x);
  constexpr float kRound = 12582912.0f;  // 1.5 · 2^23: adding and subtracting it rounds to the nearest integer
  const float n = (xc * 1.44269504088896341f + kRound) - kRound;
  float r = xc - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  const float scale = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  return x < -87.3f ? 0.0f : y * scale;
}

GRPO_ALWAYS_INLINE double fast_exp(double x) { return std::exp(x); }

template <typename T>
struct ComputeOf {
  using type = float;
};
template <>
struct ComputeOf<double> {
  using type = double;
};

/// One row: online max / Σ exp / Σ exp·(z − m) over blocks, then the target logit.
template <typename In, bool WithEntropy>
GRPO_ALWAYS_INLINE void forward_rows(const RowForwardArgs& a, int64_t begin, int64_t end) {
  using Acc = typename ComputeOf<In>::type;
  constexpr Acc kNegInf = -std::numeric_limits<Acc>::infinity();
  const In* base = static_cast<const In*>(a.logits);
  const Acc inv_t = static_cast<Acc>(a.inv_temperature);
  alignas(64) Acc z[kBlock];
  for (int64_t row = begin; row < end; ++row) {
    const In* x = base + a.layout.offset(row);
    Acc m = kNegInf;
    double s = 0.0, q = 0.0;  // Σ exp(z − m) and Σ exp(z − m)·(z − m), across blocks in double
    for (int64_t v0 = 0; v0 < a.vocab; v0 += kBlock) {
      const int64_t n = a.vocab - v0 < kBlock ? a.vocab - v0 : kBlock;
      const int64_t n_vec = n - n % kLanes;
      Acc lane_max[kLanes];
      for (int j = 0; j < kLanes; ++j) lane_max[j] = kNegInf;
      for (int64_t i = 0; i < n_vec; i += kLanes) {
        for (int j = 0; j < kLanes; ++j) {
          const Acc zi = static_cast<Acc>(x[v0 + i + j]) * inv_t;
          z[i + j] = zi;
          lane_max[j] = zi > lane_max[j] ? zi : lane_max[j];
        }
      }
      Acc block_max = kNegInf;
      for (int64_t i = n_vec; i < n; ++i) {
        z[i] = static_cast<Acc>(x[v0 + i]) * inv_t;
        block_max = z[i] > block_max ? z[i] : block_max;
      }
      for (int j = 0; j < kLanes; ++j) block_max = lane_max[j] > block_max ? lane_max[j] : block_max;
      if (block_max == kNegInf) continue;  // every logit of the block is −inf: nothing to add
      if (block_max > m) {
        if (s > 0.0) {
          const double d = static_cast<double>(m) - static_cast<double>(block_max);
          const double f = std::exp(d);
          q = f * (q + d * s);
          s *= f;
        }
        m = block_max;
      }
      Acc lane_s[kLanes] = {}, lane_q[kLanes] = {};
      for (int64_t i = 0; i < n_vec; i += kLanes) {
        for (int j = 0; j < kLanes; ++j) {
          const Acc t = z[i + j] - m;
          const Acc e = fast_exp(t);
          lane_s[j] += e;
          if constexpr (WithEntropy) lane_q[j] += e * t;
        }
      }
      for (int64_t i = n_vec; i < n; ++i) {
        const Acc t = z[i] - m;
        const Acc e = fast_exp(t);
        lane_s[0] += e;
        if constexpr (WithEntropy) lane_q[0] += e * t;
      }
      for (int j = 0; j < kLanes; ++j) {
        s += lane_s[j];
        if constexpr (WithEntropy) q += lane_q[j];
      }
    }
    const double log_s = std::log(s);
    const double lse = static_cast<double>(m) + log_s;
    const double target = static_cast<double>(static_cast<Acc>(x[a.ids[row]]) * inv_t);
    static_cast<Acc*>(a.lse)[row] = static_cast<Acc>(lse);
    static_cast<Acc*>(a.log_probs)[row] = static_cast<Acc>(target - lse);
    if constexpr (WithEntropy) static_cast<Acc*>(a.entropy)[row] = static_cast<Acc>(log_s - q / s);
  }
}

template <typename In, bool WithEntropy>
GRPO_ALWAYS_INLINE void backward_rows(const RowBackwardArgs& a, int64_t begin, int64_t end) {
  using Acc = typename ComputeOf<In>::type;
  const In* base = static_cast<const In*>(a.logits);
  In* grad_base = static_cast<In*>(a.grad);
  const Acc inv_t = static_cast<Acc>(a.inv_temperature);
  const auto* lse = static_cast<const Acc*>(a.lse);
  const auto* g_lp = static_cast<const Acc*>(a.grad_log_probs);
  const auto* g_h = static_cast<const Acc*>(a.grad_entropy);
  const auto* entropy = static_cast<const Acc*>(a.entropy);
  alignas(64) Acc buf[kBlock];
  for (int64_t row = begin; row < end; ++row) {
    const In* x = base + a.layout.offset(row);
    In* out = grad_base + a.grad_layout.offset(row);
    const Acc g = g_lp != nullptr ? g_lp[row] : Acc(0);
    const Acc gh = WithEntropy ? g_h[row] : Acc(0);
    if (g == Acc(0) && gh == Acc(0)) {
      for (int64_t v = 0; v < a.vocab; ++v) out[v] = In(0);
      continue;
    }
    const Acc l = lse[row];
    const Acc h = WithEntropy ? entropy[row] : Acc(0);
    // The target's term is computed before the sweep, which may overwrite x when grad aliases the logits.
    const int64_t id = a.ids[row];
    const Acc t_id = static_cast<Acc>(x[id]) * inv_t - l;
    const Acc p_id = fast_exp(t_id);
    const Acc d_id = (g * (Acc(1) - p_id) - (WithEntropy ? gh * p_id * (t_id + h) : Acc(0))) * inv_t;
    // −p·(g + g_h·(log p + H))·inv_t = −p·(c0 + c1·log p) with c0 = (g + g_h·H)·inv_t, c1 = g_h·inv_t
    const Acc c0 = (g + gh * h) * inv_t, c1 = gh * inv_t;
    // Per block: compute into a local buffer, then store. Going through the buffer keeps the loops free of
    // possible aliasing between x and out (in place), which would otherwise stop the vectoriser.
    for (int64_t v0 = 0; v0 < a.vocab; v0 += kBlock) {
      const int64_t n = a.vocab - v0 < kBlock ? a.vocab - v0 : kBlock;
      for (int64_t i = 0; i < n; ++i) buf[i] = static_cast<Acc>(x[v0 + i]);
      for (int64_t i = 0; i < n; ++i) {
        const Acc t = buf[i] * inv_t - l;
        const Acc p = fast_exp(t);
        buf[i] = WithEntropy ? -p * (c0 + c1 * t) : -p * c0;
      }
      for (int64_t i = 0; i < n; ++i) out[v0 + i] = static_cast<In>(buf[i]);
    }
    out[id] = static_cast<In>(d_id);
  }
}

template <typename In>
GRPO_ALWAYS_INLINE void forward_dispatch(const RowForwardArgs& a, int64_t begin, int64_t end) {
  if (a.entropy != nullptr) {
    forward_rows<In, true>(a, begin, end);
  } else {
    forward_rows<In, false>(a, begin, end);
  }
}

template <typename In>
GRPO_ALWAYS_INLINE void backward_dispatch(const RowBackwardArgs& a, int64_t begin, int64_t end) {
  if (a.grad_entropy != nullptr) {
    backward_rows<In, true>(a, begin, end);
  } else {
    backward_rows<In, false>(a, begin, end);
  }
}

// The entry points the loader dispatches (one clone per instruction set); the templates above are inlined into
// each clone, so each gets its own vectorised loops.
GRPO_ROW_KERNEL_CLONES void forward_float(const RowForwardArgs& a, int64_t b, int64_t e) {
  forward_dispatch<float>(a, b, e);
}
GRPO_ROW_KERNEL_CLONES void forward_bfloat16(const RowForwardArgs& a, int64_t b, int64_t e) {
  forward_dispatch<c10::BFloat16>(a, b, e);
}
GRPO_ROW_KERNEL_CLONES void forward_half(const RowForwardArgs& a, int64_t b, int64_t e) {
  forward_dispatch<c10::Half>(a, b, e);
}
void forward_double(const RowForwardArgs& a, int64_t b, int64_t e) { forward_dispatch<double>(a, b, e); }

GRPO_ROW_KERNEL_CLONES void backward_float(const RowBackwardArgs& a, int64_t b, int64_t e) {
  backward_dispatch<float>(a, b, e);
}
GRPO_ROW_KERNEL_CLONES void backward_bfloat16(const RowBackwardArgs& a, int64_t b, int64_t e) {
  backward_dispatch<c10::BFloat16>(a, b, e);
}
GRPO_ROW_KERNEL_CLONES void backward_half(const RowBackwardArgs& a, int64_t b, int64_t e) {
  backward_dispatch<c10::Half>(a, b, e);
}
void backward_double(const RowBackwardArgs& a, int64_t b, int64_t e) { backward_dispatch<double>(a, b, e); }

}  // namespace

void row_forward(const RowForwardArgs& args, int64_t begin, int64_t end) {
  switch (args.dtype) {
    case c10::ScalarType::Float:
      return forward_float(args, begin, end);
    case c10::ScalarType::Double:
      return forward_double(args, begin, end);
    case c10::ScalarType::BFloat16:
      return forward_bfloat16(args, begin, end);
    case c10::ScalarType::Half:
      return forward_half(args, begin, end);
    default:
      break;
  }
  TORCH_CHECK(false, "row_forward: unsupported dtype ", args.dtype);
}

void row_backward(const RowBackwardArgs& args, int64_t begin, int64_t end) {
  switch (args.dtype) {
    case c10::ScalarType::Float:
      return backward_float(args, begin, end);
    case c10::ScalarType::Double:
      return backward_double(args, begin, end);
    case c10::ScalarType::BFloat16:
      return backward_bfloat16(args, begin, end);
    case c10::ScalarType::Half:
      return backward_half(args, begin, end);
    default:
      break;
  }
  TORCH_CHECK(false, "row_backward: unsupported dtype ", args.dtype);
}

const char* row_kernel_isa() {
#if GRPO_ROW_KERNEL_DISPATCH
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512cd"))
    return "x86-64-v4 (AVX-512)";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "x86-64-v3 (AVX2+FMA)";
#endif
  return "baseline";
}

}  // namespace grpo::detail
