// SPDX-License-Identifier: Apache-2.0
// Extraction and normalisation tests: expected strings written by hand from the rules in extract.hpp.
#include "grpo/math/extract.hpp"

#include <catch2/catch.hpp>

#include <string>

namespace gm = grpo::math;

namespace {
std::string first(std::string_view text, const gm::ExtractOptions& o = {}) {
  auto a = gm::extract_answers(text, o);
  return a.empty() ? std::string("<none>") : a.front();
}
}  // namespace

TEST_CASE("normalize_latex: basic LaTeX rules", "[math][normalize]") {
  gm::NormalizationOptions n;
  CHECK(gm::normalize_latex("\\left( 3, \\dfrac{\\pi}{2} \\right)", n) == "( 3, \\frac{\\pi}{2} )");
  CHECK(gm::normalize_latex("\\$10", n) == "10");
  CHECK(gm::normalize_latex("6 \\text{ and } 8", n) == "6 , 8");
  CHECK(gm::normalize_latex("1 and 2 or 3", n) == "1, 2, 3");
  CHECK(gm::normalize_latex("28 percent", n) == "28 \\%");
  CHECK(gm::normalize_latex("14{,}916", n) == "14,916");
  CHECK(gm::normalize_latex("11,\\! 111,\\! 100", n) == "11,111,100");  // \! and its spaces vanish
  CHECK(gm::normalize_latex("1\\,000", n) == "1000");                   // thin-space thousands separator
  CHECK(gm::normalize_latex("\\\\frac{1}{2}", n) == "\\frac{1}{2}");     // doubled backslash before a command
  CHECK(gm::normalize_latex("\\begin{pmatrix}1\\\\2\\end{pmatrix}", n) == "\\begin{pmatrix}1\\\\2\\end{pmatrix}");
  CHECK(gm::normalize_latex(".5", n) == "0.5");                          // nits: leading dot
  CHECK(gm::normalize_latex("x_{1}=3,\\quadx_{2}=4", n) == "x_{1}=3, x_{2}=4");  // "\\quadx" is \\quad x
}

TEST_CASE("normalize_latex: units", "[math][normalize]") {
  gm::NormalizationOptions n;
  n.basic_latex = false;
  n.boxed = gm::BoxedMode::none;
  CHECK(gm::normalize_latex("865 \\mbox{ inches}^2", n) == "865");
  CHECK(gm::normalize_latex("\\mbox{hello}", n) == "\\mbox{hello}");  // nothing in front: not a unit
  CHECK(gm::normalize_latex("1cm", n) == "1");
  CHECK(gm::normalize_latex("\\frac{1}{2} cm", n) == "\\frac{1}{2}");
  CHECK(gm::normalize_latex("1 < ms < 2", n) == "1 < ms < 2");
  CHECK(gm::normalize_latex("35 cm", n) == "35");
  CHECK(gm::normalize_latex("5 hours", n) == "5");
  CHECK(gm::normalize_latex("3s", n) == "3");  // one-letter units only right after a digit
  CHECK(gm::normalize_latex("x s", n) == "x s");
  n.units = false;
  CHECK(gm::normalize_latex("35 cm", n) == "35 cm");
}

TEST_CASE("normalize_latex: boxed all / last", "[math][normalize]") {
  gm::NormalizationOptions n;
  n.boxed = gm::BoxedMode::all;
  CHECK(gm::normalize_latex("\\boxed{1} and \\boxed{2}", n) == "1,2");
  n.boxed = gm::BoxedMode::last;
  CHECK(gm::normalize_latex("\\boxed{1} and \\boxed{2}", n) == "1,2");                // short gap with "and"
  CHECK(gm::normalize_latex("\\boxed{1} no no no no no \\boxed{2}", n) == "2");       // long gap: last only
  CHECK(gm::normalize_latex("\\boxed{3} \\boxed{3}", n) == "3");                      // duplicates dropped
  CHECK(gm::normalize_latex("x = \\boxed{\\frac{1}{2}", n) == "\\frac{1}{2}");        // unterminated: rest of text
  CHECK(gm::normalize_latex("\\fbox{7}", n) == "7");
}

TEST_CASE("extract_answers: priorities and environments", "[math][extract]") {
  gm::ExtractOptions o;
  CHECK(first("so $x = 2$ and finally \\boxed{5}.", o) == "5");
  CHECK(first("The final answer is $7$. I hope it is correct.", o) == "7");
  CHECK(first("Answer: $\\frac{1}{2}$", o) == "\\frac{1}{2}");
  CHECK(first("we get \\[ 9 \\] done", o) == "9");
  CHECK(first("we get \\( 9 \\) done", o) == "9");
  CHECK(first("we get $$ 9 $$ done", o) == "9");
  CHECK(first("$1$, $2$ and $3$", o) == "1, 2, 3");              // one match with three parts
  CHECK(first("it is $28$ percent", o) == "28\\%");              // percent suffix after an environment
  CHECK(first("so the number is 10 which is 1,000.99m\xc2\xb2", o) == "1,000.99");  // plain number, thousands
  CHECK(first("AZYUK2A", o) == "<none>");                         // a number needs a boundary before it
  CHECK(first("P(A) = 2/3. Done", o) == "2/3");
  o.boxed_match_priority = -1;
  o.latex_without_anchor = false;
  o.expr = false;
  CHECK(first("\\boxed{1}", o) == "<none>");
}

TEST_CASE("extract_answers: multiple-choice options", "[math][extract]") {
  gm::ExtractOptions o;
  o.latex = o.expr = false;
  o.choices = {"A", "B", "C", "D"};
  CHECK(first("The answer is C.", o) == "C");
  CHECK(first("B. Because A is wrong", o) == "B");       // the option at the start (250) beats a later token (300)
  CHECK(first("I pick D", o) == "D");
  CHECK(first("ABCD are letters", o) == "<none>");       // not standalone tokens
  o.choices_without_anchor = false;
  CHECK(first("I pick D", o) == "<none>");
}

TEST_CASE("extract_answers: R1-Zero extras", "[math][extract]") {
  gm::ExtractOptions o;
  o.answer_tags = true;
  CHECK(first("<think>maybe $3$</think><answer>$4$</answer>", o) == "4");
  CHECK(first("no tags, $3$", o) == "3");
  // A span without $…$ or \boxed{} is the answer itself, read whole.
  CHECK(first("<think> </think> <answer> 7 </answer>", o) == "7");
  CHECK(first("<answer>\\frac{1}{2}</answer>", o) == "\\frac{1}{2}");
  CHECK(first("<answer>   </answer>", o) == "<none>");
  gm::ExtractOptions g;
  CHECK(first("Natalia sold 48/2 = 24 clips.\n#### 72", g) == "72");
}

TEST_CASE("extract_answers: bounded work on hostile input", "[math][extract]") {
  gm::ExtractOptions o;
  std::string s(2 << 20, 'x');
  s += "$5$";
  CHECK(first(s, o) == "5");  // only the last 64 KiB are searched
  o.max_input_bytes = 16;
  CHECK(first("$1$ then later a long tail of text $2$", o) == "2");
  std::string boxes;
  for (int k = 0; k < 20000; ++k) boxes += "\\boxed{";
  // 20,000 unclosed boxes: no box closes and nothing parses, so the one answer is the string fallback: the text's
  // searched tail (at most 64 KiB, cut at a whole "\\boxed{").
  for (const std::string& text : {boxes, boxes + "}"}) {
    const auto answers = gm::extract_answers(text);
    REQUIRE(answers.size() == 1);
    CHECK(answers[0].size() <= std::size_t{1} << 16);
    CHECK(answers[0].size() > (std::size_t{1} << 16) - 16);
    CHECK(text.ends_with(answers[0]));
    CHECK(answers[0].starts_with("\\boxed{"));
  }
}
