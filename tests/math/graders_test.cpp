// SPDX-License-Identifier: Apache-2.0
// Compatibility profiles: hand cases from the upstream rules (hendrycks/math strip_string, NeMo-Skills math_equal).
#include "grpo/math/graders.hpp"

#include <catch2/catch.hpp>

namespace gm = grpo::math;
using gm::Verdict;

TEST_CASE("hendrycks_strip_string follows math_equivalence.py", "[math][graders]") {
  CHECK(gm::hendrycks_strip_string("\\tfrac{1}{2} +\\! \\frac1{72}") == "\\frac{1}{2}+\\frac{1}{72}");
  CHECK(gm::hendrycks_strip_string("10\\text{ units}") == "10");
  CHECK(gm::hendrycks_strip_string("x = 0.5") == "\\frac{1}{2}");      // short "x =" prefix, then 0.5 → 1/2
  CHECK(gm::hendrycks_strip_string("\\sqrt3") == "\\sqrt{3}");
  CHECK(gm::hendrycks_strip_string("1/2") == "\\frac{1}{2}");
  CHECK(gm::hendrycks_strip_string(".1") == "0.1");
  CHECK(gm::hendrycks_strip_string("\\left(x-2\\right)") == "(x-2)");
}

TEST_CASE("hendrycks_is_equiv is exact string equality after stripping", "[math][graders]") {
  CHECK(gm::hendrycks_is_equiv("10\\%", "10") == Verdict::equal);
  CHECK(gm::hendrycks_is_equiv("10, 4, -2", "4, 10, -2") == Verdict::not_equal);  // no set semantics
  CHECK(gm::hendrycks_is_equiv("\\frac{1}{2}", "0.5") == Verdict::equal);
  CHECK(gm::hendrycks_is_equiv("\\frac{2}{4}", "\\frac{1}{2}") == Verdict::not_equal);  // no arithmetic
}

TEST_CASE("nemo_skills_math_equal", "[math][graders]") {
  CHECK(gm::nemo_skills_math_equal("5", "5.0") == Verdict::equal);
  CHECK(gm::nemo_skills_math_equal("10%", "10") == Verdict::equal);      // a trailing % is stripped
  CHECK(gm::nemo_skills_math_equal("185\\", "185") == Verdict::equal);   // so is a trailing backslash
  CHECK(gm::nemo_skills_math_equal("\\$10", "10") == Verdict::equal);
  CHECK(gm::nemo_skills_math_equal("odd", "\\text{oddd}") == Verdict::not_equal);
  CHECK(gm::nemo_skills_math_equal("(r+5)(r+5)", "(r+5)^2") == Verdict::equal);
  CHECK(gm::nemo_skills_math_equal("0", "") == Verdict::not_equal);
}
