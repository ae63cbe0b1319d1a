// SPDX-License-Identifier: Apache-2.0
// Policy<Model>: per-token log-probs and entropy of a rollout's completions under a model, and the frozen reference
// copy for the KL term.
#pragma once

#include <grpo/core/error.hpp>
#include <grpo/core/tensor_checks.hpp>
#include <grpo/logprob/linear_log_probs.hpp>
#include <grpo/logprob/token_log_probs.hpp>
#include <grpo/policy/causal_lm_concepts.hpp>
#include <grpo/policy/rollout.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <memory>
#include <vector>

namespace grpo {

/// Deep copy of a LibTorch module holder whose module is torch::nn::Cloneable. Models that are not Cloneable
/// provide an overload found by argument-dependent lookup (grpo::models::deep_copy for CausalLM).
template <typename ModelType>
ModelType deep_copy(const ModelType& model) {
  auto copy = std::dynamic_pointer_cast<ModuleOf<ModelType>>(model->clone());
  GRPO_CHECK(copy != nullptr, "deep_copy: the model's clone() did not return its own type");
  return ModelType(copy);
}

struct PolicyOptions {
  /// Sampling temperature; logits are divided by it exactly as the sampler does.
  double temperature = 1.0;
  /// Sequences per forward pass (bounds the [chunk, T, V] logits held at once); 0 = the whole batch.
  int64_t chunk_sequences = 8;
  /// Models with hidden states (fused path): rows of logits computed at once inside linear_token_log_probs
  /// (0 = automatic, about 128 MiB of logits). Unused for models that only return logits.
  int64_t chunk_rows = 0;
  /// Models with hidden states, in half precision: the log-probs (and their gradients) from fp32 copies of the
  /// hidden states and the lm_head weight (the aim of TRL's cast_lm_head_to_fp32, which keeps the head in fp32, and of ScaleRL's fp32 head): the logits' rounding
  /// in bf16 (about 3 significant digits) no longer enters the log-probs and the importance ratios.
  bool fp32_lm_head = false;
  /// Models with packed rows (SupportsPackedSequences, e.g. models::CausalLM): each forward runs the chunk's
  /// sequences without their padding, one after another in one row, each attending only to itself
  /// (padding-free, as TRL's padding_free): no compute spent on the prompts' left padding and the completions'
  /// right padding. Log-probs equal the padded forward's to rounding.
  bool pack_sequences = false;
};

/// A policy: any model meeting CausalLanguageModel, plus temperature and chunking. Models that expose hidden states
/// (ExposesHiddenStates, e.g. models::CausalLM) get the fused linear log-prob path (linear_log_probs.hpp): log-probs
/// from the completion positions' hidden states and the lm_head weight, never holding more than one chunk of logits.
template <typename ModelType>
class Policy {
  static_assert(CausalLanguageModel<ModelType>,
                "grpo::Policy<Model>: Model must be a module holder with forward(input_ids [B, T] int64, "
                "attention_mask [B, T]) returning logits [B, T, V]");

 public:
  explicit Policy(ModelType model, PolicyOptions options = {}) : model_(std::move(model)), options_(options) {
    GRPO_CHECK_CONFIG(options_.temperature > 0, "PolicyOptions: temperature must be > 0, got {}", options_.temperature);
    GRPO_CHECK_CONFIG(options_.chunk_sequences >= 0, "PolicyOptions: chunk_sequences must be >= 0, got {}",
                      options_.chunk_sequences);
  }

  ModelType& model() { return model_; }
  const ModelType& model() const { return model_; }
  const PolicyOptions& options() const { return options_; }

  /// log p(completion token | prefix) [B, Tc] (and entropy [B, Tc] when asked) on the model's device (the rollout
  /// may be on the CPU, where the sampler returns it), with grad unless under NoGradGuard;
  /// with_sum_pi_squared adds Σ_v p_v² [B, Tc] (no gradient; the optimal token baseline's weights).
  /// The logit at position Tp + t − 1 predicts completion token t. Padded completion positions get finite values
  /// that the caller masks with rollout.completion_mask.
  TokenLogProbs token_log_probs(const Rollout& rollout, bool with_entropy = false, bool with_sum_pi_squared = false) {
    check_rollout(rollout);
    const int64_t batch = rollout.batch_size(), tp = rollout.prompt_length(), tc = rollout.completion_length();
    const int64_t chunk = options_.chunk_sequences > 0 ? options_.chunk_sequences : std::max<int64_t>(batch, 1);
    const auto ids = rollout.input_ids(), mask = rollout.attention_mask();
    std::vector<torch::Tensor> log_probs, entropies, sums_pi_squared;
    // The lm_head weight the fused path multiplies by: with fp32_lm_head and a half-precision model, one fp32 copy
    // shared by every chunk (and by their backward), not one per chunk.
    torch::Tensor head;
    if constexpr (ExposesHiddenStates<ModelType>) {
      head = model_->lm_head_weight();
      if (options_.fp32_lm_head && head.element_size() < 4) head = head.to(torch::kFloat32);
    }
    for (int64_t start = 0; start < batch; start += chunk) {
      const int64_t rows = std::min(chunk, batch - start);
      auto chunk_ids = ids.narrow(0, start, rows), chunk_mask = mask.narrow(0, start, rows);
      const auto completion_ids = rollout.completion_ids.narrow(0, start, rows);
      TokenLogProbs out;
      if constexpr (ExposesHiddenStates<ModelType>) {
        auto hidden = hidden_states(chunk_ids, chunk_mask).narrow(1, tp - 1, tc);
        if (hidden.scalar_type() != head.scalar_type()) hidden = hidden.to(head.scalar_type());  // fp32_lm_head
        out = linear_token_log_probs(hidden, head, completion_ids.to(hidden.device()),
                                     {.temperature = options_.temperature,
                                      .chunk_rows = options_.chunk_rows,
                                      .with_entropy = with_entropy,
                                      .with_sum_pi_squared = with_sum_pi_squared});
      } else {
        auto logits = model_->forward(chunk_ids, chunk_mask).narrow(1, tp - 1, tc);
        out = grpo::token_log_probs(logits, completion_ids.to(logits.device()),
                                    {.temperature = options_.temperature, .with_entropy = with_entropy});
        if (with_sum_pi_squared) {
          torch::NoGradGuard no_grad;
          const auto dtype = out.log_probs.scalar_type();
          out.sum_pi_squared = torch::softmax(logits.detach().to(dtype) / options_.temperature, -1).square().sum(-1);
        }
      }
      log_probs.push_back(out.log_probs);
      if (with_entropy) entropies.push_back(out.entropy);
      if (with_sum_pi_squared) sums_pi_squared.push_back(out.sum_pi_squared);
    }
    TokenLogProbs result;
    result.log_probs = torch::cat(log_probs, 0);
    if (with_entropy) result.entropy = torch::cat(entropies, 0);
    if (with_sum_pi_squared) result.sum_pi_squared = torch::cat(sums_pi_squared, 0);
    return result;
  }

  /// Final hidden states [rows, T, H] of ids [rows, T] with mask [rows, T]: the model's hidden_states, or with
  /// pack_sequences the real tokens of all rows packed into one row (positions counted over each row's real tokens,
  /// as the padded forward counts them) and scattered back, zeros at padding.
  torch::Tensor hidden_states(const torch::Tensor& ids, const torch::Tensor& mask)
    requires ExposesHiddenStates<ModelType>
  {
    if constexpr (SupportsPackedSequences<ModelType>) {
      if (options_.pack_sequences) {
        const int64_t rows = ids.size(0), time = ids.size(1);
        const auto real = mask.ne(0);
        const auto kept = real.flatten().nonzero().squeeze(1);  // [N] flat indexes of the real tokens
        const auto positions = (real.to(torch::kInt64).cumsum(1) - 1).clamp_min(0).flatten().index_select(0, kept);
        const auto row_labels = torch::arange(1, rows + 1, ids.options()).unsqueeze(1).expand({rows, time});
        const auto segments = row_labels.flatten().index_select(0, kept);  // each row its own label
        const auto packed = model_->packed_hidden_states(ids.flatten().index_select(0, kept).unsqueeze(0),
                                                         positions.unsqueeze(0), segments.unsqueeze(0))
                                .squeeze(0);  // [N, H]
        const auto scatter = kept.to(packed.device());
        return torch::zeros({rows * time, packed.size(-1)}, packed.options())
            .index_copy(0, scatter, packed)
            .view({rows, time, packed.size(-1)});
      }
    }
    return model_->hidden_states(ids, mask);
  }

  /// A frozen deep copy (no grad, eval mode) for reference log-probs.
  Policy frozen_copy() const {
    ModelType copy = deep_copy_of(model_);
    for (auto& p : copy->parameters()) p.set_requires_grad(false);
    copy->eval();
    return Policy(copy, options_);
  }

  /// Moves this (reference) policy towards `policy`: θ_ref ← α·θ + (1 − α)·θ_ref (TR-DPO soft update; α = 1 is a
  /// hard sync, as TRL's sync_ref_model with ref_model_mixup_alpha). Parameters must match by name and shape.
  void sync_from(const Policy& policy, double alpha = 1.0) {
    GRPO_CHECK_CONFIG(alpha >= 0.0 && alpha <= 1.0, "Policy::sync_from: alpha must be in [0, 1], got {}", alpha);
    torch::NoGradGuard no_grad;
    auto source = policy.model_->named_parameters();
    for (auto& p : model_->named_parameters()) {
      const auto* from = source.find(p.key());
      GRPO_CHECK(from != nullptr && from->sizes() == p.value().sizes(),
                 "Policy::sync_from: parameter \"{}\" is missing or differs in shape", p.key());
      p.value().mul_(1.0 - alpha).add_(from->to(p.value().scalar_type()), alpha);
    }
  }

 private:
  static ModelType deep_copy_of(const ModelType& model) {
    using grpo::deep_copy;
    return deep_copy(model);
  }

  static void check_rollout(const Rollout& r) {
    GRPO_CHECK(r.prompt_ids.defined() && r.prompt_ids.dim() == 2 && r.prompt_ids.size(1) >= 1,
               "Policy: rollout.prompt_ids must be [B, Tp] with Tp >= 1, got {}", shape_str(r.prompt_ids));
    detail::check_same_shape(r.prompt_ids, "rollout.prompt_ids", r.prompt_mask, "rollout.prompt_mask", "Policy");
    detail::check_same_shape(r.completion_ids, "rollout.completion_ids", r.completion_mask, "rollout.completion_mask",
                             "Policy");
    GRPO_CHECK(r.completion_ids.size(0) == r.prompt_ids.size(0),
               "Policy: rollout.completion_ids has {} rows but rollout.prompt_ids has {}", r.completion_ids.size(0),
               r.prompt_ids.size(0));
  }

  ModelType model_;
  PolicyOptions options_;
};

}  // namespace grpo
