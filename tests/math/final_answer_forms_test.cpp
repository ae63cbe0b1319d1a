// SPDX-License-Identifier: Apache-2.0
// Property tests on public data: every gold answer of tests/data (MATH-500, AIME 2024/2025, DeepMath, GSM8K) written
// back as its own final answer, in every final-answer form the grader recognises, is graded equal; and another row's
// gold in the same forms is graded not_equal where the two are not equivalent. A correct answer scored 0 is a wrong
// gradient, so these catch a false-negative regression of the final-answer rule (find_final_answer, grade) in
// seconds. Expected verdicts hold by construction: the gold is its own answer, and the rows are different problems.
#include "math/final_answer_forms.hpp"

#include <catch2/catch.hpp>
#include <fmt/format.h>
#include <string>
#include <vector>

#include "grpo/math/verify.hpp"

namespace gm = grpo::math;
using gm::testing::Form;
using gm::testing::Gold;

TEST_CASE("final-answer forms: every gold of tests/data written as its own answer is equal, in every form",
          "[math][final_answer][forms]") {
  const std::vector<Gold> golds = gm::testing::all_golds();
  REQUIRE(golds.size() == 910);
  for (const Form& form : gm::testing::final_answer_forms()) {
    std::vector<std::string> failures;
    for (const Gold& g : golds) {
      const gm::Grade grade = gm::grade(g.answer, form.write(g.answer));
      if (grade.verdict != gm::Verdict::equal) {
        failures.push_back(fmt::format("{}:{} gold \"{}\" -> {} ({})", g.file, g.row, g.answer,
                                       gm::to_string(grade.verdict), grade.reason));
      }
    }
    INFO(form.name << ": " << failures.size() << " of " << golds.size() << " not equal");
    for (const std::string& f : failures) UNSCOPED_INFO(f);
    CHECK(failures.empty());
  }
}

TEST_CASE("final-answer forms: another row's gold is not equal, in every form", "[math][final_answer][forms]") {
  const std::vector<Gold> golds = gm::testing::all_golds();
  // Each gold against the next row's gold, unless the two are one value (equivalent_golds names those pairs).
  std::size_t pairs = 0;
  for (const Form& form : gm::testing::final_answer_forms()) {
    std::vector<std::string> failures;
    for (std::size_t k = 0; k < golds.size(); ++k) {
      const Gold& gold = golds[k];
      const Gold& other = golds[(k + 1) % golds.size()];
      if (gm::testing::equivalent_golds(gold.answer, other.answer)) continue;
      ++pairs;
      const gm::Grade grade = gm::grade(gold.answer, form.write(other.answer));
      if (grade.verdict != gm::Verdict::not_equal) {
        failures.push_back(fmt::format("{}:{} gold \"{}\" vs \"{}\" -> {}", gold.file, gold.row, gold.answer,
                                       other.answer, gm::to_string(grade.verdict)));
      }
    }
    INFO(form.name << ": " << failures.size() << " not graded not_equal");
    for (const std::string& f : failures) UNSCOPED_INFO(f);
    CHECK(failures.empty());
  }
  CHECK(pairs > 6000);
}
