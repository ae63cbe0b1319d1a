// SPDX-License-Identifier: Apache-2.0
// The final-answer region (find_final_answer) and final-answer grading (grade): what is graded, and why a completion
// that states several answers is not equal. Expected values are worked out by hand from the rules in
// final_answer.hpp and verify.hpp.
#include <grpo/math/verify.hpp>

#include <catch2/catch.hpp>

#include <chrono>
#include <string>

namespace gm = grpo::math;
using gm::AnswerSource;
using gm::Verdict;

TEST_CASE("find_final_answer: the answer tag, else the last marker, else the last line, never the reasoning",
          "[math][final_answer]") {
  const auto region = [](std::string_view text) { return gm::find_final_answer(text).region; };
  CHECK(region("<think>\\boxed{5}</think><answer> 4 </answer>").source == AnswerSource::answer_tag);
  CHECK(region("<think>\\boxed{5}</think><answer> 4 </answer>").text == "4");
  CHECK(region("<answer>4").text == "4");  // unclosed: to the end
  // Reasoning: up to the last </think> (a template may open <think> in the prompt), or after an unclosed <think>.
  CHECK(region("so 5</think> The final answer is 4.").text == "final answer is 4.");
  CHECK(region("so 5</think> The final answer is 4.").source == AnswerSource::final_answer_phrase);
  CHECK(region("I know it. <think> it is \\boxed{4}").source == AnswerSource::last_line);
  CHECK(region("I know it. <think> it is \\boxed{4}").text == "I know it.");
  CHECK(region("<think>\\boxed{4}</think>").source == AnswerSource::none);
  CHECK(region("<answer>4</answer>").source == AnswerSource::answer_tag);
  {
    // Boxes side by side end the completion: each is another final answer the region must agree with.
    const auto found = gm::find_final_answer("So \\boxed{3} then \\boxed{4}");
    CHECK(found.region.text == "4");
    REQUIRE(found.others.size() == 1);
    CHECK(found.others[0].text == "3");
  }
  {
    // Before a "final answer is" phrase (the region, as it ends last), markers are working.
    const auto found = gm::find_final_answer("\\boxed{3} then \\boxed{4}. The final answer is $4$. Done.");
    CHECK(found.region.source == AnswerSource::final_answer_phrase);
    CHECK(found.region.text == "final answer is $4$.");
    CHECK(found.others.empty());
  }
  {
    // ... and so are those before a correction word or a "Final Answer" heading that precedes the region.
    const auto corrected = gm::find_final_answer("\\boxed{5}. Wait, that is wrong. Redo: \\boxed{6}");
    CHECK(corrected.region.text == "6");
    CHECK(corrected.others.empty());
    const auto heading = gm::find_final_answer("so \\boxed{5}\n\n**Final Answer**\n\\[\n\\boxed{6}\n\\]");
    CHECK(heading.region.text == "6");
    CHECK(heading.others.empty());
    // A phrase before the region is no cue for itself: the box after it contradicts it.
    const auto contradicted = gm::find_final_answer("The final answer is 4. \\boxed{5}");
    CHECK(contradicted.region.text == "5");
    REQUIRE(contradicted.others.size() == 1);
    CHECK(contradicted.others[0].source == AnswerSource::final_answer_phrase);
  }
  // The last line: a display environment it closes, the whole line when nothing follows its "answer" word, and the
  // last sentence that states something of a long line.
  CHECK(region("Work.\n\\[\n\\frac{1}{2}\n\\]").text == "\\[\n\\frac{1}{2}\n\\]");
  CHECK(region("Work.\n$$\n7\n$$").text == "$$\n7\n$$");
  CHECK(region("Work.\nThus $x \\le 2$ is our answer.").text == "Thus $x \\le 2$ is our answer.");
  CHECK(region("We add 2 and 3. So it is 5. I hope it is correct.").text == "So it is 5.");
  const auto gsm8k = gm::find_final_answer("3 + 4 = 7\n#### 7\n");
  CHECK(gsm8k.region.source == AnswerSource::gsm8k);
  CHECK(gsm8k.region.text == "7");
  CHECK(region("Work.\n\nSo the answer is 12 apples\n").text == "answer is 12 apples");
  CHECK(region("Work.\n\nx = 12\n").text == "x = 12");
  // Markers after a closed answer tag are returned to be checked against it; those before it (working) and in the
  // reasoning are not.
  const auto after = gm::find_final_answer("<think>\\boxed{1}</think>\\boxed{2} <answer>4</answer> or \\boxed{5}");
  REQUIRE(after.others.size() == 1);
  CHECK(after.others[0].text == "5");
  gm::FinalAnswerOptions no_tags;
  no_tags.answer_tags = false;
  CHECK(gm::find_final_answer("<answer>4</answer> \\boxed{5}", no_tags).region.text == "5");
}

TEST_CASE("grade: one value stated, read whole or from its candidates, hedges are not equal", "[math][final_answer]") {
  const auto verdict = [](std::string_view gold, std::string_view pred) { return gm::grade(gold, pred).verdict; };
  CHECK(verdict("\\frac{1}{2}", "<answer>0.5</answer>") == Verdict::equal);
  CHECK(verdict("3\\sqrt{13}", "<answer>\\sqrt{117}</answer>") == Verdict::equal);  // a bare gold is read whole
  CHECK(verdict("4", "<answer>4 cm</answer>") == Verdict::equal);
  CHECK(verdict("4", "<answer>4 or 5</answer>") == Verdict::not_equal);
  CHECK(verdict("4", "<answer>4, 5</answer>") == Verdict::not_equal);
  CHECK(verdict("4", "<answer>April 4, 2023</answer>") == Verdict::not_equal);
  const gm::Grade hedge = gm::grade("4", "<answer>$4$ or $5$</answer>");
  CHECK(hedge.verdict == Verdict::not_equal);
  CHECK(hedge.reason == "hedged: the final answer states 2 different values");
  const gm::Grade contradicted = gm::grade("4", "<answer>4</answer> Actually, the answer is \\boxed{5}.");
  CHECK(contradicted.verdict == Verdict::not_equal);
  CHECK(contradicted.source == AnswerSource::answer_tag);
  CHECK(contradicted.reason == "hedged: another final answer in the completion disagrees with it");
  CHECK(verdict("4", "\\boxed{4} \\boxed{5}") == Verdict::not_equal);  // two boxes end the completion
  CHECK(verdict("5", "\\boxed{4} \\boxed{5}") == Verdict::not_equal);
  CHECK(verdict("4", "\\boxed{4}. Indeed, the final answer is $4$.") == Verdict::equal);  // markers that agree
  // A self-correction states its last answer: the corrected value scores, the retracted one does not.
  const std::string corrected = "\\boxed{5}. Wait, I dropped a sign. Redoing it:\n\n**Final Answer**\n\\[\n\\boxed{6}\n\\]";
  CHECK(verdict("6", corrected) == Verdict::equal);
  CHECK(verdict("5", corrected) == Verdict::not_equal);
  CHECK(verdict("4", "\\boxed{4}. No: the final answer is 5.") == Verdict::not_equal);
  CHECK(verdict("5", "\\boxed{4}. No: the final answer is 5.") == Verdict::equal);
  // One box, one tag, one "the answer is X" is one value however many numbers it holds.
  CHECK(verdict("(-2,1)", "<answer>\\boxed{(-2,1)}</answer>") == Verdict::equal);
  CHECK(verdict("6 - 5i", "<answer>\\boxed{6 - 5i}</answer>") == Verdict::equal);
  CHECK(verdict("x^5 - x^4 + x^3 - x^2 + x - 1", "The answer is $x^5 - x^4 + x^3 - x^2 + x - 1$.") == Verdict::equal);
  CHECK(verdict("\\left( 3, \\frac{\\pi}{2} \\right)", "The answer is $\\left( 3, \\frac{\\pi}{2} \\right)$.") == Verdict::equal);
  CHECK(verdict("\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", "<answer>\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}</answer>") ==
        Verdict::equal);
  CHECK(verdict("\\frac52", "the final answer is 2\\frac{1}{2}") == Verdict::equal);
  CHECK(verdict("4", "<answer>\\boxed{4}, \\boxed{5}</answer>") == Verdict::not_equal);  // two boxes in one tag
  CHECK(verdict("4", "<answer>$4$, maybe 5</answer>") == Verdict::not_equal);               // prose around the math
  // A name beside a value is no second value; alone, it is the answer.
  CHECK(verdict("34", "Final Answer: The largest $n$ is 34.") == Verdict::equal);
  CHECK(verdict("120", "Final Answer: The volume of $ABCDEFGH$ is 120.") == Verdict::equal);
  CHECK(verdict("x", "The answer is $x$.") == Verdict::equal);
  // A last line with no anchor states its last value; alternatives it joins with "or" stay a hedge.
  CHECK(verdict("1000.99", "the number is not 10 which is 1,000.99") == Verdict::equal);
  CHECK(verdict("10", "the number is not 10 which is 1,000.99") == Verdict::not_equal);
  CHECK(verdict("5", "It is 4 or maybe 5") == Verdict::not_equal);
  CHECK(verdict("(7,6)", "Moving the terms to the left side and dividing by $3.44$, the pair is $(7, 6)$.") == Verdict::equal);
  // Alternatives inside one environment or box are stated one by one.
  CHECK(verdict("(-\\infty,-2)\\cup(2,\\infty)", "The answer is $x<-2 \\text{ or } x>2$.") == Verdict::equal);
  CHECK(verdict("x=2 \\text{ or } x=-2", "\\boxed{x = -2 \\text{ or } x = 2}") == Verdict::equal);
  CHECK(verdict("x=2 \\text{ or } x=-2", "\\boxed{\\pm 2}") == Verdict::equal);
  CHECK(verdict("2", "\\boxed{x = -2 \\text{ or } x = 2}") == Verdict::not_equal);
  // A gold of relations: "or" is their union, "and" (inequalities) their intersection.
  CHECK(verdict("x > 1 \\text{ and } x < 3", "<answer>(1,3)</answer>") == Verdict::equal);
  CHECK(verdict("x > 1 \\text{ and } x < 3", "<answer>\\mathbb{R}</answer>") == Verdict::not_equal);
  CHECK(verdict("x < 1 \\text{ or } x > 3", "<answer>(-\\infty, 1) \\cup (3, \\infty)</answer>") == Verdict::equal);
  // A gold of several values: the stated values compare as a set, whatever their order or where they are stated.
  CHECK(verdict("1, 2", "<answer>2 or 1</answer>") == Verdict::equal);
  CHECK(verdict("1, 2", "so \\boxed{1} and \\boxed{2}") == Verdict::equal);
  CHECK(verdict("1, 2", "<answer>1 or 3</answer>") == Verdict::not_equal);
  // Relations joined by "or" describe their union; joined by "and" they are no union (x < 2 and x > 3 is empty).
  CHECK(verdict("(-\\infty, 2) \\cup (3, \\infty)", "<answer>x < 2 or x > 3</answer>") == Verdict::equal);
  CHECK(verdict("(-\\infty, 2) \\cup (3, \\infty)", "<answer>x < 2 and x > 3</answer>") == Verdict::not_equal);
  // An ordered gold: the values in the order they are written.
  CHECK(verdict("(1, 2)", "\\boxed{1} and \\boxed{2}") == Verdict::equal);
  CHECK(verdict("(1, 2)", "\\boxed{2} and \\boxed{1}") == Verdict::not_equal);
  CHECK(verdict("\\{1, 2\\}", "\\boxed{2} and \\boxed{1}") == Verdict::equal);
  CHECK(verdict("4", "") == Verdict::not_equal);
  CHECK(gm::grade("4", "").reason == "no final answer");
  CHECK(gm::grade("", "4").verdict == Verdict::unknown);
  CHECK_FALSE(gm::grade("", "4").gold_parsed);
}

TEST_CASE("grade: a predicted equation answers only when it names the quantity or is true", "[math][final_answer]") {
  const auto verdict = [](std::string_view gold, std::string_view pred, const gm::VerifyOptions& o = {}) {
    return gm::grade(gold, pred, o).verdict;
  };
  CHECK(verdict("4", "\\boxed{x = 4}") == Verdict::equal);
  CHECK(verdict("4", "\\boxed{f(2) = 4}") == Verdict::equal);
  CHECK(verdict("4", "\\boxed{AB = 4}") == Verdict::equal);
  CHECK(verdict("4", "\\boxed{2 + 2 = 4}") == Verdict::equal);
  CHECK(verdict("4", "\\boxed{2 + 3 = 4}") == Verdict::not_equal);  // false statement
  CHECK(verdict("4", "\\boxed{7x = 4}") == Verdict::not_equal);
  CHECK(verdict("4", "\\boxed{x + y = 4}") == Verdict::not_equal);
  // Math-Verify's rule, whole_text grading: any equation's right side.
  CHECK(verdict("4", "\\boxed{7x = 4}", gm::math_verify_defaults()) == Verdict::equal);
  CHECK(verdict("4", "\\boxed{x + y = 4}", gm::math_verify_defaults()) == Verdict::equal);
}

TEST_CASE("grade: whole_text grading is Math-Verify's, the explicit raw mode", "[math][final_answer]") {
  const gm::VerifyOptions raw = gm::math_verify_defaults();
  CHECK(raw.grading == gm::Grading::whole_text);
  // The cases: Math-Verify picks the answer anywhere; final-answer grading does not.
  CHECK(gm::grade("4", "<think>maybe 4</think><answer>5</answer>", raw).verdict == Verdict::equal);
  CHECK(gm::grade("4", "<think>maybe 4</think><answer>5</answer>").verdict == Verdict::not_equal);
  CHECK(gm::grade("4", "<think>maybe 5</think><answer>4</answer>").verdict == Verdict::equal);
  CHECK(gm::grade("4", "x", raw).source == AnswerSource::none);
  CHECK(gm::grade("4", "x", raw).graded == "x");
  // harness_options: final_answer unless a Math-Verify harness is named.
  CHECK(gm::harness_options({}).grading == gm::Grading::final_answer);
  gm::HarnessSettings named;
  named.harness = "compare_strings";
  CHECK(gm::harness_options(named).grading == gm::Grading::whole_text);
}

TEST_CASE("grade: thousands of stated answers stay cheap (the verdict is known once the gold is outnumbered)",
          "[math][final_answer][adversarial]") {
  std::string boxes, alternatives = "<answer>";
  for (int k = 0; k < 3000; ++k) {
    boxes += "\\boxed{" + std::to_string(k) + "} ";
    alternatives += (k ? " or " : "") + std::to_string(k);
  }
  alternatives += "</answer>";
  const auto started = std::chrono::steady_clock::now();
  CHECK(gm::grade("4", boxes).verdict == Verdict::not_equal);
  CHECK(gm::grade("4", alternatives).verdict == Verdict::not_equal);
  CHECK(gm::grade("1, 2", alternatives).verdict == Verdict::not_equal);
  // Quadratic in the number of values this took ~10 s; linear it is a fraction of one.
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(5));
}
