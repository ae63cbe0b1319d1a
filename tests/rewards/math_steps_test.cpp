// SPDX-License-Identifier: Apache-2.0
#include <grpo/core/error.hpp>
#include <grpo/rewards/accuracy_reward.hpp>
#include <grpo/rewards/math_steps.hpp>
#include <grpo/rewards/registry.hpp>

#include "rewards/reward_testing.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace {

using namespace grpo::rewards;
using grpo::rewards::testing::completion;
using grpo::rewards::testing::require_values;
using grpo::rewards::testing::score;
using Steps = std::vector<std::string>;

std::shared_ptr<const Row> steps_row(std::string ground_truth, Steps steps, std::string field = "ground_truth_steps") {
  Row row;
  row.set("ground_truth", std::move(ground_truth));
  row.set(std::move(field), std::move(steps));
  return std::make_shared<const Row>(std::move(row));
}

std::string repeated(std::string_view piece, std::size_t times) {
  std::string out;
  out.reserve(piece.size() * times);
  for (std::size_t i = 0; i < times; ++i) out += piece;
  return out;
}

template <typename RewardType>
const RewardType& as(const RewardPtr& reward) {
  const auto* typed = dynamic_cast<const RewardType*>(reward.get());
  REQUIRE(typed != nullptr);
  return *typed;
}

TEST_CASE("step_result: the text after the last '=', without punctuation and delimiters", "[rewards][math_steps]") {
  CHECK(step_result("x = 1/2") == "1/2");
  CHECK(step_result("First, $3 \\cdot 4 = 12$.") == "12");
  CHECK(step_result("\\frac{6}{4}") == "\\frac{6}{4}");
  CHECK(step_result("\\(y = 2x = 1\\)") == "1");
  CHECK(step_result("So 3 + 4 = 7, which is odd.") == "7");
  CHECK(step_result("Area = 6 cm") == "6");  // prose after the value ends it
  CHECK(step_result("x \\geq 3") == "x \\geq 3");
  CHECK(step_result("a <= b") == "a <= b");  // "<=" is not an '='
  CHECK(step_result("  ") == "");
}

TEST_CASE("step_reasoning: before </think>, else before the last <answer>, else everything", "[rewards][math_steps]") {
  CHECK(step_reasoning("<think>a = 1</think><answer>2</answer>") == "<think>a = 1");
  CHECK(step_reasoning("a = 1 <answer>x</answer> <answer>2</answer>") == "a = 1 <answer>x</answer> ");
  CHECK(step_reasoning("a = 1, so \\boxed{2}") == "a = 1, so \\boxed{2}");
  CHECK(step_reasoning("").empty());
}

TEST_CASE("step_candidates: math spans, right-hand sides and standalone numbers, most recent first",
          "[rewards][math_steps]") {
  const std::string reasoning =
      "We have $a = 3$ and $b^2 = 16$, so b = 4. The total is 1,000 apples; x2 and 2x are not numbers, nor are "
      "the digits of \\frac{1}{2}. Then \\( c + 1 \\) and \\boxed{7}";
  CHECK(step_candidates(reasoning) == Steps{"7", "c + 1", "1,000", "4", "16", "3"});
  // A repeated value is one candidate; the cap keeps the most recent distinct ones.
  CHECK(step_candidates("5 then 5 then 5, and x = 5.") == Steps{"5"});
  CHECK(step_candidates("a = 3, b = 5, c = 8", {.max_candidates = 2}) == Steps{"8", "5"});
  // numbers = false: only spans and right-hand sides.
  CHECK(step_candidates("12 apples and 7 pears, n = 19", {.numbers = false}) == Steps{"19"});
  CHECK(step_candidates("").empty());
  CHECK_THROWS_AS(step_candidates("x", {.max_candidates = 0}), grpo::ConfigError);
}

TEST_CASE("step_credit: results the verifier proves equal count, one step per candidate", "[rewards][math_steps]") {
  // Another form of the same value, each decided by grpo::math (not by string comparison).
  CHECK(step_credit("so x = 0.5 here", Steps{"x = 1/2"}) == 1.0f);
  CHECK(step_credit("which gives 1.5 in total", Steps{"\\frac{6}{4}"}) == 1.0f);
  CHECK(step_credit("the diagonal is $\\sqrt{8}$", Steps{"d = 2\\sqrt{2}"}) == 1.0f);
  CHECK(step_credit("the product $3 \\times 4$ follows", Steps{"12"}) == 1.0f);
  CHECK(step_credit("so x = 0.6", Steps{"x = 1/2"}) == 0.0f);
  // A prose step is read by its last candidate; a delimited span inside it by the verifier's extraction.
  CHECK(step_credit("first 3, then 5", Steps{"Therefore the answer is 5"}) == 1.0f);
  CHECK(step_credit("it is 12", Steps{"The sum is $12$ apples"}) == 1.0f);
  CHECK(step_credit("$(x-3)(x-2)$", Steps{"$x^2 - 5x + 6 = (x-2)(x-3)$"}) == 1.0f);

  // Two of four reference results appear: 2/4.
  const Steps four{"a = 3", "b = a + 2 = 5", "c = a + b = 8", "d = b + c = 13"};
  CHECK(step_credit("a = 3 and b = 5, then I am not sure what c is; maybe 9 and 14", four) == 0.5f);
  const StepMatch match = match_steps("a = 3 and b = 5", four);
  CHECK(match.matched == 2);
  CHECK(match.steps == 4);
  CHECK(match.candidates == 2);
  CHECK(match.complete);

  // One number repeated collects one step, not every step with that value (1 of 3 steps here).
  CHECK(step_credit("4 4 4 4 4 4, so 4 = 4 and $4$", Steps{"x = 4", "y = 4", "z = 9"}) == Approx(1.0f / 3.0f));
  CHECK(step_credit("3 3 3 3", Steps{"p = 3", "q = 6", "r = 9"}) == Approx(1.0f / 3.0f));
  // The same value written in two forms is two candidates; the matching puts each on its own step.
  CHECK(step_credit("x = 4 and y = 8/2", Steps{"x = 4", "y = 4"}) == 1.0f);
  // A candidate equal to two steps goes where it is needed: "6" can only serve the first step, "2*3" either.
  CHECK(step_credit("6 and $2 \\cdot 3$", Steps{"a = 6", "b = 6"}) == 1.0f);

  // Blank steps are not counted; no steps or no reasoning give 0.
  CHECK(step_credit("x = 1", Steps{"x = 1", "  "}) == 1.0f);
  CHECK(step_credit("x = 1", Steps{}) == 0.0f);
  CHECK(step_credit("", Steps{"x = 1"}) == 0.0f);
}

TEST_CASE("step_credit: the deadline stops the comparisons and says so", "[rewards][math_steps]") {
  const auto past = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  const StepMatch late = match_steps("x = 1", Steps{"x = 1"}, {}, past);
  CHECK(!late.complete);
  CHECK(late.matched == 0);
  CHECK(step_credit("x = 1", Steps{"x = 1"}, {}, past) == 0.0f);

  const MathStepsReward reward;
  ScoringContext expired;
  expired.deadline = past;
  const std::vector<Completion> batch{completion("x = 1", steps_row("1", {"x = 1"}))};
  require_values(reward.score(batch, expired), {std::nullopt});
  require_values(score(reward, batch), {1.0});
}

TEST_CASE("huge and empty completions finish quickly and score 0", "[rewards][math_steps]") {
  std::string huge;
  while (huge.size() < (4u << 20)) huge += "1 = 2 = $x \\( 12345 \\boxed{ 3,000 7/8 -4 ";
  const Steps steps{"a = 99999", "b = 1/3", "c = \\sqrt{2}"};
  const auto start = std::chrono::steady_clock::now();
  const StepMatch match = match_steps(huge, steps);
  const auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CHECK(seconds < 2.0);
  CHECK(match.matched == 0);
  CHECK(match.candidates <= 64);

  // Unclosed delimiters, deep nesting, long prose after '=', and many distinct symbolic spans.
  std::string symbolic;
  for (int i = 0; i < 200; ++i) symbolic += fmt::format("$(x+{})^{{{}}} - \\sqrt{{y+{}}}$ ", i, i % 7 + 2, i);
  for (const std::string& text : {std::string(1 << 20, '$'), repeated("\\( 1 ", 1 << 17), repeated("= (", 1 << 18),
                                  "= " + std::string(1 << 20, 'a'), repeated("\\boxed{{", 1 << 17), symbolic}) {
    const auto begin = std::chrono::steady_clock::now();
    const StepMatch adversarial =
        match_steps(text, Steps{"(x+1)^2", "x^3 - y", "\\sqrt{y}", "\\frac{x}{y}", "2x + 3", "x^2 - 1"});
    const auto elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    INFO(text.substr(0, 40));
    CHECK(elapsed < 2.0);
    CHECK(adversarial.matched == 0);
  }

  const MathStepsReward reward;
  require_values(score(reward, {completion("", steps_row("1", steps)), completion(huge, steps_row("1", steps))}),
                 {0.0, 0.0});
}

TEST_CASE("accuracy with step_weight: (1 - w)·final + w·step credit", "[rewards][math_steps][accuracy]") {
  // 2·3 = 6, 6 + 4 = 10, final answer 20.
  const auto row = steps_row("20", {"2 \\cdot 3 = 6", "6 + 4 = 10"});
  const AccuracyReward accuracy({.step_weight = 0.3f});
  const std::vector<Completion> batch{
      completion("<think>2*3 = 6, then 6 + 4 = 10, doubled</think><answer>\\boxed{21}</answer>", row),  // w·1
      completion("<think>I guess 5 and 9</think><answer>\\boxed{20}</answer>", row),  // (1 − w)·1
      completion("<think>2*3 = 6, 6 + 4 = 10</think><answer>\\boxed{20}</answer>", row),  // 1
      completion("<think>2*3 = 6</think><answer>\\boxed{20}</answer>", row),  // 0.7 + 0.3·½
      // The steps are read in the reasoning only: values after </think> do not count.
      completion("<think>no idea</think> 6 and 10 <answer>\\boxed{20}</answer>", row),
      // Without </think>: the text before <answer>.
      completion("2*3 = 6 and 6 + 4 = 10 <answer>\\boxed{19}</answer>", row),
      completion("", row),  // no answer, no steps
      // A row without steps: the final verdict alone.
      completion("\\boxed{20}", steps_row("20", {}, "other")),
  };
  require_values(score(accuracy, batch), {0.3, 0.7, 1.0, 0.85, 0.7, 0.3, 0.0, 1.0});
  // step_weight 0 (the default) ignores the steps.
  require_values(score(AccuracyReward(), batch), {0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 1.0});
  // Another steps field.
  require_values(score(AccuracyReward({.step_weight = 0.5f, .steps_field = "other"}),
                       {completion("x = 7 \\boxed{1}", steps_row("20", {"x = 7"}, "other"))}),
                 {0.5});

  CHECK_THROWS_AS(AccuracyReward({.step_weight = 1.5f}), grpo::ConfigError);
  CHECK_THROWS_AS(AccuracyReward({.step_weight = -0.1f}), grpo::ConfigError);
  CHECK_THROWS_AS(AccuracyReward({.step_weight = 0.5f, .steps_field = ""}), grpo::ConfigError);
}

TEST_CASE("math_steps reward: the credit alone, no value without steps", "[rewards][math_steps]") {
  const MathStepsReward reward;
  CHECK(reward.name() == "math_steps");
  const auto row = steps_row("20", {"2 \\cdot 3 = 6", "6 + 4 = 10"});
  Row no_steps;
  no_steps.set("ground_truth", std::string("20"));
  require_values(score(reward, {completion("<think>6 and 10</think>", row), completion("<think>6</think>", row),
                                completion("6 and 10", std::make_shared<const Row>(no_steps)),
                                completion("6 and 10", nullptr)}),
                 {1.0, 0.5, std::nullopt, std::nullopt});
  CHECK(reference_steps(*row, "ground_truth_steps") != nullptr);
  CHECK(reference_steps(*row, "ground_truth") == nullptr);  // text, not a list
  CHECK_THROWS_AS(MathStepsReward({.steps_field = ""}), grpo::ConfigError);
}

TEST_CASE("registry: step options of accuracy and the math_steps reward round trip", "[rewards][math_steps][registry]") {
  const RewardRegistry registry = RewardRegistry::with_builtins();
  const RewardPtr accuracy = registry.create(R"({"name": "accuracy", "step_weight": 0.25, "steps_field": "steps"})");
  CHECK(as<AccuracyReward>(accuracy).options().step_weight == 0.25f);
  CHECK(as<AccuracyReward>(accuracy).options().steps_field == "steps");
  CHECK(as<AccuracyReward>(registry.create(R"({"name": "accuracy"})")).options().step_weight == 0.0f);
  CHECK_THROWS_WITH(registry.create(R"({"name": "accuracy", "step_weight": 2})"), Catch::Contains("step_weight"));
  CHECK_THROWS_WITH(registry.create(R"({"name": "cosine", "step_weight": 0.5})"),
                    Catch::Contains("unknown option 'step_weight'"));

  const RewardPtr steps =
      registry.create(R"({"name": "math_steps", "steps_field": "s", "max_candidates": 8, "numbers": false})");
  const MathStepsOptions& options = as<MathStepsReward>(steps).options();
  CHECK(options.steps_field == "s");
  CHECK(options.credit.max_candidates == 8);
  CHECK(!options.credit.numbers);
  CHECK(registry.create(R"({"name": "math_steps"})")->name() == "math_steps");
  CHECK_THROWS_WITH(registry.create(R"({"name": "math_steps", "max_candidates": 0})"),
                    Catch::Contains("max_candidates"));
  require_values(score(*steps, {completion("y = 3", steps_row("3", {"y = 3"}, "s"))}), {1.0});
}

}  // namespace
