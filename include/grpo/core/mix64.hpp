// SPDX-License-Identifier: Apache-2.0
// 64-bit mixing shared by the data-parallel sources and the keyed sampling noise: splitmix64 for seeds and hash
// finalising, FNV-1a for strings.
#pragma once

#include <cstdint>
#include <string>

namespace grpo {

// splitmix64 (Steele, Lea, Flood 2014): mixes a 64-bit state into a well-spread value.
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
};

// FNV-1a of a string: the same on every rank and every run (std::hash is not specified to be).
inline int64_t string_hash(const std::string& text) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : text) h = (h ^ c) * 0x100000001B3ull;
  return static_cast<int64_t>(h);
}

}  // namespace grpo
