// SPDX-License-Identifier: Apache-2.0
// The accuracy reward on public data: the 560 gold answers of MATH-500, AIME 2024 and AIME 2025 (ROLL's
// math_benchmarks.jsonl, the dataset rows' own ground_truth field) written back as their own final answers in every
// final-answer form score 1, and the next row's gold in the same forms scores 0: the reward grades through the one
// grading path (tests/math/final_answer_forms_test.cpp checks the path itself on all 910 golds of tests/data).
#include <grpo/rewards/accuracy_reward.hpp>

#include "math/final_answer_forms.hpp"
#include "rewards/reward_testing.hpp"

#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

TEST_CASE("accuracy reward: MATH-500 and AIME golds written as their own final answers score 1, another row's 0",
          "[rewards][accuracy][forms]") {
  const auto golds = grpo::math::testing::read_golds("roll_math_benchmarks.jsonl", "ground_truth");
  REQUIRE(golds.size() == 560);
  for (const auto& form : grpo::math::testing::final_answer_forms()) {
    std::vector<grpo::rewards::Completion> batch;
    for (std::size_t k = 0; k < golds.size(); ++k) {
      grpo::rewards::Row row;
      row.set("ground_truth", golds[k].answer);
      const auto shared = std::make_shared<const grpo::rewards::Row>(row);
      batch.push_back(grpo::rewards::testing::completion(form.write(golds[k].answer), shared));
      batch.push_back(grpo::rewards::testing::completion(form.write(golds[(k + 1) % golds.size()].answer), shared));
    }
    const auto rewards = grpo::rewards::testing::score(grpo::rewards::AccuracyReward(), batch);
    REQUIRE(rewards.size() == batch.size());
    int own = 0, other = 0, other_pairs = 0;
    for (std::size_t k = 0; k < golds.size(); ++k) {
      own += rewards[2 * k].has_value() && *rewards[2 * k] == 1.0f;
      if (grpo::math::testing::equivalent_golds(golds[k].answer, golds[(k + 1) % golds.size()].answer)) continue;
      ++other_pairs;
      other += rewards[2 * k + 1].has_value() && *rewards[2 * k + 1] == 0.0f;
    }
    INFO(form.name);
    CHECK(own == 560);
    CHECK(other == other_pairs);
  }
}
