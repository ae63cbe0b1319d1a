// SPDX-License-Identifier: Apache-2.0
#include <grpo/train/rollout_ranks.hpp>

#include <grpo/core/error.hpp>
#include <grpo/train/grpo_trainer.hpp>
#include <grpo/train/step_batch_codec.hpp>

#include "rollout_protocol.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <sstream>

namespace grpo::train {

RolloutRanks RolloutRanks::join(const ProcessGroupOptions& world, int rollout_ranks) {
  GRPO_CHECK_CONFIG(rollout_ranks > 0 && world.world_size == 2 * rollout_ranks,
                    "--rollout-ranks {}: a run with rollout ranks has one per trainer rank, so WORLD_SIZE must be {} "
                    "(scripts/launch.sh -n {}), got {}",
                    rollout_ranks, 2 * rollout_ranks, 2 * rollout_ranks, world.world_size);
  world.validate();
  RolloutRanks out;
  ProcessGroupOptions link = world;
  link.backend = DistributedBackend::gloo;  // batches and weights travel as CPU tensors
  // A rollout rank waits for its next request while its trainer evaluates and checkpoints, and a trainer for a batch
  // while it is sampled: both may take longer than a collective. A peer that exits closes its sockets and is reported
  // at once; this bounds only a peer that hangs.
  link.collective_timeout = std::max(link.collective_timeout, kLinkTimeout);
  out.link = std::make_unique<ProcessGroup>(link);
  const bool serves = world.rank >= rollout_ranks;
  // Each side's own group, met through the link's store. The rollout ranks exchange pass rates: CPU tensors.
  out.side = std::make_unique<ProcessGroup>(out.link->subgroup(serves ? "rollout_ranks" : "trainer_ranks",
                                                              world.rank % rollout_ranks, rollout_ranks,
                                                              serves ? DistributedBackend::gloo : world.backend,
                                                              world.collective_timeout));
  out.peer = {.link = out.link.get(), .rank = serves ? world.rank - rollout_ranks : world.rank + rollout_ranks,
              .serves = serves};
  return out;
}

namespace rollout_protocol {
namespace {
constexpr int kRequestTag = 11, kResponseTag = 12;
constexpr std::int64_t kCollect = 1, kStop = 2;
}  // namespace

void send_request(ProcessGroup& link, int peer, const Request& request) {
  const std::int64_t tensors = request.weights ? static_cast<std::int64_t>(request.weights->size()) : -1;
  link.send_(torch::tensor({request.stop ? kStop : kCollect, request.step, static_cast<std::int64_t>(request.stage),
                            tensors},
                           torch::kInt64),
             peer, kRequestTag);
  if (request.stop) return;
  if (request.weights) {
    std::string meta;
    std::vector<torch::Tensor> cpu;
    for (const auto& [name, value] : *request.weights) {
      cpu.push_back(value.detach().to(torch::kCPU).contiguous());
      meta += fmt::format("{} {} {}\n", name, static_cast<int>(cpu.back().scalar_type()),
                          fmt::join(cpu.back().sizes(), ","));
    }
    link.send_bytes(meta, peer, kRequestTag);
    for (const torch::Tensor& t : cpu) link.send_(t, peer, kRequestTag);
  }
  link.send_bytes(request.source_state ? encode_trainer_state(*request.source_state) : std::string(), peer,
                  kRequestTag);
}

Request recv_request(ProcessGroup& link, int peer) {
  torch::Tensor header = torch::zeros({4}, torch::kInt64);
  link.recv_(header, peer, kRequestTag);
  const auto h = header.accessor<std::int64_t, 1>();
  Request out;
  GRPO_CHECK(h[0] == kCollect || h[0] == kStop, "rollout rank: trainer rank {} sent request kind {}", peer, h[0]);
  out.stop = h[0] == kStop;
  if (out.stop) return out;
  out.step = h[1];
  out.stage = static_cast<std::size_t>(h[2]);
  if (h[3] >= 0) {
    std::istringstream meta(link.recv_bytes(peer, kRequestTag));
    out.weights.emplace();
    for (std::int64_t i = 0; i < h[3]; ++i) {
      std::string name, shape;
      int dtype = -1;
      meta >> name >> dtype;
      std::getline(meta, shape);
      GRPO_CHECK(meta && dtype >= 0 && dtype < static_cast<int>(c10::ScalarType::NumOptions),
                 "rollout rank: trainer rank {} sent unreadable weights (tensor {} of {})", peer, i, h[3]);
      std::vector<std::int64_t> sizes;
      std::istringstream dims(shape);
      for (std::string dim; std::getline(dims, dim, ',');) {
        if (dim.find_first_not_of(' ') != std::string::npos) sizes.push_back(std::stoll(dim));
      }
      torch::Tensor value = torch::empty(sizes, torch::TensorOptions().dtype(static_cast<c10::ScalarType>(dtype)));
      link.recv_(value, peer, kRequestTag);
      out.weights->emplace_back(std::move(name), std::move(value));
    }
  }
  const std::string state = link.recv_bytes(peer, kRequestTag);
  if (!state.empty()) out.source_state = decode_trainer_state(state);
  return out;
}

Response encode_response(const RolloutWorker::Collected& collected) {
  GRPO_CHECK(collected.batch != nullptr && collected.source_after, "rollout rank: no batch to send");
  return {.error = {},
          .batch = encode_step_batch(*collected.batch),
          .source_before = encode_trainer_state(collected.source_before),
          .source_after = encode_trainer_state(*collected.source_after)};
}

void send_response(ProcessGroup& link, int peer, const Response& response) {
  // Always four messages, so that the trainer reads a whole response whatever it holds.
  for (const std::string* part : {&response.error, &response.batch, &response.source_before, &response.source_after}) {
    link.send_bytes(*part, peer, kResponseTag);
  }
}

RolloutWorker::Collected recv_response(ProcessGroup& link, int peer) {
  Response response;  // read whole before anything is decoded: the link stays in step if decoding fails
  for (std::string* part : {&response.error, &response.batch, &response.source_before, &response.source_after}) {
    *part = link.recv_bytes(peer, kResponseTag);
  }
  GRPO_CHECK(response.error.empty(), "rollout rank {}: {}", peer, response.error);
  RolloutWorker::Collected out;
  out.batch = std::make_shared<StepBatch>(decode_step_batch(response.batch));
  out.source_before = decode_trainer_state(response.source_before);
  out.source_after = decode_trainer_state(response.source_after);
  return out;
}

}  // namespace rollout_protocol

RemoteRolloutWorker::RemoteRolloutWorker(RolloutPeer peer) : peer_(peer) {
  GRPO_CHECK(peer_.link != nullptr && !peer_.serves, "RemoteRolloutWorker: needs a trainer rank's link to its partner");
}

RemoteRolloutWorker::~RemoteRolloutWorker() {
  try {
    rollout_protocol::Request stop;
    stop.stop = true;
    rollout_protocol::send_request(*peer_.link, peer_.rank, stop);
  } catch (const std::exception& e) {  // the rollout rank is gone already (it failed, or the link did)
    fmt::print(stderr, "grpo: could not tell rollout rank {} to stop: {}\n", peer_.rank, e.what());
  }
}

void RemoteRolloutWorker::load_weights(const WeightsSnapshot& weights) { weights_ = weights; }

void RemoteRolloutWorker::load_source_state(const TrainerState& state) { source_state_ = state; }

RolloutWorker::Collected RemoteRolloutWorker::collect(std::int64_t step, std::size_t stage) {
  rollout_protocol::Request request;
  request.step = step;
  request.stage = stage;
  request.weights = std::exchange(weights_, std::nullopt);
  request.source_state = std::exchange(source_state_, std::nullopt);
  rollout_protocol::send_request(*peer_.link, peer_.rank, request);
  return rollout_protocol::recv_response(*peer_.link, peer_.rank);
}

}  // namespace grpo::train
