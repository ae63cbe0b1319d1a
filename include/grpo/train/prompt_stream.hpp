// SPDX-License-Identifier: Apache-2.0
// An endless, reshuffled pass over a domain's prompts: epoch e visits items 0 .. n−1 in seeded_permutation(n,
// seed + e), and a domain that runs out starts its next epoch in a new order (ROLL recycles a domain's data the same
// way). The only state is the position (items drawn so far), so a checkpoint stores one integer. Torch-free.
#pragma once

#include <grpo/core/error.hpp>
#include <grpo/core/permutation.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace grpo::train {

class PromptStream {
 public:
  /// Throws ConfigError for an empty stream.
  PromptStream(std::size_t size, std::uint64_t seed) : size_(size), seed_(seed) {
    GRPO_CHECK_CONFIG(size > 0, "PromptStream: no items");
  }

  /// The next item.
  std::size_t next() { return item_at(position_++); }

  /// The next item for which accept(item) is true, looking at most one epoch's length ahead; the items passed over
  /// are consumed (they come back next epoch). nullopt when none of the next size() items is accepted; the position
  /// is then left where it was, so the caller can retry with a looser test.
  template <typename PredicateType>
  std::optional<std::size_t> next_accepted(PredicateType&& accept) {
    for (std::uint64_t offset = 0; offset < size_; ++offset) {
      const std::size_t item = item_at(position_ + offset);
      if (accept(item)) {
        position_ += offset + 1;
        return item;
      }
    }
    return std::nullopt;
  }

  std::size_t size() const { return size_; }
  std::uint64_t position() const { return position_; }
  std::uint64_t epoch() const { return position_ / size_; }
  /// Restores a position saved from position() (a checkpoint).
  void set_position(std::uint64_t position) { position_ = position; }

 private:
  std::size_t item_at(std::uint64_t position) const {
    const std::uint64_t epoch = position / size_;
    if (!order_epoch_ || *order_epoch_ != epoch) {
      order_ = seeded_permutation(size_, seed_ + epoch);
      order_epoch_ = epoch;
    }
    return order_[static_cast<std::size_t>(position % size_)];
  }

  std::size_t size_;
  std::uint64_t seed_;
  std::uint64_t position_ = 0;
  mutable std::vector<std::size_t> order_;
  mutable std::optional<std::uint64_t> order_epoch_;
};

}  // namespace grpo::train
