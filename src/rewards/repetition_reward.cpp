// SPDX-License-Identifier: Apache-2.0
// n-gram repetition penalty (see repetition_reward.hpp).
#include <grpo/core/error.hpp>
#include <grpo/rewards/repetition_reward.hpp>

#include "text_scan.hpp"

#include <cmath>
#include <functional>
#include <string>
#include <unordered_set>
#include <vector>

namespace grpo::rewards {
namespace {

// Counts the distinct n-grams of `items` exactly: n-grams are keyed by their start index, hashed by combining the
// element hashes and compared element by element, so no copies are made and hash collisions cannot merge n-grams.
template <typename ItemType>
double penalty_of(std::span<const ItemType> items, const RepetitionOptions& options) {
  const std::size_t n = options.ngram_size;
  if (items.size() < n || items.empty()) return 0.0;
  const std::size_t total = items.size() - n + 1;
  std::vector<std::size_t> item_hash(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) item_hash[i] = std::hash<ItemType>{}(items[i]);
  const auto hash = [&](std::size_t start) {
    std::size_t h = 0;
    for (std::size_t k = 0; k < n; ++k) h = h * 1099511628211ULL + item_hash[start + k] + 0x9e3779b97f4a7c15ULL;
    return h;
  };
  const auto equal = [&](std::size_t a, std::size_t b) {
    for (std::size_t k = 0; k < n; ++k) {
      if (!(items[a + k] == items[b + k])) return false;
    }
    return true;
  };
  std::unordered_set<std::size_t, decltype(hash), decltype(equal)> unique(total, hash, equal);
  for (std::size_t start = 0; start < total; ++start) unique.insert(start);
  const double scaling = 1.0 - static_cast<double>(unique.size()) / static_cast<double>(total);
  return scaling * options.max_penalty;
}

}  // namespace

double repetition_penalty(std::string_view text, const RepetitionOptions& options) {
  if (text.empty()) return 0.0;
  std::string lowered(text);
  for (char& c : lowered) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  const std::vector<std::string_view> words = detail::split_python_whitespace(lowered);
  return penalty_of(std::span<const std::string_view>(words), options);
}

double repetition_penalty(std::span<const std::int64_t> token_ids, const RepetitionOptions& options) {
  return penalty_of(token_ids, options);
}

RepetitionReward::RepetitionReward(RepetitionOptions options) : options_(options) {
  GRPO_CHECK_CONFIG(options_.ngram_size >= 1, "repetition: ngram_size must be >= 1, got {}", options_.ngram_size);
  GRPO_CHECK_CONFIG(options_.max_penalty <= 0.0 && std::isfinite(options_.max_penalty),
                    "repetition: max_penalty must be a finite value <= 0 (it is a penalty), got {}",
                    options_.max_penalty);
}

std::vector<std::optional<float>> RepetitionReward::score(std::span<const Completion> batch,
                                                          const ScoringContext& /*context*/) const {
  std::vector<std::optional<float>> values;
  values.reserve(batch.size());
  for (const Completion& completion : batch) {
    const double penalty = options_.unit == RepetitionUnit::words
                               ? repetition_penalty(completion.text, options_)
                               : repetition_penalty(std::span<const std::int64_t>(completion.token_ids), options_);
    values.emplace_back(static_cast<float>(penalty));
  }
  return values;
}

}  // namespace grpo::rewards
