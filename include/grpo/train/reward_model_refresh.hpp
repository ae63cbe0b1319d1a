// SPDX-License-Identifier: Apache-2.0
// RewardModelRefresh: a GrpoTrainer callback that trains a run's reward model on the policy's own samples as the run
// goes (iterated online RLHF; RewardModelRefreshOptions in reward_model_training.hpp). A reward model trained once, offline,
// is over-optimised by the policy: GRPO finds the texts it scores wrongly and moves there (Gao et al. 2022). Pairing
// each step's completions by the scorer's rule for correct, and training the model on them, closes many of those holes
// as they open (how far, on the tiny task: docs/reward_models.md). Each step it
//   1. pairs the step's completions (StepBatch::correct; graded_preference_pairs, seeded by the step),
//   2. measures the reward model on those new pairs before it learns them: reward_model/policy_pair_accuracy is how
//      well it still orders what the policy now writes (the over-optimisation gauge), over reward_model/policy_pairs,
//   3. adds them to the buffer (the newest buffer_pairs are kept), and every every_steps steps trains the model on
//      the whole buffer (train_reward_model; its seed moved by the step), logging reward_model/refresh_loss,
//      reward_model/refresh_accuracy (the last epoch's), reward_model/buffer_pairs and timing_s/reward_model_refresh,
//   4. and logs reward_model/correct_share (correct_variance_share of the step's totals): how much of the spread that
//      GRPO makes advantages of is right against wrong. A rule reward scores 1; a reward model spreads its scores
//      within groups that are all right or all wrong too, where a rule gives no advantage.
// (The metrics are named by the reward: "reward_model" is the registry entry's default name.)
// Pairs are read as the reward reads a completion: RewardModelOptions::completion_suffix is appended to both sides.
// The model is trained under the reward's lock (RewardModelReward::update_model), so no score call sees it half
// updated. A checkpoint gets the model's trained weights and the buffer (reward_model_refresh.safetensors beside the
// trainer's files), and restore() puts them back, so a resumed run goes on as the uninterrupted one.
//
//   auto refresh = std::make_shared<grpo::train::RewardModelRefresh>(rm_reward, grpo::train::RewardModelRefreshOptions{
//       .every_steps = 5});
//   trainer.add_callback(refresh);
//   if (resumed) refresh->restore(checkpoints.latest()->path);
//
// build_run adds one for each "reward_model" reward of the run with --rm-refresh-every N. With several processes every
// rank gathers the whole step's graded completions and trains its copy alike (then takes rank 0's weights), so the
// ranks' rewards never part; each rank does the whole refresh's work.
#pragma once

#include <grpo/train/grpo_trainer.hpp>
#include <grpo/train/reward_model_training.hpp>

#include <cstdint>
#include <deque>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace grpo::rewards {
class RewardModelReward;
}

namespace grpo::train {

/// The graded rows of every rank's `batch`, on every rank, in rank order: the completions' prompt, text and group
/// (renumbered from 0 in order of first appearance, each rank's own apart), `correct` and `totals` (empty totals
/// count as no value), and the step and group size. With contiguous prompt shards this is the one-process batch.
/// Collective: three all_gather_rows. Throws grpo::Error when `batch`'s sizes differ.
StepBatch gather_graded(ProcessGroup& group, const StepBatch& batch);

/// What correct_variance_share measured: the mean share, and over how many groups.
struct CorrectShare {
  double share = 0.0;
  std::int64_t groups = 0;
};

/// Of the rewards' spread within each group, the part that right against wrong explains: for every group (rows by
/// Completion::group) of the rows with both a total and a correct value whose totals are not all equal, the
/// between-class sum of squares n₁(m₁ − m)² + n₀(m₀ − m)² over the group's Σ(x − m)² (0 for a group all right or all
/// wrong), averaged over those groups. This is the share of a group's standardised GRPO advantages that carries the
/// verifier's signal. `completions`, `totals` and `correct` are [rows]; returns {0, 0} when no group has spread.
/// Throws grpo::Error when the sizes differ.
CorrectShare correct_variance_share(const std::vector<rewards::Completion>& completions,
                                    const std::vector<std::optional<float>>& totals,
                                    const std::vector<std::optional<bool>>& correct);

class RewardModelRefresh final : public TrainerCallback {
 public:
  /// `reward`: the run's reward model (its model is trained in place: every holder of the reward scores with the new
  /// weights), trained with options.training except its max_length, which is the reward's (RewardModelOptions: the
  /// tokens it reads). bf16 weights train through fp32 masters that, as the AdamW state, live for one refresh
  /// (train_reward_model): a weight whose whole move in one refresh is below half its bf16 spacing stays where it is.
  /// Throws ConfigError for invalid options, every_steps 0 or a process reward model (step_separator set); a float16
  /// model's refresh throws train_reward_model's ConfigError.
  RewardModelRefresh(std::shared_ptr<const rewards::RewardModelReward> reward, RewardModelRefreshOptions options);

  /// observe(batch)'s metrics added to the step's. With several processes it observes every rank's rows
  /// (gather_graded), so every rank learns the same pairs, and after a refresh rank 0's weights are broadcast.
  void on_step_metrics(const GrpoTrainer& trainer, const StepBatch& batch, std::vector<MetricValue>& values) override;
  /// The refresh's work on one step's batch (its step, completions and correct): the pairs, measured and added to
  /// the buffer, and on a step that is a multiple of every_steps the training; returns the metrics above.
  std::vector<MetricValue> observe(const StepBatch& batch);
  /// save(path) where this rank wrote a checkpoint.
  void on_save(const GrpoTrainer& trainer, std::int64_t step, const std::optional<std::filesystem::path>& path) override;

  /// Writes the model's trainable parameters and the buffer to file_name() in `checkpoint` (a directory).
  void save(const std::filesystem::path& checkpoint) const;
  /// Puts back what save wrote into `checkpoint`: the model's trained parameters and the buffer. Throws grpo::Error
  /// naming the file when it is missing (a checkpoint of a run without the refresh) or does not fit the model.
  void restore(const std::filesystem::path& checkpoint);

  /// The pairs the next refresh trains on, oldest first.
  const std::deque<PreferencePair>& buffer() const { return buffer_; }

  /// The file on_save writes in a checkpoint directory: "<reward name>_refresh.safetensors".
  std::string file_name() const;

 private:
  std::shared_ptr<const rewards::RewardModelReward> reward_;
  RewardModelRefreshOptions options_;
  std::deque<PreferencePair> buffer_;
};

}  // namespace grpo::train
