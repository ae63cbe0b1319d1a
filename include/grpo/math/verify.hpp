// SPDX-License-Identifier: Apache-2.0
#pragma once
// The math-answer verifier (the accuracy reward's engine): extract → normalise → parse → compare.
//
// Semantics follow huggingface/Math-Verify 0.8 (`verify(parse(gold), parse(pred))`), re-implemented in C++:
// exact rationals (GMP), Arb ball arithmetic at 128/320 bits for constants (√8 = 2√2, sin(π/6) = 1/2),
// randomised identity testing over Arb for expressions with free symbols (Schwartz–Zippel: polynomial and rational
// identities are decided with overwhelming probability; transcendental ones are probable), and gold-directed
// structural rules for sets, tuples, intervals, matrices, relations and assignments. Differences from
// Math-Verify are listed in docs/math_verifier.md. Thread-safe: no global state; each call owns its numbers.
// Timeouts are cooperative: `deadline` is polled by the parser/evaluator; no signals.

#include <chrono>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "grpo/math/expr.hpp"
#include "grpo/math/extract.hpp"
#include "grpo/math/final_answer.hpp"

namespace grpo::math {

enum class Verdict { equal, not_equal, unknown, timeout };

constexpr std::string_view to_string(Verdict v) {
  switch (v) {
    case Verdict::equal: return "equal";
    case Verdict::not_equal: return "not_equal";
    case Verdict::unknown: return "unknown";
    case Verdict::timeout: return "timeout";
  }
  return "?";
}
inline std::ostream& operator<<(std::ostream& os, Verdict v) { return os << to_string(v); }

// What verify() grades in the prediction.
//   final_answer (the default; the accuracy reward and `grpo verify`): the completion's final answer only
//     (find_final_answer: the <answer> span, else the last box / "final answer is" phrase / #### line, else the last
//     line; never the reasoning), read whole when it is a bare answer, and required to state one value: a region whose
//     candidates differ ("4 or 5", "$4$, maybe $5$") or another final answer that disagrees with it is not_equal,
//     unless the gold itself is a set, which the stated values are then compared as. A bare gold is read whole
//     (wrap_bare_gold), and as written when that finds nothing.
//   whole_text: Math-Verify's verify(parse(gold), parse(pred)) over the whole texts, its extraction rules and nothing
//     more (math_verify_defaults, math_verify_test_harness, open_r1_accuracy reproduce those systems this way).
enum class Grading { final_answer, whole_text };

// Options for verify(). float_rounding / numeric_precision / strict / allow_set_relation_comp mean what they mean
// in Math-Verify's verify(): a float literal on either side rounds both numbers to `float_rounding` decimals;
// strict=false renames the prediction's free symbols to the gold's by position; allow_set_relation_comp lets a
// predicted inequality match a gold set (off: echoing the question's inequality is a known reward hack).
struct VerifyOptions {
  int float_rounding = 6;
  // Relative decimal digits to which two float-bearing values must agree when rounding does not apply (complex
  // values). Exact constants are compared at ~30 digits instead (Arb), so √8 vs 2.828427 still needs rounding.
  int numeric_precision = 15;
  bool strict = true;
  bool allow_set_relation_comp = false;
  // A predicted equation against a gold value counts as its right-hand side only when it is an assignment (x = 4,
  // f(2) = 4, |AB| = 4: a left side of symbols) or a true statement with no unknowns (2 + 2 = 4). Off: Math-Verify's
  // rule, any equation's right side (7x + y = 4 "answers" 4, a known reward hack). math_verify_defaults() turns it off.
  bool strict_equations = true;
  // A predicted relation in one variable in solved form (x > 0, -3 \le x \le 4, x = 2, a set-builder {x | x > 0})
  // equals the gold interval or set it describes. Math-Verify compares a predicted relation with a gold set only with
  // allow_set_relation_comp (any relation); math_verify_defaults() turns this off. A relation that is not solved for
  // its variable (2x + 1 > 3, x^2 < 4: the question echoed) is never a set here.
  bool solved_relation_as_set = true;
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  ExtractOptions gold{}, pred{};  // final_answer grading extracts inside the prediction's region with `pred`
  ParseOptions limits{};
  int random_points = 6;  // evaluation points for expressions with free symbols
  Grading grading = Grading::final_answer;
  FinalAnswerOptions final_answer{};  // final_answer grading: which tags delimit the answer and the reasoning
};

// A verdict with what it graded.
struct Grade {
  Verdict verdict = Verdict::unknown;
  bool gold_parsed = false;                  // false: the gold has no answer (verdict unknown)
  AnswerSource source = AnswerSource::none;  // where the graded answer came from (none for whole_text grading)
  std::string graded;                        // the region's text as written (whole_text grading: the prediction)
  std::string reason;                        // set when not a plain comparison: "no final answer", "hedged: …"
};

// The one grading path: the prediction's final answer (options.grading) against the gold. Gold and prediction keep
// their roles (see verify()). Never throws for bad text; throws grpo::ConfigError for invalid options.
Grade grade(std::string_view gold, std::string_view pred, const VerifyOptions& options = {});

// grade(gold, pred, options).verdict. Gold and prediction keep their roles (not symmetric): a gold `x = 1` equals a prediction `1`,
// a gold inequality equals a predicted interval, and a predicted equation is reduced to its right-hand side.
// Returns unknown when the gold has no parsable answer or the comparison could not be decided within the limits,
// not_equal when the prediction has no answer, timeout when `deadline` passed. Never throws for bad text; throws
// grpo::ConfigError for invalid options (float_rounding outside [0, 100], numeric_precision outside [1, 1000],
// random_points outside [1, 64], non-positive limits, no extraction target on a side).
Verdict verify(std::string_view gold, std::string_view pred, const VerifyOptions& options = {});

// A ground truth written as a bare answer ("3\sqrt{13}", "\frac43", "(3,4]") has no math delimiter, so Math-Verify's
// LaTeX extraction finds nothing in it and the plain-number extraction reads only its first number. When `gold`
// holds none of $ (unescaped: "\$36" is a bare answer), \(, \[, \boxed or a "####" line, this returns "\boxed{gold}" (verl's convention for ground
// truths); otherwise (and for blank text) gold unchanged. Full solutions (TRL/NuminaMath `solution`, GSM8K answers) pass through.
std::string wrap_bare_gold(std::string_view gold);

// Compares two parsed answers (gold first) with the rules above; the building block of verify().
Verdict compare(const Expr& gold, const Expr& pred, const VerifyOptions& options = {});

// The set a one-variable relation in solved form describes: x > 0 → (0, ∞), -3 ≤ x ≤ 4 → [-3, 4], x = 2 → {2},
// x ∈ S → S; nullopt for anything else (2x + 1 > 3, x^2 < 4, a number).
std::optional<Expr> solved_relation_set(const Expr& relation);

// An extracted and parsed answer: the first candidate that parsed (Math-Verify's group rules: by priority, then
// rightmost first; first_match stops at the first candidate) and the first normalised candidate string, which
// Math-Verify keeps as a string fallback (two equal fallback strings make verify() return equal).
struct ParsedAnswer {
  std::optional<Expr> expr;
  std::string fallback;
};

// Extract and parse once, then verify_parsed() many times: a GRPO group shares one gold answer.
ParsedAnswer parse_answer(std::string_view text, const ExtractOptions& extract = {}, const ParseOptions& parse = {},
                          std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max());
Verdict verify_parsed(const ParsedAnswer& gold, const ParsedAnswer& pred, const VerifyOptions& options = {});

// Presets of other systems, all whole_text grading (the accuracy reward uses VerifyOptions{}: final_answer).
// Math-Verify's own defaults: verify(parse(gold), parse(pred)) with LatexExtractionConfig() + ExprExtractionConfig();
// strict_equations and solved_relation_as_set off (Math-Verify's rules).
VerifyOptions math_verify_defaults();
// open-r1's accuracy_reward: gold parsed with first_match and the default targets; prediction with LaTeX only, boxed
// first, no unanchored environments, no malformed-operator repair, no nits, first_match.
VerifyOptions open_r1_accuracy();
// Math-Verify's test-suite harness (tests/test_all.py compare_strings): boxed priority 0 on both sides and the
// given targets.
VerifyOptions math_verify_test_harness(bool latex, bool expr);

// Math-Verify's harness settings by name, as its test suite's per-case config writes them and `grpo verify` takes
// them (a --jsonl line's "config" object, or flags). Unset fields keep the base's.
struct HarnessSettings {
  // "final_answer" (VerifyOptions{}: final-answer grading), "parse_verify_defaults" (math_verify_defaults) or
  // "compare_strings" (math_verify_test_harness, tests/test_all.py); unset: final_answer.
  std::optional<std::string> harness;
  std::optional<std::vector<std::string>> extraction;  // targets on both sides: "latex", "expr"
  std::optional<int> boxed_match_priority;             // both sides; -1 = no boxed pattern
  std::optional<int> float_rounding, numeric_precision;
  std::optional<bool> strict, allow_set_relation_comp;
};

// The options `settings` describe. Throws grpo::ConfigError naming the setting: an unknown harness (also
// "sympy_expr_eq", which compares SymPy objects rather than text), an extraction target other than latex and expr,
// or none; verify() checks the numbers' ranges.
VerifyOptions harness_options(const HarnessSettings& settings);

// `config`, a JSON object of those settings under Math-Verify's names (float_rounding, numeric_precision, strict,
// extraction, boxed_match_priority, allow_set_relation_comp, harness), over `base`; null leaves `base` as it is.
// Throws grpo::ParseError naming the key: an unknown key, a value of the wrong JSON type, text that is not JSON.
HarnessSettings read_harness_settings(std::string_view config, HarnessSettings base = {});

}  // namespace grpo::math
