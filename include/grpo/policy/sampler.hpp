// SPDX-License-Identifier: Apache-2.0
// Sampler: G completions per prompt from any causal LM, with a KV cache when the model offers one.
#pragma once

#include <grpo/core/error.hpp>
#include <grpo/policy/causal_lm_concepts.hpp>
#include <grpo/policy/rollout.hpp>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

namespace grpo {

namespace detail {
/// The model's KV-cache type, or a placeholder for models without one.
template <typename ModelType, bool = SupportsKvCache<ModelType>>
struct CacheOf {
  using type = int;
};
template <typename ModelType>
struct CacheOf<ModelType, true> {
  using type = typename ModuleOf<ModelType>::Cache;
};
}  // namespace detail

/// Which distribution Rollout::sampler_log_probs is taken from.
enum class SamplerLogProbs {
  /// log softmax(logits / temperature) over the full vocabulary: what Policy recomputes, so the importance ratio
  /// between trainer and sampler is 1 when the weights are equal (the default).
  full_distribution,
  /// log-prob under the distribution actually sampled from, after top-k / top-p / min-p filtering and
  /// renormalisation (what vLLM reports with processed log-probs); differs from the trainer's by log S, S the kept
  /// probability mass (TRL #6789).
  sampling_distribution,
};

struct SamplerOptions {
  /// Logits are divided by it before sampling (the same division Policy applies). 0 = greedy decoding.
  double temperature = 1.0;
  int64_t max_new_tokens = 256;
  /// Keep only the k most likely tokens (0 = off).
  int64_t top_k = 0;
  /// Keep the smallest set of most likely tokens whose probability reaches top_p (1 = off).
  double top_p = 1.0;
  /// Keep tokens whose probability is at least min_p times the most likely one's (0 = off; transformers' MinP).
  /// Filters apply in transformers' order: top-k, then top-p, then min-p.
  double min_p = 0.0;
  /// A completion ends at the first of these (the EOS is part of the completion and of its mask).
  std::vector<int64_t> eos_token_ids;
  /// Fills prompt left-padding and completion right-padding.
  int64_t pad_token_id = 0;
  uint64_t seed = 0;
  /// See SamplerLogProbs.
  SamplerLogProbs log_probs = SamplerLogProbs::full_distribution;

  /// Throws ConfigError naming the option.
  void validate() const {
    GRPO_CHECK_CONFIG(temperature >= 0, "SamplerOptions: temperature must be >= 0, got {}", temperature);
    GRPO_CHECK_CONFIG(max_new_tokens >= 1, "SamplerOptions: max_new_tokens must be >= 1, got {}", max_new_tokens);
    GRPO_CHECK_CONFIG(top_k >= 0, "SamplerOptions: top_k must be >= 0, got {}", top_k);
    GRPO_CHECK_CONFIG(top_p > 0 && top_p <= 1, "SamplerOptions: top_p must be in (0, 1], got {}", top_p);
    GRPO_CHECK_CONFIG(min_p >= 0 && min_p <= 1, "SamplerOptions: min_p must be in [0, 1], got {}", min_p);
    GRPO_CHECK_CONFIG(pad_token_id >= 0, "SamplerOptions: pad_token_id must be >= 0, got {}", pad_token_id);
  }
};

/// Samples completions token by token. Rollout::sampler_log_probs holds the log-prob of each sampled token under
/// the distribution chosen by SamplerOptions::log_probs (after temperature; with temperature 0 — greedy — it is the
/// temperature-1 log-prob of the chosen token).
class Sampler {
 public:
  explicit Sampler(SamplerOptions options = {})
      : options_(std::move(options)), generator_(at::make_generator<at::CPUGeneratorImpl>(options_.seed)) {
    options_.validate();
  }

  const SamplerOptions& options() const { return options_; }

  /// prompts: P token-id lists (each non-empty, ids in [0, V)); returns B = P·G completions, row p·G + g.
  template <typename ModelType>
  Rollout generate(ModelType& model, const std::vector<std::vector<int64_t>>& prompts, int64_t group_size) {
    static_assert(CausalLanguageModel<ModelType>,
                  "grpo::Sampler::generate: Model must have forward(input_ids [B, T] int64, attention_mask [B, T]) "
                  "returning logits [B, T, V]");
    GRPO_CHECK(group_size >= 1, "Sampler::generate: group_size must be >= 1, got {}", group_size);
    GRPO_CHECK(!prompts.empty(), "Sampler::generate: no prompts");
    torch::NoGradGuard no_grad;
    Rollout r;
    left_pad(prompts, group_size, r);
    const int64_t batch = r.prompt_ids.size(0);
    auto finished = torch::zeros({batch}, torch::kBool);
    std::vector<torch::Tensor> tokens, masks, log_probs;
    auto mask = r.prompt_mask.clone();

    [[maybe_unused]] typename detail::CacheOf<ModelType>::type cache{};
    torch::Tensor logits;
    for (int64_t step = 0; step < options_.max_new_tokens; ++step) {
      if constexpr (SupportsKvCache<ModelType>) {
        auto input = step == 0 ? r.prompt_ids : tokens.back().unsqueeze(1);
        if constexpr (requires { model->forward_step_last(input, mask, cache); }) {
          logits = model->forward_step_last(input, mask, cache);  // lm_head on the last position only
        } else {
          logits = model->forward_step(input, mask, cache).select(1, -1);
        }
      } else {
        auto ids = step == 0 ? r.prompt_ids : torch::cat({r.prompt_ids, torch::stack(tokens, 1)}, 1);
        logits = model->forward(ids, mask).select(1, -1);
      }
      auto [token, log_prob] = sample(logits.to(torch::kCPU, torch::kFloat32));
      auto real = finished.logical_not();
      token = torch::where(real, token, torch::full_like(token, options_.pad_token_id));
      tokens.push_back(token);
      masks.push_back(real.to(torch::kInt64));
      log_probs.push_back(log_prob * real);
      finished = finished | is_eos(token);
      if (finished.all().item<bool>()) break;
      mask = torch::cat({mask, real.to(torch::kInt64).unsqueeze(1).to(mask.device())}, 1);
    }
    r.completion_ids = torch::stack(tokens, 1);
    r.completion_mask = torch::stack(masks, 1);
    r.sampler_log_probs = torch::stack(log_probs, 1);
    r.truncated = finished.logical_not();
    return r;
  }

 private:
  void left_pad(const std::vector<std::vector<int64_t>>& prompts, int64_t group_size, Rollout& r) const {
    size_t longest = 0;
    for (size_t p = 0; p < prompts.size(); ++p) {
      GRPO_CHECK(!prompts[p].empty(), "Sampler::generate: prompt {} is empty", p);
      longest = std::max(longest, prompts[p].size());
    }
    const int64_t batch = static_cast<int64_t>(prompts.size()) * group_size, tp = static_cast<int64_t>(longest);
    r.prompt_ids = torch::full({batch, tp}, options_.pad_token_id, torch::kInt64);
    r.prompt_mask = torch::zeros({batch, tp}, torch::kInt64);
    auto ids = r.prompt_ids.accessor<int64_t, 2>();
    auto mask = r.prompt_mask.accessor<int64_t, 2>();
    for (size_t p = 0; p < prompts.size(); ++p) {
      const int64_t offset = tp - static_cast<int64_t>(prompts[p].size());
      for (int64_t g = 0; g < group_size; ++g) {
        const int64_t row = static_cast<int64_t>(p) * group_size + g;
        for (size_t t = 0; t < prompts[p].size(); ++t) {
          ids[row][offset + static_cast<int64_t>(t)] = prompts[p][t];
          mask[row][offset + static_cast<int64_t>(t)] = 1;
        }
      }
    }
  }

  torch::Tensor is_eos(const torch::Tensor& token) const {
    auto eos = torch::zeros_like(token, torch::kBool);
    for (int64_t id : options_.eos_token_ids) eos = eos | (token == id);
    return eos;
  }

  struct Sample {
    torch::Tensor token, log_prob;  // [B] int64, [B] float32
  };

  /// One token per row from logits [B, V] (fp32, CPU).
  Sample sample(const torch::Tensor& logits) {
    const double t = options_.temperature > 0 ? options_.temperature : 1.0;
    auto scaled = logits / t;
    auto full_log_probs = torch::log_softmax(scaled, -1);
    if (options_.temperature == 0) {
      auto token = scaled.argmax(-1);
      return {token, full_log_probs.gather(-1, token.unsqueeze(-1)).squeeze(-1)};
    }
    const auto minus_inf = -std::numeric_limits<float>::infinity();
    auto filtered = scaled.clone();
    const int64_t vocab = filtered.size(-1);
    if (options_.top_k > 0 && options_.top_k < vocab) {
      auto kth = std::get<0>(filtered.topk(options_.top_k, -1)).select(-1, -1).unsqueeze(-1);
      filtered.masked_fill_(filtered < kth, minus_inf);
    }
    if (options_.top_p < 1.0) {
      auto [sorted, order] = filtered.sort(-1, /*descending=*/true);
      auto probs = torch::softmax(sorted, -1);
      // drop a token when the tokens before it already reach top_p (the first token is always kept)
      auto drop_sorted = (probs.cumsum(-1) - probs) >= options_.top_p;
      filtered.masked_fill_(torch::zeros_like(drop_sorted).scatter(-1, order, drop_sorted), minus_inf);
    }
    if (options_.min_p > 0.0) {
      auto probs = torch::softmax(filtered, -1);
      auto threshold = std::get<0>(probs.max(-1, /*keepdim=*/true)) * options_.min_p;
      filtered.masked_fill_(probs < threshold, minus_inf);
    }
    auto token = torch::multinomial(torch::softmax(filtered, -1), 1, /*replacement=*/false, generator_).squeeze(-1);
    const auto& source =
        options_.log_probs == SamplerLogProbs::full_distribution ? full_log_probs : torch::log_softmax(filtered, -1);
    return {token, source.gather(-1, token.unsqueeze(-1)).squeeze(-1)};
  }

  SamplerOptions options_;
  at::Generator generator_;
};

}  // namespace grpo
