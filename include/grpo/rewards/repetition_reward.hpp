// SPDX-License-Identifier: Apache-2.0
// The n-gram repetition penalty (open-r1 `get_repetition_penalty_reward` on words, TRL's on token ids;
// open-r1 src/open_r1/rewards.py get_repetition_penalty_reward): r = (1 − |unique n-grams| / |n-grams|) · max_penalty,
// in [max_penalty, 0].
#pragma once

#include <grpo/core/enum_names.hpp>
#include <grpo/rewards/reward_function.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace grpo::rewards {

/// What the n-grams are made of.
enum class RepetitionUnit {
  words,   ///< open-r1: text.lower().split() (ASCII lowercasing, Python's whitespace set including Unicode spaces)
  tokens,  ///< TRL: the completion's token ids
};

namespace detail {
inline constexpr ::grpo::detail::EnumNames<RepetitionUnit, 2> kRepetitionUnitNames{{
    {RepetitionUnit::words, "words"},
    {RepetitionUnit::tokens, "tokens"},
}};
}  // namespace detail

/// "words" or "tokens".
GRPO_ENUM_NAMES(RepetitionUnit, detail::kRepetitionUnitNames, "repetition unit");

struct RepetitionOptions {
  std::size_t ngram_size = 3;   ///< n (open-r1 and TRL default 3)
  double max_penalty = -0.1;    ///< the value of a completion made of one repeated n-gram; must be <= 0
                                ///< (seed recipe −0.1; open-r1 and TRL default −1.0)
  RepetitionUnit unit = RepetitionUnit::words;
};

/// (1 − unique/total)·max_penalty over the n-grams of the words of `text`; 0 for empty text or fewer than n words.
double repetition_penalty(std::string_view text, const RepetitionOptions& options);

/// The same over a token id sequence; 0 for fewer than n ids.
double repetition_penalty(std::span<const std::int64_t> token_ids, const RepetitionOptions& options);

/// repetition_penalty of each completion. Always has a value. Throws ConfigError for ngram_size 0 or
/// max_penalty > 0.
class RepetitionReward final : public RewardFunction {
 public:
  explicit RepetitionReward(RepetitionOptions options = {});
  std::string name() const override { return "repetition"; }
  std::vector<std::optional<float>> score(std::span<const Completion> batch,
                                          const ScoringContext& context) const override;
  const RepetitionOptions& options() const { return options_; }

 private:
  RepetitionOptions options_;
};

}  // namespace grpo::rewards
