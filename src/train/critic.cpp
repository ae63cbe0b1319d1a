// SPDX-License-Identifier: Apache-2.0
#include <grpo/train/critic.hpp>

#include <grpo/core/error.hpp>
#include <grpo/core/tensor_checks.hpp>
#include <grpo/loss/aggregation.hpp>
#include <grpo/train/optimizer_step.hpp>
#include <grpo/train/training_mode.hpp>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <utility>

namespace grpo::train {

void CriticOptions::validate() const {
  GRPO_CHECK_CONFIG(std::isfinite(learning_rate) && learning_rate >= 0.0, "critic learning_rate must be >= 0, got {}",
                    learning_rate);
  GRPO_CHECK_CONFIG(std::isfinite(weight_decay) && weight_decay >= 0.0, "critic weight_decay must be >= 0, got {}",
                    weight_decay);
  GRPO_CHECK_CONFIG(std::isfinite(max_grad_norm) && max_grad_norm >= 0.0,
                    "critic max_grad_norm must be >= 0 (0 = no clipping), got {}", max_grad_norm);
  GRPO_CHECK_CONFIG(epochs >= 1, "critic epochs must be >= 1, got {}", epochs);
  GRPO_CHECK_CONFIG(micro_batches >= 1, "critic micro_batches must be >= 1, got {}", micro_batches);
  loss.validate();
}

std::vector<MetricValue> CriticUpdate::metrics() const {
  return {{"critic/vf_loss", value_loss, MetricReduction::max, 1.0},
          {"critic/vf_clipfrac", clip_fraction, MetricReduction::max, 1.0},
          {"critic/vpred_mean", values_mean, MetricReduction::max, 1.0},
          {"critic/grad_norm", grad_norm, MetricReduction::max, 1.0},
          {"critic/lr", learning_rate, MetricReduction::max, 1.0}};
}

Critic::Critic(models::ValueModel model, ProcessGroup& group, CriticOptions options, std::uint64_t seed)
    : model_(std::move(model)), group_(group), options_((options.validate(), std::move(options))),
      master_(trainable_parameters(*model_), options_.optimizer_precision) {
  GRPO_CHECK_CONFIG(!master_.masters().empty(), "Critic: the value model has no parameter that requires grad");
  optimizer_ = make_adamw(
      master_, torch::optim::AdamWOptions(options_.learning_rate).weight_decay(options_.weight_decay), seed);
  model_->eval();
  broadcast_parameters(group_, *model_);  // every rank starts from rank 0's weights
  master_.parameters_to_masters();
}

CheckpointedModel Critic::checkpointed() const { return module_checkpoint(model_.ptr()); }

torch::Tensor Critic::completion_values(const Rollout& part) {
  const torch::Device device = model_->head_weight().device();
  const torch::Tensor values = model_->forward(part.input_ids().to(device), part.attention_mask().to(device));
  return values.narrow(1, part.prompt_length() - 1, part.completion_length());
}

torch::Tensor Critic::values(const Rollout& rollout) {
  GRPO_CHECK(rollout.prompt_length() >= 1,
             "Critic::values: the rollout has no prompt column (prompt_ids {}): no state precedes the first "
             "completion token",
             shape_str(rollout.prompt_ids));
  const std::int64_t rows = rollout.batch_size(), width = rollout.completion_length();
  if (rows == 0) return torch::zeros({0, width}, torch::kFloat32);
  torch::NoGradGuard no_grad;
  model_->eval();
  const std::int64_t micro = (rows + options_.micro_batches - 1) / options_.micro_batches;
  std::vector<torch::Tensor> parts;
  for (std::int64_t begin = 0; begin < rows; begin += micro) {
    const std::int64_t count = std::min(micro, rows - begin);
    parts.push_back(completion_values(rollout.rows(begin, count)).to(torch::kCPU, torch::kFloat32));
  }
  return torch::cat(parts).masked_fill(rollout.completion_mask.to(torch::kCPU) == 0, 0.0f);
}

CriticUpdate Critic::update(const Rollout& rollout, const torch::Tensor& old_values, const torch::Tensor& returns,
                            const torch::Tensor& mask) {
  const std::int64_t rows = rollout.batch_size(), width = rollout.completion_length();
  const std::vector<std::int64_t> expected{rows, width};
  using Named = std::pair<const torch::Tensor*, const char*>;
  for (const auto& [tensor, name] :
       std::initializer_list<Named>{{&old_values, "old_values"}, {&returns, "returns"}, {&mask, "mask"}}) {
    GRPO_CHECK(tensor->defined() && tensor->sizes() == torch::IntArrayRef(expected),
               "Critic::update: {} is {}, the rollout's completions are [{}, {}]", name,
               tensor->defined() ? shape_str(*tensor) : std::string("undefined"), rows, width);
  }
  GRPO_CHECK(rows == 0 || rollout.prompt_length() >= 1,
             "Critic::update: the rollout has no prompt column (prompt_ids {})", shape_str(rollout.prompt_ids));
  const TrainingModeScope training(*model_, /*training=*/true);  // dropout while the loss is computed

  const LossType type = options_.loss.loss_type;
  LocalNormaliserOptions normaliser_options;
  normaliser_options.max_completion_length = width;  // dr_grpo's constant: the padded completion length
  const Normaliser normaliser = global_normaliser(
      group_, type, rows > 0 ? std::optional(local_normaliser(type, mask, normaliser_options)) : std::nullopt);
  const std::int64_t micro = (rows + options_.micro_batches - 1) / options_.micro_batches;
  CriticUpdate out;
  out.learning_rate = options_.learning_rate;
  for (std::int64_t epoch = 0; epoch < options_.epochs; ++epoch) {
    optimizer_->zero_grad();
    // Σ loss (each micro-batch's share of the normalised loss), Σ clipped tokens, Σ values, Σ tokens.
    torch::Tensor sums = torch::zeros({4}, torch::kFloat64);
    for (std::int64_t begin = 0; begin < rows; begin += micro) {
      const std::int64_t count = std::min(micro, rows - begin);
      const torch::Tensor values = completion_values(rollout.rows(begin, count));
      const auto on_device = [&](const torch::Tensor& t) { return t.narrow(0, begin, count).to(values.device()); };
      const torch::Tensor part_mask = on_device(mask);
      const ValueLossOutput result =
          clipped_value_loss(values, on_device(old_values), on_device(returns), part_mask, normaliser, options_.loss);
      result.loss.backward();
      master_.accumulate_gradients();
      const torch::Tensor valid = part_mask != 0;
      const double tokens = valid.sum().item<double>();
      sums[0] += result.loss.item<double>();
      sums[1] += result.clip_fraction * tokens;
      sums[2] += values.detach().to(torch::kFloat64).masked_fill(~valid, 0.0).sum().item<double>();
      sums[3] += tokens;
    }
    group_.all_reduce_(sums);
    all_reduce_gradients(group_, master_.masters());  // summed: each rank's loss has the global normaliser
    out.grad_norm = clip_and_step(*optimizer_, master_.masters(), options_.max_grad_norm);
    master_.masters_to_parameters();
    const double tokens = sums[3].item<double>();
    out.value_loss = sums[0].item<double>();
    out.clip_fraction = tokens > 0 ? sums[1].item<double>() / tokens : 0.0;
    out.values_mean = tokens > 0 ? sums[2].item<double>() / tokens : 0.0;
    out.tokens = tokens;
  }
  return out;
}

}  // namespace grpo::train
