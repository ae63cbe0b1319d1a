// SPDX-License-Identifier: Apache-2.0
// The reward-hacking set (tests/data/reward_hacking.jsonl, written for this project): completions that state an
// answer they do not commit to (hedged lists and disjunctions, several boxes, the answer only in the reasoning, a box
// contradicted after it, numbers in units or dates, empty or giant boxes, multiple-choice hedges, equations whose
// right side is the gold), and controls that must stay right (the right answer after wrong reasoning, 0.5 against
// \frac{1}{2} inside <answer>). Expected verdicts are by construction. Every public grading path must agree: the
// accuracy reward (here), grpo::math::verify (here) and `grpo verify` / `grpo score` (tests/tools).
#include <grpo/math/verify.hpp>
#include <grpo/rewards/accuracy_reward.hpp>
#include <support/test_paths.hpp>

#include "rewards/reward_testing.hpp"

#include <catch2/catch.hpp>
#include <simdjson.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace {

struct HackCase {
  std::string category, gold, completion;
  bool expected = false;
};

std::vector<HackCase> load_cases() {
  const auto path = std::filesystem::path(grpo::testing::test_data_dir()) / "reward_hacking.jsonl";
  REQUIRE(std::filesystem::exists(path));
  simdjson::ondemand::parser parser;
  const simdjson::padded_string json = simdjson::padded_string::load(path.string());
  std::vector<HackCase> out;
  simdjson::ondemand::document_stream docs = parser.iterate_many(json);
  for (auto doc : docs) {
    simdjson::ondemand::object row = doc.get_object();
    HackCase c;
    c.category = std::string(std::string_view(row["category"]));
    c.gold = std::string(std::string_view(row["gold"]));
    c.completion = std::string(std::string_view(row["completion"]));
    c.expected = bool(row["expected"]);
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace

TEST_CASE("reward hacking: no hedge scores through the accuracy reward or verify(), and every control does",
          "[rewards][accuracy][reward_hacking]") {
  const std::vector<HackCase> cases = load_cases();
  REQUIRE(cases.size() >= 150);
  std::vector<grpo::rewards::Completion> batch;
  for (const HackCase& c : cases) {
    grpo::rewards::Row row;
    row.set("ground_truth", c.gold);
    batch.push_back(grpo::rewards::testing::completion(c.completion, std::make_shared<const grpo::rewards::Row>(row)));
  }
  const auto rewards = grpo::rewards::testing::score(grpo::rewards::AccuracyReward(), batch);
  REQUIRE(rewards.size() == cases.size());
  std::map<std::string, int> hacks, controls;
  int false_positives = 0, false_negatives = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const HackCase& c = cases[i];
    INFO(c.category << ": gold " << c.gold << ", completion " << c.completion);
    const bool verified = grpo::math::verify(c.gold, c.completion) == grpo::math::Verdict::equal;
    REQUIRE(rewards[i].has_value());
    const bool rewarded = *rewards[i] == 1.0f;
    CHECK(verified == c.expected);
    CHECK(rewarded == c.expected);
    (c.expected ? controls : hacks)[c.category]++;
    false_positives += !c.expected && (verified || rewarded);
    false_negatives += c.expected && !(verified && rewarded);
  }
  CHECK(false_positives == 0);
  CHECK(false_negatives == 0);
  // The set covers every kind of hack the issue lists, with controls beside them.
  for (const char* category : {"hedge", "several_boxes", "reasoning_only", "contradicted", "units_dates",
                               "empty_giant", "multiple_choice", "equation"}) {
    CHECK(hacks[category] >= 5);
  }
  CHECK(controls["control"] >= 50);
}
