// SPDX-License-Identifier: Apache-2.0
#pragma once
// Answer extraction and LaTeX normalisation, after huggingface/Math-Verify (parser.py, latex2sympy2_extended's
// normalize_latex). Hand-written linear scanners replace Math-Verify's regexes (no backtracking, no std::regex);
// docs/math_verifier.md lists the patterns and where we deliberately differ.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace grpo::math {

// How \boxed{} is unwrapped during normalisation (Math-Verify NormalizationConfig.boxed).
enum class BoxedMode { none, all, last };

// Math-Verify NormalizationConfig. The defaults here are LatexExtractionConfig's (units, malformed operators and
// nits on), not the class defaults (which turn those three off).
struct NormalizationOptions {
  bool basic_latex = true;          // \left/\right, \dfrac, \text{and}→",", \$, "percent"→\%, \\cmd→\cmd, ...
  bool units = true;                // strip a trailing \text{unit}/\mbox{...} and ~150 unit words (cm, hours, ...)
  bool malformed_operators = true;  // \frac12, \sqrt3, sqrt(x), ^(...) (the parser accepts these in any case)
  bool nits = true;                 // a leading "." becomes "0."
  BoxedMode boxed = BoxedMode::all;
};

// Normalises one extracted LaTeX answer; a pure string → string function (see the header comment).
std::string normalize_latex(std::string_view latex, const NormalizationOptions& options = {});

enum class ExtractionMode { first_match, any_match };

// Which extractors run and how, mirroring Math-Verify's LatexExtractionConfig + ExprExtractionConfig pooled in one
// parse() call. Defaults are Math-Verify's parse() defaults: both targets, boxed priority 50, any_match with
// first_match fallback.
struct ExtractOptions {
  bool latex = true;                      // LatexExtractionConfig: $…$, \[…\], \(…\), \boxed{}
  bool expr = true;                       // ExprExtractionConfig: plain numbers and expressions (1,000.99, 2/3)
  int boxed_match_priority = 50;          // 0 = boxed before everything, -1 = no boxed pattern
  bool latex_without_anchor = true;       // LatexExtractionConfig.try_extract_without_anchor
  bool expr_without_anchor = true;        // ExprExtractionConfig.try_extract_without_anchor
  NormalizationOptions normalization{};
  ExtractionMode mode = ExtractionMode::any_match;
  bool string_fallback = true;            // fallback_mode="first_match": keep the first normalised string
  // R1-Zero extras, not in Math-Verify: search only inside the last <answer>…</answer> when present (off by
  // default; when nothing is found there, the span's whole content is read as \boxed{content}, so
  // "<answer> 7 </answer>" answers 7), and accept GSM8K's "#### N" as a priority-0 anchor (on; it only fires on
  // text containing "####").
  bool answer_tags = false;
  bool gsm8k_anchor = true;
  // Multiple choice (Math-Verify StringExtractionConfig, off when empty): option strings such as {"A","B","C","D"},
  // found after the final-answer and "answer" anchors, at the start of the text (priority 250) or as a standalone
  // token followed by . , : ) or a space (300, when choices_without_anchor). Compared case-insensitively when
  // lowercase_choices (the parsed value is lower-cased; the original is the fallback string).
  std::vector<std::string> choices{};
  bool lowercase_choices = true;
  bool choices_without_anchor = true;
  // Only the last max_input_bytes of a completion are searched (answers sit at the end; bounds the cost of
  // 1 MB adversarial completions). Math-Verify scans everything.
  std::size_t max_input_bytes = 64 * 1024;
  std::size_t max_candidates = 64;        // total candidates returned
};

// One extraction candidate: its normalised parts (several when "$a$, $b$ and $c$" is one match, merged into a set
// by the verifier), whether it is LaTeX or plain text, and its priority group (lower is tried first).
struct AnswerCandidate {
  std::vector<std::string> parts;
  bool latex = true;
  bool choice = false;  // one of ExtractOptions::choices (then latex is false)
  int priority = 0;
};

// All candidates in the order the verifier tries them: by priority group, then rightmost-ending first.
std::vector<AnswerCandidate> extract_candidates(std::string_view text, const ExtractOptions& options = {});

// Every \boxed{…} / \fbox{…} of `text`, left to right (a box nested in another is part of its content): the byte
// range of the whole box ([begin, end); end = text.size() when unclosed) and its content.
struct BoxedSpan {
  std::size_t begin = 0, end = 0;
  std::string content;
};
std::vector<BoxedSpan> boxed_spans(std::string_view text);

// Every bare LaTeX environment of `text` ($…$, $$…$$, \[…\], \(…\) and a bare -?\frac{d}{d}, each with its percent
// suffix; "$a$, $b$ and $c$" is one span), left to right and not overlapping, as the unanchored LaTeX extraction finds
// them: the byte range [begin, end) of each.
struct TextSpan {
  std::size_t begin = 0, end = 0;
};
std::vector<TextSpan> environment_spans(std::string_view text);

// Candidate answer strings, best first (parts joined with ", "). Duplicates removed.
std::vector<std::string> extract_answers(std::string_view text, const ExtractOptions& options = {});

}  // namespace grpo::math
