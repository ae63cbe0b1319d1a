// SPDX-License-Identifier: Apache-2.0
// A whole training run from its settings (run_settings.hpp): the parts built in the order they depend on each other,
// then the loop that trains, evaluates and saves them. `grpo train` is parse_run_settings + build_run + train_run;
// examples/r1_zero.cpp builds the same parts and writes its own loop, phase by phase.
//
//   grpo::train::RunSettings settings;
//   if (!grpo::train::parse_run_settings(settings, args, "grpo train [options]")) return 0;
//   auto run = grpo::train::build_run(settings);
//   const auto curve = grpo::train::train_run(*run, settings);   // held-out accuracy by step
//   grpo::train::finish_run(*run, settings, curve);
#pragma once

#include <grpo/train/checkpoint.hpp>
#include <grpo/train/distributed.hpp>
#include <grpo/train/grpo_trainer.hpp>
#include <grpo/train/mixed_prompt_source.hpp>
#include <grpo/train/run_settings.hpp>

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

namespace grpo::train {

/// --device for this rank: cpu; cuda is cuda:LOCAL_RANK (one GPU per process); cuda:N only with one process.
torch::Device run_device(const RunSettings& settings, const ProcessGroup& group);
/// --dtype as a torch dtype.
torch::ScalarType run_dtype(const RunSettings& settings);
/// The LoRA configuration the settings ask for: --lora-adapter's adapter_config.json, --lora-r's, or none.
std::optional<models::LoraOptions> run_lora(const RunSettings& settings);
/// The model as the settings ask, in place: --dtype and --device, LoRA adapters (a target matching no module is an
/// error naming the flag), activation checkpointing (auto: on from 100 M parameters).
void prepare_model(models::CausalLM& model, const RunSettings& settings, const torch::Device& device);
/// The run's scorer: --reward-config, the config's reward entries, or --rewards with --reward-weights; with
/// domains, each domain's own set.
StepScorer make_scorer(const RunSettings& settings);
/// The data runs' prompt source: --data and the domains' files, held-out split or validation files, curriculum;
/// `tools`: the tool schemas every prompt announces (multi-turn rollouts, --env).
std::unique_ptr<MixedPromptSource> make_data_source(const RunSettings& settings, text::Tokenizer tokenizer,
                                                    std::vector<std::int64_t> eos_token_ids,
                                                    std::vector<std::string> tools = {});

/// Everything a run holds, at fixed addresses (the trainer refers to the group, source and scorer).
struct Run {
  explicit Run(ProcessGroup process_group) : group(std::move(process_group)) {}
  /// With --rollout-ranks: the group of every rank, over which this rank and its partner exchange batches and
  /// weights (rollout_ranks.hpp; first, so that it outlives the trainer); null otherwise.
  std::unique_ptr<ProcessGroup> rollout_link;
  /// This rank's side: every rank, or with --rollout-ranks the trainer ranks (or, on a rollout rank, the rollout ranks).
  ProcessGroup group;
  torch::Device device = torch::kCPU;
  models::CausalLM model{nullptr};
  std::unique_ptr<PromptSource> source;
  std::unique_ptr<StepScorer> scorer;
  std::unique_ptr<GrpoTrainer> trainer;
  std::unique_ptr<CheckpointManager> checkpoints;
  std::int64_t first_step = 1;  ///< after a resume, the step after the checkpoint's
  /// A rollout rank (--rollout-ranks): its loop is trainer->serve_rollouts(), and it logs and writes nothing.
  bool serves_rollouts = false;
};

/// Builds a run: the process group (RANK/WORLD_SIZE from the environment, scripts/launch.sh; with --rollout-ranks the
/// groups of rollout_ranks.hpp, and a rollout rank's run has Run::serves_rollouts set), intra-op threads, the
/// model (the tiny task's, warmed up, or the checkpoint's), the prompt source, the scorer and the trainer; restores the
/// newest checkpoint with --resume. On rank 0 it prints the model line, writes config.yaml (refusing a --config that
/// is this output directory's own config.yaml unless resuming) and adds the metrics, completions and progress logs.
std::unique_ptr<Run> build_run(RunSettings& settings);

/// Held-out accuracy by step.
using AccuracyCurve = std::vector<std::pair<std::int64_t, double>>;

/// The curve a run starts with: step 0's held-out accuracy when it starts from scratch (rank 0), else empty.
AccuracyCurve start_accuracy_curve(Run& run);

/// What a run does after `step`, the one rule train_run and a loop of the user's share: on rank 0 it evaluates every
/// eval_every steps and after the last step, appending to `curve` (the other ranks wait at the next collective); every
/// rank takes part in a checkpoint every save_every steps and after the last step.
void evaluate_and_save(Run& run, const RunSettings& settings, std::int64_t step, AccuracyCurve& curve);

/// The loop from run.first_step to the last step: GrpoTrainer::step, then evaluate_and_save. Returns the curve. On a
/// rollout rank: serve_rollouts until the trainer rank is done, and an empty curve.
AccuracyCurve train_run(Run& run, const RunSettings& settings);

/// After the last step, on rank 0: a LoRA run's adapter written as peft saves it (output_dir/adapter), and the curve
/// printed ("held-out accuracy by step:  0: 0.044  ...").
void finish_run(Run& run, const RunSettings& settings, const AccuracyCurve& curve);

/// `program [options]`: parse, build, train, print the accuracy curve. Returns the exit status; errors are printed
/// as "<program>: <message>".
int run_training_command(std::span<const std::string> args, std::string_view program);

}  // namespace grpo::train
