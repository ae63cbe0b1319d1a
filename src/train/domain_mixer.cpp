// SPDX-License-Identifier: Apache-2.0
#include <grpo/core/error.hpp>
#include <grpo/core/permutation.hpp>
#include <grpo/train/domain_mixer.hpp>

#include <cmath>
#include <random>

namespace grpo::train {
namespace {

// Independent streams for the remainder draw and the slot order of each step (splitmix64's finaliser over the seed
// and step, so neighbouring steps do not get neighbouring generator seeds).
std::uint64_t mix(std::uint64_t seed, std::int64_t step, std::uint64_t salt) {
  std::uint64_t x = seed ^ (static_cast<std::uint64_t>(step) * 0x9E3779B97F4A7C15ULL) ^ salt;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

}  // namespace

DomainMixer::DomainMixer(DomainMixerOptions options) : seed_(options.seed) {
  GRPO_CHECK_CONFIG(!options.probabilities.empty(), "DomainMixer: no domains");
  double sum = 0.0;
  for (std::size_t d = 0; d < options.probabilities.size(); ++d) {
    const double p = options.probabilities[d];
    GRPO_CHECK_CONFIG(std::isfinite(p) && p >= 0.0, "DomainMixer: probability of domain {} must be finite and >= 0, got {}",
                      d, p);
    sum += p;
  }
  GRPO_CHECK_CONFIG(sum > 0.0, "DomainMixer: the domain probabilities sum to 0");
  for (const double p : options.probabilities) probabilities_.push_back(p / sum);
}

std::vector<std::int64_t> DomainMixer::counts(std::int64_t step, std::int64_t prompts) const {
  GRPO_CHECK_CONFIG(prompts >= 0, "DomainMixer::counts: prompts must be >= 0, got {}", prompts);
  const std::size_t n = probabilities_.size();
  std::vector<std::int64_t> out(n);
  std::vector<double> remainder(n);
  std::int64_t assigned = 0;
  double remainder_sum = 0.0;
  for (std::size_t d = 0; d < n; ++d) {
    const double share = static_cast<double>(prompts) * probabilities_[d];
    out[d] = static_cast<std::int64_t>(std::floor(share));
    remainder[d] = share - static_cast<double>(out[d]);
    assigned += out[d];
    remainder_sum += remainder[d];
  }
  const std::int64_t extra = prompts - assigned;  // = Σ remainders, an integer up to rounding
  if (extra <= 0 || remainder_sum <= 0.0) return out;
  // Systematic sampling: points u, u+1, ..., u+extra−1 over the remainders laid end to end (rescaled to sum to
  // `extra` exactly). Each remainder is < 1, so it holds at most one point, with probability equal to its length.
  std::mt19937_64 generator(mix(seed_, step, 0x6d69786572ULL));
  const double u = static_cast<double>(generator() >> 11) * 0x1.0p-53;
  const double scale = static_cast<double>(extra) / remainder_sum;
  double cumulative = 0.0;
  std::int64_t next_point = 0;
  std::size_t last_positive = 0;
  for (std::size_t d = 0; d < n && next_point < extra; ++d) {
    if (remainder[d] <= 0.0) continue;
    last_positive = d;
    cumulative += remainder[d] * scale;
    if (u + static_cast<double>(next_point) < cumulative) {
      ++out[d];
      ++next_point;
    }
  }
  // Rounding may leave the last point just past the end: it belongs to the last domain with a remainder.
  if (next_point < extra) out[last_positive] += extra - next_point;
  return out;
}

std::vector<std::size_t> DomainMixer::assignment(std::int64_t step, std::int64_t prompts) const {
  const std::vector<std::int64_t> per_domain = counts(step, prompts);
  std::vector<std::size_t> slots;
  slots.reserve(static_cast<std::size_t>(prompts));
  for (std::size_t d = 0; d < per_domain.size(); ++d) slots.insert(slots.end(), static_cast<std::size_t>(per_domain[d]), d);
  const std::vector<std::size_t> order = seeded_permutation(slots.size(), mix(seed_, step, 0x736c6f7473ULL));
  std::vector<std::size_t> out(slots.size());
  for (std::size_t i = 0; i < slots.size(); ++i) out[i] = slots[order[i]];
  return out;
}

}  // namespace grpo::train
