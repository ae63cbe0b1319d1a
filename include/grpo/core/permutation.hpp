// SPDX-License-Identifier: Apache-2.0
// The library's one seeded shuffle, identical with every compiler, standard library and machine.
#pragma once

#include <cstddef>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

namespace grpo {

/// A permutation of 0 .. n−1 that depends only on n and the seed: Fisher–Yates driven by std::mt19937_64 (whose
/// output the C++ standard fixes; std::shuffle and the distributions are not portable), j = draw mod (i + 1), whose
/// bias is below 2^-40 for any in-memory data set. io::Dataset::shuffled(seed) orders its examples this way, and
/// train::shard_prompt_indices draws epoch e as seeded_permutation(n, seed + e).
inline std::vector<std::size_t> seeded_permutation(std::size_t n, std::uint64_t seed) {
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::mt19937_64 generator(seed);
  for (std::size_t i = n; i > 1; --i) {
    const std::size_t j = static_cast<std::size_t>(generator() % i);
    std::swap(order[i - 1], order[j]);
  }
  return order;
}

}  // namespace grpo
