// SPDX-License-Identifier: Apache-2.0
// The messages between a trainer rank and its rollout rank (rollout_ranks.hpp), over the link group.
//   request  (trainer → rollout): int64[4] {kind, step, stage, number of weight tensors or −1}; with weights, their
//            names, dtypes and shapes as text, then each tensor; then a prompt-source state to load (empty: none).
//   response (rollout → trainer): an error message (empty: none), the batch and the source's states before and after
//            it (step_batch_codec.hpp; empty with an error): always four byte strings.
#pragma once

#include <grpo/train/distributed.hpp>
#include <grpo/train/rollout_pipeline.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace grpo::train::rollout_protocol {

struct Request {
  bool stop = false;  ///< the trainer is done: the rollout rank returns from serve_rollouts
  std::int64_t step = 0;
  std::size_t stage = 0;
  std::optional<WeightsSnapshot> weights;      ///< new weights to load first (CPU tensors)
  std::optional<TrainerState> source_state;    ///< a prompt-source state to load first
};

void send_request(ProcessGroup& link, int peer, const Request& request);
/// The next request from `peer`; waits up to the link's collective_timeout for it.
Request recv_request(ProcessGroup& link, int peer);

/// A response as bytes: an error message (empty: none), or the batch and the source's states.
struct Response {
  std::string error, batch, source_before, source_after;
};
/// The bytes of a collected batch (throws what the codec throws).
Response encode_response(const RolloutWorker::Collected& collected);
void send_response(ProcessGroup& link, int peer, const Response& response);
/// The response of `peer` (rollout rank `peer` of the link); throws grpo::Error with the rollout rank's message.
RolloutWorker::Collected recv_response(ProcessGroup& link, int peer);

}  // namespace grpo::train::rollout_protocol
