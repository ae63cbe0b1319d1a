// SPDX-License-Identifier: Apache-2.0
// The accuracy reward and the math correctness judge (see accuracy_reward.hpp).
#include <grpo/core/error.hpp>
#include <grpo/math/extract.hpp>
#include <grpo/math/verify.hpp>
#include <grpo/rewards/accuracy_reward.hpp>

#include <utility>

namespace grpo::rewards {
namespace {

// The gold answers of the first present gold field: one for a string or number, several for a list.
std::vector<std::string> gold_answers(const Completion& completion, const std::vector<std::string>& fields) {
  if (!completion.row) return {};
  for (const std::string& field : fields) {
    const FieldValue* value = completion.row->find(field);
    if (value == nullptr) continue;
    if (const auto* list = std::get_if<std::vector<std::string>>(value)) return *list;
    if (auto text = completion.row->text(field)) return {std::move(*text)};
  }
  return {};
}

}  // namespace

CorrectnessJudge math_correctness(AccuracyOptions options) {
  return [options = std::move(options)](const Completion& completion, const ScoringContext& context) {
    math::VerifyOptions verify_options;  // the verifier's one grading path: the completion's final answer
    verify_options.deadline = context.deadline;
    verify_options.final_answer.answer_tags = options.answer_tags;
    bool gold_parsed = false;
    bool timed_out = false;
    for (const std::string& gold : gold_answers(completion, options.gold_fields)) {
      const math::Grade grade = math::grade(gold, completion.text, verify_options);
      gold_parsed |= grade.gold_parsed;
      switch (grade.verdict) {
        case math::Verdict::equal:
          return Correctness::correct;
        case math::Verdict::timeout:
          timed_out = true;
          break;
        case math::Verdict::not_equal:
        case math::Verdict::unknown:  // undecidable within the verifier's limits: scored as wrong (Math-Verify)
          break;
      }
    }
    if (timed_out) return Correctness::timeout;
    return gold_parsed ? Correctness::wrong : Correctness::no_gold;
  };
}

AccuracyReward::AccuracyReward(AccuracyOptions options, CorrectnessJudge judge)
    : options_(std::move(options)), math_judge_(!judge), judge_(judge ? std::move(judge) : math_correctness(options_)) {
  GRPO_CHECK_CONFIG(options_.step_weight >= 0.0f && options_.step_weight <= 1.0f,
                    "accuracy: step_weight must be in [0, 1], got {}", options_.step_weight);
  GRPO_CHECK_CONFIG(options_.step_weight == 0.0f || !options_.steps_field.empty(),
                    "accuracy: steps_field must not be empty when step_weight > 0");
  options_.steps.validate();
}

std::optional<std::string> AccuracyReward::graded_answer(const Completion& completion) const {
  if (!math_judge_) return std::nullopt;
  math::FinalAnswerOptions options;
  options.answer_tags = options_.answer_tags;
  const math::FinalAnswer answer = math::find_final_answer(completion.text, options);
  if (answer.region.source == math::AnswerSource::none) return std::nullopt;
  return math::normalize_latex(answer.region.text);
}

std::vector<std::optional<float>> AccuracyReward::score(std::span<const Completion> batch,
                                                        const ScoringContext& context) const {
  std::vector<std::optional<float>> values;
  values.reserve(batch.size());
  const float weight = options_.step_weight;
  // (1 − w)·final + w·step credit when the row has reference steps; the final verdict alone otherwise.
  const auto blended = [&](const Completion& completion, float final_value) -> std::optional<float> {
    const std::vector<std::string>* steps =
        weight > 0.0f && completion.row ? reference_steps(*completion.row, options_.steps_field) : nullptr;
    if (steps == nullptr) return final_value;
    const StepMatch match = match_steps(step_reasoning(completion.text), *steps, options_.steps, context.deadline);
    if (!match.complete) return std::nullopt;  // the deadline passed: the executor would discard the value anyway
    if (match.steps == 0) return final_value;
    return (1.0f - weight) * final_value + weight * match.credit();
  };
  for (const Completion& completion : batch) {
    switch (judge_(completion, context)) {
      case Correctness::correct:
        values.push_back(blended(completion, 1.0f));
        break;
      case Correctness::wrong:
        values.push_back(blended(completion, 0.0f));
        break;
      case Correctness::no_gold:
        values.push_back(options_.no_gold_value);
        break;
      case Correctness::timeout:
        values.emplace_back(std::nullopt);
        break;
    }
  }
  return values;
}

}  // namespace grpo::rewards
