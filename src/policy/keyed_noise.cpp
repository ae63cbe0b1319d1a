// SPDX-License-Identifier: Apache-2.0
// keyed_noise.hpp: Philox4x32-10 as tensor operations (any device) and fused with the sampler's race on the CPU.
#include <grpo/core/error.hpp>
#include <grpo/core/mix64.hpp>
#include <grpo/core/tensor_checks.hpp>
#include <grpo/policy/keyed_noise.hpp>

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace grpo {

namespace {

constexpr std::uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u, kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
constexpr float kTwoToMinus24 = 1.0f / 16777216.0f;

/// u in (0, 1) from 32 random bits: an odd multiple of 2^-24, exact in float32.
inline float uniform_of(std::uint32_t bits) {
  return static_cast<float>(((bits >> 9) << 1) | 1u) * kTwoToMinus24;
}

/// Philox4x32-10 of kPhiloxLanes counters at once (structure of arrays, in place) under one key's round keys: lanes in
/// the inner loop so the compiler vectorises it, built for AVX-512, AVX2 and the baseline (chosen at run time).
constexpr std::int64_t kPhiloxLanes = 64;
__attribute__((target_clones("avx512f", "avx2", "default"))) void philox_lanes(
    std::uint32_t* __restrict c0, std::uint32_t* __restrict c1, std::uint32_t* __restrict c2,
    std::uint32_t* __restrict c3, const std::uint32_t* __restrict k0, const std::uint32_t* __restrict k1) {
  for (int round = 0; round < 10; ++round) {
    for (std::int64_t i = 0; i < kPhiloxLanes; ++i) {
      const std::uint64_t p0 = static_cast<std::uint64_t>(kM0) * c0[i];
      const std::uint64_t p1 = static_cast<std::uint64_t>(kM1) * c2[i];
      const auto n0 = static_cast<std::uint32_t>(p1 >> 32) ^ c1[i] ^ k0[round];
      const auto n2 = static_cast<std::uint32_t>(p0 >> 32) ^ c3[i] ^ k1[round];
      c1[i] = static_cast<std::uint32_t>(p1);
      c3[i] = static_cast<std::uint32_t>(p0);
      c0[i] = n0;
      c2[i] = n2;
    }
  }
}

void check_rows(const torch::Tensor& keys, const torch::Tensor& samples, std::int64_t rows, std::int64_t position,
                std::string_view what) {
  GRPO_CHECK(keys.dim() == 1 && keys.scalar_type() == torch::kInt64 && keys.size(0) == rows,
             "{}: keys must be [A] = [{}] int64, got {} {}", what, rows, shape_str(keys), c10::toString(keys.scalar_type()));
  GRPO_CHECK(samples.dim() == 1 && samples.scalar_type() == torch::kInt64 && samples.size(0) == rows,
             "{}: samples must be [A] = [{}] int64, got {} {}", what, rows, shape_str(samples), c10::toString(samples.scalar_type()));
  GRPO_CHECK(position >= 0, "{}: position must be >= 0, got {}", what, position);
}

/// Low 32 bits (as int64 in [0, 2^32)) and high 32 bits of m · c for c in [0, 2^32), without int64 overflow: c is
/// split into 16-bit halves so every partial product stays below 2^48.
std::pair<torch::Tensor, torch::Tensor> mulhilo(std::uint32_t m, const torch::Tensor& c) {
  constexpr std::int64_t mask16 = 0xFFFF, mask32 = 0xFFFFFFFF;
  const auto m64 = static_cast<std::int64_t>(m);
  const torch::Tensor a = c.bitwise_and(mask16) * m64, b = c.__rshift__(16) * m64;
  const torch::Tensor lo = (b.bitwise_and(mask16).__lshift__(16) + a).bitwise_and(mask32);
  const torch::Tensor hi = (b + a.__rshift__(16)).__rshift__(16);
  return {lo, hi};
}

}  // namespace

std::uint64_t prompt_noise_key(std::uint64_t stream, std::uint64_t prompt_key) {
  SplitMix64 mix{SplitMix64{stream}.next() ^ prompt_key};
  return mix.next();
}

torch::Tensor keyed_exponential(const torch::Tensor& keys, const torch::Tensor& samples, std::int64_t position,
                                std::int64_t vocab, const torch::Device& device) {
  constexpr std::string_view kWhat = "keyed_exponential";
  const std::int64_t rows = keys.dim() == 1 ? keys.size(0) : -1;
  check_rows(keys, samples, rows, position, kWhat);
  GRPO_CHECK(vocab >= 1, "{}: vocab must be >= 1, got {}", kWhat, vocab);
  constexpr std::int64_t mask32 = 0xFFFFFFFF;
  const auto options = torch::TensorOptions().dtype(torch::kInt64).device(device);
  const std::int64_t blocks = (vocab + 3) / 4;
  const torch::Tensor key64 = keys.to(device).unsqueeze(1);
  torch::Tensor k0 = key64.bitwise_and(mask32), k1 = key64.__rshift__(32).bitwise_and(mask32);
  const torch::Tensor zeros = torch::zeros({rows, blocks}, options);
  torch::Tensor c0 = torch::arange(blocks, options).unsqueeze(0) + zeros;
  torch::Tensor c1 = torch::full({rows, blocks}, position & mask32, options);
  torch::Tensor c2 = samples.to(device).bitwise_and(mask32).unsqueeze(1) + zeros;
  torch::Tensor c3 = zeros;
  for (int round = 0; round < 10; ++round) {
    auto [lo0, hi0] = mulhilo(kM0, c0);
    auto [lo1, hi1] = mulhilo(kM1, c2);
    torch::Tensor n0 = hi1.bitwise_xor(c1).bitwise_xor(k0), n2 = hi0.bitwise_xor(c3).bitwise_xor(k1);
    c0 = std::move(n0);
    c1 = std::move(lo1);
    c2 = std::move(n2);
    c3 = std::move(lo0);
    k0 = (k0 + static_cast<std::int64_t>(kW0)).bitwise_and(mask32);
    k1 = (k1 + static_cast<std::int64_t>(kW1)).bitwise_and(mask32);
  }
  const torch::Tensor bits = torch::stack({c0, c1, c2, c3}, -1).reshape({rows, blocks * 4}).narrow(1, 0, vocab);
  const torch::Tensor u = (bits.__rshift__(9).__lshift__(1) + 1).to(torch::kFloat32) * kTwoToMinus24;
  return -torch::log(u);
}

torch::Tensor keyed_race(const torch::Tensor& probs, const torch::Tensor& keys, const torch::Tensor& samples,
                         std::int64_t position) {
  constexpr std::string_view kWhat = "keyed_race";
  GRPO_CHECK(probs.dim() == 2 && probs.scalar_type() == torch::kFloat32,
             "{}: probs must be [A, V] float32, got {} {}", kWhat, shape_str(probs), c10::toString(probs.scalar_type()));
  const std::int64_t rows = probs.size(0), vocab = probs.size(1);
  check_rows(keys, samples, rows, position, kWhat);
  if (!probs.device().is_cpu() || vocab == 0) {
    return probs.div(keyed_exponential(keys, samples, position, vocab, probs.device())).argmax(-1);
  }
  const torch::Tensor p = probs.contiguous();
  const torch::Tensor key_values = keys.to(torch::kCPU).contiguous(), sample_values = samples.to(torch::kCPU).contiguous();
  torch::Tensor out = torch::empty({rows}, torch::kInt64);
  const float* data = p.data_ptr<float>();
  const std::int64_t* key_data = key_values.data_ptr<std::int64_t>();
  const std::int64_t* sample_data = sample_values.data_ptr<std::int64_t>();
  std::int64_t* out_data = out.data_ptr<std::int64_t>();
  const std::int64_t blocks = (vocab + 3) / 4;
  constexpr std::int64_t kLanes = kPhiloxLanes;
  // E ≥ 1 − u, and float32 log is within an ulp: an entry with p ≤ best·(1 − u)·(1 − 1e-5) cannot win.
  constexpr float kBoundMargin = 1.0f - 1e-5f;
  at::parallel_for(0, rows, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t a = begin; a < end; ++a) {
      const float* row = data + a * vocab;
      const auto key = static_cast<std::uint64_t>(key_data[a]);
      const auto sample = static_cast<std::uint32_t>(static_cast<std::uint64_t>(sample_data[a]));
      const auto pos = static_cast<std::uint32_t>(static_cast<std::uint64_t>(position));
      float best = 0.0f;
      std::int64_t best_index = 0;
      std::uint32_t key_schedule[2][10];
      for (int round = 0; round < 10; ++round) {
        key_schedule[0][round] = static_cast<std::uint32_t>(key) + static_cast<std::uint32_t>(round) * kW0;
        key_schedule[1][round] = static_cast<std::uint32_t>(key >> 32) + static_cast<std::uint32_t>(round) * kW1;
      }
      for (std::int64_t b0 = 0; b0 < blocks; b0 += kLanes) {
        std::uint32_t c0[kLanes], c1[kLanes], c2[kLanes], c3[kLanes];
        for (std::int64_t i = 0; i < kLanes; ++i) {
          c0[i] = static_cast<std::uint32_t>(b0 + i);
          c1[i] = pos;
          c2[i] = sample;
          c3[i] = 0;
        }
        philox_lanes(c0, c1, c2, c3, key_schedule[0], key_schedule[1]);
        const std::int64_t last = std::min(blocks, b0 + kLanes);
        for (std::int64_t b = b0; b < last; ++b) {
          const std::uint32_t lanes[4] = {c0[b - b0], c1[b - b0], c2[b - b0], c3[b - b0]};
          const std::int64_t first = b * 4, count = std::min<std::int64_t>(4, vocab - first);
          for (std::int64_t j = 0; j < count; ++j) {
            const float prob = row[first + j];
            if (!(prob > 0.0f)) continue;
            const float u = uniform_of(lanes[j]);
            if (prob <= best * (1.0f - u) * kBoundMargin) continue;
            const float score = prob / -std::log(u);
            if (score > best) {
              best = score;
              best_index = first + j;
            }
          }
        }
      }
      out_data[a] = best_index;
    }
  });
  return out.to(probs.device());
}

}  // namespace grpo
