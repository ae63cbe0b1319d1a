// SPDX-License-Identifier: Apache-2.0
#include <grpo/core/error.hpp>
#include <grpo/train/pass_rate_filter.hpp>

#include <catch2/catch.hpp>

#include <cmath>
#include <random>

using grpo::train::PassRateFilter;

TEST_CASE("pass-rate filter retires prompts after `window` all-wrong or all-right appearances", "[train][curriculum]") {
  PassRateFilter filter({.window = 2});
  filter.observe("hard", 0.0, 1);
  CHECK_FALSE(filter.is_retired("hard", 2));  // one zero is not yet a streak of two
  filter.observe("hard", 0.0, 3);
  CHECK(filter.is_retired("hard", 4));
  CHECK(filter.is_retired("hard", 1000000));  // retire_steps 0: for the rest of the run

  filter.observe("mixed", 0.0, 1);
  filter.observe("mixed", 0.5, 2);  // a signal in between breaks the streak
  filter.observe("mixed", 0.0, 3);
  CHECK_FALSE(filter.is_retired("mixed", 4));
  filter.observe("flip", 0.0, 1);
  filter.observe("flip", 1.0, 2);  // 0 then 1 is not a streak of either kind
  CHECK_FALSE(filter.is_retired("flip", 3));
  filter.observe("flip", 1.0, 3);
  CHECK(filter.is_retired("flip", 4));
  filter.observe("nan", 1.0, 1);
  filter.observe("nan", std::nan(""), 2);  // nothing could be judged: breaks the streak
  filter.observe("nan", 1.0, 3);
  CHECK_FALSE(filter.is_retired("nan", 4));
  CHECK(filter.retired_count(4) == 2);
  CHECK_FALSE(filter.is_retired("never seen", 4));
}

TEST_CASE("pass-rate filter: timed retirement, one-sided retirement, errors", "[train][curriculum]") {
  PassRateFilter timed({.window = 1, .retire_unsolved = false, .retire_steps = 10});
  timed.observe("easy", 1.0, 5);
  CHECK(timed.is_retired("easy", 6));
  CHECK(timed.is_retired("easy", 15));
  CHECK_FALSE(timed.is_retired("easy", 16));  // out for steps 6..15, back at 16
  timed.observe("hard", 0.0, 5);              // retire_unsolved off
  CHECK_FALSE(timed.is_retired("hard", 6));
  timed.observe("easy", 0.5, 16);             // back, with a new streak
  CHECK_FALSE(timed.is_retired("easy", 17));
  CHECK_THROWS_WITH(timed.observe("x", 1.5, 1), Catch::Contains("pass rate of 'x' must be in [0, 1], got 1.5"));
  CHECK_THROWS_AS(PassRateFilter({.window = 0}), grpo::ConfigError);
  CHECK_THROWS_AS(PassRateFilter({.retire_steps = -1}), grpo::ConfigError);
}

TEST_CASE("pass-rate filter on synthetic pass rates: state survives save/load exactly", "[train][curriculum]") {
  // 50 prompts with fixed true pass probabilities (some 0, some 1, the rest in between), G = 4 samples each step.
  std::mt19937_64 rng(17);
  std::vector<double> truth(50);
  for (std::size_t i = 0; i < truth.size(); ++i) truth[i] = i < 10 ? 0.0 : i < 20 ? 1.0 : 0.25 + 0.5 * (i % 3) / 2.0;
  auto pass_rate = [&](std::size_t i) {
    int correct = 0;
    for (int g = 0; g < 4; ++g) correct += std::uniform_real_distribution<double>(0, 1)(rng) < truth[i];
    return correct / 4.0;
  };
  PassRateFilter filter({.window = 3});
  PassRateFilter resumed({.window = 3});
  for (std::int64_t step = 1; step <= 60; ++step) {
    for (std::size_t i = 0; i < truth.size(); ++i) {
      const std::string id = "p" + std::to_string(i);
      if (filter.is_retired(id, step)) continue;
      const double rate = pass_rate(i);
      filter.observe(id, rate, step);
      if (step > 30) resumed.observe(id, rate, step);
    }
    if (step == 30) resumed.load(filter.save(), "state");
  }
  // Every always-wrong and always-right prompt is retired after exactly 3 appearances; the in-between ones (pass
  // probability 0.25..0.75, so a streak of 3 identical extremes has probability ≤ 0.32^3 per window) mostly stay.
  for (std::size_t i = 0; i < 20; ++i) CHECK(filter.is_retired("p" + std::to_string(i), 61));
  std::size_t middle_retired = 0;
  for (std::size_t i = 20; i < truth.size(); ++i) middle_retired += filter.is_retired("p" + std::to_string(i), 61);
  CHECK(middle_retired < 20);
  CHECK(resumed.save() == filter.save());
  CHECK_THROWS_WITH(resumed.load(R"({"prompts": [["a", 3, 1, -1]]})", "ckpt/filter"),
                    Catch::Contains("ckpt/filter: prompts[0] should be"));
  CHECK_THROWS_WITH(resumed.load("[", "ckpt/filter"), Catch::Contains("ckpt/filter: invalid JSON"));
}
