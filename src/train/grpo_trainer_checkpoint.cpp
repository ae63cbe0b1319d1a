// SPDX-License-Identifier: Apache-2.0
// GrpoTrainer::save and restore: a checkpoint with everything a bit-exact resume needs (model, optimizer, RNG, synced
// reference, the critic, the controllers' coefficients, the context stage, the prompt source's state).
#include <grpo/train/grpo_trainer.hpp>

#include <cmath>
#include <limits>

namespace grpo::train {
namespace {

/// The critic as a checkpoint part (critic/), or none.
std::vector<CheckpointPart> critic_parts(Critic* critic) {
  if (critic == nullptr) return {};
  return {{.name = "critic",
           .model = critic->checkpointed(),
           .optimizer = &critic->optimizer(),
           .master_weights = &critic->master_weights()}};
}

}  // namespace

std::optional<std::filesystem::path> GrpoTrainer::save(CheckpointManager& checkpoints, std::int64_t step) {
  TrainerState state;
  state.step = step;
  state.seed = options_.seed;
  state.values = context_.state_values();
  state.values["kl_coef"] = kl_.beta();
  if (options_.kl_in_reward.enabled()) state.values["reward_kl_coef"] = reward_kl_.beta();
  state.values["entropy_coef"] = entropy_.coef();
  // +inf (nothing measured yet) is left out: the checkpoint's values are JSON numbers.
  if (std::isfinite(entropy_.last_entropy())) state.values["entropy/last"] = entropy_.last_entropy();
  prompts_.save_state(state);
  auto path = save_checkpoint(group_, checkpoints, model_->checkpointed(), *optimizer_, state,
                              synced_reference_ ? std::optional(reference_->checkpointed()) : std::nullopt, &master_,
                              critic_parts(critic_.get()));
  for (const auto& callback : callbacks_) callback->on_save(*this, step, path);
  return path;
}

std::int64_t GrpoTrainer::restore(CheckpointManager& checkpoints) {
  const auto latest = checkpoints.latest();
  if (!latest) return 0;
  const auto state =
      load_checkpoint(group_, latest->path, model_->checkpointed(), *optimizer_,
                      synced_reference_ ? std::optional(reference_->checkpointed()) : std::nullopt, &master_,
                      critic_parts(critic_.get()));
  prompts_.load_state(state);
  // An adaptive β continues where it was; a fixed one is the options' (which the resumed run may change).
  if (const auto beta = state.values.find("kl_coef");
      beta != state.values.end() && kl_.options().type == KlControl::adaptive) {
    kl_.restore(beta->second);
  }
  if (const auto beta = state.values.find("reward_kl_coef");
      beta != state.values.end() && reward_kl_.options().type == KlControl::adaptive) {
    reward_kl_.restore(beta->second);
  }
  // An adaptive entropy coefficient continues where it was; a fixed one is the options'.
  if (const auto coef = state.values.find("entropy_coef"); coef != state.values.end() && entropy_.adaptive()) {
    const auto last = state.values.find("entropy/last");
    entropy_.restore(coef->second,
                     last != state.values.end() ? last->second : std::numeric_limits<double>::infinity());
  }
  if (state.values.count("context/stage")) context_.restore(state.values);
  return state.step;
}

}  // namespace grpo::train
