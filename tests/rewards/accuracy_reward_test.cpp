// SPDX-License-Identifier: Apache-2.0
#include <grpo/rewards/accuracy_reward.hpp>
#include <grpo/rewards/executor.hpp>

#include "rewards/reward_testing.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace {

using namespace grpo::rewards;
using namespace std::chrono_literals;
using grpo::rewards::testing::require_values;
using grpo::rewards::testing::score;

std::shared_ptr<const Row> gold(FieldValue value, std::string field = "solution") {
  Row row;
  row.set(std::move(field), std::move(value));
  return std::make_shared<const Row>(std::move(row));
}

TEST_CASE("accuracy maps the judge's verdicts to 1, 0, or no value", "[rewards][accuracy]") {
  const CorrectnessJudge judge = [](const Completion& c, const ScoringContext&) {
    if (c.text == "right") return Correctness::correct;
    if (c.text == "late") return Correctness::timeout;
    if (c.text == "nogold") return Correctness::no_gold;
    return Correctness::wrong;
  };
  const auto batch = testing::completions({"right", "wrong", "late", "nogold"});
  require_values(score(AccuracyReward({}, judge), batch), {1.0, 0.0, std::nullopt, std::nullopt});
  // The seed recipe's neutral value for an unparseable gold.
  require_values(score(AccuracyReward({.no_gold_value = 0.5f}, judge), batch), {1.0, 0.0, std::nullopt, 0.5});
}

TEST_CASE("accuracy with the math verifier: boxed, answer tags, final answer, GSM8K", "[rewards][accuracy]") {
  const AccuracyReward accuracy;
  const auto g42 = gold(std::string("42"));
  const std::vector<Completion> batch{
      testing::completion("So the result is \\boxed{42}.", g42),
      testing::completion("So the result is \\boxed{41}.", g42),
      testing::completion("<think>maybe 41</think><answer>\\boxed{42}</answer>", g42),
      testing::completion("Therefore, the final answer is $42$. I hope it is correct.", g42),
      testing::completion("", g42),  // empty completion: no answer → wrong
      testing::completion("\\boxed{\\frac{1}{2}}", gold(std::string("\\frac{1}{2}"))),
      testing::completion("<think> </think> <answer> 42 </answer>", g42),  // R1-Zero: the span is the answer
      testing::completion("<think> </think> <answer> 41 </answer>", g42),
      testing::completion("<think>42</think> <answer> </answer>", g42),  // an empty answer span: wrong
  };
  require_values(score(accuracy, batch), {1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0});

  // GSM8K: the gold is a worked solution ending in "#### 18"; the completion may use the same anchor.
  const auto gsm8k = gold(std::string("She makes 9 * 2 = $<<9*2=18>>18 every day.\n#### 18"), "answer");
  require_values(score(accuracy, {testing::completion("9 * 2 = 18\n#### 18", gsm8k),
                                  testing::completion("\\boxed{18}", gsm8k), testing::completion("#### 17", gsm8k)}),
                 {1.0, 1.0, 0.0});
}

TEST_CASE("accuracy's graded answer is the final answer its verifier grades, the majority vote's key",
          "[rewards][accuracy]") {
  const AccuracyReward accuracy;
  const auto answer = [&](const std::string& text) { return accuracy.graded_answer(testing::completion(text, nullptr)); };
  CHECK(answer("So the result is \\boxed{42}.") == "42");
  CHECK(answer("\\boxed{5}. Wait, that is wrong ... \\boxed{6}") == "6");  // the box after the correction
  CHECK(answer("<think>maybe \\boxed{41}</think><answer> 42 </answer>") == "42");  // never the reasoning
  CHECK(answer("<answer>\\frac{1}{2}</answer>") == answer("\\boxed{\\frac{1}{2}}"));
  CHECK(answer("") == std::nullopt);  // no final answer
  // Without answer tags, "<answer>" is no delimiter: the last box is the answer.
  CHECK(AccuracyReward({.answer_tags = false}).graded_answer(testing::completion("\\boxed{3} <answer>4</answer>",
                                                                                   nullptr)) == "3");
  // Another judge grades by its own rule, which names no answer.
  const CorrectnessJudge judge = [](const Completion&, const ScoringContext&) { return Correctness::correct; };
  CHECK(AccuracyReward({}, judge).graded_answer(testing::completion("\\boxed{42}", nullptr)) == std::nullopt);
}

TEST_CASE("accuracy reads a bare ground truth (ROLL, MATH-500) as one LaTeX answer", "[rewards][accuracy]") {
  // Without delimiters Math-Verify would read only "3" of 3\sqrt{13}, and nothing of \frac43 or (3,4].
  const AccuracyReward accuracy;
  const std::vector<Completion> batch{
      testing::completion("so \\boxed{\\sqrt{117}}", gold(std::string("3\\sqrt{13}"), "ground_truth")),
      testing::completion("so \\boxed{3}", gold(std::string("3\\sqrt{13}"), "ground_truth")),
      testing::completion("the answer is $\\frac{4}{3}$", gold(std::string("\\frac43"), "ground_truth")),
      testing::completion("\\boxed{(3, 4]}", gold(std::string("(3,4]"), "ground_truth")),
      testing::completion("\\boxed{[3, 4]}", gold(std::string("(3,4]"), "ground_truth")),
  };
  require_values(score(accuracy, batch), {1.0, 0.0, 1.0, 1.0, 0.0});
}

TEST_CASE("accuracy: gold fields, lists, numbers, and unparseable gold", "[rewards][accuracy]") {
  const AccuracyReward accuracy;
  const auto answer = testing::completion("\\boxed{42}");
  auto with = [&](std::shared_ptr<const Row> row) {
    Completion c = answer;
    c.row = std::move(row);
    return c;
  };
  const std::vector<Completion> batch{
      with(gold(std::vector<std::string>{"41", "42"})),       // any of several gold answers
      with(gold(42.0, "ground_truth")),                        // a number field
      with(gold(std::string(""))),                             // unparseable gold → no value
      with(nullptr),                                           // no row → no value
      with(std::make_shared<const Row>(Row{{"solution", std::string("42")}, {"answer", std::string("7")}})),
  };
  require_values(score(accuracy, batch), {1.0, 1.0, std::nullopt, std::nullopt, 1.0});
  require_values(score(AccuracyReward({.no_gold_value = 0.5f}), batch), {1.0, 1.0, 0.5, 0.5, 1.0});
  // Only the configured field: "answer" holds 7.
  require_values(score(AccuracyReward({.gold_fields = {"answer"}}), {batch[4]}), {0.0});
}

TEST_CASE("accuracy honours an expired deadline and survives adversarial completions", "[rewards][accuracy]") {
  const auto g = gold(std::string("42"));
  const auto c = testing::completion("\\boxed{42}", g);
  ScoringContext expired;
  expired.deadline = std::chrono::steady_clock::now() - 1s;
  require_values(AccuracyReward().score({&c, 1}, expired), {std::nullopt});

  std::string huge;
  while (huge.size() < (1u << 20)) huge += "\\boxed{\\frac{\xff\xfe{{{{ 1 + ( \\sqrt{ \xc3";
  std::string nested(100000, '{');
  const std::vector<Completion> adversarial{testing::completion(huge, g), testing::completion(nested + "\\boxed{42}", g),
                                            testing::completion(std::string(1 << 20, '\xff'), g)};
  const RewardPtr reward = std::make_shared<AccuracyReward>();
  const auto started = std::chrono::steady_clock::now();
  const RewardScores scores = RewardExecutor({.num_threads = 2, .budget = 2000ms}).score(reward, adversarial);
  CHECK(std::chrono::steady_clock::now() - started < 3s);
  REQUIRE(scores.values.size() == 3);
  // Garbage boxes are wrong, the closed \\boxed{42} after 100,000 open braces is right, invalid UTF-8 is wrong.
  CHECK(scores.values[0] == std::optional<float>(0.0f));
  CHECK(scores.values[1] == std::optional<float>(1.0f));
  CHECK(scores.values[2] == std::optional<float>(0.0f));
  CHECK(scores.metrics.frac_error == 0.0);
}

}  // namespace
