// SPDX-License-Identifier: Apache-2.0
// RolloutPipeline: the generation worker of a pipelined GRPO run (rLLM's verl-pipe, verl's one_step_off_policy, AReaL's
// bounded staleness). A worker thread owns a sampler copy of the policy and collects the batches of later steps —
// prompts, sampling and scoring, the part of a step that needs no trainer weights — while the trainer trains on the
// current one. Every batch is generated at one weights version: the step whose update made the weights it was sampled
// with (0: the starting weights). GrpoTrainer admits batch j with the weights of version j − 1 − s (s = max_staleness; version 0,
// the starting weights, for the first s + 1 batches), so a batch is at most s versions behind the weights that train
// on it, by admission: the worker cannot start a batch before its version exists. Which version generates which batch
// does not depend on timing, so a pipelined run repeats bit for bit, and resumes so. The worker is a sampler copy in
// this process (LocalRolloutWorker) or a dedicated rollout rank (RemoteRolloutWorker, rollout_ranks.hpp); the thread
// then carries the batches and weights to and from it.
//
//   main thread (trainer)                         worker (sampler copy, scorer, prompt source)
//   submit(j, version j − 1 − s, weights)   ───►  loads the weights, collects batch j
//   take(k): waits for batch k              ◄───  batch k (or the exception that stopped it)
//
// GrpoTrainer builds one when GrpoTrainerOptions::max_staleness is set; users drive it through the trainer's phases.
#pragma once

#include <grpo/train/checkpoint.hpp>
#include <grpo/train/generator.hpp>

#include <torch/torch.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace grpo::train {

struct StepBatch;
class TrainedModel;

/// The trained parameters of one weights version by name (CPU or device copies, detached): all a sampler copy needs,
/// since the parameters that do not train never change.
using WeightsSnapshot = std::vector<std::pair<std::string, torch::Tensor>>;

/// Copies of `module`'s parameters that require grad, by name (no gradient).
WeightsSnapshot snapshot_trained_weights(const torch::nn::Module& module);
/// Loads `weights` into `module`'s parameters of the same names, in place (no gradient): what a sampler (a worker's
/// copy, or a rollout rank's model) does with a version's snapshot. Throws grpo::Error naming a parameter the module
/// lacks, or has with another shape or dtype (the two sides were built with different settings).
void load_trained_weights(torch::nn::Module& module, const WeightsSnapshot& weights);

/// The side of a pipeline that collects batches: a sampler copy on a worker thread of this process
/// (LocalRolloutWorker), or a dedicated rollout rank reached over c10d (RemoteRolloutWorker, rollout_ranks.hpp).
/// RolloutPipeline calls it from its thread only, one call at a time, in the order of the batches.
class RolloutWorker {
 public:
  virtual ~RolloutWorker() = default;
  /// The sampler's trained parameters become `weights` (one version's snapshot) before the next collect.
  virtual void load_weights(const WeightsSnapshot& weights) = 0;
  /// The prompt source becomes `state` (a restored checkpoint's) before the next collect.
  virtual void load_source_state(const TrainerState& state) = 0;
  /// A collected batch with the prompt source's state before and after collecting it.
  struct Collected {
    std::shared_ptr<StepBatch> batch;
    TrainerState source_before;
    /// Unset when the source is the trainer's own (LocalRolloutWorker): PromptSource::save_state gives it then.
    std::optional<TrainerState> source_after;
  };
  /// Collects batch `step` at context stage `stage` (an index into the trainer's stages).
  virtual Collected collect(std::int64_t step, std::size_t stage) = 0;
  /// Whether it uses the trainer's own scorer and prompt source, so that evaluation must hold it still.
  virtual bool shares_trainer_parts() const = 0;
};

/// The worker of a pipeline on one process: its own sampler copy of the policy, the run's generator rebuilt over it,
/// and the trainer's collect, scorer and prompt source (which it shares with the trainer: the pipeline holds it still
/// while the trainer evaluates or saves).
class LocalRolloutWorker : public RolloutWorker {
 public:
  /// Collects batch `step` at context stage `stage` with `generator` (the worker's, over the sampler copy).
  using Collect = std::function<StepBatch(std::int64_t step, std::size_t stage, Generator& generator)>;
  /// The prompt source's state (PromptSource::save_state): what a checkpoint saves to regenerate the batches in flight.
  using SourceState = std::function<TrainerState()>;

  /// `sampler`: a copy of the policy (TrainedModel::sampler_copy) that only the worker uses, and `generator` over it
  /// (the run's generator rebound to the copy: TrainedModel::rebind_generator).
  LocalRolloutWorker(std::unique_ptr<TrainedModel> sampler, std::shared_ptr<Generator> generator, Collect collect,
                     SourceState source_state);
  ~LocalRolloutWorker() override;
  void load_weights(const WeightsSnapshot& weights) override;
  /// Nothing: the source is the trainer's own, which GrpoTrainer::restore has loaded.
  void load_source_state(const TrainerState& /*state*/) override {}
  Collected collect(std::int64_t step, std::size_t stage) override;
  bool shares_trainer_parts() const override { return true; }

 private:
  std::unique_ptr<TrainedModel> sampler_;
  std::shared_ptr<Generator> generator_;
  Collect collect_;
  SourceState source_state_;
};

class RolloutPipeline {
 public:
  /// Starts the thread that runs `worker`; `generation_threads` > 0 sets its intra-op thread count
  /// (at::set_num_threads on that thread), 0 leaves the default.
  RolloutPipeline(std::unique_ptr<RolloutWorker> worker, std::int64_t generation_threads);
  /// Stops the worker after its current batch and joins it.
  ~RolloutPipeline();
  RolloutPipeline(const RolloutPipeline&) = delete;
  RolloutPipeline& operator=(const RolloutPipeline&) = delete;

  /// Admits batch `step`, to be generated at context stage `stage` with `weights`, the weights of version `version`.
  /// Steps are submitted in increasing order; the worker collects them in that order.
  void submit(std::int64_t step, std::size_t stage, std::int64_t version, WeightsSnapshot weights);
  /// Whether batch `step` was submitted and not yet taken.
  bool pending(std::int64_t step) const;
  /// Waits for batch `step` (the oldest pending one) and returns it with its `weights_version` set; rethrows the
  /// exception that stopped the worker on it or on an earlier batch (and on every later call). grpo::Error when `step`
  /// is not the oldest pending batch.
  StepBatch take(std::int64_t step);
  /// Waits until the worker has collected every submitted batch (none running), then holds it still until the
  /// returned lock is released: what evaluation and checkpoints need, as they share the scorer and the prompt source
  /// with it. Rethrows the worker's exception.
  std::unique_lock<std::mutex> quiesce();

  /// What a checkpoint needs to regenerate the batches in flight exactly (call while quiesced): the pending steps,
  /// their versions and weights (one snapshot per version), and the prompt source's state before the oldest of them.
  struct InFlight {
    struct Step {
      std::int64_t step = 0, version = 0;
      std::size_t stage = 0;
    };
    std::vector<Step> steps;                                    ///< oldest first
    std::map<std::int64_t, WeightsSnapshot> weights;            ///< by version
    TrainerState source_before;
    /// With no batch pending: the worker's prompt source after the last batch it collected (unset when it collected
    /// none since the start or the last clear(), or when that source is the trainer's own).
    std::optional<TrainerState> source_now;
  };
  InFlight in_flight() const;
  /// Drops every pending batch, after the one the worker collects (if any) is done, and forgets which weights the copy
  /// holds: before a restore submits the batches that were in flight again.
  void clear();
  /// The worker's prompt source becomes `state` before it collects its next batch (RolloutWorker::load_source_state).
  void load_source_state(TrainerState state);

  /// Whether its worker uses the trainer's scorer and prompt source (RolloutWorker::shares_trainer_parts).
  bool shares_trainer_parts() const { return worker_->shares_trainer_parts(); }

  /// Seconds the trainer waited in take() for its last batch, and the worker's busy seconds (loading weights,
  /// collecting) over the batches taken so far.
  double last_wait_seconds() const { return last_wait_seconds_; }
  double busy_seconds_taken() const { return busy_taken_; }

 private:
  struct Job {
    std::int64_t step = 0;
    std::int64_t version = 0;
    std::size_t stage = 0;
    std::shared_ptr<const WeightsSnapshot> weights;
    std::optional<TrainerState> source_before;
    std::shared_ptr<StepBatch> batch;  // set when collected
    double busy_seconds = 0.0;
  };
  void run();
  void rethrow_locked() const;

  std::unique_ptr<RolloutWorker> worker_;
  std::int64_t generation_threads_ = 0;

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Job> jobs_;          // pending, in step order; the worker collects the first without a batch
  bool running_job_ = false;      // the worker is collecting (mutex_ released meanwhile)
  bool stop_ = false;
  std::exception_ptr error_;
  std::int64_t loaded_version_ = -1;
  std::optional<TrainerState> source_to_load_;  // load_source_state's, for the worker before its next batch
  std::optional<TrainerState> source_now_;      // after the last batch collected
  double last_wait_seconds_ = 0.0, busy_taken_ = 0.0;
  std::thread thread_;
};

}  // namespace grpo::train
