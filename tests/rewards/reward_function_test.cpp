// SPDX-License-Identifier: Apache-2.0
#include <grpo/rewards/reward_function.hpp>

#include "rewards/reward_testing.hpp"

#include <catch2/catch.hpp>

#include <optional>
#include <string>
#include <vector>

namespace {

using namespace grpo::rewards;
using grpo::rewards::testing::completions;
using grpo::rewards::testing::require_values;
using grpo::rewards::testing::score;

TEST_CASE("Row holds strings, numbers and lists, text() renders scalars", "[rewards][row]") {
  Row row{{"answer", std::string("42")}, {"difficulty", 4.5}, {"count", 18.0},
          {"answers", std::vector<std::string>{"1", "2"}}};
  row.set("tag", std::string("math"));
  CHECK(row.text("answer") == "42");
  CHECK(row.text("difficulty") == "4.5");
  CHECK(row.text("count") == "18");  // shortest round-trip form
  CHECK_FALSE(row.text("answers").has_value());
  CHECK_FALSE(row.text("missing").has_value());
  CHECK(row.contains("tag"));
  REQUIRE(std::get_if<std::vector<std::string>>(row.find("answers")) != nullptr);
  CHECK(row.fields().size() == 5);
}

TEST_CASE("Row::from_json reads dataset rows (ROLL and GSM8K formats)", "[rewards][row]") {
  // A ROLL RLVR row: "messages" is a JSON string holding the chat; "difficulty" a string here, a number elsewhere.
  const Row roll = Row::from_json(
      R"({"id": "1", "source": "deepmath_103k", "difficulty": 4.5, "prompt": "Find x.",)"
      R"( "messages": "[{\"role\": \"user\", \"content\": \"Find x.\"}]", "ground_truth": "\\frac{1}{2}",)"
      R"( "case_type": "", "test_cases": null, "tag": "deepmath_103k", "ok": true,)"
      R"( "answers": ["1", "2"], "meta": {"a": [1, 2]}, "ids": [1, 2]})");
  CHECK(roll.text("ground_truth") == "\\frac{1}{2}");
  CHECK(roll.text("messages") == R"([{"role": "user", "content": "Find x."}])");
  CHECK(roll.text("difficulty") == "4.5");
  CHECK(roll.text("tag") == "deepmath_103k");
  CHECK(roll.text("ok") == "1");                     // booleans become 0/1
  CHECK_FALSE(roll.contains("test_cases"));          // null fields are left out
  CHECK(roll.text("meta") == R"({"a":[1,2]})");      // nested JSON kept as (minified) text
  CHECK(roll.text("ids") == "[1,2]");
  REQUIRE(std::get_if<std::vector<std::string>>(roll.find("answers")) != nullptr);
  CHECK(*std::get_if<std::vector<std::string>>(roll.find("answers")) == std::vector<std::string>{"1", "2"});

  const Row gsm8k = Row::from_json(R"({"question": "How many?", "answer": "2/2=<<2/2=1>>1\n#### 3"})");
  CHECK(gsm8k.text("answer") == "2/2=<<2/2=1>>1\n#### 3");

  CHECK_THROWS_AS(Row::from_json("{\"a\": "), grpo::ParseError);
  CHECK_THROWS_WITH(Row::from_json("[1]"), Catch::Contains("dataset row") && Catch::Contains("expected a JSON object"));
}

TEST_CASE("make_reward adapts per-completion and whole-batch callables", "[rewards][adapter]") {
  const auto batch = completions({"a", "bbb", ""});
  // Per completion, bool → float.
  auto short_text = make_reward("short", [](const Completion& c) { return c.text.size() < 2; });
  require_values(score(*short_text, batch), {1.0, 0.0, 1.0});
  CHECK(short_text->name() == "short");
  CHECK(short_text->scope() == RewardScope::completion);

  // Per completion with context, std::optional<double>: empty text cannot be judged.
  auto length = make_reward("length", [](const Completion& c, const ScoringContext&) -> std::optional<double> {
    if (c.text.empty()) return std::nullopt;
    return static_cast<double>(c.text.size());
  });
  require_values(score(*length, batch), {1.0, 3.0, std::nullopt});

  // Whole batch: the rank of each completion's length within the batch.
  auto rank = make_reward(
      "rank",
      [](std::span<const Completion> all) {
        std::vector<std::optional<float>> values;
        for (const auto& c : all) {
          float smaller = 0;
          for (const auto& other : all) smaller += other.text.size() < c.text.size();
          values.emplace_back(smaller);
        }
        return values;
      },
      RewardScope::batch);
  require_values(score(*rank, batch), {1.0, 2.0, 0.0});
  CHECK(rank->scope() == RewardScope::batch);

  // Whole batch with context.
  auto expired = make_reward("expired", [](std::span<const Completion> all, const ScoringContext& context) {
    return std::vector<std::optional<float>>(all.size(), context.expired() ? 1.0f : 0.0f);
  });
  ScoringContext past;
  past.deadline = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  require_values(expired->score(batch, past), {1.0, 1.0, 1.0});
  require_values(score(*expired, batch), {0.0, 0.0, 0.0});  // default deadline: never

  CHECK_THROWS_AS(make_reward("", [](const Completion&) { return 0.0f; }), grpo::ConfigError);
}

TEST_CASE("check_result_size names the reward and both sizes", "[rewards][adapter]") {
  auto reward = make_reward("broken", [](const Completion&) { return 0.0f; });
  CHECK_NOTHROW(grpo::rewards::detail::check_result_size(*reward, 3, 3));
  CHECK_THROWS_WITH(grpo::rewards::detail::check_result_size(*reward, 2, 3),
                    Catch::Contains("broken") && Catch::Contains("2 values") && Catch::Contains("3 completions"));
}

}  // namespace
