// SPDX-License-Identifier: Apache-2.0
// Dedicated rollout ranks for a pipelined run (GrpoTrainerOptions::max_staleness): the processes that sample and score
// are not the ones that train. A world of 2·T processes (scripts/launch.sh -n 2T) splits into T trainer ranks
// (0 … T − 1) and T rollout ranks (T … 2T − 1); rollout rank T + t collects trainer t's share of every batch, as the
// worker thread of a one-process pipeline would, so the batches, metrics and weights are those of the same run with
// worker threads (tested bit for bit). The rollout ranks hold the policy's weights and the scorer, never an optimizer,
// masters, a reference or a critic.
//
//   trainer rank t                                       rollout rank T + t
//   GrpoTrainer (group: the trainer ranks)                GrpoTrainer serving (group: the rollout ranks)
//   pipeline thread: a batch's step and stage,  ──────►   loads the weights (when their version is new),
//     the trained weights of its version (new            collects the batch (prompts, sampling, scoring; its
//     ones only), a restored source state                collectives among the rollout ranks)
//   take(k) ◄──────────────────────────────────────────   the batch as bytes (step_batch_codec.hpp), or its error
//
// The weights go from each trainer to its partner after the update that made them (the trainers' weights are equal,
// so this is the broadcast of one version to every rollout rank), over Gloo on the CPU. Three process groups:
// `link` (every rank, at MASTER_ADDR:MASTER_PORT), and two subgroups of it met through its store
// (ProcessGroup::subgroup): the trainers' and the rollout ranks'.
#pragma once

#include <grpo/train/distributed.hpp>
#include <grpo/train/rollout_pipeline.hpp>

#include <chrono>
#include <memory>
#include <optional>

namespace grpo::train {

/// A trainer rank's partner on a rollout rank, or the reverse: GrpoTrainerParts::rollout_peer.
struct RolloutPeer {
  ProcessGroup* link = nullptr;  ///< the group of every rank (RolloutRanks::link); outlives the trainer
  int rank = -1;                 ///< the partner's rank in `link`
  /// true on a rollout rank: the GrpoTrainer only answers its trainer (GrpoTrainer::serve_rollouts) and builds no
  /// optimizer; false on a trainer rank: its pipeline's batches come from the partner.
  bool serves = false;
};

/// How long a trainer and its rollout rank wait for each other's next message on the link (a request, a batch), at
/// least: 24 hours, or ProcessGroupOptions::collective_timeout when longer.
inline constexpr std::chrono::milliseconds kLinkTimeout{24LL * 3600 * 1000};

/// This process's place in a world with rollout ranks.
struct RolloutRanks {
  /// Joins the three groups of a world of `world.world_size` = 2 · rollout_ranks processes (world: the launch's
  /// ProcessGroupOptions, rank and port included). Throws ConfigError naming --rollout-ranks when the world is not
  /// twice its value.
  static RolloutRanks join(const ProcessGroupOptions& world, int rollout_ranks);

  std::unique_ptr<ProcessGroup> link;  ///< every rank: batches and weights travel here
  /// This process's side: the trainer ranks (their gradient all-reduce, metrics) or the rollout ranks (their pass
  /// rates and dynamic sampling), with ranks 0 … T − 1 within it.
  std::unique_ptr<ProcessGroup> side;
  RolloutPeer peer;  ///< the partner, and whether this process serves
};

/// A pipeline's worker on a rollout rank (RolloutPeer): load_weights keeps the snapshot to send with the next batch
/// request; collect sends the request (step, stage, new weights, a restored source state) and waits for the batch.
/// The rollout rank's failure arrives as grpo::Error naming the rank and its message. Destroying it tells the rollout
/// rank to stop serving.
class RemoteRolloutWorker : public RolloutWorker {
 public:
  explicit RemoteRolloutWorker(RolloutPeer peer);
  ~RemoteRolloutWorker() override;
  void load_weights(const WeightsSnapshot& weights) override;
  void load_source_state(const TrainerState& state) override;
  Collected collect(std::int64_t step, std::size_t stage) override;
  /// false: the rollout rank scores with its own scorer and source.
  bool shares_trainer_parts() const override { return false; }

 private:
  RolloutPeer peer_;
  std::optional<WeightsSnapshot> weights_;    // to send with the next request
  std::optional<TrainerState> source_state_;  // to send with the next request
};

}  // namespace grpo::train
