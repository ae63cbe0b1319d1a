// SPDX-License-Identifier: Apache-2.0
// Hard equivalences written for this project (tests/data/equivalence_cases.jsonl), graded the way the accuracy reward
// grades (grade() with the default options, the prediction inside <answer>): solution sets as inequalities, intervals
// and set-builder notation (with unions written with "or"), radicals and rational powers, fractions / decimals /
// percents / mixed numbers, and currency and unit forms (about 40 pairs each); and the kinds a final answer takes that
// graders miss: products, logarithms and mixed numbers, rearranged equations and implicit curves, tuples with decimal
// or \left( … \right) elements, relations joined by "or", subsets of the real line (ℝ, set differences, adjacent
// intervals) and repeating decimals. Each category holds equal and not-equal pairs; expected verdicts were worked out
// by hand.
#include <grpo/math/verify.hpp>
#include <support/test_paths.hpp>

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <simdjson.h>

#include <filesystem>
#include <map>
#include <string>

TEST_CASE("equivalence: each hard category at >= 98% through the reward's grading", "[math][equivalence]") {
  const auto path = std::filesystem::path(grpo::testing::test_data_dir()) / "equivalence_cases.jsonl";
  REQUIRE(std::filesystem::exists(path));
  simdjson::ondemand::parser parser;
  const simdjson::padded_string json = simdjson::padded_string::load(path.string());
  simdjson::ondemand::document_stream docs = parser.iterate_many(json);
  std::map<std::string, std::pair<int, int>> tally;  // category → {agree, total}
  int false_positives = 0;
  for (auto doc : docs) {
    simdjson::ondemand::object row = doc.get_object();
    const auto category = std::string(std::string_view(row["category"]));
    const auto gold = std::string(std::string_view(row["gold"]));
    const auto pred = std::string(std::string_view(row["pred"]));
    const bool expected = bool(row["expected"]);
    const grpo::math::Grade grade = grpo::math::grade(gold, pred);
    const bool equal = grade.verdict == grpo::math::Verdict::equal;
    auto& [agree, total] = tally[category];
    ++total;
    agree += equal == expected;
    false_positives += equal && !expected;
    if (equal != expected) fmt::print("  miss [{}] gold={} pred={} verdict={}\n", category, gold, pred, to_string(grade.verdict));
  }
  REQUIRE(tally.size() == 10);
  for (const auto& [category, counts] : tally) {
    INFO(category << ": " << counts.first << " / " << counts.second);
    CHECK(counts.second >= 6);
    CHECK(counts.first >= 0.98 * counts.second);
  }
  CHECK(false_positives == 0);
}
