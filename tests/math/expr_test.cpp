// SPDX-License-Identifier: Apache-2.0
// Parser unit tests: each expected tree is written out by hand in the S-expression form of to_string().
#include "grpo/math/expr.hpp"

#include <catch2/catch.hpp>

#include <string>

using grpo::math::ExprKind;
using grpo::math::parse_latex;
using grpo::math::parse_plain;
using grpo::math::to_string;

namespace {
std::string tree(std::string_view latex) {
  auto e = parse_latex(latex);
  return e ? to_string(*e) : std::string("FAIL");
}
}  // namespace

TEST_CASE("parse_latex: numbers, fractions and the SymPy-style canonical shapes", "[math][parser]") {
  CHECK(tree("42") == "42");
  CHECK(tree("-5") == "(mul -1 5)");                      // negation is Mul(-1, x)
  CHECK(tree("a - b") == "(add a (mul -1 b))");           // subtraction is Add(a, -b)
  CHECK(tree("\\frac{1}{3}") == "(mul 1 (pow 3 -1))");    // division is Mul(a, Pow(b, -1))
  CHECK(tree("\\frac13") == "(mul 1 (pow 3 -1))");        // malformed \frac13 takes one digit per argument
  CHECK(tree("\\frac3{a}") == "(mul 3 (pow a -1))");
  CHECK(tree("\\sqrt3") == "(func:sqrt 3)");
  CHECK(tree("\\sqrt[3]{x}") == "(pow x (pow 3 -1))");
  CHECK(tree("2\\frac{1}{2}") == "(add 2 (mul 1 (pow 2 -1)))");  // mixed number 2 + 1/2
  CHECK(tree("1,234,567.5") == "1234567.5");                     // whole-string thousands separators
  CHECK(tree("0,5") == "0.5");                                    // 0,xxx is a decimal comma
  CHECK(tree("1.5e3") == "1.5e3");
  CHECK(tree("2e") == "(mul 2 e)");                               // e without digits is Euler's number
}

TEST_CASE("parse_latex: implicit multiplication, powers, functions", "[math][parser]") {
  CHECK(tree("2x") == "(mul 2 x)");
  CHECK(tree("2\\sqrt{2}") == "(mul 2 (func:sqrt 2))");
  CHECK(tree("x^23") == "(mul (pow x 2) 3)");  // ^ takes one token, as TeX does
  CHECK(tree("x^{-1}") == "(pow x (mul -1 1))");
  CHECK(tree("\\sin^2 x") == "(pow (func:sin x) 2)");
  CHECK(tree("\\sin b \\cos a") == "(mul (func:sin b) (func:cos a))");
  CHECK(tree("\\log_2 8") == "(func:log 8 2)");
  CHECK(tree("5!") == "(func:factorial 5)");
  CHECK(tree("|x-1|") == "(func:abs (add x (mul -1 1)))");
  CHECK(tree("f(x)") == "(func:undefined:f x)");
  CHECK(tree("X") == "x");  // symbols are lower-cased
  CHECK(tree("a_{37}") == "a_37");
  CHECK(tree("90^\\circ") == "90");
  CHECK(tree("28\\%") == "(mul 28 1/100)");
}

TEST_CASE("parse_latex: sets, tuples, intervals, matrices, relations", "[math][parser]") {
  CHECK(tree("1, 2, 3") == "(set 1 2 3)");
  CHECK(tree("\\{1, 2\\}") == "(set 1 2)");
  CHECK(tree("(1, 2)") == "(tuple 1 2)");  // open interval or 2-tuple: decided at comparison
  CHECK(parse_latex("(1, 2)")->maybe_interval);
  CHECK(tree("[0, 1)") == "(interval [) 0 1)");
  CHECK(tree("(0, 1]") == "(interval (] 0 1)");
  CHECK(tree("(1,2,3)") == "(tuple 1 2 3)");
  CHECK(tree("[0,1) \\cup (2, \\infty)") == "(union (interval [) 0 1) (tuple 2 oo))");
  CHECK(tree("\\begin{pmatrix}1 & 2 \\\\ 3 & 4\\end{pmatrix}") == "(matrix 1 2 3 4)");
  auto m = parse_latex("\\begin{pmatrix}1 & 2 \\\\ 3 & 4\\end{pmatrix}");
  REQUIRE(m);
  CHECK(m->rows == 2);
  CHECK(m->cols == 2);
  CHECK(tree("x = 3") == "(rel = x 3)");
  CHECK(tree("1 < x \\le 2") == "(and (rel < 1 x) (rel <= x 2))");
  CHECK(tree("x \\in [0, 1]") == "(rel in x (interval [] 0 1))");
  CHECK(tree("x \\approx 3") == "3");                // x ≈ 3 keeps 3 when the left side is a symbol
  CHECK(tree("\\frac{1}{3} \\approx 0.33") == "(mul 1 (pow 3 -1))");  // otherwise the left side
  CHECK(tree("\\pm 2") == "(set 2 (mul -1 2))");
  CHECK(tree("1 \\pm \\sqrt{2}") == "(set (add 1 (func:sqrt 2)) (add 1 (mul -1 (func:sqrt 2))))");
  CHECK(tree("p=5,q=2;p=7,q=2") == "(set (tuple (rel = p 5) (rel = q 2)) (tuple (rel = p 7) (rel = q 2)))");
  // The real numbers, set differences (left to right with unions), repeating decimals as exact rationals.
  CHECK(tree("\\mathbb{R}") == "(interval () (mul -1 oo) oo)");
  CHECK(tree("\\mathbb{R}\\setminus\\{0\\}") == "(minus (interval () (mul -1 oo) oo) (set 0))");
  CHECK(tree("[1,2]\\cup[3,4]\\setminus\\{3\\}") == "(minus (union (interval [] 1 2) (interval [] 3 4)) (set 3))");
  CHECK(tree("0.\\overline{3}") == "1/3");
  CHECK(tree("0.1\\overline{6}") == "1/6");
  CHECK(tree("1.\\overline{142857}") == "8/7");
  CHECK(tree("2.\\dot{3}") == "7/3");
  CHECK(tree("0.\\overline{9}") == "1");
}

TEST_CASE("parse_latex: text and rejects", "[math][parser]") {
  CHECK(tree("\\text{Evelyn}") == "evelyn");
  CHECK(parse_latex("\\text{Evelyn}")->kind == ExprKind::text);
  CHECK(tree("\\text{(C)}") == "c");
  CHECK(tree("204_5") == "204_5");
  CHECK(tree("") == "FAIL");
  CHECK(tree("\\frac{1}{") == "FAIL");
  CHECK(tree("(1, 2") == "FAIL");
  CHECK(tree("1 +") == "FAIL");
  CHECK(tree("\\int_0^1 x dx") == "FAIL");  // integrals and limits are not supported (documented)
  // A sum is an undefined function named by its written limits (not evaluated, never a number in its limits).
  CHECK(tree("\\sum_{k=0}^{n} k") == "(func:undefined:sum_k=0^n k)");
  CHECK(tree("\\prod_{k = 1}^{n}k^2") == "(func:undefined:prod_k=1^n (pow k 2))");
  CHECK(tree("\xff\xfe") == "FAIL");            // invalid UTF-8
}

TEST_CASE("parse_latex: limits bound depth and size", "[math][parser]") {
  std::string deep(5000, '{');
  deep += "1";
  deep += std::string(5000, '}');
  CHECK_FALSE(parse_latex(deep));                  // depth > 100
  CHECK_FALSE(parse_latex(std::string(5000, '1')));  // longer than 4096 bytes
  auto repeat = [](std::string_view unit, int n) {
    std::string r;
    for (int k = 0; k < n; ++k) r += unit;
    return r + "1";
  };
  // Recursive constructs without braces are bounded too (no stack overflow): 600 levels each, under 4096 bytes.
  CHECK_FALSE(parse_latex(repeat("\\sqrt", 600)));
  CHECK_FALSE(parse_latex(repeat("-", 600)));
  CHECK_FALSE(parse_latex(repeat("\\left(", 600)));
  CHECK_FALSE(parse_latex(repeat("|", 600)));
  CHECK_FALSE(parse_latex(repeat("\\sin", 600)));
  CHECK_FALSE(parse_latex(repeat("\\mathrm{", 400) + std::string(400, '}')));
  CHECK(parse_latex(repeat("\\sqrt", 20)));
  std::string nested = "1";
  for (int k = 0; k < 40; ++k) nested = "\\frac{" + nested + "}{2}";
  CHECK(parse_latex(nested));  // each \\frac level costs two depth units (argument + group): 81 ≤ 100
  nested = "\\frac{" + nested + "}{2}";
  for (int k = 0; k < 10; ++k) nested = "\\frac{" + nested + "}{2}";
  CHECK_FALSE(parse_latex(nested));
}

TEST_CASE("parse_plain: Math-Verify's plain-number forms", "[math][parser]") {
  auto text = [](std::string_view s) {
    auto e = parse_plain(s);
    return e ? to_string(*e) : std::string("FAIL");
  };
  CHECK(text("7,425,000") == "7425000");
  CHECK(text("1 000") == "1000");
  CHECK(text("1000,99") == "1000.99");  // a comma decimal
  CHECK(text("1,22") == "1.22");
  CHECK(text("0,111") == "0.111");
  CHECK(text("-5") == "(mul -1 5)");
  CHECK(text("2**3") == "(pow 2 3)");
  CHECK(text("2/3") == "(mul 2 (pow 3 -1))");
  // A bare exponent is the whole number, as sympy's parse_expr reads "^" as "**" (LaTeX would read 2^64 as 2^6·4).
  CHECK(text("2^64") == "(pow 2 64)");
  CHECK(text("2 ** 64") == "(pow 2 64)");
  CHECK(text("10^-3") == text("10^(-3)"));
  CHECK(text("x^12+1") == "(add (pow x 12) 1)");
  CHECK(text("2^x") == "(pow 2 x)");
}
