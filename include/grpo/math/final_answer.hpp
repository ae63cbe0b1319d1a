// SPDX-License-Identifier: Apache-2.0
#pragma once
// The final answer of a completion: which part of it the verifier grades (grade() in verify.hpp, the accuracy reward
// and `grpo verify` all use this one rule; docs/math_verifier.md "What is graded").
//
// Reasoning is never graded: text up to the last </think> is reasoning, and so is everything after an unclosed
// <think>. In what is left, the region is, in order:
//   1. answer_tag: the last <answer>…</answer> (to the end of the text when it is not closed);
//   2. else the final-answer marker that ends last: a \boxed{…} (or \fbox{…}), a "final answer … is X" phrase (to the
//      end of its sentence) or a GSM8K "#### X" line;
//   3. else last_line: the last non-empty line, from its last "answer" word when it has one.
// The other final-answer markers (boxes, phrases, #### lines) that could offer a second final answer are returned in
// `others`, and grade() requires them to agree with the region (a completion that states two different final answers
// hedges): for an answer tag, those after it; otherwise those after the last cue before the region, a cue being a
// "final answer" (a heading, "the final answer is") or a correction word ("wait", "actually", "wrong", ...). Markers
// before the tag or the cue are working: "\boxed{5}. Wait, that is wrong ... \boxed{6}" and "\boxed{5} ...
// **Final Answer** \boxed{6}" state 6, while "\boxed{5}\n\n\boxed{6}" and "\boxed{5} or \boxed{6}" state two values.
// Grading only the last answer gives a hacker nothing. Linear in the text; only its last max_input_bytes are read.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace grpo::math {

enum class AnswerSource { none, answer_tag, boxed, final_answer_phrase, gsm8k, last_line };

constexpr std::string_view to_string(AnswerSource s) {
  switch (s) {
    case AnswerSource::none: return "none";
    case AnswerSource::answer_tag: return "answer_tag";
    case AnswerSource::boxed: return "boxed";
    case AnswerSource::final_answer_phrase: return "final_answer_phrase";
    case AnswerSource::gsm8k: return "gsm8k";
    case AnswerSource::last_line: return "last_line";
  }
  return "?";
}

// One stated answer: where it is ([begin, end) in the completion as given) and its text (a box's content, a tag's
// content, a phrase or line as written), trimmed.
struct AnswerMarker {
  AnswerSource source = AnswerSource::none;
  std::size_t begin = 0, end = 0;
  std::string text;
};

struct FinalAnswer {
  AnswerMarker region;               // source none: the completion states no final answer
  std::vector<AnswerMarker> others;  // the other final-answer markers outside the reasoning, in text order
};

struct FinalAnswerOptions {
  bool answer_tags = true;   // <answer>…</answer> delimits the answer (R1-Zero's format)
  bool think_tags = true;    // <think>…</think> is reasoning
  std::size_t max_input_bytes = 64 * 1024;  // answers sit at the end; bounds the cost of huge completions
};

FinalAnswer find_final_answer(std::string_view completion, const FinalAnswerOptions& options = {});

}  // namespace grpo::math
