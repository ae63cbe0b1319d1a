// SPDX-License-Identifier: Apache-2.0
// The smallest complete GRPO loop: a toy policy learns to count up from a prompt digit ("3" → "3 4 5 6").
// Every library part is here: per-token log-probs (chunked, with entropy), group advantages, the clipped loss with
// an explicit normaliser, and an optimiser step. Runs in a few seconds on a CPU.
#include <grpo/grpo.hpp>

#include <fmt/format.h>

#include <cstdio>

namespace {

constexpr int64_t kVocab = 10, kLength = 4;  // digits; completion tokens

/// A policy needs only to map its input to logits [B, T, V]: here an embedding of the prompt digit and of each
/// position, mixed by a small MLP.
struct ToyPolicyImpl : torch::nn::Module {
  torch::nn::Embedding digit{register_module("digit", torch::nn::Embedding(kVocab, 32))};
  torch::nn::Embedding position{register_module("position", torch::nn::Embedding(kLength, 32))};
  torch::nn::Linear hidden{register_module("hidden", torch::nn::Linear(64, 128))};
  torch::nn::Linear head{register_module("head", torch::nn::Linear(128, kVocab))};

  torch::Tensor forward(const torch::Tensor& prompts) {  // [B] → logits [B, T, V]
    auto x = torch::cat({digit(prompts).unsqueeze(1).expand({-1, kLength, -1}),
                         position(torch::arange(kLength)).unsqueeze(0).expand({prompts.size(0), -1, -1})}, -1);
    return head(torch::relu(hidden(x)));
  }
};
TORCH_MODULE(ToyPolicy);

}  // namespace

int main() {
  torch::manual_seed(0);
  const int64_t prompts_per_step = 16, group_size = 16, batch = prompts_per_step * group_size;
  const double temperature = 1.0;

  ToyPolicy policy;
  torch::optim::AdamW optimizer(policy->parameters(), torch::optim::AdamWOptions(2e-3));
  grpo::GroupAdvantage advantage({.estimator = grpo::AdvantageEstimator::grpo});
  auto loss_options = grpo::recipes::dapo();
  loss_options.entropy_coef = 0.01;  // a small entropy bonus keeps groups diverse
  grpo::GrpoLoss loss(loss_options);

  for (int step = 1; step <= 300; ++step) {
    // 1. Sample G completions per prompt (the sampler divides logits by the temperature, as token_log_probs does).
    auto prompts = torch::randint(0, kVocab, {prompts_per_step}).repeat_interleave(group_size);  // [B]
    torch::Tensor ids;
    {
      torch::NoGradGuard no_grad;
      auto probs = torch::softmax(policy(prompts) / temperature, -1);
      ids = torch::multinomial(probs.view({-1, kVocab}), 1).view({batch, kLength});  // [B, T]
    }
    // 2. Reward: the fraction of positions that count up correctly; [P, G].
    auto target = (prompts.unsqueeze(1) + torch::arange(kLength)) % kVocab;
    auto rewards = (ids == target).to(torch::kFloat).mean(1).view({prompts_per_step, group_size});
    // 3. Advantages from the group statistics; [B].
    auto adv = advantage(rewards);
    // 4. Loss on the current log-probs (μ = 1: old log-probs are the detached current ones).
    auto lp = grpo::token_log_probs(policy(prompts), ids, {.temperature = temperature, .with_entropy = true});
    grpo::LossInputs inputs{.log_probs = lp.log_probs,
                            .advantages = adv.advantages,
                            .mask = torch::ones({batch, kLength}),
                            .entropy = lp.entropy};
    auto out = loss(inputs, loss.local_normaliser(inputs));
    optimizer.zero_grad();
    out.loss.backward();
    optimizer.step();
    if (step % 30 == 0 || step == 1) {
      fmt::print("step {:3d}  reward {:.3f}  frac_reward_zero_std {:.2f}  entropy {:.3f}  loss {:+.4f}\n", step,
                 rewards.mean().item<double>(), adv.frac_reward_zero_std, out.metrics.entropy_mean.value_or(0.0), out.metrics.loss);
      std::fflush(stdout);
    }
  }
  return 0;
}
