// SPDX-License-Identifier: Apache-2.0
// GrpoTrainer::save and restore: a checkpoint with everything a bit-exact resume needs (model, optimizer, RNG, synced
// reference, the critic, the controllers' coefficients, the context stage, the prompt source's state).
#include <grpo/train/grpo_trainer.hpp>

#include <grpo/io/safetensors.hpp>
#include <grpo/train/master_weights.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <string>
#include <utility>

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

constexpr const char* kInFlightWeights = "weights.safetensors";

/// A pipelined run's batches in flight as a checkpoint part (pipeline/weights.safetensors: "v<version>/<parameter>"),
/// written from `in_flight` and read into `loaded`.
CheckpointPart in_flight_part(const RolloutPipeline::InFlight* in_flight, std::map<std::string, torch::Tensor>* loaded) {
  return {.name = "pipeline",
          .model = CheckpointedModel(
              [in_flight](const std::filesystem::path& directory) {
                std::map<std::string, torch::Tensor> tensors;
                for (const auto& [version, weights] : in_flight->weights) {
                  for (const auto& [name, value] : weights) tensors[fmt::format("v{}/{}", version, name)] = value;
                }
                io::save_safetensors(directory / kInFlightWeights, tensors);
              },
              [loaded](const std::filesystem::path& directory) {
                const auto path = directory / kInFlightWeights;
                GRPO_CHECK(std::filesystem::is_regular_file(path), "checkpoint {} has no {}", directory.string(),
                           kInFlightWeights);
                *loaded = io::SafetensorsFile(path).tensors();
              },
              torch::kCPU)};
}

}  // namespace

std::optional<std::filesystem::path> GrpoTrainer::save(CheckpointManager& checkpoints, std::int64_t step) {
  // A pipelined run: the worker finishes the batches admitted and waits; the checkpoint holds what regenerates them.
  std::unique_lock<std::mutex> worker_waits;
  GRPO_CHECK(!serving_, "GrpoTrainer::save: a rollout rank saves nothing (its trainer rank writes the checkpoint)");
  std::optional<RolloutPipeline::InFlight> in_flight, in_flight_now;
  if (pipeline_) {
    worker_waits = pipeline_->quiesce();
    in_flight = pipeline_->in_flight();
    if (in_flight->steps.empty()) in_flight_now = std::exchange(in_flight, std::nullopt);
  }
  TrainerState state;
  state.step = step;
  state.seed = options_.seed;
  state.values = context_.state_values();
  state.values["kl_coef"] = kl_.beta();
  if (options_.kl_in_reward.enabled()) state.values["reward_kl_coef"] = reward_kl_.beta();
  state.values["entropy_coef"] = entropy_.coef();
  // +inf (nothing measured yet) is left out: the checkpoint's values are JSON numbers.
  if (std::isfinite(entropy_.last_entropy())) state.values["entropy/last"] = entropy_.last_entropy();
  std::vector<CheckpointPart> parts = critic_parts(critic_.get());
  if (in_flight) {
    // The prompt source as it was before the oldest batch in flight: a resume collects those batches again.
    state.values.insert(in_flight->source_before.values.begin(), in_flight->source_before.values.end());
    state.texts.insert(in_flight->source_before.texts.begin(), in_flight->source_before.texts.end());
    state.values["pipeline/max_staleness"] = static_cast<double>(*options_.max_staleness);
    state.values["pipeline/batches"] = static_cast<double>(in_flight->steps.size());
    for (std::size_t i = 0; i < in_flight->steps.size(); ++i) {
      state.values[fmt::format("pipeline/{}/step", i)] = static_cast<double>(in_flight->steps[i].step);
      state.values[fmt::format("pipeline/{}/version", i)] = static_cast<double>(in_flight->steps[i].version);
      state.values[fmt::format("pipeline/{}/stage", i)] = static_cast<double>(in_flight->steps[i].stage);
    }
    parts.push_back(in_flight_part(&*in_flight, nullptr));
  } else if (pipeline_ && in_flight_now && in_flight_now->source_now) {
    // The worker's source after the last batch it collected (a rollout rank's is not this process's).
    state.values.insert(in_flight_now->source_now->values.begin(), in_flight_now->source_now->values.end());
    state.texts.insert(in_flight_now->source_now->texts.begin(), in_flight_now->source_now->texts.end());
  } else {
    prompts_.save_state(state);
  }
  auto path = save_checkpoint(group_, checkpoints, model_->checkpointed(), *optimizer_, state,
                              synced_reference_ ? std::optional(reference_->checkpointed()) : std::nullopt, &master_,
                              parts);
  for (const auto& callback : callbacks_) callback->on_save(*this, step, path);
  return path;
}

std::int64_t GrpoTrainer::restore(CheckpointManager& checkpoints) {
  GRPO_CHECK(!serving_, "GrpoTrainer::restore: a rollout rank restores nothing (its trainer rank sends the state)");
  const auto latest = checkpoints.latest();
  if (!latest) return 0;
  // The worker stops touching the prompt source before the checkpoint's state replaces it.
  if (pipeline_) pipeline_->clear();
  std::vector<CheckpointPart> parts = critic_parts(critic_.get());
  std::map<std::string, torch::Tensor> in_flight_weights;
  const bool in_flight = pipeline_ && std::filesystem::is_directory(latest->path / "pipeline");
  if (in_flight) parts.push_back(in_flight_part(nullptr, &in_flight_weights));
  const auto state =
      load_checkpoint(group_, latest->path, model_->checkpointed(), *optimizer_,
                      synced_reference_ ? std::optional(reference_->checkpointed()) : std::nullopt, &master_, parts);
  prompts_.load_state(state);
  if (pipeline_) pipeline_->load_source_state(state);  // a rollout rank's source is its own
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
  if (pipeline_) {
    // The batches that were in flight, collected again with the weights that collected them (the prompt source is
    // back where it was before the oldest). Saved with another max_staleness, or by a synchronous run: the next
    // collect_groups starts the pipeline from the current weights.
    const auto value = [&](const std::string& key) {
      const auto it = state.values.find(key);
      GRPO_CHECK(it != state.values.end(), "checkpoint {}: trainer_state.json has no {}", latest->path.string(), key);
      return static_cast<std::int64_t>(it->second);
    };
    if (in_flight && value("pipeline/max_staleness") == *options_.max_staleness) {
      const auto trained = trainable_parameters(model_->module());
      for (std::int64_t i = 0; i < value("pipeline/batches"); ++i) {
        const std::int64_t version = value(fmt::format("pipeline/{}/version", i));
        const auto stage = static_cast<std::size_t>(value(fmt::format("pipeline/{}/stage", i)));
        GRPO_CHECK(stage < context_.stages().size(), "checkpoint {}: pipeline/{}/stage {} is not one of this run's {} "
                   "context stages", latest->path.string(), i, stage, context_.stages().size());
        WeightsSnapshot weights;
        for (const auto& [name, parameter] : trained) {
          const std::string key = fmt::format("v{}/{}", version, name);
          const auto it = in_flight_weights.find(key);
          GRPO_CHECK(it != in_flight_weights.end() && it->second.sizes() == parameter.sizes(),
                     "checkpoint {}: pipeline/{} has no tensor {} of shape [{}]", latest->path.string(),
                     kInFlightWeights, key, fmt::join(parameter.sizes(), ", "));
          weights.emplace_back(name, it->second.to(parameter.device(), parameter.scalar_type()));
        }
        pipeline_->submit(value(fmt::format("pipeline/{}/step", i)), stage, version, std::move(weights));
      }
    }
  }
  return state.step;
}

}  // namespace grpo::train
