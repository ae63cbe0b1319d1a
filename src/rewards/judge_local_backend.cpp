// SPDX-License-Identifier: Apache-2.0
// LocalJudgeBackend: a judge model run in-process with grpo's own model, tokenizer and sampler (see
// judge_reward.hpp). The only reward source that needs LibTorch; its header stays torch-free.
#include <grpo/models/causal_lm.hpp>
#include <grpo/policy/decode.hpp>
#include <grpo/policy/sampler.hpp>
#include <grpo/rewards/judge_reward.hpp>
#include <grpo/text/tokenizer.hpp>

#include <algorithm>
#include <mutex>

namespace grpo::rewards {

struct LocalJudgeBackend::State {
  models::CausalLM model;
  text::Tokenizer tokenizer;
  LocalJudgeOptions options;
  bool chat = false;
  SamplerOptions sampler;
  std::mutex mutex;  // one model: one generate at a time

  State(const models::CausalLM& m, const text::Tokenizer& t, LocalJudgeOptions o)
      : model(m), tokenizer(t), options(o) {}

  std::vector<int64_t> prompt_ids(const JudgeRequest& request) const {
    std::vector<int32_t> ids;
    if (chat) {
      std::vector<text::ChatMessage> messages;
      if (!request.system.empty()) messages.push_back({"system", request.system, std::nullopt});
      messages.push_back({"user", request.user, std::nullopt});
      text::ChatRenderOptions render;
      render.add_generation_prompt = true;
      ids = tokenizer.encode_chat(messages, render);
    } else {
      ids = tokenizer.encode(request.system.empty() ? request.user + "\n" : request.system + "\n\n" + request.user + "\n");
    }
    return std::vector<int64_t>(ids.begin(), ids.end());
  }
};

LocalJudgeBackend::LocalJudgeBackend(const models::CausalLM& model, const text::Tokenizer& tokenizer,
                                     LocalJudgeOptions options)
    : state_(std::make_shared<State>(model, tokenizer, options)) {
  GRPO_CHECK_CONFIG(options.max_new_tokens > 0, "LocalJudgeOptions: max_new_tokens must be > 0, got {}",
                    options.max_new_tokens);
  GRPO_CHECK_CONFIG(options.batch_size > 0, "LocalJudgeOptions: batch_size must be > 0");
  if (options.use_chat_template) {
    try {
      (void)tokenizer.chat_template();
      state_->chat = true;
    } catch (const ConfigError&) {
      state_->chat = false;  // no template: plain "{system}\n\n{user}\n" prompts
    }
  }
  SamplerOptions& sampler = state_->sampler;
  sampler.temperature = 0.0;  // greedy: a judge should be deterministic
  sampler.max_new_tokens = options.max_new_tokens;
  const auto& special = tokenizer.special_token_ids();
  if (special.eos) {
    sampler.eos_token_ids = {*special.eos};
  } else {
    sampler.eos_token_ids = model->config().eos_token_ids;
  }
  if (special.pad) {
    sampler.pad_token_id = *special.pad;
  } else if (!sampler.eos_token_ids.empty()) {
    sampler.pad_token_id = sampler.eos_token_ids.front();
  }
}

LocalJudgeBackend::~LocalJudgeBackend() = default;

std::vector<std::optional<std::string>> LocalJudgeBackend::complete(std::span<const JudgeRequest> requests,
                                                                    const ScoringContext& context) const {
  std::vector<std::optional<std::string>> replies(requests.size());
  std::lock_guard lock(state_->mutex);
  torch::NoGradGuard no_grad;
  for (std::size_t begin = 0; begin < requests.size(); begin += state_->options.batch_size) {
    if (context.expired()) break;  // the rest get no reply
    const std::size_t end = std::min(requests.size(), begin + state_->options.batch_size);
    std::vector<std::vector<int64_t>> prompts;
    for (std::size_t i = begin; i < end; ++i) prompts.push_back(state_->prompt_ids(requests[i]));
    Sampler sampler(state_->sampler);
    const Rollout rollout = sampler.generate(state_->model, prompts, 1);
    std::vector<std::string> texts = decode_completions(rollout, state_->tokenizer);
    for (std::size_t i = begin; i < end; ++i) replies[i] = std::move(texts[i - begin]);
  }
  return replies;
}

JudgeBackendPtr local_judge_from_pretrained(const std::filesystem::path& directory, LocalJudgeOptions options) {
  models::CausalLM model = models::from_pretrained(directory, torch::kFloat32);
  const text::Tokenizer tokenizer = text::Tokenizer::from_pretrained(directory);
  return std::make_shared<LocalJudgeBackend>(model, tokenizer, options);
}

}  // namespace grpo::rewards
