// SPDX-License-Identifier: Apache-2.0
// The small task of the trainer tests that check an estimator against a computation by hand: prompt [t] (t in 1..5),
// the completion right when its first token is t + 1, token 7 ending a completion (TokenPromptSource). Its batches
// depend only on the step, so a run resumed from a checkpoint draws the prompts the uninterrupted run drew.
// SuccessorRun is a GrpoTrainer on it with a 16-wide model.
#pragma once

#include <grpo/loss/recipes.hpp>
#include <grpo/models/value_model.hpp>
#include <grpo/rewards/reward_function.hpp>
#include <grpo/train/grpo_trainer.hpp>
#include <grpo/train/step_scorer.hpp>
#include <support/model_testing.hpp>
#include <support/token_prompt_source.hpp>

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace grpo::testing {

struct SuccessorTask final : TokenPromptSource {
  std::vector<train::Problem> train_batch(std::int64_t step, std::int64_t count) override {
    std::vector<train::Problem> out;
    for (std::int64_t i = 0; i < count; ++i) {
      const std::int64_t t = 1 + ((step * count + i) * 3) % 5;
      out.push_back({.prompt_ids = {t}, .prompt_text = std::to_string(t),
                     .row = std::make_shared<const rewards::Row>(rewards::Row{{"answer", std::to_string(t + 1)}})});
    }
    return out;
  }
};

/// 1 for the right first token, plus 0.1 per completion character so that groups have spread.
inline train::StepScorer successor_scorer() {
  auto reward = rewards::make_reward("accuracy", [](const rewards::Completion& c) {
    const bool right = !c.text.empty() && c.text.substr(0, 1) == c.row->text("answer").value_or("");
    return (right ? 1.0 : 0.0) + 0.1 * static_cast<double>(c.text.size());
  });
  return train::StepScorer(rewards::RewardSet({{reward, 1.0}}));
}

/// A GrpoTrainer on SuccessorTask: P = 4, G = 4, completions of up to 4 tokens, the grpo recipe, a large learning
/// rate (the policy leaves the reference in one step, so KL_t ≠ 0 from step 2 on), then `configure`'s changes. With
/// `with_critic`, the policy's copy with a new head (models::value_model_from_policy) is GrpoTrainerParts::critic.
struct SuccessorRun {
  SuccessorTask task;
  train::StepScorer scorer = successor_scorer();
  train::ProcessGroup group{train::ProcessGroupOptions{}};
  models::CausalLM model;
  std::unique_ptr<train::GrpoTrainer> trainer;
  explicit SuccessorRun(const std::function<void(train::GrpoTrainerOptions&)>& configure, bool with_critic = false)
      : model((torch::manual_seed(3), models::CausalLM(tiny_model_config({.vocab = 8, .hidden = 16, .intermediate = 32})))) {
    train::GrpoTrainerOptions o{.steps = 6, .prompts_per_step = 4, .group_size = 4, .seed = 9};
    o.sampling.max_new_tokens = 4;
    o.loss = recipes::grpo();
    o.learning_rate = 0.2;
    configure(o);
    train::GrpoTrainerParts parts;
    if (with_critic) parts.critic = models::value_model_from_policy(model);
    trainer = std::make_unique<train::GrpoTrainer>(model, task, scorer, group, o, parts);
  }
};

/// [rows][T] of a 2-D tensor, in double.
inline std::vector<std::vector<double>> rows_of(const torch::Tensor& t) {
  const auto c = t.to(torch::kFloat64).contiguous();
  std::vector<std::vector<double>> out(static_cast<std::size_t>(c.size(0)));
  for (std::int64_t b = 0; b < c.size(0); ++b) {
    for (std::int64_t j = 0; j < c.size(1); ++j) out[b].push_back(c[b][j].item<double>());
  }
  return out;
}

}  // namespace grpo::testing
