// SPDX-License-Identifier: Apache-2.0
// A PPO critic (verl's critic worker, ROLL's critic): a ValueModel whose values of a rollout's completion tokens are
// GAE's baseline (advantage/gae.hpp) and which is trained towards GAE's returns with the clipped value loss
// (loss/value_loss.hpp), with its own AdamW, learning rate and clipping, as verl's dp_critic.py update_critic does
// (volcengine/verl 012be9d, verl/workers/critic/dp_critic.py; defaults of verl/trainer/config/critic/critic.yaml).
//
//   grpo::train::Critic critic(grpo::models::value_model_from_policy(policy), group, {.learning_rate = 1e-5});
//   const torch::Tensor old_values = critic.values(batch.rollout);                  // [B, Tc], before any update
//   const auto gae = grpo::gae_advantages(token_rewards, old_values, batch.rollout.completion_mask, {.lambda = 0.95});
//   const grpo::train::CriticUpdate update =
//       critic.update(batch.rollout, old_values, gae.returns, batch.rollout.completion_mask);
//
// Every rank holds the whole critic; update() all-reduces its gradients (the value loss is normalised over every
// rank's tokens), so ranks stay equal, as the policy's update does.
#pragma once

#include <grpo/loss/value_loss.hpp>
#include <grpo/models/value_model.hpp>
#include <grpo/policy/rollout.hpp>
#include <grpo/train/checkpoint.hpp>
#include <grpo/train/distributed.hpp>
#include <grpo/train/master_weights.hpp>
#include <grpo/train/metrics.hpp>

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace grpo::train {

struct CriticOptions {
  double learning_rate = 1e-5;   ///< AdamW's rate (verl critic.optim.lr), constant
  double weight_decay = 0.01;    ///< verl critic.optim.weight_decay
  double max_grad_norm = 1.0;    ///< global-norm clipping (verl critic.grad_clip; 0 = off, the norm is still measured)
  ValueLossOptions loss;         ///< clip range (verl critic.cliprange_value 0.5) and loss aggregation (token mean)
  std::int64_t epochs = 1;       ///< optimizer steps per update(), each over the whole batch (verl critic.ppo_epochs)
  std::int64_t micro_batches = 1;  ///< gradient accumulation within each step; values() uses the same split
  /// How a bf16 critic's weights are optimised (as the policy's: master_weights.hpp).
  OptimizerPrecision optimizer_precision = OptimizerPrecision::fp32_master;

  /// ConfigError naming the option: a negative or non-finite rate, decay or clip norm, epochs or micro_batches < 1,
  /// and the loss options' own checks.
  void validate() const;
};

/// What one update() measured, over every rank; metrics() gives them under verl's names.
struct CriticUpdate {
  double value_loss = 0.0;     ///< the last step's loss before it (verl critic/vf_loss)
  double clip_fraction = 0.0;  ///< of the last step's tokens, where the clipped term was the larger (critic/vf_clipfrac)
  double values_mean = 0.0;    ///< token mean of the last step's predicted values before it (critic/vpred_mean)
  double grad_norm = 0.0;      ///< the last step's gradient norm before clipping (critic/grad_norm)
  double learning_rate = 0.0;  ///< critic/lr
  double tokens = 0.0;         ///< valid tokens of every rank

  /// "critic/vf_loss", "critic/vf_clipfrac", "critic/vpred_mean", "critic/grad_norm", "critic/lr", reduced already:
  /// equal on every rank (MetricReduction::max).
  std::vector<MetricValue> metrics() const;
};

class Critic {
 public:
  /// Trains `model` in place: AdamW (or CompensatedAdamW with optimizer_precision compensated, its rounding seeded
  /// with `seed`) over the parameters that require grad (a LoRA backbone's adapters and the head), through fp32
  /// masters for half-precision ones. Every rank starts from rank 0's weights (a broadcast: collective). Keeps a
  /// reference to `group`, which must outlive the critic. Throws ConfigError for bad options or a model with no
  /// parameter that requires grad.
  Critic(models::ValueModel model, ProcessGroup& group, CriticOptions options = {}, std::uint64_t seed = 0);

  /// V of the state before each completion token: [B, Tc] float32 on the CPU, the head on the hidden state of the
  /// token before it (the last prompt token for the first: verl's values[:, -response_length - 1 : -1]) with the
  /// rollout's attention mask; 0 where completion_mask is 0. No gradient, eval mode, in micro_batches parts. Throws
  /// grpo::Error for a rollout without a prompt column (Tp = 0: no state precedes the first token).
  torch::Tensor values(const Rollout& rollout);

  /// options.epochs optimizer steps on the clipped value loss of values(rollout) (with gradient) against `returns`,
  /// clipped around `old_values`, over the tokens where `mask` is nonzero (old_values, returns, mask: [B, Tc], any
  /// floating dtype / any integer or bool mask, on the CPU or the model's device), the loss normalised over every
  /// rank's batch (options.loss.loss_type). A rank with B = 0 takes part with no tokens. Collective. Throws
  /// grpo::Error naming the tensor whose shape differs from the rollout's [B, Tc].
  CriticUpdate update(const Rollout& rollout, const torch::Tensor& old_values, const torch::Tensor& returns,
                      const torch::Tensor& mask);

  models::ValueModel& model() { return model_; }
  torch::optim::Optimizer& optimizer() { return *optimizer_; }
  /// The fp32 masters of a half-precision critic (for checkpoints: CheckpointManager's master_weights).
  MasterWeights& master_weights() { return master_; }
  /// The critic's weights for a checkpoint: every named parameter and buffer (module_checkpoint).
  CheckpointedModel checkpointed() const;
  const CriticOptions& options() const { return options_; }

 private:
  /// values() of rows [begin, begin + count) on the model's device, with gradient when enabled.
  torch::Tensor completion_values(const Rollout& part);

  models::ValueModel model_;
  ProcessGroup& group_;
  CriticOptions options_;
  MasterWeights master_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
};

}  // namespace grpo::train
