// SPDX-License-Identifier: Apache-2.0
// The per-row log-prob kernels (row_kernels.hpp).
//
// Why hand-written: eager log_softmax in LibTorch 1.13 reads a row three times and its exp is the bottleneck, not
// memory. Here each row is read from memory once: it is processed in blocks of kBlock elements that stay in L1;
// per block, one sweep takes the max and one sweep sums exp(z − m) (and exp(z − m)·(z − m) for the entropy),
// rescaling the running sums whenever the max grows (online softmax, Milakov & Gimelshein 2018).
//
// Vectorisation: the exp is a Cephes-style polynomial (range reduction by ln 2, degree-7 polynomial, 2^n built in
// the exponent bits; max relative error ≈ 2 ulp) written on GCC vector types of 16 floats, and every reduction keeps
// 16 independent partial sums, so no -ffast-math is needed. The float entry points
// are compiled three times with GCC's target_clones (x86-64-v4 = AVX-512, x86-64-v3 = AVX2+FMA, and the baseline
// the library is built for) and the loader picks the best one for the CPU at run time, so a library built on one
// machine runs everywhere and uses the wide units where they exist. Other compilers or targets get one baseline
// build (still vectorised at the baseline width). LibTorch's at::vec::Vectorized<float> was not used: its AVX2 and
// AVX-512 specialisations are only compiled when CPU_CAPABILITY_* is defined, which would tie the library to one
// instruction set, and its Sleef exp is not part of the installed headers' inline code.
#include "row_kernels.hpp"
#include "vec_float.hpp"

#include <grpo/logprob/token_log_probs.hpp>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

namespace grpo::detail {
namespace {

using namespace vec;

constexpr int64_t kBlock = 2048;

/// The logits of a block as floats: float logits are read in place, others are converted into buf.
template <typename In>
GRPO_ALWAYS_INLINE const float* block_floats(const In* x, int64_t n, float* buf) {
  if constexpr (std::is_same_v<In, float>) {
    return x;
  } else {
    for (int64_t i = 0; i < n; ++i) buf[i] = static_cast<float>(x[i]);
    return buf;
  }
}

/// Float-compute forward (float, bfloat16, half logits), per block of kBlock logits: one vector sweep for the
/// max, one for Σ exp(z − m) and Σ exp(z − m)·(z − m), z = x·inv_t (inv_t > 0, so max z = inv_t·max x). A partial
/// last vector is padded with −inf, whose exp is exactly 0.
template <typename In, bool WithEntropy>
GRPO_ALWAYS_INLINE void forward_rows_vec(const RowForwardArgs& a, int64_t begin, int64_t end) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const In* base = static_cast<const In*>(a.logits);
  const float inv_t = static_cast<float>(a.inv_temperature);
  alignas(64) float buf[kBlock];
  for (int64_t row = begin; row < end; ++row) {
    const In* x = base + a.layout.offset(row);
    float m = kNegInf;
    double s = 0.0, q = 0.0;  // Σ exp(z − m) and Σ exp(z − m)·(z − m), across blocks in double
    for (int64_t v0 = 0; v0 < a.vocab; v0 += kBlock) {
      const int64_t n = a.vocab - v0 < kBlock ? a.vocab - v0 : kBlock;
      const int64_t n_vec = n - n % kVec;
      const float* src = block_floats(x + v0, n, buf);
      const bool has_tail = n_vec < n;
      const VecF tail = has_tail ? load_tail(src + n_vec, n - n_vec, kNegInf) : splat(kNegInf);
      VecF vmax = tail;
      for (int64_t i = 0; i < n_vec; i += kVec) {
        const VecF v = load(src + i);
        vmax = v > vmax ? v : vmax;
      }
      float block_max = kNegInf;
      for (int j = 0; j < kVec; ++j) block_max = vmax[j] > block_max ? vmax[j] : block_max;
      block_max *= inv_t;
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
      VecF vs{}, vq{};
      auto accumulate = [&](VecF v) __attribute__((always_inline)) {
        const VecF t = v * inv_t - m;
        const VecF e = fast_exp(t);
        vs += e;
        // e is exactly 0 where t < −87.3 (including −inf): clamping t keeps 0·(−inf) out of the sum.
        if constexpr (WithEntropy) vq += e * (t < -100.0f ? splat(-100.0f) : t);
      };
      for (int64_t i = 0; i < n_vec; i += kVec) accumulate(load(src + i));
      if (has_tail) accumulate(tail);
      for (int j = 0; j < kVec; ++j) {
        s += vs[j];
        if constexpr (WithEntropy) q += vq[j];
      }
    }
    const double log_s = std::log(s);
    const double lse = static_cast<double>(m) + log_s;
    const double target = static_cast<double>(static_cast<float>(x[a.ids[row]]) * inv_t);
    static_cast<float*>(a.lse)[row] = static_cast<float>(lse);
    static_cast<float*>(a.log_probs)[row] = static_cast<float>(target - lse);
    if constexpr (WithEntropy) static_cast<float*>(a.entropy)[row] = static_cast<float>(log_s - q / s);
  }
}

/// Float-compute backward. Float logits are read and written in place by whole vectors (each vector is read before
/// it is written, so grad may alias the logits); other dtypes go through a float block buffer.
template <typename In, bool WithEntropy>
GRPO_ALWAYS_INLINE void backward_rows_vec(const RowBackwardArgs& a, int64_t begin, int64_t end) {
  const In* base = static_cast<const In*>(a.logits);
  In* grad_base = static_cast<In*>(a.grad);
  const float inv_t = static_cast<float>(a.inv_temperature);
  const auto* lse = static_cast<const float*>(a.lse);
  const auto* g_lp = static_cast<const float*>(a.grad_log_probs);
  const auto* g_h = static_cast<const float*>(a.grad_entropy);
  const auto* entropy = static_cast<const float*>(a.entropy);
  alignas(64) float buf[kBlock];
  for (int64_t row = begin; row < end; ++row) {
    const In* x = base + a.layout.offset(row);
    In* out = grad_base + a.grad_layout.offset(row);
    const float g = g_lp != nullptr ? g_lp[row] : 0.0f;
    const float gh = WithEntropy ? g_h[row] : 0.0f;
    if (g == 0.0f && gh == 0.0f) {
      for (int64_t v = 0; v < a.vocab; ++v) out[v] = In(0);
      continue;
    }
    const float l = lse[row];
    const float h = WithEntropy ? entropy[row] : 0.0f;
    // The target's term is computed before the sweep, which may overwrite x when grad aliases the logits.
    const int64_t id = a.ids[row];
    const float t_id = static_cast<float>(x[id]) * inv_t - l;
    const float p_id = std::exp(t_id);
    const float d_id = (g * (1.0f - p_id) - (WithEntropy ? gh * p_id * (t_id + h) : 0.0f)) * inv_t;
    // −p·(g + g_h·(log p + H))·inv_t = −p·(c0 + c1·log p) with c0 = (g + g_h·H)·inv_t, c1 = g_h·inv_t
    const float c0 = (g + gh * h) * inv_t, c1 = gh * inv_t;
    auto grad_of = [&](VecF v) __attribute__((always_inline)) {
      const VecF t = v * inv_t - l;
      const VecF p = fast_exp(t);
      if constexpr (WithEntropy) return -p * (c0 + c1 * (t < -100.0f ? splat(-100.0f) : t));
      return -p * c0;
    };
    for (int64_t v0 = 0; v0 < a.vocab; v0 += kBlock) {
      const int64_t n = a.vocab - v0 < kBlock ? a.vocab - v0 : kBlock;
      const int64_t n_vec = n - n % kVec;
      const float* src = block_floats(x + v0, n, buf);
      float* dst = std::is_same_v<In, float> ? reinterpret_cast<float*>(out + v0) : buf;
      for (int64_t i = 0; i < n_vec; i += kVec) store(dst + i, grad_of(load(src + i)));
      if (n_vec < n) {
        alignas(64) float tail[kVec];
        store(tail, grad_of(load_tail(src + n_vec, n - n_vec, 0.0f)));
        for (int64_t i = n_vec; i < n; ++i) dst[i] = tail[i - n_vec];
      }
      if constexpr (!std::is_same_v<In, float>) {
        for (int64_t i = 0; i < n; ++i) out[v0 + i] = static_cast<In>(buf[i]);
      }
    }
    out[id] = static_cast<In>(d_id);
  }
}

// float64 logits (tests, references): the same algorithm in plain scalar double code with std::exp.
/// One row: online max / Σ exp / Σ exp·(z − m) over blocks, then the target logit.
template <typename In, bool WithEntropy>
void forward_rows(const RowForwardArgs& a, int64_t begin, int64_t end) {
  using Acc = In;
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
      Acc block_max = kNegInf;
      for (int64_t i = 0; i < n; ++i) {
        z[i] = static_cast<Acc>(x[v0 + i]) * inv_t;
        block_max = z[i] > block_max ? z[i] : block_max;
      }
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
      for (int64_t i = 0; i < n; ++i) {
        const Acc t = z[i] - m;
        const Acc e = std::exp(t);
        s += e;
        if constexpr (WithEntropy) q += e * (t < -1e300 ? Acc(0) : t);
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
void backward_rows(const RowBackwardArgs& a, int64_t begin, int64_t end) {
  using Acc = In;
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
    const Acc p_id = std::exp(t_id);
    const Acc d_id = (g * (Acc(1) - p_id) - (WithEntropy ? gh * p_id * (t_id + h) : Acc(0))) * inv_t;
    // −p·(g + g_h·(log p + H))·inv_t = −p·(c0 + c1·log p) with c0 = (g + g_h·H)·inv_t, c1 = g_h·inv_t
    const Acc c0 = (g + gh * h) * inv_t, c1 = gh * inv_t;
    // Through a block buffer, as in the float path, so that grad may alias the logits.
    for (int64_t v0 = 0; v0 < a.vocab; v0 += kBlock) {
      const int64_t n = a.vocab - v0 < kBlock ? a.vocab - v0 : kBlock;
      for (int64_t i = 0; i < n; ++i) buf[i] = static_cast<Acc>(x[v0 + i]);
      for (int64_t i = 0; i < n; ++i) {
        const Acc t = buf[i] * inv_t - l;
        const Acc p = std::exp(t);
        buf[i] = WithEntropy ? -p * (c0 + c1 * (t < -1e300 ? Acc(0) : t)) : -p * c0;
      }
      for (int64_t i = 0; i < n; ++i) out[v0 + i] = static_cast<In>(buf[i]);
    }
    out[id] = static_cast<In>(d_id);
  }
}

template <typename In>
GRPO_ALWAYS_INLINE void forward_dispatch(const RowForwardArgs& a, int64_t begin, int64_t end) {
  if constexpr (std::is_same_v<In, double>) {
    if (a.entropy != nullptr) return forward_rows<In, true>(a, begin, end);
    return forward_rows<In, false>(a, begin, end);
  } else {
    if (a.entropy != nullptr) return forward_rows_vec<In, true>(a, begin, end);
    return forward_rows_vec<In, false>(a, begin, end);
  }
}

template <typename In>
GRPO_ALWAYS_INLINE void backward_dispatch(const RowBackwardArgs& a, int64_t begin, int64_t end) {
  if constexpr (std::is_same_v<In, double>) {
    if (a.grad_entropy != nullptr) return backward_rows<In, true>(a, begin, end);
    return backward_rows<In, false>(a, begin, end);
  } else {
    if (a.grad_entropy != nullptr) return backward_rows_vec<In, true>(a, begin, end);
    return backward_rows_vec<In, false>(a, begin, end);
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

}  // namespace grpo::detail

namespace grpo {

const char* log_prob_kernel_isa() {
  switch (detail::vector_isa()) {
    case detail::VectorIsa::x86_64_v4:
      return "x86-64-v4 (AVX-512)";
    case detail::VectorIsa::x86_64_v3:
      return "x86-64-v3 (AVX2+FMA)";
    case detail::VectorIsa::baseline:
      break;
  }
  return "baseline";
}

}  // namespace grpo
