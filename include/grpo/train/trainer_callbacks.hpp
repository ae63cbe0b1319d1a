// SPDX-License-Identifier: Apache-2.0
// Ready-made GrpoTrainer callbacks: the sinks a run usually wants, each a TrainerCallback (grpo_trainer.hpp) to add on
// rank 0. Write your own by deriving from TrainerCallback; MetricsLog is the simplest template.
//
//   MetricsLog      every step's scalars and every evaluation's to metrics.jsonl (and TensorBoard events)
//   CompletionLog   the first N kept completions of each step (prompt, text, each reward, advantage, domain)
//   ProgressLog     the console: a progress line every N steps, evaluation lines, per-domain lines, stage switches
#pragma once

#include <grpo/train/grpo_trainer.hpp>
#include <grpo/train/metrics_writer.hpp>
#include <grpo/train/tensorboard.hpp>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>

namespace grpo::train {

/// Step and evaluation scalars to a JSON-lines file (MetricsWriter) and, when `tensorboard_dir` is not empty, to
/// TensorBoard event files there. The new event file tells TensorBoard to hide the earlier files' records from
/// `first_step` on when the run resumes (OpenMode::append; the JSON-lines file is trimmed by drop_records_after before
/// it is opened), and all of them for a fresh run (OpenMode::truncate), as the JSON-lines file starts empty.
class MetricsLog final : public TrainerCallback {
 public:
  MetricsLog(const std::filesystem::path& jsonl, const std::filesystem::path& tensorboard_dir = {},
             OpenMode mode = OpenMode::truncate, std::int64_t first_step = 1);
  void on_step_end(const GrpoTrainer& trainer, const StepReport& report) override;
  void on_evaluation(const GrpoTrainer& trainer, const EvaluationReport& report) override;

 private:
  void write(std::int64_t step, const Scalars& scalars);
  MetricsWriter metrics_;
  std::optional<TensorBoardWriter> tensorboard_;
};

/// The first `per_step` kept completions of every step to a completion table (CompletionTableWriter); the domain
/// column is written when the scorer has per-domain reward sets.
class CompletionLog final : public TrainerCallback {
 public:
  CompletionLog(const std::filesystem::path& path, std::int64_t per_step, OpenMode mode = OpenMode::truncate);
  void on_step_end(const GrpoTrainer& trainer, const StepReport& report) override;

 private:
  CompletionTableWriter table_;
  std::int64_t per_step_;
};

/// Console output: every `every` steps (and the first and last of the run) a progress line with reward, the headline
/// reward (or each domain's accuracy), zero-std fraction, entropy, length, dynamic-sampling rounds and adaptive β;
/// with per-domain reward sets a line per domain; a line per evaluation; a line per context stage switch.
class ProgressLog final : public TrainerCallback {
 public:
  /// Steps first_step .. total_steps are this run's (a resumed run starts past 1).
  ProgressLog(std::int64_t every, std::int64_t first_step, std::int64_t total_steps);
  void on_step_end(const GrpoTrainer& trainer, const StepReport& report) override;
  void on_evaluation(const GrpoTrainer& trainer, const EvaluationReport& report) override;
  void on_stage_switch(const GrpoTrainer& trainer, const StageSwitch& change) override;

 private:
  std::int64_t every_, first_step_, total_steps_;
  std::optional<std::chrono::steady_clock::time_point> start_;
};

}  // namespace grpo::train
