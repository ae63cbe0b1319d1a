// SPDX-License-Identifier: Apache-2.0
#include <grpo/rewards/reward_set.hpp>

#include "rewards/reward_testing.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <thread>

namespace {

using namespace grpo::rewards;
using namespace std::chrono_literals;
using grpo::rewards::testing::completions;
using grpo::rewards::testing::require_values;

// A registry with "fixed": every completion gets "value", or no value when "value" is absent.
RewardRegistry fixed_registry() {
  RewardRegistry registry = RewardRegistry::with_builtins();
  registry.add("fixed", [](const RewardOptions& options, const RewardRegistry&) {
    const std::optional<double> value = options.optional_number("value");
    return make_reward("fixed", [value](const Completion&) -> std::optional<double> { return value; });
  });
  return registry;
}

TEST_CASE("RewardSet from an array config: per-reward values and the weighted total", "[rewards][set]") {
  const RewardSet set = RewardSet::from_config(R"([{"name": "format"}, {"name": "tag_count", "weight": 0.5}])");
  REQUIRE(set.entries().size() == 2);
  const auto batch = completions({"<think>\nx\n</think>\n<answer>\ny\n</answer>", "<think>\nabc", ""});
  const RewardSetScores scores = set.score(batch);
  CHECK(scores.names == std::vector<std::string>{"format", "tag_count"});
  CHECK(scores.weights == std::vector<double>{1.0, 0.5});
  require_values(scores.values[0], {1.0, 0.0, 0.0});
  require_values(scores.values[1], {1.0, 0.25, 0.0});
  // total = 1·format + 0.5·tag_count: 1 + 0.5 = 1.5;  0 + 0.125 = 0.125;  0.
  require_values(scores.total, {1.5, 0.125, 0.0});
  // mean (1.5 + 0.125 + 0)/3 = 0.541667; Bessel std of {1.5, 0.125, 0}.
  const double mean = (1.5 + 0.125) / 3.0;
  const double std = std::sqrt((std::pow(1.5 - mean, 2) + std::pow(0.125 - mean, 2) + std::pow(mean, 2)) / 2.0);
  const auto metrics = scores.metrics();
  CHECK(metrics.at("reward") == Approx(mean));
  CHECK(metrics.at("reward_std") == Approx(std));
  CHECK(metrics.at("rewards/format/mean") == Approx(1.0 / 3.0));
  CHECK(metrics.at("rewards/tag_count/frac_no_value") == 0.0);
  CHECK(metrics.count("rewards/format/frac_over_budget") == 1);
  CHECK(metrics.count("rewards/format/seconds") == 1);
}

TEST_CASE("RewardSet total: nansum over rewards, no total when no reward has a value", "[rewards][set]") {
  const RewardRegistry registry = fixed_registry();
  // 2·1 + (none) = 2.
  const RewardSet partial = RewardSet::from_config(
      R"([{"name": "fixed", "value": 1, "weight": 2}, {"name": "fixed", "label": "blank"}])", registry);
  const RewardSetScores some = partial.score(completions({"a", "b"}));
  require_values(some.total, {2.0, 2.0});
  CHECK(some.names == std::vector<std::string>{"fixed", "blank"});
  CHECK(some.metrics().at("rewards/blank/frac_no_value") == 1.0);

  const RewardSet empty = RewardSet::from_config(R"([{"name": "fixed"}, {"name": "fixed", "label": "again"}])", registry);
  const RewardSetScores none = empty.score(completions({"a"}));
  require_values(none.total, {std::nullopt});
  CHECK(none.metrics().at("reward") == 0.0);  // finite, no NaN
  CHECK(none.metrics().at("reward/frac_no_value") == 1.0);
  const std::vector<float> nan = with_nan(none.total);
  CHECK(std::isnan(nan[0]));
  CHECK(with_nan(some.total) == std::vector<float>{2.0f, 2.0f});
}

TEST_CASE("RewardSet object config: executor options and the ProRL truncation coefficient", "[rewards][set]") {
  const RewardRegistry registry = fixed_registry();
  const RewardSet set = RewardSet::from_config(R"({
      "rewards": [{"name": "fixed", "value": 0.8}],
      "executor": {"threads": 2, "budget_ms": 250, "fallback": "zero", "on_error": "rethrow"},
      "truncated_coef": -0.5})",
                                               registry);
  CHECK(set.options().executor.num_threads == 2);
  CHECK(set.options().executor.budget == 250ms);
  CHECK(set.options().executor.fallback == BudgetFallback::zero);
  CHECK(set.options().executor.on_error == ErrorPolicy::rethrow);
  auto batch = completions({"a", "b"});
  batch[1].truncated = true;
  // coef < 0 replaces the total of a truncated completion: 0.8 and −0.5.
  require_values(set.score(batch).total, {0.8, -0.5});
  // coef in [0, 1] scales it: 0.8·0.5 = 0.4.
  const RewardSet scaled(
      {{.reward = make_reward("fixed", [](const Completion&) { return 0.8f; })}}, {.truncated_coef = 0.5});
  require_values(scaled.score(batch).total, {0.8, 0.4});
  CHECK_THROWS_AS(RewardSet({{.reward = make_reward("x", [](const Completion&) { return 0.0f; })}},
                            {.truncated_coef = 2.0}),
                  grpo::ConfigError);
}

TEST_CASE("RewardSet budget overrun is counted in the metrics", "[rewards][set]") {
  auto slow = make_reward("slow", [](const Completion& c) {
    if (c.text == "slow") std::this_thread::sleep_for(300ms);
    return 1.0f;
  });
  const RewardSet set({{.reward = slow, .weight = 1.0}},
                      {.executor = {.num_threads = 2, .budget = 40ms, .fallback = BudgetFallback::zero}});
  const RewardSetScores scores = set.score(completions({"slow", "fast"}));
  require_values(scores.total, {0.0, 1.0});
  CHECK(scores.metrics().at("rewards/slow/frac_over_budget") == 0.5);
}

TEST_CASE("every built-in reward returns within budget on adversarial completions", "[rewards][set]") {
  const RewardSet set = RewardSet::from_config(R"({"rewards": [
      {"name": "accuracy"}, {"name": "format"}, {"name": "format", "label": "format_open_r1", "style": "open_r1"},
      {"name": "tag_count"}, {"name": "reasoning_steps"}, {"name": "cosine"}, {"name": "length"},
      {"name": "repetition"}, {"name": "repetition", "label": "repetition_tokens", "unit": "tokens"},
      {"name": "soft_overlong"}, {"name": "stop_properly"}],
      "executor": {"threads": 2, "budget_ms": 2000}})");
  const auto row = std::make_shared<const Row>(Row{{"solution", std::string("42")}});
  std::string mixed;
  while (mixed.size() < (1u << 20)) mixed += "<think>\n\xff\xfe Step 1: \\boxed{\\frac{ \xc3 </answer>\n- the the the ";
  std::vector<Completion> batch{testing::completion(mixed, row), testing::completion(std::string(1 << 20, '\xff'), row),
                                testing::completion(std::string(1 << 20, '{'), row), testing::completion("", row)};
  batch[0].token_ids.assign(1 << 18, 7);
  const auto started = std::chrono::steady_clock::now();
  const RewardSetScores scores = set.score(batch);
  CHECK(std::chrono::steady_clock::now() - started < 10s);
  for (std::size_t k = 0; k < scores.names.size(); ++k) {
    INFO(scores.names[k]);
    CHECK(scores.reward_metrics[k].frac_error == 0.0);
    CHECK(scores.reward_metrics[k].frac_over_budget == 0.0);
  }
  // The empty completion: accuracy 0 (no answer), format 0, tag_count 0, steps 0, cosine at length 0 and wrong:
  // −0.5, length: lengths differ in the group, 0 is the minimum → λ = 0.5, wrong → min(0, 0.5) = 0; no
  // repetition, not overlong, not truncated. Total −0.5.
  require_values({scores.total[3]}, {-0.5});
}

TEST_CASE("RewardSet config errors name the entry and the field", "[rewards][set]") {
  CHECK_THROWS_WITH(RewardSet::from_config(R"([{"name": "format"}, {"name": "format", "weight": "high"}])"),
                    Catch::Contains("rewards[1] (format)") && Catch::Contains("'weight' must be a number") &&
                        Catch::Contains("\"high\""));
  CHECK_THROWS_WITH(RewardSet::from_config(R"([{"name": "format"}, {"name": "format"}])"),
                    Catch::Contains("two rewards are named 'format'") && Catch::Contains("label"));
  CHECK_THROWS_WITH(RewardSet::from_config(R"([{"name": "accuracyy"}])"),
                    Catch::Contains("rewards[0]") && Catch::Contains("unknown reward 'accuracyy'") &&
                        Catch::Contains("valid names: accuracy, code_tests, cosine"));
  CHECK_THROWS_WITH(RewardSet::from_config(R"({"rewards": [{"name": "repetition", "max_penalty": 1}]})"),
                    Catch::Contains("rewards[0] (repetition)") && Catch::Contains("max_penalty"));
  CHECK_THROWS_WITH(RewardSet::from_config(R"({"rewards": [], "executor": {"threads": -1}})"),
                    Catch::Contains("executor") && Catch::Contains("threads"));
  CHECK_THROWS_WITH(RewardSet::from_config(R"({"rewards": [{"name": "format"}], "executor": {"budget": 5}})"),
                    Catch::Contains("unknown option 'budget'") && Catch::Contains("budget_ms"));
  CHECK_THROWS_WITH(RewardSet::from_config(R"({"reward": []})"), Catch::Contains("unknown key 'reward'"));
  CHECK_THROWS_WITH(RewardSet::from_config(R"({"executor": {}})"), Catch::Contains("missing \"rewards\""));
  CHECK_THROWS_WITH(RewardSet::from_config(R"([])"), Catch::Contains("at least one reward"));
  CHECK_THROWS_WITH(RewardSet::from_config(R"([3])"), Catch::Contains("rewards[0]: expected a JSON object"));
  CHECK_THROWS_WITH(RewardSet::from_config(R"([{"name": "format", "weight": 1e999}])"), Catch::Contains("invalid JSON"));
  CHECK_THROWS_AS(RewardSet({}), grpo::ConfigError);
  CHECK_THROWS_AS(RewardSet({{.reward = nullptr}}), grpo::ConfigError);
}

}  // namespace
