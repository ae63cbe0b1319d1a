// SPDX-License-Identifier: Apache-2.0
// Equivalence-engine and pipeline tests. Each expectation is decided by hand (the maths is in the comment).
#include "grpo/math/verify.hpp"

#include "grpo/core/error.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <string>
#include <thread>

namespace gm = grpo::math;
using gm::Verdict;

namespace {
// Both answers are bare LaTeX (no $…$): parse them directly and compare, gold first.
Verdict cmp(std::string_view gold, std::string_view pred, gm::VerifyOptions o = {}) {
  auto g = gm::parse_latex(gold), p = gm::parse_latex(pred);
  REQUIRE(g);
  REQUIRE(p);
  return gm::compare(*g, *p, o);
}
}  // namespace

TEST_CASE("compare: exact rationals and decimals", "[math][compare]") {
  CHECK(cmp("\\frac{1}{2}", "0.5") == Verdict::equal);
  CHECK(cmp("\\frac{2}{4}", "\\frac{1}{2}") == Verdict::equal);       // 2/4 = 1/2 exactly
  CHECK(cmp("\\frac{10}{9}", "\\frac{10}{8}") == Verdict::not_equal);
  CHECK(cmp("2\\frac12", "2.5") == Verdict::equal);                    // mixed number 2 + 1/2
  CHECK(cmp("1000", "1,000") == Verdict::equal);                       // thousands separator
  CHECK(cmp("10^{30}+1", "10^{30}") == Verdict::not_equal);            // exact: beyond double precision
  CHECK(cmp("50\\%", "\\frac{1}{2}") == Verdict::equal);               // 50% = 50/100
  CHECK(cmp("90^\\circ", "90") == Verdict::equal);                     // degrees dropped (convert_degrees=False)
}

TEST_CASE("compare: float literals round both sides to float_rounding decimals", "[math][compare]") {
  gm::VerifyOptions o;
  o.float_rounding = 6;
  CHECK(cmp("\\frac{1}{3}", "0.333333", o) == Verdict::equal);    // round(1/3, 6) = 0.333333
  CHECK(cmp("\\frac{1}{3}", "0.333", o) == Verdict::not_equal);   // 0.333333 != 0.333
  o.float_rounding = 3;
  CHECK(cmp("\\frac{1}{3}", "0.333", o) == Verdict::equal);       // round(1/3, 3) = 0.333
  o.float_rounding = 6;
  CHECK(cmp("\\sqrt{17}", "4.123106", o) == Verdict::equal);      // √17 = 4.1231056… → 4.123106
}

TEST_CASE("compare: constants by ball arithmetic", "[math][compare]") {
  CHECK(cmp("2\\sqrt{2}", "\\sqrt{8}") == Verdict::equal);                    // √8 = √(4·2) = 2√2
  CHECK(cmp("\\sqrt{6}", "\\sqrt{2}\\sqrt{3}") == Verdict::equal);
  CHECK(cmp("\\frac{1}{2}", "\\sin(\\pi/6)") == Verdict::equal);              // sin 30° = 1/2
  CHECK(cmp("\\frac{1+\\sqrt{5}}{2}", "\\frac{2}{\\sqrt{5}-1}") == Verdict::equal);  // rationalise: 2(√5+1)/4
  CHECK(cmp("2", "\\log_2 4") == Verdict::equal);
  CHECK(cmp("120", "5!") == Verdict::equal);
  CHECK(cmp("10", "\\binom{5}{2}") == Verdict::equal);                        // 5·4/2
  CHECK(cmp("\\pi", "3.14159") == Verdict::not_equal);                        // 3.141593 vs 3.14159 at 6 decimals
  CHECK(cmp("4", "4\\sqrt{2}") == Verdict::not_equal);
  CHECK(cmp("\\frac{1+\\sqrt{5}}{2}", "2") == Verdict::not_equal);
}

TEST_CASE("compare: identities with free symbols", "[math][compare]") {
  CHECK(cmp("(x+1)^2", "x^2+2x+1") == Verdict::equal);
  CHECK(cmp("\\frac{x+2}{7}", "\\frac{x}{7}+\\frac{2}{7}") == Verdict::equal);
  CHECK(cmp("\\frac{2}{x^2-1}", "\\frac{1}{x-1}-\\frac{1}{x+1}") == Verdict::equal);
  CHECK(cmp("\\tan^2(y)+1", "\\sec^2(y)") == Verdict::equal);
  CHECK(cmp("2\\sin b \\cos a", "\\sin(a+b)-\\sin(a-b)") == Verdict::equal);  // sum-to-product
  CHECK(cmp("x^2+2x+1", "x^3+2x+1") == Verdict::not_equal);
  CHECK(cmp("x+2n+1", "x+1") == Verdict::not_equal);
  CHECK(cmp("X", "x") == Verdict::equal);  // symbols are case-insensitive (lowercase_symbols)
}

TEST_CASE("compare: strict=false renames the prediction's symbols by position", "[math][compare]") {
  gm::VerifyOptions o;
  CHECK(cmp("f(x)", "f(y)", o) == Verdict::not_equal);
  o.strict = false;
  CHECK(cmp("f(x)", "f(y)", o) == Verdict::equal);
}

TEST_CASE("compare: sets, tuples, intervals, matrices", "[math][compare]") {
  CHECK(cmp("1,2,3", "3,1,2") == Verdict::equal);                            // sets are unordered
  CHECK(cmp("\\{1,2\\}", "\\{1,2,2\\}") == Verdict::equal);                  // and have no duplicates
  CHECK(cmp("1,2", "1,2,3") == Verdict::not_equal);
  CHECK(cmp("(1,2,3)", "(1,3,2)") == Verdict::not_equal);                    // tuples are ordered
  CHECK(cmp("(1,\\frac{9}{2})", "(1,4.5)") == Verdict::equal);
  CHECK(cmp("[0,1)", "[0,1)") == Verdict::equal);
  CHECK(cmp("[0,1)", "(0,1)") == Verdict::not_equal);                        // openness differs
  CHECK(cmp("(0,1]", "(0,\\frac{2}{2}]") == Verdict::equal);
  CHECK(cmp("(1,3)", "\\{1,3\\}") == Verdict::equal);                        // open interval vs 2-element set
  CHECK(cmp("(3,1)", "\\{1,3\\}") == Verdict::not_equal);                    // Interval(3,1) is empty upstream
  CHECK(cmp("\\pm 2", "\\{-2, 2\\}") == Verdict::equal);
  CHECK(cmp("\\pm 2", "2") == Verdict::not_equal);
  CHECK(cmp("\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", "\\begin{bmatrix}1&2\\\\3&4\\end{bmatrix}") == Verdict::equal);
  CHECK(cmp("\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", "\\begin{pmatrix}1&2\\\\3&5\\end{pmatrix}") ==
        Verdict::not_equal);
  CHECK(cmp("\\begin{pmatrix}1\\\\2\\end{pmatrix}", "2k+2") == Verdict::not_equal);  // a matrix is no scalar
  // Subsets of the real line in one canonical form: touching and overlapping pieces merged, points removed.
  CHECK(cmp("[2,5]", "[2,3]\\cup[3,5]") == Verdict::equal);
  CHECK(cmp("[2,5]", "[2,3)\\cup[3,5]") == Verdict::equal);
  CHECK(cmp("[2,5]", "[2,3)\\cup(3,5]") == Verdict::not_equal);                  // 3 is missing
  CHECK(cmp("[1,4]", "[1,3]\\cup[2,4]") == Verdict::equal);                       // overlapping
  CHECK(cmp("[1,4]", "[2,4]\\cup[1,3]") == Verdict::equal);                       // in any order
  CHECK(cmp("\\mathbb{R}", "(-\\infty,\\infty)") == Verdict::equal);
  CHECK(cmp("\\mathbb{R}", "(-\\infty,0]\\cup(0,\\infty)") == Verdict::equal);
  CHECK(cmp("\\mathbb{R}\\setminus\\{0\\}", "(-\\infty,0)\\cup(0,\\infty)") == Verdict::equal);
  CHECK(cmp("\\mathbb{R}\\setminus\\{0, 1\\}", "(-\\infty,0)\\cup(0,1)\\cup(1,\\infty)") == Verdict::equal);
  CHECK(cmp("[0,2]\\setminus\\{0\\}", "(0,2]") == Verdict::equal);
  CHECK(cmp("[0,2]\\setminus\\{0\\}", "[0,2]") == Verdict::not_equal);
  CHECK(cmp("\\mathbb{R}\\setminus\\{0\\}", "\\mathbb{R}") == Verdict::not_equal);
  CHECK(cmp("[0,\\sqrt{2}]", "[0,1]\\cup[1,\\frac{\\sqrt{8}}{2}]") == Verdict::equal);  // endpoints by value
  CHECK(cmp("\\{-2\\}\\cup\\{2\\}", "\\pm 2") == Verdict::equal);
  // [[1,2],[3,4]] + [[5,6],[7,8]] = [[6,8],[10,12]]
  CHECK(cmp("\\begin{pmatrix}6&8\\\\10&12\\end{pmatrix}",
            "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}+\\begin{pmatrix}5&6\\\\7&8\\end{pmatrix}") == Verdict::equal);
}

TEST_CASE("compare: equations, assignments and inequalities (gold-directed)", "[math][compare]") {
  CHECK(cmp("x=3", "3") == Verdict::equal);          // gold assignment vs value
  CHECK(cmp("3", "x=3") == Verdict::equal);          // predicted equation reduced to its right side
  CHECK(cmp("x+y=3", "3") == Verdict::equal);        // a left side made of symbols only is an assignment
  CHECK(cmp("x+2y=3", "3") == Verdict::not_equal);   // a number on the left: an equation, not an assignment
  CHECK(cmp("2x+4y-3=0", "y=-\\frac{1}{2}x+\\frac{3}{4}") == Verdict::equal);  // same line: lhs-rhs ratio 4
  CHECK(cmp("x<1", "-x>-1") == Verdict::equal);      // mirrored relation
  CHECK(cmp("x<1", "x>-1") == Verdict::not_equal);
  CHECK(cmp("x\\le 5", "5\\ge x") == Verdict::equal);
  CHECK(cmp("1<x<2", "(1,2)") == Verdict::equal);    // gold relation → set
  // The reverse: Math-Verify compares a predicted relation with a gold set only when allowed (an echoed question
  // is a relation too) ...
  gm::VerifyOptions o = gm::math_verify_defaults();
  CHECK(cmp("(1,2)", "1<x<2", o) == Verdict::not_equal);
  o.allow_set_relation_comp = true;
  CHECK(cmp("(1,2)", "1<x<2", o) == Verdict::equal);
  // ... final-answer grading takes a relation solved for its variable as the set it describes, not an unsolved one.
  CHECK(cmp("(1,2)", "1<x<2") == Verdict::equal);
  CHECK(cmp("(1,2)", "1<2x-1<3") == Verdict::not_equal);
  CHECK(cmp("x \\ge 2", "[2, \\infty)") == Verdict::equal);
}

TEST_CASE("compare: text answers", "[math][compare]") {
  CHECK(cmp("\\text{Evelyn}", "\\text{evelyn}") == Verdict::equal);
  CHECK(cmp("\\text{odd}", "odd") == Verdict::equal);  // o·d·d spells the word
  CHECK(cmp("\\text{E}", "e") == Verdict::equal);
  CHECK(cmp("d", "\\text{E}") == Verdict::not_equal);
  CHECK(cmp("\\text{odd}", "\\text{even}") == Verdict::not_equal);
}

TEST_CASE("verify: full pipeline on completions", "[math][verify]") {
  CHECK(gm::verify("$\\frac{14}{3}$", "so the sum is $2+\\frac{5}{3}+1=\\boxed{\\frac{14}{3}}$") == Verdict::equal);
  CHECK(gm::verify("$3\\sqrt{13}$", "Thus $\\sqrt{117} = \\boxed{3\\sqrt{13}}$.") == Verdict::equal);
  CHECK(gm::verify("$28\\%$", "a total loss of $\\boxed{28\\%}$.") == Verdict::equal);
  CHECK(gm::verify("1000.99", "the total is $1,000.99") == Verdict::equal);
  CHECK(gm::verify("$1/3$", "$\\frac{1}{3} \\text{meters}$") == Verdict::equal);  // units
  CHECK(gm::verify("$125$ miles", "The distance is $\\boxed{125\\textnormal{ miles}}.$") == Verdict::equal);
  gm::VerifyOptions latex_only = gm::math_verify_test_harness(/*latex=*/true, /*expr=*/false);
  CHECK(gm::verify("$9$", "Answer $ \n 9 \n $", latex_only) == Verdict::not_equal);  // $…$ does not cross lines
  CHECK(gm::verify("$9$", "Answer $$ \n 9 \n $$", latex_only) == Verdict::equal);    // $$…$$ does
  CHECK(gm::verify("$\\frac{14}{3}$", "$\\boxed{\\frac{14}{4}}$") == Verdict::not_equal);
  CHECK(gm::verify("\\boxed{1} papers and \\boxed{2} bins", "$\\boxed{1,2}$") == Verdict::equal);
  CHECK(gm::verify("\\boxed{1} no no no no no \\boxed{2}", "$\\boxed{1,2}$") == Verdict::not_equal);
}

TEST_CASE("verify: R1-Zero anchors", "[math][verify]") {
  gm::VerifyOptions o = gm::open_r1_accuracy();
  CHECK(gm::verify("\\frac{63}{400}", "<think>…</think> so \\boxed{\\frac{63}{400}}", o) == Verdict::equal);
  CHECK(gm::verify("6", "\\boxed{3}", o) == Verdict::not_equal);
  CHECK(gm::verify("6", "The answer is 6", o) == Verdict::not_equal);  // open-r1: prediction must be LaTeX
  o.pred.answer_tags = true;
  o.pred.latex_without_anchor = true;
  CHECK(gm::verify("6", "I think $5$. <answer>$6$</answer>", o) == Verdict::equal);
  gm::VerifyOptions d;
  CHECK(gm::verify("72", "She sold 48 + 24 = 72 clips.\n#### 72", d) == Verdict::equal);  // GSM8K
  CHECK(gm::verify("7", "The final answer is 7. I hope it is correct.", d) == Verdict::equal);
}

TEST_CASE("verify: missing answers", "[math][verify]") {
  CHECK(gm::verify("", "$5$") == Verdict::unknown);        // no gold: cannot judge (open-r1 returns None)
  CHECK(gm::verify("$5$", "no number here") == Verdict::not_equal);
  CHECK(gm::verify("$5$", "") == Verdict::not_equal);
}

TEST_CASE("verify: adversarial completions return quickly without crashing", "[math][verify][adversarial]") {
  using clock = std::chrono::steady_clock;
  gm::VerifyOptions o;
  o.deadline = clock::now() + std::chrono::seconds(10);
  auto timed = [&](const std::string& pred) {
    const auto t0 = clock::now();
    const Verdict v = gm::verify("$5$", pred, o);
    const double ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
    CHECK(ms < 1000.0);
    return v;
  };
  std::string big(1 << 20, 'a');
  big += " \\boxed{5}";
  CHECK(timed(big) == Verdict::equal);                               // 1 MB of text, answer at the end
  std::string dollars(1 << 20, '$');
  CHECK(timed(dollars) == Verdict::not_equal);
  std::string parens;
  for (int k = 0; k < 100000; ++k) parens += "\\( x ";
  CHECK(timed(parens) == Verdict::not_equal);                        // openers without closers
  std::string braces = "\\boxed{" + std::string(10000, '{') + "5" + std::string(10000, '}') + "}";
  CHECK(timed(braces) != Verdict::equal);                            // 10k nested braces: over the depth limit
  CHECK(timed("\\boxed{10^{10^{10}}}") == Verdict::not_equal);       // a tower, decided by ball arithmetic
  CHECK(gm::verify("$10^{10^{10}}$", "\\boxed{10^{10^{10}}}", o) == Verdict::equal);
  CHECK(gm::verify("$10^{10^{10}}$", "\\boxed{10^{10^{10}}+1}", o) == Verdict::unknown);  // too big to decide exactly
  std::string fracs = "1";
  for (int k = 0; k < 60; ++k) fracs = "\\frac{" + fracs + "}{2}";
  CHECK(timed("\\boxed{" + fracs + "}") == Verdict::not_equal);
  CHECK(timed("\\boxed{5") == Verdict::equal);                       // unterminated: the rest of the text
  CHECK(timed("\\boxed{\xff\xfe}") == Verdict::not_equal);            // invalid UTF-8 does not parse
  CHECK(timed(std::string(100000, '9') + "!") != Verdict::equal);    // a huge factorial
}

TEST_CASE("verify: a passed deadline reports timeout", "[math][verify]") {
  gm::VerifyOptions o;
  o.deadline = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  CHECK(gm::verify("$5$", "$5$", o) == Verdict::timeout);
}

TEST_CASE("verify: concurrent use from threads gives the same verdicts", "[math][verify]") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"$2\\sqrt{2}$", "$\\sqrt{8}$"}, {"$(x+1)^2$", "$x^2+2x+1$"}, {"$\\frac{1}{3}$", "$0.25$"}};
  std::vector<Verdict> expected;
  for (const auto& [g, p] : cases) expected.push_back(gm::verify(g, p));
  std::vector<int> mismatches(2, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 50; ++rep) {
        for (std::size_t k = 0; k < cases.size(); ++k) {
          mismatches[static_cast<std::size_t>(t)] += gm::verify(cases[k].first, cases[k].second) != expected[k];
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(expected == std::vector<Verdict>{Verdict::equal, Verdict::equal, Verdict::not_equal});
  CHECK(mismatches[0] + mismatches[1] == 0);
}

TEST_CASE("verify: invalid options throw ConfigError naming the option", "[math][verify]") {
  gm::VerifyOptions o;
  o.float_rounding = -1;
  CHECK_THROWS_AS(gm::verify("1", "1", o), grpo::ConfigError);
  CHECK_THROWS_WITH(gm::verify("1", "1", o), Catch::Contains("float_rounding"));
  o = {};
  o.random_points = 0;
  CHECK_THROWS_WITH(gm::verify("1", "1", o), Catch::Contains("random_points"));
  o = {};
  o.pred.latex = o.pred.expr = false;
  CHECK_THROWS_WITH(gm::verify("1", "1", o), Catch::Contains("pred"));
}

TEST_CASE("wrap_bare_gold boxes a bare answer and leaves delimited text alone", "[math][verify]") {
  using grpo::math::wrap_bare_gold;
  REQUIRE(wrap_bare_gold("3\\sqrt{13}") == "\\boxed{3\\sqrt{13}}");
  REQUIRE(wrap_bare_gold("18") == "\\boxed{18}");
  REQUIRE(wrap_bare_gold(" ") == " ");
  REQUIRE(wrap_bare_gold("$x$") == "$x$");
  REQUIRE(wrap_bare_gold("so \\boxed{2}") == "so \\boxed{2}");
  REQUIRE(wrap_bare_gold("\\[ 5 \\]") == "\\[ 5 \\]");
  REQUIRE(wrap_bare_gold("9 * 2 = 18\n#### 18") == "9 * 2 = 18\n#### 18");
  // bare golds verify against completions only once wrapped
  const auto options = grpo::math::open_r1_accuracy();
  REQUIRE(grpo::math::verify(wrap_bare_gold("3\\sqrt{13}"), "\\boxed{\\sqrt{117}}", options) == grpo::math::Verdict::equal);
  REQUIRE(grpo::math::verify(wrap_bare_gold("\\text{Evelyn}"), "\\boxed{\\text{Evelyn}}", options) == grpo::math::Verdict::equal);
}
