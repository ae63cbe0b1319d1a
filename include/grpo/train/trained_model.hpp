// SPDX-License-Identifier: Apache-2.0
// TrainedModel: what GrpoTrainer needs of the model it trains, as a small interface, so that the trainer is one
// compiled class and trains any model type that gives logits (grpo::CausalLanguageModel: a LibTorch module holder
// whose forward(input_ids [B, T] int64, attention_mask [B, T]) returns logits [B, T, V]), not only models::CausalLM.
// TrainedModelOf<Model> implements it over Policy<Model>, so a model type gets what Policy gives it: the fused
// hidden-state log-prob path when it exposes hidden states, packed rows when it runs them, the KV-cache sampler when
// it has a cache (else the sampler's full-forward decoding).
//
//   auto trained = grpo::train::trained_model(MyModel(...), {.temperature = 0.7});
//
// GrpoTrainer's constructor does this for the model it is given.
#pragma once

#include <grpo/core/error.hpp>
#include <grpo/models/causal_lm.hpp>
#include <grpo/models/lora.hpp>
#include <grpo/policy/causal_lm_concepts.hpp>
#include <grpo/policy/policy.hpp>
#include <grpo/policy/rollout.hpp>
#include <grpo/train/checkpoint.hpp>
#include <grpo/train/generator.hpp>

#include <torch/torch.h>

#include <any>
#include <memory>
#include <optional>
#include <type_traits>

namespace grpo::train {

class TrainedModel {
 public:
  virtual ~TrainedModel() = default;

  /// The module: its parameters that require grad are the ones trained; train()/eval() switch its dropout.
  virtual torch::nn::Module& module() = 0;
  /// Policy<Model>::token_log_probs: log p [B, Tc] of the rollout's completion tokens (entropy [B, Tc] and Σπ² [B, Tc]
  /// when asked), on the model's device, with grad unless under NoGradGuard.
  virtual TokenLogProbs token_log_probs(const Rollout& rollout, bool with_entropy = false,
                                        bool with_sum_pi_squared = false) = 0;
  /// The KL term's reference: a frozen deep copy (no grad, eval mode) of this model; for a model with LoRA adapters,
  /// this model itself with its adapters off while it computes (the base model, no second copy of the weights).
  virtual std::unique_ptr<TrainedModel> reference() = 0;
  /// A copy of this model (its LoRA adapters included: the policy as it samples), frozen and in evaluation mode: the
  /// sampler copy of a pipelined run (rollout_pipeline.hpp), which loads the trained weights of each version. A deep
  /// copy, except under LoRA: then the copy's frozen base weights are this model's own tensors
  /// (models::weight_sharing_copy) and its adapters (and any base parameter that trains) are its own.
  virtual std::unique_ptr<TrainedModel> sampler_copy() = 0;
  /// Whether reference() shares this model's weights (LoRA: the reference is the base model under the adapters).
  virtual bool reference_shares_weights() const = 0;
  /// This (reference) model moves towards `policy`: θ ← α·θ_policy + (1 − α)·θ (TR-DPO); `policy` must be of the
  /// same model type (grpo::Error otherwise); ConfigError for a reference that shares the policy's weights.
  virtual void sync_from(TrainedModel& policy, double alpha) = 0;
  /// The default generator: the library's Sampler on this model (SamplerGenerator).
  virtual std::shared_ptr<Generator> sampler_generator() = 0;
  /// `like` rebuilt over this model (Generator::rebind); null when it cannot be.
  virtual std::shared_ptr<Generator> rebind_generator(const Generator& like) = 0;
  /// How a checkpoint writes and reads this model's weights: models::CausalLM in the Hugging Face layout (its LoRA
  /// adapters in peft's), any other model by parameter name (module_checkpoint).
  virtual CheckpointedModel checkpointed() = 0;
};

template <typename ModelType>
class TrainedModelOf final : public TrainedModel {
  static_assert(CausalLanguageModel<ModelType>,
                "grpo::train::TrainedModelOf<Model>: Model must be a module holder with forward(input_ids [B, T] "
                "int64, attention_mask [B, T]) returning logits [B, T, V]");
  static constexpr bool kCausalLM = std::is_same_v<ModelType, models::CausalLM>;

 public:
  /// `adapters_off`: this is a LoRA model's reference view (models::CausalLM only).
  TrainedModelOf(ModelType model, PolicyOptions options, bool adapters_off = false)
      : policy_(std::move(model), options), adapters_off_(adapters_off) {}

  torch::nn::Module& module() override { return *policy_.model(); }

  TokenLogProbs token_log_probs(const Rollout& rollout, bool with_entropy, bool with_sum_pi_squared) override {
    std::optional<models::LoraDisabled> base_only;
    if constexpr (kCausalLM) {
      if (adapters_off_) base_only.emplace(policy_.model());
    }
    return policy_.token_log_probs(rollout, with_entropy, with_sum_pi_squared);
  }

  std::unique_ptr<TrainedModel> reference() override {
    if (reference_shares_weights()) {
      return std::make_unique<TrainedModelOf>(policy_.model(), policy_.options(), /*adapters_off=*/true);
    }
    Policy<ModelType> frozen = policy_.frozen_copy();
    return std::make_unique<TrainedModelOf>(frozen.model(), frozen.options());
  }

  std::unique_ptr<TrainedModel> sampler_copy() override {
    if constexpr (kCausalLM) {
      // A LoRA run changes its adapters only: the copy shares the frozen base weights (no second copy of a 7B base
      // once built) and gets adapters of its own (the same names) holding this model's values; a base parameter
      // the run trains too is copied.
      if (const auto& lora = policy_.model()->lora_options()) {
        models::CausalLM copy = models::weight_sharing_copy(policy_.model());
        models::add_lora(copy, *lora);
        torch::NoGradGuard no_grad;
        auto source = policy_.model()->named_parameters();
        for (auto& p : copy->named_parameters()) {
          if (models::is_lora_parameter(p.key())) p.value().copy_(source[p.key()]);
          p.value().set_requires_grad(false);
        }
        copy->eval();
        return std::make_unique<TrainedModelOf>(copy, policy_.options());
      }
    }
    Policy<ModelType> frozen = policy_.frozen_copy();
    return std::make_unique<TrainedModelOf>(frozen.model(), frozen.options());
  }

  bool reference_shares_weights() const override {
    if constexpr (kCausalLM) {
      return policy_.model()->lora_options().has_value();
    } else {
      return false;
    }
  }

  void sync_from(TrainedModel& policy, double alpha) override {
    GRPO_CHECK_CONFIG(!adapters_off_, "ref_sync_every: a LoRA run's reference is the base model under the adapters, "
                                      "which cannot be synced to the policy");
    auto* same = dynamic_cast<TrainedModelOf*>(&policy);
    GRPO_CHECK(same != nullptr, "TrainedModel::sync_from: the policy is of another model type");
    policy_.sync_from(same->policy_, alpha);
  }

  std::shared_ptr<Generator> sampler_generator() override {
    return std::make_shared<SamplerGenerator<ModelType>>(policy_.model());
  }

  std::shared_ptr<Generator> rebind_generator(const Generator& like) override {
    return like.rebind(std::any(policy_.model()));
  }

  CheckpointedModel checkpointed() override {
    if constexpr (kCausalLM) {
      return CheckpointedModel(policy_.model());
    } else {
      return module_checkpoint(policy_.model().ptr());
    }
  }

 private:
  Policy<ModelType> policy_;
  bool adapters_off_ = false;
};

/// `model` (shared, trained in place) behind the TrainedModel interface, its log-probs under `options`.
template <typename ModelType>
std::unique_ptr<TrainedModel> trained_model(ModelType model, PolicyOptions options = {}) {
  return std::make_unique<TrainedModelOf<ModelType>>(std::move(model), options);
}

}  // namespace grpo::train
