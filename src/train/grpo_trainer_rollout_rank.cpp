// SPDX-License-Identifier: Apache-2.0
// GrpoTrainer on a rollout rank (rollout_ranks.hpp): the loop that answers the partner trainer rank.
#include <grpo/train/grpo_trainer.hpp>

#include <grpo/core/error.hpp>
#include <grpo/train/trained_model.hpp>

#include "rollout_protocol.hpp"

#include <fmt/format.h>

#include <exception>

namespace grpo::train {

void GrpoTrainer::serve_rollouts() {
  GRPO_CHECK(serving_, "GrpoTrainer::serve_rollouts: this trainer is not a rollout rank's (GrpoTrainerParts::"
             "rollout_peer with serves)");
  if (options_.generation_threads > 0) at::set_num_threads(static_cast<int>(options_.generation_threads));
  ProcessGroup& link = *serving_->link;
  const int trainer = serving_->rank;
  for (;;) {
    rollout_protocol::Request request = rollout_protocol::recv_request(link, trainer);
    if (request.stop) return;
    rollout_protocol::Response response;
    try {
      RolloutWorker::Collected collected;
      if (request.weights) load_trained_weights(model_->module(), *request.weights);
      if (request.source_state) prompts_.load_state(*request.source_state);
      GRPO_CHECK(request.stage < context_.stages().size(), "the trainer asked for context stage {} of {}",
                 request.stage, context_.stages().size());
      prompts_.save_state(collected.source_before);
      collected.batch = std::make_shared<StepBatch>(
          collect_rollouts(request.step, *generator_, context_.stages()[request.stage], group_));
      prompts_.save_state(collected.source_after.emplace());
      response = rollout_protocol::encode_response(collected);
    } catch (const std::exception& e) {
      response = {};
      response.error = fmt::format("batch {} failed: {}", request.step, e.what());
    }
    rollout_protocol::send_response(link, trainer, response);
  }
}

}  // namespace grpo::train
