// SPDX-License-Identifier: Apache-2.0
#include <grpo/rewards/format_rewards.hpp>
#include <grpo/rewards/length_rewards.hpp>
#include <grpo/rewards/registry.hpp>
#include <grpo/rewards/repetition_reward.hpp>
#include <grpo/rewards/tag_router.hpp>

#include "rewards/reward_testing.hpp"

#include <catch2/catch.hpp>

#include <memory>
#include <string>

namespace {

using namespace grpo::rewards;
using grpo::rewards::testing::completions;
using grpo::rewards::testing::require_values;
using grpo::rewards::testing::score;

template <typename RewardType>
const RewardType& as(const RewardPtr& reward) {
  const auto* typed = dynamic_cast<const RewardType*>(reward.get());
  REQUIRE(typed != nullptr);
  return *typed;
}

TEST_CASE("the built-in registry knows every built-in reward", "[rewards][registry]") {
  const RewardRegistry registry = RewardRegistry::with_builtins();
  CHECK(registry.names() == std::vector<std::string>{"accuracy", "code_tests", "cosine", "format", "judge", "length",
                                                     "math_steps", "reasoning_steps", "repetition", "reward_model",
                                                     "route", "soft_overlong", "stop_properly", "tag_count"});
  for (const std::string& name : registry.names()) {
    // route needs routes, judge an endpoint, reward_model a checkpoint (reward_model_reward_test.cpp builds one)
    if (name == "route" || name == "judge" || name == "reward_model") continue;
    INFO(name);
    CHECK(registry.create(R"({"name": ")" + name + R"("})")->name() == name);
  }
}

TEST_CASE("options from JSON reach the reward", "[rewards][registry]") {
  const RewardRegistry registry = RewardRegistry::with_builtins();
  // Keep each reward alive while a reference to it is used (a temporary RewardPtr would free it at the ';').
  const RewardPtr cosine_reward = registry.create(
      R"({"name": "cosine", "max_len": 500, "min_value_wrong": -1.0, "max_value_wrong": -0.5, "min_value_correct": 0.5,
          "max_value_correct": 1.0, "unit": "tokens", "clamp_progress": false, "unjudgeable_value": 1.0,
          "gold_fields": "ground_truth", "answer_tags": false})");
  const auto& cosine = as<CosineReward>(cosine_reward);
  CHECK(cosine.options().max_len == 500.0);
  CHECK(cosine.options().min_value_wrong == -1.0);
  CHECK(cosine.options().unit == LengthUnit::tokens);
  CHECK_FALSE(cosine.options().clamp_progress);
  CHECK(cosine.options().unjudgeable_value == 1.0f);
  CHECK(cosine.options().accuracy.gold_fields == std::vector<std::string>{"ground_truth"});
  CHECK_FALSE(cosine.options().accuracy.answer_tags);

  const RewardPtr repetition_reward =
      registry.create(R"({"name": "repetition", "ngram_size": 2, "max_penalty": -1, "unit": "tokens"})");
  const auto& repetition = as<RepetitionReward>(repetition_reward);
  CHECK(repetition.options().ngram_size == 2);
  CHECK(repetition.options().max_penalty == -1.0);
  CHECK(repetition.options().unit == RepetitionUnit::tokens);

  CHECK(as<FormatReward>(registry.create(R"({"name": "format", "style": "open_r1"})")).options().style ==
        FormatStyle::open_r1);
  CHECK(as<ReasoningStepsReward>(registry.create(R"({"name": "reasoning_steps", "line_anchor": "string_start"})"))
            .options()
            .line_anchor == StepLineAnchor::string_start);
  const RewardPtr overlong_reward =
      registry.create(R"({"name": "soft_overlong", "max_completion_len": 20, "soft_punish_cache": 5})");
  const auto& overlong = as<SoftOverlongReward>(overlong_reward);
  CHECK(overlong.options().max_completion_len == 20);
  CHECK(overlong.options().soft_punish_cache == 5);
  CHECK(as<StopProperlyReward>(registry.create(R"({"name": "stop_properly", "penalty": -0.25})")).options().penalty ==
        -0.25);
  CHECK(as<LengthReward>(registry.create(R"({"name": "length", "unjudgeable_as_correct": false})"))
            .options()
            .unjudgeable_as_correct == false);
}

TEST_CASE("registry errors name the entry, the option and the valid choices", "[rewards][registry]") {
  const RewardRegistry registry = RewardRegistry::with_builtins();
  CHECK_THROWS_WITH(registry.create(R"({"name": "cosin"})"),
                    Catch::Contains("unknown reward 'cosin'") && Catch::Contains("accuracy, code_tests, cosine, format"));
  CHECK_THROWS_WITH(registry.create(R"({"name": "repetition", "max_penalty": 0.5})"),
                    Catch::Contains("repetition") && Catch::Contains("max_penalty") && Catch::Contains("0.5"));
  CHECK_THROWS_WITH(registry.create(R"({"name": "cosine", "max_len": "long"})"),
                    Catch::Contains("'max_len' must be a number") && Catch::Contains("\"long\""));
  CHECK_THROWS_WITH(registry.create(R"({"name": "cosine", "max_lenght": 10})"),
                    Catch::Contains("unknown option 'max_lenght'") && Catch::Contains("max_len"));
  CHECK_THROWS_WITH(registry.create(R"({"name": "tag_count", "x": 1})"), Catch::Contains("takes no options"));
  CHECK_THROWS_WITH(registry.create(R"({"name": "format", "style": "strict"})"),
                    Catch::Contains("'style' must be one of") && Catch::Contains("open_r1"));
  CHECK_THROWS_WITH(registry.create(R"({"name": "repetition", "ngram_size": 2.5})"),
                    Catch::Contains("ngram_size") && Catch::Contains("integer"));
  CHECK_THROWS_WITH(registry.create(R"({"name": "cosine", "min_value_wrong": 0.0, "max_value_wrong": -0.5})"),
                    Catch::Contains("min_value_wrong"));
  CHECK_THROWS_WITH(registry.create(R"({"max_len": 3})"), Catch::Contains("missing the reward's \"name\""));
  CHECK_THROWS_WITH(registry.create(R"({"name": 3})"), Catch::Contains("\"name\" must be a string"));
  CHECK_THROWS_WITH(registry.create(R"({"name": "cosine", "max_len": null})"), Catch::Contains("'max_len' is null"));
  CHECK_THROWS_WITH(registry.create(R"({"name": "cosine", "max_len": 1, "max_len": 2})"),
                    Catch::Contains("appears twice"));
  CHECK_THROWS_WITH(registry.create(R"({"name": "cosine",)"), Catch::Contains("invalid JSON"));
  CHECK_THROWS_WITH(registry.create(R"([1, 2])"), Catch::Contains("expected a JSON object"));
  CHECK_THROWS_AS(registry.create(R"({"name": "cosine", "max_len": -1})"), grpo::ConfigError);
}

TEST_CASE("users register their own rewards beside the built-in ones", "[rewards][registry]") {
  RewardRegistry registry = RewardRegistry::with_builtins();
  registry.add("constant", [](const RewardOptions& options, const RewardRegistry&) {
    const float value = static_cast<float>(options.number("value", 1.0));
    return make_reward("constant", [value](const Completion&) { return value; });
  });
  require_values(score(*registry.create(R"({"name": "constant", "value": 0.25})"), completions({"a"})), {0.25});
  CHECK_THROWS_WITH(registry.add("format", [](const RewardOptions&, const RewardRegistry&) { return RewardPtr(); }),
                    Catch::Contains("already registered"));
  CHECK_THROWS_AS(registry.add("", [](const RewardOptions&, const RewardRegistry&) { return RewardPtr(); }),
                  grpo::ConfigError);
  CHECK(RewardRegistry().names().empty());
}

TEST_CASE("RewardOptions typed accessors", "[rewards][registry]") {
  const RewardOptions options = RewardOptions::from_json(
      R"({"name": "x", "n": 3, "f": 0.5, "b": true, "s": "text", "l": ["a", "b"], "o": {"k": 1}, "mixed": [1, "a"]})",
      "rewards[4]");
  CHECK(options.reward_name() == "x");
  CHECK(options.context() == "rewards[4]");
  CHECK(options.count("n", 0) == 3);
  CHECK(options.number("f", 0.0) == 0.5);
  CHECK(options.flag("b", false));
  CHECK(options.text("s", "") == "text");
  CHECK(options.text_list("l", {}) == std::vector<std::string>{"a", "b"});
  CHECK(options.text_list("s", {}) == std::vector<std::string>{"text"});
  CHECK(options.object("o") == std::optional<std::string>(R"({"k":1})"));
  CHECK(options.number("absent", 7.0) == 7.0);
  CHECK_FALSE(options.optional_number("absent").has_value());
  CHECK_THROWS_WITH(options.flag("n", false), Catch::Contains("'n' must be true or false, got 3"));
  CHECK_THROWS_WITH(options.object("mixed"), Catch::Contains("'mixed' must be a JSON object"));
  CHECK_THROWS_WITH(options.text_list("f", {}), Catch::Contains("list of strings"));
  CHECK_NOTHROW(options.check_all_used());  // every key was read above ("mixed" too)
}

TEST_CASE("route: per-tag routing from a config", "[rewards][registry][router]") {
  const RewardRegistry registry = RewardRegistry::with_builtins();
  const RewardPtr route = registry.create(R"({"name": "route", "field": "tag",
      "routes": {"format": {"name": "format"}, "steps": {"name": "reasoning_steps", "target_steps": 1}},
      "default": {"name": "stop_properly", "penalty": -0.5}})");
  CHECK(route->name() == "route");
  const auto row = [](std::string tag) { return std::make_shared<const Row>(Row{{"tag", std::move(tag)}}); };
  std::vector<Completion> batch{testing::completion("<think>a</think><answer>b</answer>", row("format")),
                                testing::completion("Step 1: a", row("steps")), testing::completion("x", row("other"))};
  batch[2].truncated = true;
  // format → 1; reasoning_steps with target 1: min(1, 1/1) = 1; default stop_properly on a truncated one → −0.5.
  require_values(score(*route, batch), {1.0, 1.0, -0.5});
  CHECK_THROWS_WITH(registry.create(R"({"name": "route"})"), Catch::Contains("'routes' is required"));
  CHECK_THROWS_WITH(registry.create(R"({"name": "route", "routes": {"math": {"name": "nope"}}})"),
                    Catch::Contains("routes.math") && Catch::Contains("unknown reward 'nope'"));
  CHECK_THROWS_WITH(registry.create(R"({"name": "route", "routes": {"math": 3}})"),
                    Catch::Contains("routes.math must be a reward object"));
}

}  // namespace
