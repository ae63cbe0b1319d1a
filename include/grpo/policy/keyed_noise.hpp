// SPDX-License-Identifier: Apache-2.0
// Counter-based sampling noise: the exponential noise of the sampler's race (token = argmax p / E, E ~ Exp(1), which
// is torch.multinomial's draw of one sample) as a pure function of (stream, prompt key, sample index, decode
// position, vocabulary index), so a completion depends only on its key and its logits: not on which other rows share
// its batch, the rank it runs on, the chunk it is sampled in, or the device.
//
// The bits come from Philox4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel Random Numbers: As Easy as 1, 2, 3",
// SC'11; the generator of LibTorch's CUDA/CPU philox engine and of JAX): 10 rounds over a 128-bit counter under a
// 64-bit key. Here, for row a and vocabulary index v:
//
//   key     = prompt_noise_key(stream, prompt key) (64 bits: low word, high word)
//   counter = (v / 4, position, sample, 0), lane v % 4 of the output
//   u       = (2·(bits >> 9) + 1) · 2^-24    (odd multiples of 2^-24: exactly representable, strictly inside (0, 1))
//   E       = −log(u) in float32
//
// keyed_exponential evaluates it with tensor operations on any device; keyed_race fuses it with the race on the CPU,
// computing log and division only for the entries that can still win (−log u ≥ 1 − u bounds the rest), and equals
// (probs / keyed_exponential(...)).argmax(-1) wherever the two logs round alike (float32 log is accurate to an ulp).
#pragma once

#include <torch/torch.h>

#include <array>
#include <cstdint>

namespace grpo {

/// Philox4x32-10 of one 128-bit counter under one 64-bit key (Random123's philox4x32 with 10 rounds).
inline std::array<std::uint32_t, 4> philox4x32_10(std::array<std::uint32_t, 4> counter,
                                                  std::array<std::uint32_t, 2> key) {
  constexpr std::uint64_t m0 = 0xD2511F53u, m1 = 0xCD9E8D57u;
  for (int round = 0; round < 10; ++round) {
    const std::uint64_t p0 = m0 * counter[0], p1 = m1 * counter[2];
    counter = {static_cast<std::uint32_t>(p1 >> 32) ^ counter[1] ^ key[0], static_cast<std::uint32_t>(p1),
               static_cast<std::uint32_t>(p0 >> 32) ^ counter[3] ^ key[1], static_cast<std::uint32_t>(p0)};
    key = {key[0] + 0x9E3779B9u, key[1] + 0xBB67AE85u};
  }
  return counter;
}

/// The 64-bit Philox key of one prompt's completions: splitmix64 over the stream (the sampler's seed, which the
/// trainer derives from the run's seed, the step and the dynamic-sampling round) and the prompt's key (its index in
/// the step's global batch, or in the held-out set).
std::uint64_t prompt_noise_key(std::uint64_t stream, std::uint64_t prompt_key);

/// E ~ Exp(1) as above for rows with Philox keys `keys` ([A] int64, the 64-bit keys' bits) and sample indices
/// `samples` ([A] int64, ≥ 0), at decode position `position` (≥ 0), over `vocab` entries: [A, vocab] float32 on
/// `device` (keys and samples may live anywhere). Tensor operations only, so any device computes the same bits.
torch::Tensor keyed_exponential(const torch::Tensor& keys, const torch::Tensor& samples, std::int64_t position,
                                std::int64_t vocab, const torch::Device& device);

/// argmax_v probs[a, v] / E[a, v] (the first index among equals), E as keyed_exponential's: probs [A, V] float32
/// (≥ 0, rows of a distribution after any filtering; zeros never win unless the whole row is 0), keys and samples [A]
/// int64. Returns [A] int64 on probs' device. On the CPU a fused kernel (rows in parallel, no [A, V] noise tensor);
/// elsewhere the tensor-operation form.
torch::Tensor keyed_race(const torch::Tensor& probs, const torch::Tensor& keys, const torch::Tensor& samples,
                         std::int64_t position);

}  // namespace grpo
