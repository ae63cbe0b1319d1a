// SPDX-License-Identifier: Apache-2.0
// A causal LM's decoder with a scalar head on its final hidden states: per-token values [B, T] (a PPO critic: V_t of
// the state before token t + 1 is the head on token t's hidden state, as verl's critic reads it) and one score per
// sequence at its last real token (an outcome reward model). Loaded from and saved to Hugging Face's layouts:
//
//   sequence_classification  transformers' Qwen2/Qwen3/LlamaForSequenceClassification, num_labels 1:
//                            "model.*" and "score.weight" [1, H] (no bias, no lm_head); the score of a sequence is the
//                            head at its rightmost non-padding token, as transformers pools it
//   token_classification     …ForTokenClassification, num_labels 1: "score.weight" [1, H] and "score.bias" [1] (the
//                            layout verl's critic uses)
//   trl_value_head           TRL's AutoModelForCausalLMWithValueHead: the causal LM's tensors (lm_head included) and
//                            "v_head.summary.weight" [1, H], "v_head.summary.bias" [1]
//
// The backbone is a models::CausalLM, so bf16, LoRA (add_lora(model->backbone(), …)) and activation checkpointing
// (model->backbone()->set_gradient_checkpointing(true)) work as they do for the policy. A classification layout's
// backbone has no lm_head of its own (a value model never computes logits).
//
//   auto critic = grpo::models::value_model_from_pretrained("Qwen2.5-0.5B-critic");     // or from_policy(policy)
//   torch::Tensor values = critic->forward(rollout.input_ids(), rollout.attention_mask());  // [B, Tp + Tc]
#pragma once

#include <grpo/core/enum_names.hpp>
#include <grpo/models/causal_lm.hpp>

#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>

namespace grpo::models {

/// Where a checkpoint keeps its scalar head (see the top of this file).
enum class ScalarHeadLayout { sequence_classification, token_classification, trl_value_head };

namespace detail {
inline constexpr ::grpo::detail::EnumNames<ScalarHeadLayout, 3> kScalarHeadLayoutNames{{
    {ScalarHeadLayout::sequence_classification, "sequence_classification"},
    {ScalarHeadLayout::token_classification, "token_classification"},
    {ScalarHeadLayout::trl_value_head, "trl_value_head"},
}};
}  // namespace detail

GRPO_ENUM_NAMES(ScalarHeadLayout, detail::kScalarHeadLayoutNames, "scalar head layout", parse_scalar_head_layout);

class ValueModelImpl : public torch::nn::Module {
 public:
  /// `backbone` (registered as "backbone") and a new head in `layout`: weight [1, H] drawn from N(0, 0.02)
  /// (transformers' initialisation of score), bias 0 where the layout has one; the backbone's dtype and device.
  /// `config`: what save_pretrained writes as config.json (default: the backbone's).
  ValueModelImpl(CausalLM backbone, ScalarHeadLayout layout, std::optional<ModelConfig> config = std::nullopt);

  /// Values [B, T] (the backbone's dtype) for input_ids [B, T] int64 and attention_mask [B, T] (undefined = all 1):
  /// the head on each position's final hidden state. Differentiable in the backbone and the head.
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask = {});
  /// Scores [B]: forward's value at each row's last position with attention_mask 1 (the last position without a
  /// mask). transformers' sequence classifier pools at the rightmost token that is not pad_token_id: the same unless
  /// a real sequence ends with the pad id. Throws grpo::Error for a row with no real token.
  torch::Tensor sequence_scores(const torch::Tensor& input_ids, const torch::Tensor& attention_mask = {});

  CausalLM& backbone() { return backbone_; }
  const CausalLM& backbone() const { return backbone_; }
  ScalarHeadLayout layout() const { return layout_; }
  torch::Tensor head_weight() const { return weight_; }  ///< [1, H]
  torch::Tensor head_bias() const { return bias_; }      ///< [1], undefined for sequence_classification
  /// Every base parameter under its name in the layout (the backbone's Hugging Face names and the head's), detached.
  std::map<std::string, torch::Tensor> hf_state() const;
  /// The checkpoint's own configuration (its tie_word_embeddings included), which save_pretrained writes back.
  const ModelConfig& config() const { return config_; }
  /// config.json's pad_token_id, written back by save_pretrained: transformers' sequence classifier finds each
  /// row's last token by it (and refuses batches of more than one row without it).
  std::optional<int64_t> pad_token_id() const { return pad_token_id_; }
  void set_pad_token_id(std::optional<int64_t> id) { pad_token_id_ = id; }

 private:
  ModelConfig config_;
  CausalLM backbone_{nullptr};
  ScalarHeadLayout layout_;
  torch::Tensor weight_, bias_;
  std::optional<int64_t> pad_token_id_;
};
TORCH_MODULE(ValueModel);

/// A critic started from a policy (verl's critic starts from the actor's weights): a deep copy of `policy`'s base
/// weights (no LoRA adapters, no lm_head for a classification layout) with a new head in `layout`.
ValueModel value_model_from_policy(const CausalLM& policy,
                                   ScalarHeadLayout layout = ScalarHeadLayout::token_classification);

/// Loads a checkpoint directory in any of the three layouts (found from its tensor names) in the requested dtype
/// (default: the config's) and device, in eval mode. Throws grpo::Error naming the directory and the tensor: no head
/// ("score.weight" or "v_head.summary.weight"), a head with more than one output (num_labels ≠ 1) or of another width
/// than hidden_size, and every error of CausalLM's loading (a missing or misshapen backbone tensor).
ValueModel value_model_from_pretrained(const std::filesystem::path& directory,
                                       std::optional<torch::ScalarType> dtype = std::nullopt,
                                       torch::Device device = torch::kCPU);

/// Writes config.json (for the classification layouts architectures …ForSequenceClassification or
/// …ForTokenClassification and one label) and model.safetensors in the model's layout, so that transformers (or TRL)
/// and value_model_from_pretrained read it back.
void save_pretrained(const ValueModel& model, const std::filesystem::path& directory);

}  // namespace grpo::models
