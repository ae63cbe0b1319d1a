// SPDX-License-Identifier: Apache-2.0
#include <grpo/rewards/length_rewards.hpp>

#include "rewards/reward_testing.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <numbers>
#include <string>

namespace {

using namespace grpo::rewards;
using grpo::rewards::testing::require_values;
using grpo::rewards::testing::score;

// A judge reading the row's "verdict" field, so the tests control correctness exactly; no row → no_gold.
Correctness judge(const Completion& c, const ScoringContext&) {
  if (!c.row) return Correctness::no_gold;
  const auto verdict = c.row->text("verdict");
  return verdict == "correct" ? Correctness::correct : verdict == "timeout" ? Correctness::timeout : Correctness::wrong;
}

const auto kCorrect = std::make_shared<const Row>(Row{{"verdict", std::string("correct")}});
const auto kWrong = std::make_shared<const Row>(Row{{"verdict", std::string("wrong")}});

Completion of_length(std::size_t chars, std::shared_ptr<const Row> row, std::size_t group = 0) {
  Completion c = testing::completion(std::string(chars, 'x'), std::move(row));
  c.group = group;
  return c;
}

TEST_CASE("completion_length counts code points or token ids", "[rewards][length]") {
  Completion c = testing::completion("h\xc3\xa9llo");  // "héllo": 6 bytes, 5 code points
  c.token_ids = {1, 2};
  CHECK(completion_length(c, LengthUnit::chars) == 5);
  CHECK(completion_length(c, LengthUnit::tokens) == 2);
  CHECK(completion_length(testing::completion("\xff\xfe"), LengthUnit::chars) == 2);  // invalid bytes: 1 each
}

TEST_CASE("cosine with the seed defaults (−0.5/−0.1, 0.8/1.0, max_len 1000)", "[rewards][cosine]") {
  const CosineReward cosine({}, judge);
  // r = lo + ½(hi − lo)(1 + cos(π·p)); correct: hi 1.0, lo 0.8; wrong: hi −0.5 (at p = 0), lo −0.1 (at p = 1).
  //   correct p=0   → 0.8 + 0.1·2 = 1.0        wrong p=0   → −0.1 − 0.2·2 = −0.5
  //   correct p=0.5 → 0.8 + 0.1·1 = 0.9        wrong p=0.5 → −0.1 − 0.2·1 = −0.3
  //   correct p=1   → 0.8 + 0.1·0 = 0.8        wrong p=1   → −0.1
  //   p clamped at 1 for 1500 chars.
  const std::vector<Completion> batch{of_length(0, kCorrect),   of_length(500, kCorrect), of_length(1000, kCorrect),
                                      of_length(1500, kCorrect), of_length(0, kWrong),    of_length(500, kWrong),
                                      of_length(1000, kWrong),   of_length(1500, kWrong)};
  require_values(score(cosine, batch), {1.0, 0.9, 0.8, 0.8, -0.5, -0.3, -0.1, -0.1});
  // Intended ordering: a short wrong answer scores below a long wrong one.
  CHECK(cosine.value(false, 10) < cosine.value(false, 900));
  CHECK(cosine.value(true, 10) > cosine.value(true, 900));
}

TEST_CASE("cosine: unclamped (open-r1), tokens (TRL), unjudgeable, UTF-8 length", "[rewards][cosine]") {
  const CosineReward unclamped({.clamp_progress = false}, judge);
  // p = 1.5: cos(1.5π) = 0 → correct 0.8 + 0.1 = 0.9; p = 2: cos(2π) = 1 → wrong −0.5 (back to the p = 0 value).
  require_values(score(unclamped, {of_length(1500, kCorrect), of_length(2000, kWrong)}), {0.9, -0.5});

  Completion tokens = of_length(3, kCorrect);
  tokens.token_ids.assign(250, 0);
  // p = 250/1000: 0.8 + 0.1·(1 + cos(π/4)) = 0.8 + 0.1·1.70710678 = 0.970710678.
  const CosineReward by_tokens({.unit = LengthUnit::tokens}, judge);
  require_values(by_tokens.score({&tokens, 1}, ScoringContext{}), {0.8 + 0.1 * (1.0 + std::cos(std::numbers::pi / 4))});

  // 500 × "é" is 1000 bytes but 500 characters → p = 0.5 → 0.9.
  std::string accents;
  for (int i = 0; i < 500; ++i) accents += "\xc3\xa9";
  require_values(score(CosineReward({}, judge), {testing::completion(accents, kCorrect)}), {0.9});

  const auto timeout = std::make_shared<const Row>(Row{{"verdict", std::string("timeout")}});
  const std::vector<Completion> unjudgeable{testing::completion("x"), testing::completion("x", timeout)};
  require_values(score(CosineReward({}, judge), unjudgeable), {std::nullopt, std::nullopt});
  require_values(score(CosineReward({.unjudgeable_value = 1.0f}, judge), unjudgeable), {1.0, 1.0});  // open-r1
}

TEST_CASE("cosine rejects inverted orderings", "[rewards][cosine]") {
  // open-r1's config default: min_value_wrong 0.0, max_value_wrong −0.5.
  CHECK_THROWS_WITH(CosineReward({.min_value_wrong = 0.0, .max_value_wrong = -0.5}, judge),
                    Catch::Contains("min_value_wrong"));
  CHECK_THROWS_AS(CosineReward({.min_value_correct = 1.0, .max_value_correct = 0.5}, judge), grpo::ConfigError);
  CHECK_THROWS_AS(CosineReward({.max_len = 0.0}, judge), grpo::ConfigError);
}

TEST_CASE("length (Kimi 1.5): λ = 0.5 − (len − min)/(max − min) within each group", "[rewards][length]") {
  const LengthReward length({}, judge);
  // Group 0: lengths 10, 20, 30, 10, 30 → min 10, max 30.
  //   10 correct: 0.5;  20 wrong: λ = 0.5 − 10/20 = 0 → min(0, 0) = 0;  30 correct: 0.5 − 1 = −0.5;
  //   10 wrong: min(0, 0.5) = 0;  30 wrong: min(0, −0.5) = −0.5.
  // Group 1: lengths 100, 200 → 100 correct 0.5, 200 wrong −0.5.
  // Group 2: equal lengths → 0 whatever the correctness.
  const std::vector<Completion> batch{of_length(10, kCorrect),     of_length(20, kWrong),       of_length(30, kCorrect),
                                      of_length(10, kWrong),       of_length(30, kWrong),       of_length(100, kCorrect, 1),
                                      of_length(200, kWrong, 1),   of_length(5, kCorrect, 2),   of_length(5, kWrong, 2)};
  require_values(score(length, batch), {0.5, 0.0, -0.5, 0.0, -0.5, 0.5, -0.5, 0.0, 0.0});
  CHECK(length.scope() == RewardScope::batch);

  // Unjudgeable (no row): counted as correct by default (open-r1), no value when asked.
  const std::vector<Completion> unjudged{of_length(10, nullptr), of_length(30, nullptr)};
  require_values(score(length, unjudged), {0.5, -0.5});
  require_values(score(LengthReward({.unjudgeable_as_correct = false}, judge), unjudged), {std::nullopt, std::nullopt});
  require_values(score(length, {}), {});
}

TEST_CASE("soft_overlong (DAPO eq. 13)", "[rewards][length]") {
  const SoftOverlongReward overlong({.max_completion_len = 20, .soft_punish_cache = 5});
  // L − C = 15: 0 and 15 → 0;  16 → (15 − 16)/5 = −0.2;  20 (exactly L) → (15 − 20)/5 = −1;  21 → −1.
  std::vector<Completion> batch;
  for (std::size_t n : {0, 15, 16, 20, 21}) {
    Completion c;
    c.token_ids.assign(n, 1);
    batch.push_back(c);
  }
  require_values(score(overlong, batch), {0.0, 0.0, -0.2, -1.0, -1.0});
  // C = 0: a hard limit, 0 up to L and −1 beyond.
  require_values(score(SoftOverlongReward({.max_completion_len = 20, .soft_punish_cache = 0}), batch),
                 {0.0, 0.0, 0.0, 0.0, -1.0});
  CHECK_THROWS_AS(SoftOverlongReward({.max_completion_len = 4, .soft_punish_cache = 5}), grpo::ConfigError);
}

TEST_CASE("stop_properly penalises truncated completions", "[rewards][length]") {
  std::vector<Completion> batch(2);
  batch[1].truncated = true;
  require_values(score(StopProperlyReward(), batch), {0.0, -1.0});
  require_values(score(StopProperlyReward({.penalty = -0.5}), batch), {0.0, -0.5});
  CHECK_THROWS_AS(StopProperlyReward({.penalty = 0.5}), grpo::ConfigError);
}

}  // namespace
