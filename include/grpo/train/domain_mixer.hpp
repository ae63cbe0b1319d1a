// SPDX-License-Identifier: Apache-2.0
// Domain mixing for multi-domain runs (ROLL's `domain_interleave_probs`, verl's `data.prompt_probs`): how many of a
// step's P prompts each domain supplies, and in which slots.
//
// ROLL gives domain d the fixed share int(P·p_d) and hands the rounding remainder to the first domains, which biases
// every step the same way. Here domain d gets ⌊P·p_d⌋ prompts plus one more with probability equal to the fractional
// part of P·p_d (systematic sampling of the remainders with one uniform draw per step), so
//   E[count_d] = P·p_d exactly,   |count_d − P·p_d| < 1 every step,   Σ_d count_d = P,
// and the slot order is a seeded permutation, so data-parallel ranks (which take contiguous slots) get a mix too.
// Everything is a pure function of (seed, step, P): a resumed run draws the same mixes. Torch-free.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace grpo::train {

struct DomainMixerOptions {
  /// One weight per domain, ≥ 0, not all 0; normalised to sum 1 (so {3, 1} means 75% / 25%).
  std::vector<double> probabilities;
  std::uint64_t seed = 0;
};

class DomainMixer {
 public:
  /// Throws ConfigError for no domains, a negative or non-finite weight, or weights summing to 0.
  explicit DomainMixer(DomainMixerOptions options);

  std::size_t domains() const { return probabilities_.size(); }
  /// The normalised probabilities.
  const std::vector<double>& probabilities() const { return probabilities_; }

  /// [D] prompts per domain for `step` out of `prompts` (see the file comment). Throws ConfigError for prompts < 0.
  std::vector<std::int64_t> counts(std::int64_t step, std::int64_t prompts) const;
  /// [prompts] the domain index of each prompt slot of `step`: counts(step, prompts) in a seeded random order.
  std::vector<std::size_t> assignment(std::int64_t step, std::int64_t prompts) const;

 private:
  std::vector<double> probabilities_;
  std::uint64_t seed_;
};

}  // namespace grpo::train
