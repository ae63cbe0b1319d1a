// SPDX-License-Identifier: Apache-2.0
// libFuzzer target for the math-answer verifier (src/math): the input bytes are a completion/answer text, fed to
// every extractor configuration, the normaliser, both parsers and verify(). The contract under test is the one
// docs/math_verifier.md states for bad text: never throw, never crash, stay linear-time, respect the deadline.
// An escaping exception is therefore left uncaught, so libFuzzer reports it as a crash with its input.
//
// Input layout: "gold\x1Epred" (ASCII record separator) verifies gold against pred; without a separator the
// prediction is derived from the input (the input boxed inside a sentence), which exercises the equal path.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "grpo/math/graders.hpp"
#include "grpo/math/verify.hpp"

namespace gm = grpo::math;

namespace {

constexpr char kSeparator = '\x1E';

// Every preset the library ships, plus the multiple-choice and <answer>-tag extractors, chosen by a cheap hash of
// the input so one run covers all of them without running each on every input.
gm::VerifyOptions options_for(std::string_view text) {
  unsigned h = 0;
  for (unsigned char c : text) h = h * 31 + c;
  gm::VerifyOptions o;
  switch (h % 6) {
    case 5: break;  // VerifyOptions{}: final-answer grading (find_final_answer, hedge checks, strict equations)
    case 0: o = gm::math_verify_defaults(); break;
    case 1: o = gm::open_r1_accuracy(); break;
    case 2: o = gm::math_verify_test_harness(true, true); break;
    case 3:
      o = gm::math_verify_test_harness(true, false);
      o.strict = false;
      o.allow_set_relation_comp = true;
      break;
    default:
      o = gm::math_verify_defaults();
      o.gold.choices = o.pred.choices = {"A", "B", "C", "D"};
      o.pred.answer_tags = true;
      o.pred.mode = gm::ExtractionMode::first_match;
      o.float_rounding = 2;
      break;
  }
  // Well under libFuzzer's -timeout: a run past it means the cooperative deadline was not honoured.
  o.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  return o;
}

void exercise_parsers(std::string_view text, const gm::VerifyOptions& o) {
  for (const auto& e : {gm::parse_latex(text, o.limits), gm::parse_plain(text, o.limits)}) {
    if (!e) continue;
    (void)gm::to_string(*e);
    (void)gm::compare(*e, *e, o);  // an answer against itself: evaluation and structural paths on one tree
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const gm::VerifyOptions o = options_for(input);

  std::string_view gold = input;
  std::string derived;
  std::string_view pred;
  if (const auto sep = input.find(kSeparator); sep != std::string_view::npos) {
    gold = input.substr(0, sep);
    pred = input.substr(sep + 1);
  } else {
    derived = "<think>\nLet me check.\n</think>\nThe final answer is $\\boxed{" + std::string(input) + "}$.";
    pred = derived;
  }

  for (const auto& extract : {o.gold, o.pred}) {
    for (const auto& answer : gm::extract_answers(gold, extract)) exercise_parsers(answer, o);
    (void)gm::extract_candidates(pred, extract);
  }
  (void)gm::normalize_latex(gold, o.gold.normalization);
  exercise_parsers(gold, o);

  (void)gm::verify(gold, pred, o);
  (void)gm::find_final_answer(pred);
  (void)gm::find_final_answer(gold);
  const auto parsed_gold = gm::parse_answer(gold, o.gold, o.limits, o.deadline);
  const auto parsed_pred = gm::parse_answer(pred, o.pred, o.limits, o.deadline);
  (void)gm::verify_parsed(parsed_gold, parsed_pred, o);
  if (parsed_gold.expr && parsed_pred.expr) (void)gm::compare(*parsed_gold.expr, *parsed_pred.expr, o);

  (void)gm::hendrycks_is_equiv(gold, pred);
  (void)gm::nemo_skills_math_equal(gold, pred, o);
  return 0;
}
