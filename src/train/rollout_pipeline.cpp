// SPDX-License-Identifier: Apache-2.0
#include <grpo/train/rollout_pipeline.hpp>

#include <grpo/core/error.hpp>
#include <grpo/train/grpo_trainer.hpp>
#include <grpo/train/master_weights.hpp>
#include <grpo/train/trained_model.hpp>

#include "seconds_since.hpp"

#include <fmt/ranges.h>

#include <chrono>
#include <utility>

namespace grpo::train {
WeightsSnapshot snapshot_trained_weights(const torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  WeightsSnapshot out;
  for (const auto& [name, parameter] : trainable_parameters(module)) out.emplace_back(name, parameter.detach().clone());
  return out;
}

void load_trained_weights(torch::nn::Module& module, const WeightsSnapshot& weights) {
  torch::NoGradGuard no_grad;
  auto parameters = module.named_parameters();
  for (const auto& [name, value] : weights) {
    torch::Tensor* target = parameters.find(name);
    GRPO_CHECK(target != nullptr && target->sizes() == value.sizes() && target->scalar_type() == value.scalar_type(),
               "the sampler's model has no parameter \"{}\" of shape [{}] and dtype {}: the trainer and the sampler "
               "must be built from the same model with the same settings",
               name, fmt::join(value.sizes(), ", "), c10::toString(value.scalar_type()));
    target->copy_(value);
  }
}

LocalRolloutWorker::LocalRolloutWorker(std::unique_ptr<TrainedModel> sampler, std::shared_ptr<Generator> generator,
                                       Collect collect, SourceState source_state)
    : sampler_(std::move(sampler)), generator_(std::move(generator)), collect_(std::move(collect)),
      source_state_(std::move(source_state)) {
  GRPO_CHECK(sampler_ != nullptr && generator_ != nullptr, "LocalRolloutWorker: no sampler copy or no generator");
}

LocalRolloutWorker::~LocalRolloutWorker() = default;

void LocalRolloutWorker::load_weights(const WeightsSnapshot& weights) { load_trained_weights(sampler_->module(), weights); }

RolloutWorker::Collected LocalRolloutWorker::collect(std::int64_t step, std::size_t stage) {
  Collected out;  // source_after unset: the source is the trainer's, which a checkpoint reads itself
  out.source_before = source_state_();
  out.batch = std::make_shared<StepBatch>(collect_(step, stage, *generator_));
  return out;
}

RolloutPipeline::RolloutPipeline(std::unique_ptr<RolloutWorker> worker, std::int64_t generation_threads)
    : worker_(std::move(worker)), generation_threads_(generation_threads) {
  GRPO_CHECK(worker_ != nullptr, "RolloutPipeline: no worker");
  GRPO_CHECK(generation_threads_ >= 0, "RolloutPipeline: generation_threads must be >= 0, got {}", generation_threads_);
  thread_ = std::thread([this] { run(); });
}

RolloutPipeline::~RolloutPipeline() {
  {
    const std::lock_guard lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void RolloutPipeline::submit(std::int64_t step, std::size_t stage, std::int64_t version, WeightsSnapshot weights) {
  {
    const std::lock_guard lock(mutex_);
    GRPO_CHECK(jobs_.empty() || jobs_.back().step < step, "RolloutPipeline::submit: step {} after step {}", step,
               jobs_.back().step);
    // Batches of one version share its snapshot (the first s + 1 batches of a run are all at version 0).
    std::shared_ptr<const WeightsSnapshot> shared;
    if (!jobs_.empty() && jobs_.back().version == version) {
      shared = jobs_.back().weights;
    } else {
      shared = std::make_shared<const WeightsSnapshot>(std::move(weights));
    }
    Job job;
    job.step = step;
    job.version = version;
    job.stage = stage;
    job.weights = std::move(shared);
    jobs_.push_back(std::move(job));
  }
  changed_.notify_all();
}

bool RolloutPipeline::pending(std::int64_t step) const {
  const std::lock_guard lock(mutex_);
  for (const Job& job : jobs_) {
    if (job.step == step) return true;
  }
  return false;
}

void RolloutPipeline::rethrow_locked() const {
  if (error_) std::rethrow_exception(error_);
}

StepBatch RolloutPipeline::take(std::int64_t step) {
  const auto started = std::chrono::steady_clock::now();
  std::unique_lock lock(mutex_);
  GRPO_CHECK(!jobs_.empty() && jobs_.front().step == step,
             "RolloutPipeline::take: batch {} was not submitted (the oldest pending batch is {})", step,
             jobs_.empty() ? std::string("none") : std::to_string(jobs_.front().step));
  changed_.wait(lock, [&] { return error_ != nullptr || jobs_.front().batch != nullptr; });
  if (jobs_.front().batch == nullptr) rethrow_locked();  // a batch collected before the failure is still good
  Job job = std::move(jobs_.front());
  jobs_.pop_front();
  lock.unlock();
  last_wait_seconds_ = seconds_since(started);
  busy_taken_ += job.busy_seconds;
  StepBatch out = std::move(*job.batch);
  out.weights_version = job.version;
  return out;
}

std::unique_lock<std::mutex> RolloutPipeline::quiesce() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] {
    if (error_ != nullptr) return true;
    if (running_job_) return false;
    for (const Job& job : jobs_) {
      if (job.batch == nullptr) return false;
    }
    return true;
  });
  rethrow_locked();
  return lock;
}

RolloutPipeline::InFlight RolloutPipeline::in_flight() const {
  InFlight out;
  for (const Job& job : jobs_) {
    out.steps.push_back({.step = job.step, .version = job.version, .stage = job.stage});
    out.weights.try_emplace(job.version, *job.weights);
  }
  if (!jobs_.empty() && jobs_.front().source_before) out.source_before = *jobs_.front().source_before;
  if (jobs_.empty()) out.source_now = source_now_;
  return out;
}

void RolloutPipeline::clear() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return !running_job_; });
  jobs_.clear();
  loaded_version_ = -1;  // a restored run may number other weights with the same version
  source_now_.reset();
}

void RolloutPipeline::load_source_state(TrainerState state) {
  const std::lock_guard lock(mutex_);
  source_to_load_ = std::move(state);
}

void RolloutPipeline::run() {
  if (generation_threads_ > 0) at::set_num_threads(static_cast<int>(generation_threads_));
  std::unique_lock lock(mutex_);
  for (;;) {
    Job* job = nullptr;
    changed_.wait(lock, [&] {
      if (stop_ || error_) return true;
      for (Job& candidate : jobs_) {
        if (candidate.batch == nullptr) {
          job = &candidate;
          return true;
        }
      }
      return false;
    });
    if (stop_ || error_) return;
    running_job_ = true;
    const std::int64_t step = job->step, version = job->version;
    const std::size_t stage = job->stage;
    const std::shared_ptr<const WeightsSnapshot> weights = job->weights;
    std::optional<TrainerState> source_to_load = std::exchange(source_to_load_, std::nullopt);
    lock.unlock();
    // Outside the lock: the trainer submits, takes and waits meanwhile. Only this thread touches the sampler copy,
    // and (while a batch is collected) the scorer and the prompt source.
    RolloutWorker::Collected collected;
    std::exception_ptr error;
    const auto started = std::chrono::steady_clock::now();
    try {
      if (source_to_load) worker_->load_source_state(*source_to_load);
      if (version != loaded_version_) {
        worker_->load_weights(*weights);
        loaded_version_ = version;
      }
      collected = worker_->collect(step, stage);
    } catch (...) {
      error = std::current_exception();
    }
    const double busy = seconds_since(started);
    lock.lock();
    running_job_ = false;
    // The job is still pending: take() waits for its batch, and clear() refuses while it runs.
    for (Job& pending_job : jobs_) {
      if (pending_job.step != step) continue;
      if (error) break;
      pending_job.batch = std::move(collected.batch);
      pending_job.source_before = std::move(collected.source_before);
      pending_job.busy_seconds = busy;
      source_now_ = std::move(collected.source_after);
    }
    if (error) error_ = error;
    changed_.notify_all();
  }
}

}  // namespace grpo::train
