// SPDX-License-Identifier: Apache-2.0
// `grpo train-rm`: a reward model trained on preference pairs (train/reward_model_training.hpp: TRL's RewardTrainer
// loss, −log σ(r_chosen − r_rejected)) and written as a Hugging Face …ForSequenceClassification directory with its
// tokenizer, which the "reward_model" reward reads back ({"name": "reward_model", "model_dir": OUT}).
//
//   grpo train-rm --model DIR --pairs train.jsonl [--eval-pairs held_out.jsonl] --out OUT
//       DIR a causal LM (a new head on its weights) or, with --reward-model DIR, a reward model to train on
//   grpo train-rm --task tiny --out OUT
//       the built-in tiny task (grpo train --task tiny): its warmed-up starting policy as the backbone, and pairs made
//       by its verifier (the accuracy reward) from graded answers: the right one preferred to a wrong one, for
//       training prompts and, held out, for the task's held-out problems
//
// --dtype bf16 keeps the weights in bf16 and trains them through fp32 master copies (--optimizer-precision);
// --lora-r trains LoRA adapters on the backbone and the whole score head (peft's task SEQ_CLS, which adds "score" to
// modules_to_save, as TRL's reward modelling with --use_peft --lora_task_type SEQ_CLS), merged into the weights
// written (peft's merge_and_unload);
// --gradient-checkpointing recomputes each decoder layer in backward.
//
// It prints the held-out loss and pairwise accuracy before and after training and each epoch's training figures, and
// writes them to OUT/train_rm_results.json: {"before": {"loss", "accuracy", "pairs"}, "epochs": [...], "after": {...}}.
#pragma once

#include <grpo/train/reward_model_training.hpp>
#include <grpo/train/run_settings.hpp>

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

struct TrainRmArgs {
  std::string task;          ///< "" or "tiny"
  std::string model;         ///< a causal LM directory: a new head on it
  std::string reward_model;  ///< a scalar-head directory to train further
  std::string pairs, eval_pairs, out;
  std::uint64_t seed = 1;
  std::int64_t train_prompts = 2048;  ///< --task tiny: training prompts, pairs_per_prompt pairs each
  std::int64_t pairs_per_prompt = 4;  ///< --task tiny: pairs of each training prompt's candidates
  std::int64_t eval_prompts = 256;    ///< --task tiny: held-out problems, one pair each
  grpo::train::RewardModelTrainingOptions training;
  double center_rewards_coefficient = 0.0;  ///< copied into training when the flag is given
  std::string optimizer_precision = "fp32_master";
  /// The model's precision, memory and adapters: --dtype, --gradient-checkpointing and --lora-* of grpo train, with
  /// its defaults (prepare_model applies them to the backbone).
  grpo::train::RunSettings model_settings;
};

/// Adds the train-rm subcommand with its flags bound to `args`.
CLI::App* add_train_rm_command(CLI::App& app, TrainRmArgs& args);

/// Runs it; 0 on success. Throws grpo::ConfigError naming the flag for bad flags, and the library's errors (naming
/// the file and line) for bad pairs or checkpoints.
int run_train_rm(TrainRmArgs args, const CLI::App& command);
