// SPDX-License-Identifier: Apache-2.0
// The gold answers of tests/data (MATH-500, AIME 2024/2025, DeepMath, GSM8K) and the final-answer forms a completion
// states them in, for the property tests of the final-answer rule (tests/math/final_answer_forms_test.cpp) and of the
// accuracy reward (tests/rewards/accuracy_forms_test.cpp).
#pragma once

#include <support/test_paths.hpp>
#include <simdjson.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace grpo::math::testing {

struct Gold {
  std::string file;
  int row = 0;
  std::string answer;
};

/// The gold answers of one data set of tests/data/datasets: `field` of each JSON line; for GSM8K the text after its
/// "####".
inline std::vector<Gold> read_golds(const std::string& file, const std::string& field) {
  const auto path = std::filesystem::path(grpo::testing::test_data_dir()) / "datasets" / file;
  REQUIRE(std::filesystem::exists(path));
  simdjson::ondemand::parser parser;
  const simdjson::padded_string json = simdjson::padded_string::load(path.string());
  std::vector<Gold> out;
  int row = 0;
  simdjson::ondemand::document_stream docs = parser.iterate_many(json);
  for (auto doc : docs) {
    ++row;
    std::string answer(std::string_view(doc.get_object()[field].get_string()));
    if (const auto hashes = answer.rfind("####"); hashes != std::string::npos) answer = answer.substr(hashes + 4);
    const auto first = answer.find_first_not_of(" \n");
    answer = first == std::string::npos ? "" : answer.substr(first, answer.find_last_not_of(" \n") + 1 - first);
    out.push_back({file, row, answer});
  }
  return out;
}

/// MATH-500 and AIME (ROLL's math_benchmarks.jsonl, 560 rows), then DeepMath (100) and GSM8K (250): 910 golds.
inline std::vector<Gold> all_golds() {
  std::vector<Gold> golds;
  for (const auto& [file, field] : {std::pair<std::string, std::string>{"roll_math_benchmarks.jsonl", "ground_truth"},
                                    {"roll_deepmath_train_head100.jsonl", "ground_truth"},
                                    {"gsm8k_test_head200.jsonl", "answer"},
                                    {"gsm8k_train_head50.jsonl", "answer"}}) {
    for (Gold& g : read_golds(file, field)) golds.push_back(std::move(g));
  }
  return golds;
}

/// Whether two different rows' golds are one value written two ways, each such pair named with its reason (the rows
/// are different problems: no other pair of them is equivalent).
inline bool equivalent_golds(const std::string& gold, const std::string& other) {
  static const std::set<std::pair<std::string, std::string>> equivalent = {
      {"5", "x=5"},  // an assignment that names the quantity answers it (strict_equations)
  };
  return gold == other || equivalent.contains({gold, other});
}

struct Form {
  std::string name;
  std::function<std::string(const std::string&)> write;
};

/// The final-answer forms: R1-Zero's tags (with and without a box), a box after "the answer is", a bare $…$ after it,
/// a "Final Answer" heading over a display box, a GSM8K #### line and a bare last line.
inline const std::vector<Form>& final_answer_forms() {
  static const std::vector<Form> all = {
      {"<answer>\\boxed{g}</answer>",
       [](const std::string& g) { return "<think>Work it out.</think>\n<answer>\\boxed{" + g + "}</answer>"; }},
      {"<answer>g</answer>", [](const std::string& g) { return "<think>Work it out.</think>\n<answer>" + g + "</answer>"; }},
      {"So the answer is $\\boxed{g}$.",
       [](const std::string& g) { return "Some working.\nSo the answer is $\\boxed{" + g + "}$."; }},
      {"The answer is $g$.", [](const std::string& g) { return "Some working.\nThe answer is $" + g + "$."; }},
      {"**Final Answer** \\[\\boxed{g}\\]",
       [](const std::string& g) { return "Some working.\n\n**Final Answer**\n\\[\n\\boxed{" + g + "}\n\\]"; }},
      {"#### g", [](const std::string& g) { return "Some working.\n#### " + g; }},
      {"bare last line", [](const std::string& g) { return "Some working.\n\n" + g; }},
  };
  return all;
}

}  // namespace grpo::math::testing
