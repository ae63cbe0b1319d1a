// SPDX-License-Identifier: Apache-2.0
#include <grpo/rewards/executor.hpp>

#include "rewards/reward_testing.hpp"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace grpo::rewards;
using namespace std::chrono_literals;
using grpo::rewards::testing::completions;
using grpo::rewards::testing::require_values;

using Clock = std::chrono::steady_clock;

// Never looks at the deadline: "slow" sleeps 500 ms, everything else scores 1 at once.
RewardPtr non_cooperative() {
  return make_reward("sleepy", [](const Completion& c) {
    if (c.text == "slow") std::this_thread::sleep_for(500ms);
    return 1.0f;
  });
}

TEST_CASE("summarize: mean and Bessel std over the values present", "[rewards][executor]") {
  const std::vector<std::optional<float>> values{1.0f, std::nullopt, 3.0f};
  const RewardMetrics m = summarize(values);
  // mean (1 + 3)/2 = 2; std sqrt(((1 − 2)² + (3 − 2)²)/(2 − 1)) = sqrt(2); 1 of 3 missing.
  CHECK(m.count == 3);
  CHECK(m.mean == Approx(2.0));
  CHECK(m.std == Approx(std::sqrt(2.0)));
  CHECK(m.frac_no_value == Approx(1.0 / 3.0));
  const std::vector<std::optional<float>> one{5.0f}, none{std::nullopt, std::nullopt};
  CHECK(summarize(one).std == 0.0);
  CHECK(summarize(none).mean == 0.0);  // no NaN
  CHECK(summarize(none).frac_no_value == 1.0);
  CHECK(summarize(std::vector<std::optional<float>>{}).count == 0);
}

TEST_CASE("threaded scoring gives the same values as serial scoring", "[rewards][executor]") {
  auto reward = make_reward("mix", [](const Completion& c) -> std::optional<float> {
    if (c.text.size() % 5 == 0) return std::nullopt;
    return static_cast<float>(c.text.size() % 7) - 3.0f;
  });
  std::vector<std::string> texts;
  for (int i = 0; i < 200; ++i) texts.push_back(std::string(static_cast<std::size_t>(i * 37 % 101), 'a'));
  const auto batch = completions(texts);
  const RewardScores serial = RewardExecutor().score(reward, batch);
  const RewardScores chunked = RewardExecutor({.num_threads = 3}).score(reward, batch);
  const RewardScores budgeted = RewardExecutor({.num_threads = 3, .budget = 5000ms}).score(reward, batch);
  REQUIRE(serial.values.size() == 200);
  CHECK((chunked.values == serial.values));
  CHECK((budgeted.values == serial.values));
  CHECK(budgeted.metrics.mean == Approx(serial.metrics.mean));
  CHECK(budgeted.metrics.frac_over_budget == 0.0);
}

TEST_CASE("a non-cooperative reward over budget gets the fallback, is counted, and does not block",
          "[rewards][executor]") {
  const auto reward = non_cooperative();
  const RewardExecutor executor({.num_threads = 2, .budget = 50ms});
  const auto started = Clock::now();
  const RewardScores scores = executor.score(reward, completions({"a", "slow", "b", "c"}));
  const auto elapsed = Clock::now() - started;
  require_values(scores.values, {1.0, std::nullopt, 1.0, 1.0});
  CHECK(scores.metrics.frac_over_budget == 0.25);
  CHECK(scores.metrics.frac_no_value == 0.25);
  CHECK(scores.metrics.mean == 1.0);
  CHECK(elapsed < 350ms);  // did not wait for the 500 ms sleep

  // More stuck calls than workers: each is abandoned at its budget and its worker replaced.
  const auto again = Clock::now();
  const RewardScores stuck = executor.score(reward, completions({"slow", "slow", "slow", "d"}));
  require_values(stuck.values, {std::nullopt, std::nullopt, std::nullopt, 1.0});
  CHECK(stuck.metrics.frac_over_budget == 0.75);
  CHECK(Clock::now() - again < 400ms);

  // Fallback zero: the overrun counts as a wrong answer (a value), still counted as over budget.
  const RewardExecutor zero({.num_threads = 2, .budget = 50ms, .fallback = BudgetFallback::zero});
  const RewardScores zeroed = zero.score(reward, completions({"slow", "a"}));
  require_values(zeroed.values, {0.0, 1.0});
  CHECK(zeroed.metrics.frac_over_budget == 0.5);
  CHECK(zeroed.metrics.frac_no_value == 0.0);

  // The abandoned calls are still sleeping; when they return (during later tests, or at exit) they write nowhere.
  const RewardScores after = executor.score(reward, completions({"x", "y", "z"}));
  require_values(after.values, {1.0, 1.0, 1.0});
  CHECK(after.metrics.frac_over_budget == 0.0);
}

TEST_CASE("a cooperative reward sees the deadline, late values are discarded without threads",
          "[rewards][executor]") {
  // Spins until its deadline, then returns 5 (too late).
  auto spinner = make_reward("spinner", [](const Completion& c, const ScoringContext& context) {
    if (c.text == "spin") {
      while (!context.expired()) std::this_thread::sleep_for(1ms);
    }
    return 5.0f;
  });
  const RewardScores inline_scores = RewardExecutor({.budget = 30ms}).score(spinner, completions({"spin", "ok"}));
  require_values(inline_scores.values, {std::nullopt, 5.0});
  CHECK(inline_scores.metrics.frac_over_budget == 0.5);
  const RewardScores threaded = RewardExecutor({.num_threads = 1, .budget = 30ms}).score(spinner, completions({"ok", "spin"}));
  require_values(threaded.values, {5.0, std::nullopt});
  CHECK(threaded.metrics.frac_over_budget == 0.5);
}

TEST_CASE("a throwing reward gives no value and is counted, or rethrows", "[rewards][executor]") {
  auto thrower = make_reward("thrower", [](const Completion& c) {
    if (c.text == "bad") throw std::runtime_error("cannot score");
    return 2.0f;
  });
  const auto batch = completions({"good", "bad", "good"});
  for (std::size_t threads : {0, 2}) {
    INFO("threads " << threads);
    const RewardScores scores = RewardExecutor({.num_threads = threads, .budget = 1000ms}).score(thrower, batch);
    require_values(scores.values, {2.0, std::nullopt, 2.0});
    CHECK(scores.metrics.frac_error == Approx(1.0 / 3.0));
    CHECK_THROWS_WITH(
        RewardExecutor({.num_threads = threads, .budget = 1000ms, .on_error = ErrorPolicy::rethrow}).score(thrower, batch),
        "cannot score");
  }
  // Without a budget the whole batch (or chunk) is one call, so the error covers all of it.
  const RewardScores whole = RewardExecutor().score(thrower, batch);
  require_values(whole.values, {std::nullopt, std::nullopt, std::nullopt});
  CHECK(whole.metrics.frac_error == 1.0);
}

TEST_CASE("the executor checks the number of values and respects batch scope", "[rewards][executor]") {
  auto short_result = make_reward("short", [](std::span<const Completion>) { return std::vector<std::optional<float>>(1); });
  CHECK_THROWS_WITH(RewardExecutor().score(short_result, completions({"a", "b"})), Catch::Contains("short"));
  CHECK_THROWS_AS(RewardExecutor({.num_threads = 2}).score(short_result, completions({"a", "b", "c", "d"})),
                  grpo::Error);

  auto calls = std::make_shared<std::atomic<int>>(0);
  auto whole = make_reward(
      "whole",
      [calls](std::span<const Completion> all) {
        ++*calls;
        return std::vector<std::optional<float>>(all.size(), static_cast<float>(all.size()));
      },
      RewardScope::batch);
  const RewardScores scores = RewardExecutor({.num_threads = 2, .budget = 1000ms}).score(whole, completions({"a", "b", "c"}));
  require_values(scores.values, {3.0, 3.0, 3.0});
  CHECK(calls->load() == 1);

  CHECK(RewardExecutor({.num_threads = 2}).score(whole, {}).values.empty());
  CHECK_THROWS_AS(RewardExecutor({.budget = -1ms}), grpo::ConfigError);
  CHECK_THROWS_AS(RewardExecutor().score(nullptr, {}), grpo::Error);
}

}  // namespace
