// SPDX-License-Identifier: Apache-2.0
// R1-Zero-style GRPO on a task small enough for two CPU cores: a Qwen2-shaped model built in code learns to answer
// "max d1 d2 d3 d4 d5 =" with "<answer> d </answer> <eos>", rewarded for a correct answer and for the format.
//
// As in R1-Zero, the reward is rule-based and GRPO does the learning. The starting policy speaks the format after a
// short warm-up on answers that are taken from the prompt but are never the maximum: it attends to its input
// (so GRPO does not collapse onto a constant) yet starts near 0% accuracy.
#include <grpo/grpo.hpp>

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <span>

namespace {

// Vocabulary: digits 0–9, then the task's symbols.
constexpr int64_t kEquals = 10, kAnswerOpen = 11, kAnswerClose = 12, kEos = 13, kPad = 14, kBos = 15, kMax = 16;
constexpr int64_t kVocab = 17, kDigits = 5;

struct Task {
  std::vector<std::vector<int64_t>> prompts;  // [BOS, max, d1..d5, =]
  std::vector<int64_t> answers;               // max(d)
};

Task sample_task(int64_t count, torch::Generator& gen) {
  auto digits = torch::randint(0, 10, {count, kDigits}, gen, torch::kInt64);
  Task task;
  for (int64_t i = 0; i < count; ++i) {
    std::vector<int64_t> prompt{kBos, kMax};
    for (int64_t d = 0; d < kDigits; ++d) prompt.push_back(digits[i][d].item<int64_t>());
    prompt.push_back(kEquals);
    task.prompts.push_back(prompt);
    task.answers.push_back(digits[i].max().item<int64_t>());
  }
  return task;
}

/// The answer digit if the completion is exactly "<answer> d </answer> <eos>", else -1.
int64_t parse_answer(std::span<const int64_t> ids) {
  if (ids.size() < 4 || ids[0] != kAnswerOpen || ids[1] > 9 || ids[2] != kAnswerClose || ids[3] != kEos) return -1;
  return ids[1];
}

/// Valid completion tokens of row b (up to and including EOS).
std::vector<int64_t> completion_tokens(const grpo::Rollout& r, int64_t b) {
  std::vector<int64_t> out;
  for (int64_t t = 0; t < r.completion_length(); ++t) {
    if (r.completion_mask[b][t].item<int64_t>() == 0) break;
    out.push_back(r.completion_ids[b][t].item<int64_t>());
  }
  return out;
}

grpo::models::CausalLM build_model() {
  grpo::models::ModelConfig c;
  c.architecture = grpo::models::Architecture::qwen2;
  c.vocab_size = kVocab;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 32;
  c.rope_theta = 10000.0;
  c.tie_word_embeddings = true;
  c.eos_token_ids = {kEos};
  return grpo::models::CausalLM(c);
}

/// Supervised warm-up: teach the format with a wrong answer copied from the prompt.
void warm_up(grpo::models::CausalLM& model, torch::Generator& gen, int steps) {
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(3e-3));
  for (int step = 0; step < steps; ++step) {
    auto task = sample_task(64, gen);
    std::vector<torch::Tensor> rows;
    for (size_t i = 0; i < task.prompts.size(); ++i) {
      std::vector<int64_t> wrong;
      for (int64_t d = 2; d < 2 + kDigits; ++d) {
        if (task.prompts[i][d] != task.answers[i]) wrong.push_back(task.prompts[i][d]);
      }
      const int64_t pick = wrong.empty() ? task.answers[i]
                                         : wrong[torch::randint(0, static_cast<int64_t>(wrong.size()), {1}, gen).item<int64_t>()];
      auto row = task.prompts[i];
      row.insert(row.end(), {kAnswerOpen, pick, kAnswerClose, kEos});
      rows.push_back(torch::tensor(row, torch::kInt64));
    }
    auto ids = torch::stack(rows);                       // [64, 12]
    const int64_t tp = static_cast<int64_t>(task.prompts[0].size());
    auto logits = model->forward(ids).narrow(1, tp - 1, 4);
    auto targets = ids.narrow(1, tp, 4);
    auto loss = -grpo::token_log_probs(logits, targets).log_probs.mean();
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
  }
}

/// Greedy accuracy on held-out prompts.
double evaluate(grpo::models::CausalLM& model, const Task& held_out) {
  grpo::Sampler greedy({.temperature = 0.0, .max_new_tokens = 6, .eos_token_ids = {kEos}, .pad_token_id = kPad});
  auto r = greedy.generate(model, held_out.prompts, 1);
  int correct = 0;
  for (int64_t b = 0; b < r.batch_size(); ++b) correct += parse_answer(completion_tokens(r, b)) == held_out.answers[b];
  return static_cast<double>(correct) / static_cast<double>(r.batch_size());
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 150;
  const double learning_rate = argc > 2 ? std::atof(argv[2]) : 1e-3;
  const double entropy_coef = argc > 3 ? std::atof(argv[3]) : 0.0;
  at::set_num_threads(static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  torch::manual_seed(1);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1);
  const int64_t prompts_per_step = 32, group_size = 8;

  auto model = build_model();
  auto held_out = sample_task(256, gen);
  warm_up(model, gen, 150);
  fmt::print("after warm-up: held-out accuracy {:.1f}%\n", 100 * evaluate(model, held_out));

  grpo::Policy policy(model, {.temperature = 1.0});
  grpo::Sampler sampler({.temperature = 1.0, .max_new_tokens = 6, .eos_token_ids = {kEos}, .pad_token_id = kPad, .seed = 7});
  grpo::GroupAdvantage advantage;  // group z-score
  auto loss_options = grpo::recipes::dapo();
  loss_options.entropy_coef = entropy_coef;
  grpo::GrpoLoss loss(loss_options);
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(learning_rate));

  // Rewards: accuracy 1 for the right digit, format 0.2 for "<answer> d </answer> <eos>".
  using grpo::rewards::Completion;
  std::vector<int64_t> answers;
  auto accuracy = grpo::rewards::make_reward("accuracy", [&](const Completion& c) {
    return parse_answer(c.token_ids) == answers[static_cast<size_t>(c.group)] ? 1.0 : 0.0;
  });
  auto format = grpo::rewards::make_reward("format", [](const Completion& c) {
    return parse_answer(c.token_ids) >= 0 ? 1.0 : 0.0;
  });
  grpo::rewards::RewardSet rewards({{accuracy, 1.0}, {format, 0.2}});

  const auto start = std::chrono::steady_clock::now();
  for (int step = 1; step <= steps; ++step) {
    auto task = sample_task(prompts_per_step, gen);
    answers = task.answers;
    grpo::Rollout rollout;
    {
      torch::NoGradGuard no_grad;
      rollout = sampler.generate(model, task.prompts, group_size);
    }
    std::vector<Completion> batch;
    for (int64_t b = 0; b < rollout.batch_size(); ++b) {
      Completion c;
      c.token_ids = completion_tokens(rollout, b);
      c.group = b / group_size;
      c.truncated = rollout.truncated[b].item<bool>();
      batch.push_back(std::move(c));
    }
    auto scores = rewards.score(batch);
    auto total = torch::tensor(grpo::rewards::with_nan(scores.total)).view({prompts_per_step, group_size});
    auto adv = advantage(total);
    auto lp = policy.token_log_probs(rollout, /*with_entropy=*/true);
    grpo::LossInputs inputs{.log_probs = lp.log_probs, .advantages = adv.advantages,
                            .mask = rollout.completion_mask, .entropy = lp.entropy};
    auto out = loss(inputs, loss.local_normaliser(inputs));
    optimizer.zero_grad();
    out.loss.backward();
    optimizer.step();
    if (step % 10 == 0 || step == 1) {
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      fmt::print("step {:4d}  reward {:.3f}  accuracy {:.3f}  zero-std groups {:.2f}  entropy {:.3f}  held-out {:5.1f}%  {:.1f}s\n",
                 step, scores.total_metrics.mean, scores.reward_metrics[0].mean, adv.frac_reward_zero_std,
                 out.metrics.entropy_mean.value_or(0.0), 100 * evaluate(model, held_out), seconds);
      std::fflush(stdout);
    }
  }
  return 0;
}
