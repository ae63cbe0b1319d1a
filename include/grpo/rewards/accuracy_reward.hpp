// SPDX-License-Identifier: Apache-2.0
// The accuracy reward: is the completion's final answer equal to the dataset row's gold answer, judged by the math
// verifier's one grading path (grpo::math::grade with final-answer grading; docs/math_verifier.md "What is graded"):
// only the last <answer>…</answer> span when present, else the last \boxed{}, "the final answer is …" or GSM8K
// "#### N", else the last line; never the reasoning; a hedged answer ("4 or 5", two boxes that disagree) is wrong.
// The gold is read whole when it is a bare answer ("3\sqrt{13}", "(3,4]"), else as Math-Verify parses it (a worked
// solution with $…$, \boxed{} or a "#### N" line).
#pragma once

#include <grpo/rewards/math_steps.hpp>
#include <grpo/rewards/reward_function.hpp>

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace grpo::rewards {

/// The verdict of a correctness judge on one completion.
enum class Correctness {
  correct,
  wrong,
  no_gold,  ///< the row has no gold field, or the gold answer cannot be parsed
  timeout,  ///< the verifier gave up at the scoring deadline (or could not decide)
};

/// Decides whether a completion is correct. Called concurrently; must honour context.deadline where it can.
using CorrectnessJudge = std::function<Correctness(const Completion&, const ScoringContext&)>;

struct AccuracyOptions {
  /// Row fields holding the gold answer, tried in order; the first present one is used. A list field holds
  /// several acceptable answers (correct if any matches, as rLLM's multi-answer ground truth).
  std::vector<std::string> gold_fields = {"solution", "ground_truth", "answer"};
  /// Value for Correctness::no_gold. std::nullopt (no value) as TRL/open-r1; the seed recipe's neutral 0.5 is an
  /// option.
  std::optional<float> no_gold_value = std::nullopt;
  /// R1-Zero: when the completion contains <answer>…</answer>, only the last such span is graded.
  bool answer_tags = true;
  /// AccuracyReward only (cosine and length use the verdict alone). Step-wise credit w in [0, 1]: for a row whose
  /// `steps_field` is a non-empty list of reference steps (io::Dataset puts a ground_truth object's steps in
  /// "ground_truth_steps"), accuracy = (1 − w)·final + w·step_credit (math_steps.hpp), final being 1 or 0; rows
  /// without steps score final alone. 0 = off. Read docs/rewards.md on what step credit rewards and how it is gamed.
  float step_weight = 0.0f;
  std::string steps_field = "ground_truth_steps";
  StepCreditOptions steps{};
};

/// The default judge: grpo::math extraction and verification with the deadline of the scoring context.
CorrectnessJudge math_correctness(AccuracyOptions options = {});

/// 1 for a correct completion, 0 for a wrong one; no_gold → AccuracyOptions::no_gold_value; timeout → no value.
/// With step_weight w > 0 and reference steps in the row: (1 − w)·{1, 0} + w·step_credit; when the scoring deadline
/// stops the step comparisons, no value. `judge` replaces the math verifier (for other domains, or to test without
/// it); null = math_correctness(options). Throws ConfigError for step_weight outside [0, 1] or an empty steps_field.
class AccuracyReward final : public RewardFunction {
 public:
  explicit AccuracyReward(AccuracyOptions options = {}, CorrectnessJudge judge = {});
  std::string name() const override { return "accuracy"; }
  std::vector<std::optional<float>> score(std::span<const Completion> batch,
                                          const ScoringContext& context) const override;
  /// With the math judge: the final answer it grades (math::find_final_answer's region, under answer_tags), in
  /// math::normalize_latex's form; nullopt with another judge, whose rule is its own.
  std::optional<std::string> graded_answer(const Completion& completion) const override;
  const AccuracyOptions& options() const { return options_; }

 private:
  AccuracyOptions options_;
  bool math_judge_;
  CorrectnessJudge judge_;
};

}  // namespace grpo::rewards
