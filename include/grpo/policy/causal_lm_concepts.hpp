// SPDX-License-Identifier: Apache-2.0
// What a policy model must offer, as C++20 concepts. A policy is any LibTorch module holder (e.g. a TORCH_MODULE
// type); no base class is imposed. Policy<Model> and Sampler check these with static_asserts whose messages say
// which member is missing.
#pragma once

#include <torch/torch.h>

#include <concepts>
#include <type_traits>
#include <utility>

namespace grpo {

/// The module type behind a holder (CausalLMImpl for CausalLM): what `*model` refers to.
template <typename ModelType>
using ModuleOf = std::remove_cvref_t<decltype(*std::declval<ModelType&>())>;

/// model->forward(input_ids [B, T] int64, attention_mask [B, T]) returns logits [B, T, V].
template <typename ModelType>
concept CausalLanguageModel = requires(ModelType model, const torch::Tensor& ids, const torch::Tensor& mask) {
  { model->forward(ids, mask) } -> std::convertible_to<torch::Tensor>;
};

/// Also exposes the final hidden states [B, T, H] and the lm_head weight [V, H], so log-probs can be computed from
/// hidden states for the completion positions only (and by fused kernels) instead of from full logits.
template <typename ModelType>
concept ExposesHiddenStates = CausalLanguageModel<ModelType> &&
    requires(ModelType model, const torch::Tensor& ids, const torch::Tensor& mask) {
  { model->hidden_states(ids, mask) } -> std::convertible_to<torch::Tensor>;
  { model->lm_head_weight() } -> std::convertible_to<torch::Tensor>;
};

/// Also runs padding-free rows: model->packed_hidden_states(input_ids [B, N], position_ids [B, N], segments [B, N])
/// → hidden states [B, N, H] of several sequences packed one after another in each row, each attending to itself
/// only (models::CausalLM::packed_hidden_states).
template <typename ModelType>
concept SupportsPackedSequences = ExposesHiddenStates<ModelType> &&
    requires(ModelType model, const torch::Tensor& ids, const torch::Tensor& positions, const torch::Tensor& segments) {
  { model->packed_hidden_states(ids, positions, segments) } -> std::convertible_to<torch::Tensor>;
};

/// Also decodes incrementally: the module type names its cache type `Cache` (default-constructible) and
/// model->forward_step(new_ids [B, T], attention_mask [B, cached + T], cache&) returns logits [B, T, V] for the new
/// tokens, appending to the cache. A model may also offer forward_step_last(...) → logits [B, V] of the last new
/// token only; the Sampler uses it when present.
template <typename ModelType>
concept SupportsKvCache = CausalLanguageModel<ModelType> && requires(ModelType model, const torch::Tensor& ids,
                                                                      const torch::Tensor& mask) {
  typename ModuleOf<ModelType>::Cache;
  requires std::default_initializable<typename ModuleOf<ModelType>::Cache>;
  requires requires(typename ModuleOf<ModelType>::Cache& cache) {
    { model->forward_step(ids, mask, cache) } -> std::convertible_to<torch::Tensor>;
  };
};

/// Also continues cached sequences (Sampler::continue_generation): the cache type keeps rows (select_rows(rows [K]
/// int64)) and positions (gather_positions(columns [B, W] int64): row b keeps its cached positions columns[b][...], in
/// that order), as models::KvCache does.
template <typename ModelType>
concept SupportsCacheContinuation =
    SupportsKvCache<ModelType> && requires(typename ModuleOf<ModelType>::Cache& cache, const torch::Tensor& index) {
      cache.select_rows(index);
      cache.gather_positions(index);
    };

}  // namespace grpo
