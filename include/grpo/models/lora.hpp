// SPDX-License-Identifier: Apache-2.0
// LoRA (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models") on models::CausalLM, in the format
// Hugging Face peft reads and writes.
//
//   y = x·Wᵀ + b + dropout(x)·Aᵀ·Bᵀ · scaling,   A [r, in], B [out, r],   scaling = α / r  (α / √r with rsLoRA)
//
// add_lora puts an adapter on every Linear whose name matches target_modules and freezes every other parameter, so
// an optimizer over the parameters that require grad trains the adapters only; the base weights are never copied.
// LoraDisabled runs the base model alone (the reference policy of a LoRA run). Adapters start as peft's
// init_lora_weights=True: A Kaiming-uniform (a = √5, torch::nn::Linear's), B = 0, so the adapted model starts equal
// to the base. Beside a half-precision base they are kept in fp32 (peft's autocast_adapter_dtype; peft first rounds
// its initial A to the base dtype, this library draws it in fp32) and the sum base + adapter is formed in fp32 and
// rounded to the base dtype once, as peft's lora.Linear does.
//
// Files (peft save_pretrained): adapter_config.json (peft_type "LORA", r, lora_alpha, lora_dropout, target_modules,
// use_rslora, layers_to_transform, …) and adapter_model.safetensors with tensors
// "base_model.model.<module>.lora_A.weight" [r, in] and "….lora_B.weight" [out, r].
#pragma once

#include <grpo/models/causal_lm.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace grpo::models {

/// Module names (e.g. "model.layers.3.self_attn.q_proj") of the Linear layers that carry an adapter, in module order.
std::vector<std::string> lora_modules(const CausalLM& model);

/// The module names add_lora(model, options) would adapt, without changing the model; throws as add_lora does.
std::vector<std::string> lora_targets(const CausalLM& model, const LoraOptions& options);

/// Adds adapters to the Linear layers `options` selects (peft's check_target_module_exists: a single entry that is
/// not a plain name is peft's string form, a regular expression (ECMAScript syntax) the whole name must match, and
/// "all-linear" (any case) every Linear but lm_head; otherwise each entry, as in peft's list form, matches the
/// module of that exact name or, within layers_to_transform, a module whose name ends with "." + entry) and freezes
/// all other parameters. Throws ConfigError
/// naming target_modules (and listing the model's Linear names) when nothing matches, for lm_head (the fused
/// log-prob kernels read its weight directly), or when the model already has adapters. Returns lora_modules(model).
std::vector<std::string> add_lora(CausalLM& model, const LoraOptions& options);

/// Writes adapter_config.json and adapter_model.safetensors (the adapters' dtype) into `directory` (created), as
/// peft's save_pretrained does; `base_model` is written as base_model_name_or_path. Throws grpo::Error when the model
/// has no adapters.
void save_lora_adapter(const CausalLM& model, const std::filesystem::path& directory, std::string_view base_model = "");

/// Reads a peft LoRA adapter directory (ours or peft's) into a model: add_lora with its adapter_config.json (a model
/// that already has adapters keeps them; their r and scaling must be the file's), then every adapter tensor. Throws ParseError / ConfigError naming the file and the field for
/// what this library does not implement (use_dora, bias other than "none", fan_in_fan_out, modules_to_save,
/// rank_pattern, alpha_pattern, a peft_type other than LORA), and grpo::Error naming the tensor that is missing,
/// unexpected, or of the wrong shape.
LoraOptions load_lora_adapter(CausalLM& model, const std::filesystem::path& directory);

/// Reads adapter_config.json alone (what load_lora_adapter checks).
LoraOptions read_lora_config(const std::filesystem::path& path);

/// Folds every adapter into its base weight, W ← W + B·A·scaling (computed in fp32, rounded once to W's dtype),
/// removes the adapters and makes every parameter trainable again: a plain model save_pretrained writes as a full
/// checkpoint (peft's merge_and_unload).
void merge_lora(CausalLM& model);

/// While alive, every adapter of `model` is off: the model computes the base model's outputs.
class LoraDisabled {
 public:
  explicit LoraDisabled(CausalLM& model);
  ~LoraDisabled();
  LoraDisabled(const LoraDisabled&) = delete;
  LoraDisabled& operator=(const LoraDisabled&) = delete;

 private:
  std::vector<LinearImpl*> disabled_;
};

}  // namespace grpo::models
