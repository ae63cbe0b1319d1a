// SPDX-License-Identifier: Apache-2.0
#include <grpo/rewards/repetition_reward.hpp>

#include "rewards/reward_testing.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace {

using namespace grpo::rewards;
using grpo::rewards::testing::completions;
using grpo::rewards::testing::require_values;
using grpo::rewards::testing::score;

TEST_CASE("repetition on words: (1 − unique/total)·max_penalty", "[rewards][repetition]") {
  const RepetitionOptions defaults;  // n = 3, max_penalty = −0.1
  // 6 words → 4 trigrams (a b c)(b c a)(c a b)(a b c), 3 unique: (1 − 3/4)·(−0.1) = −0.025.
  CHECK(repetition_penalty("a b c a b c", defaults) == Approx(-0.025));
  // Lowercased: "the the the the" → 2 trigrams, 1 unique: (1 − 1/2)·(−0.1) = −0.05.
  CHECK(repetition_penalty("The the THE the", defaults) == Approx(-0.05));
  CHECK(repetition_penalty("a b c d e", defaults) == 0.0);  // all unique
  CHECK(repetition_penalty("", defaults) == 0.0);            // empty completion
  CHECK(repetition_penalty("   \n\t ", defaults) == 0.0);   // no words
  CHECK(repetition_penalty("a b", defaults) == 0.0);         // fewer words than n
  CHECK(repetition_penalty("a a a", defaults) == 0.0);       // exactly n words: one trigram, unique
  // Python str.split() also splits on U+00A0 (no-break space) and U+3000: "a\u00a0a\u3000a" is 3 words;
  // n = 1: 3 unigrams, 1 unique: (1 − 1/3)·(−0.1).
  CHECK(repetition_penalty("a\xc2\xa0" "a\xe3\x80\x80" "a", {.ngram_size = 1}) == Approx(-0.2 / 3.0));
  // open-r1's and TRL's default max_penalty −1.0: "x y x y" with n = 2 → (x y)(y x)(x y): 1 − 2/3 = 1/3 → −1/3.
  CHECK(repetition_penalty("x y x y", {.ngram_size = 2, .max_penalty = -1.0}) == Approx(-1.0 / 3.0));
}

TEST_CASE("repetition on token ids", "[rewards][repetition]") {
  const std::vector<std::int64_t> ids{1, 2, 1, 2, 1, 2};
  // n = 2: (1,2)(2,1)(1,2)(2,1)(1,2): 5 bigrams, 2 unique → (1 − 2/5)·(−1) = −0.6.
  CHECK(repetition_penalty(ids, {.ngram_size = 2, .max_penalty = -1.0}) == Approx(-0.6));
  CHECK(repetition_penalty(std::vector<std::int64_t>{7, 7}, RepetitionOptions{}) == 0.0);  // fewer ids than n

  Completion c;
  c.text = "unique words only here";
  c.token_ids = ids;
  const RepetitionReward by_tokens({.ngram_size = 2, .max_penalty = -1.0, .unit = RepetitionUnit::tokens});
  const RepetitionReward by_words({.ngram_size = 2, .max_penalty = -1.0, .unit = RepetitionUnit::words});
  require_values(by_tokens.score({&c, 1}, ScoringContext{}), {-0.6});
  require_values(by_words.score({&c, 1}, ScoringContext{}), {0.0});
}

TEST_CASE("repetition options are validated", "[rewards][repetition]") {
  CHECK_THROWS_WITH(RepetitionReward({.max_penalty = 0.5}), Catch::Contains("max_penalty") && Catch::Contains("0.5"));
  CHECK_THROWS_AS(RepetitionReward({.ngram_size = 0}), grpo::ConfigError);
  CHECK_NOTHROW(RepetitionReward({.max_penalty = 0.0}));
}

TEST_CASE("repetition on adversarial text: 1 MB of one repeated word and invalid UTF-8", "[rewards][repetition]") {
  std::string huge;
  for (int i = 0; i < 200000; ++i) huge += "ab\xff\xc3 ";  // 1 MB, 200000 identical (invalid UTF-8) words
  const auto started = std::chrono::steady_clock::now();
  // 199998 trigrams, 1 unique: (1 − 1/199998)·(−0.1).
  const auto values = score(RepetitionReward(), completions({huge}));
  require_values(values, {-0.1 * (1.0 - 1.0 / 199998.0)});
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(2));
}

}  // namespace
