// SPDX-License-Identifier: Apache-2.0
// Step-wise math credit: partial credit for the reference solution's intermediate results (a row's
// `ground_truth_steps`, see io::Dataset) that appear in the completion's reasoning, judged equal by the math verifier
// (grpo::math, docs/math_verifier.md), not by string match: "x = 0.5" in the reasoning counts for the reference step
// "x = 1/2", "1.5" for "\frac{6}{4}", "\sqrt{8}" for "2\sqrt{2}".
//
//   credit = |maximum one-to-one matching between reference steps and reasoning candidates| / |steps|
//
// where a step and a candidate are linked when verify(step result, candidate) is `equal`. What is compared:
//  - a step's result: the text after its last '=' ("<=", ">=", "!=", "==" are not '='), read up to the end of the
//    expression (as a candidate's right-hand side, below), or the whole step when it has no '='; trailing punctuation
//    and math delimiters ($…$, $$…$$, \(…\), \[…\]) are dropped. A result still holding a delimited span ("we get
//    $12$ apples") is read by the verifier's extraction. A result holding prose (a word of three or more letters other
//    than a function name: "Therefore the answer is 5") is read by its own last candidate (below), here 5.
//  - the reasoning: the completion before its first `</think>`; without one, the text before its last `<answer>`;
//    without either, the whole completion (then the final answer is a candidate too).
//  - candidates in the reasoning, most recent first: the contents of math spans ($…$, $$…$$, \(…\), \[…\], and
//    \boxed{…}), where a span holding '=' gives each right-hand side instead of itself; outside spans the right-hand
//    side of each '=' (up to a newline, a top-level ',' or ';', a sentence end, the next '=' or an English word) and
//    standalone numbers (12, -3, 0.5, 3/4, 1,000; not digits inside words or LaTeX arguments). Equal texts are one
//    candidate; only the `max_candidates` most recent distinct ones are kept.
//
// What it rewards, and how it can be gamed (docs/rewards.md "Step-wise math credit"): writing the reference's
// intermediate values, however derived. Listing many numbers, restating the question's numbers, or copying values
// without valid reasoning all collect credit; the mitigations are the candidate cap (only the most recent candidates
// count), one-to-one matching (a value written many times counts for one step) and reading the reasoning only.
#pragma once

#include <grpo/rewards/reward_function.hpp>

#include <chrono>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace grpo::rewards {

struct StepCreditOptions {
  /// The most recent distinct candidates kept (the cost is at most steps × max_candidates verifier calls).
  std::size_t max_candidates = 64;
  /// Only the last max_scan_bytes of the reasoning are searched (bounds the cost of huge completions).
  std::size_t max_scan_bytes = 64 * 1024;
  /// A math span or right-hand side longer than this is not a candidate (a derivation, not a result).
  std::size_t max_candidate_bytes = 160;
  /// Standalone numbers outside math spans and '=' are candidates. Off, only math spans and right-hand sides count,
  /// which makes "list many numbers" cost more (the numbers must be written as results).
  bool numbers = true;
  /// The verifier's float rounding (decimals both sides are rounded to when either is a float; Math-Verify's 6).
  int float_rounding = 6;

  /// Throws ConfigError for a zero cap or float_rounding outside [0, 100].
  void validate() const;
};

/// The outcome of matching the reference steps against a reasoning text.
struct StepMatch {
  std::size_t matched = 0;     ///< reference steps matched to a distinct candidate
  std::size_t steps = 0;       ///< reference steps
  std::size_t candidates = 0;  ///< candidates compared (after the cap)
  bool complete = true;        ///< false when the deadline stopped the comparisons: `matched` counts what was decided
  /// matched / steps; 0 when there are no steps.
  float credit() const { return steps == 0 ? 0.0f : static_cast<float>(matched) / static_cast<float>(steps); }
};

/// The part of a completion that counts as its reasoning (see the header comment): before the first `</think>`, else
/// before the last `<answer>`, else all of it.
std::string_view step_reasoning(std::string_view completion);

/// The result of one reference step (the text after its last '=', cleaned as the header comment says); "" for a
/// blank step.
std::string step_result(std::string_view step);

/// The candidates of a reasoning text, most recent first, distinct, at most options.max_candidates (see the header
/// comment for what a candidate is).
std::vector<std::string> step_candidates(std::string_view reasoning, const StepCreditOptions& options = {});

/// Matches `steps` (reference steps, each a text such as "x = 1/2") against `reasoning` (already cut by
/// step_reasoning, or any text). Each step is matched at most once and each candidate at most once (maximum bipartite
/// matching). At the deadline the comparisons stop and `complete` is false: pairs not compared count as unmatched.
/// Never throws for bad text.
StepMatch match_steps(std::string_view reasoning, std::span<const std::string> steps,
                      const StepCreditOptions& options = {},
                      std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max());

/// The fraction of reference steps whose result appears in the reasoning: match_steps(...).credit(). 0 for no steps
/// or an empty reasoning; at the deadline, the fraction decided so far.
float step_credit(std::string_view reasoning, std::span<const std::string> steps,
                  const StepCreditOptions& options = {},
                  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max());

/// The reference steps of a row: the field `field` when it is a non-empty list of strings, else nullptr.
const std::vector<std::string>* reference_steps(const Row& row, std::string_view field);

struct MathStepsOptions {
  std::string steps_field = "ground_truth_steps";
  StepCreditOptions credit{};
};

/// "math_steps": step_credit of the completion's reasoning against the row's reference steps, in [0, 1]. No value
/// for a row without steps (or no row), or when the scoring deadline stopped the comparisons. Weight it beside
/// "accuracy" in a RewardSet, or use AccuracyOptions::step_weight to blend the two into one value.
class MathStepsReward final : public RewardFunction {
 public:
  explicit MathStepsReward(MathStepsOptions options = {});
  std::string name() const override { return "math_steps"; }
  std::vector<std::optional<float>> score(std::span<const Completion> batch,
                                          const ScoringContext& context) const override;
  const MathStepsOptions& options() const { return options_; }

 private:
  MathStepsOptions options_;
};

}  // namespace grpo::rewards
