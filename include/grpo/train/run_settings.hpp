// SPDX-License-Identifier: Apache-2.0
// The settings of a GRPO training run, as `grpo train` and examples/r1_zero read them: GrpoTrainerOptions (every
// option of the trainer, bound to its own member and so to its own default) and what a run needs beyond the trainer
// (the model, the data, the rewards, LoRA, the output). Every setting is declared once, in run_option_table(): its
// key, help and check. From that table come the command-line flags, the config keys (layered YAML with `extends`,
// --set overrides, a ROLL rlvr_config.yaml through --roll-config), --help, the checks with the flag or file:line at
// fault, and the config.yaml a run writes, which --config reads back as the same run.
//
//   grpo::train::RunSettings settings;
//   if (!grpo::train::parse_run_settings(settings, args, "grpo train [options]")) return 0;  // --help
//   settings.trainer.steps;            // resolved: recipe, config, --set and flags applied, checked
//
// Adding an option is one declaration in run_option_table() (src/train/run_settings.cpp), bound to the member that
// holds its default (docs/extending.md).
#pragma once

#include <grpo/io/dataset.hpp>
#include <grpo/agent/multi_turn_options.hpp>
#include <grpo/train/grpo_trainer.hpp>
#include <grpo/train/option_table.hpp>
#include <grpo/train/reward_model_training.hpp>
#include <grpo/train/run_config.hpp>

#include <cstdint>
#include <filesystem>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace grpo::train {

struct RunSettings {
  // What to train.
  /// tiny (the built-in task, tiny_task.hpp), tiny_lookup (a task only a tool solves, agent/tiny_lookup_task.hpp) or
  /// data (a checkpoint on data sets)
  std::string task = "tiny";
  std::filesystem::path model_dir, data_path;
  io::DatasetFormat data_format = io::DatasetFormat::detect;
  std::string prompt_field, answer_field, unknown_tag = "error";
  io::BadRowPolicy on_bad_row = io::BadRowPolicy::stop;
  std::int64_t held_out = 256;  ///< problems kept out of training for evaluation (per domain)
  std::vector<std::string> validation_data;
  // The model's precision, memory and adapters.
  std::string dtype = "fp32", device = "cpu", gradient_checkpointing = "auto";
  std::int64_t lora_r = 0;  ///< 0 = full fine-tuning
  double lora_alpha = 32.0, lora_dropout = 0.05;
  std::vector<std::string> lora_target_modules;
  std::filesystem::path lora_adapter;
  /// The completion limit; 0 = 8 for the tiny task, 512 for data (then trainer.sampling.max_new_tokens).
  std::int64_t max_new_tokens = 0;
  // Names the trainer's options are selected by (the recipe fills trainer.loss; the rest override it).
  std::string loss = "dapo", advantage = "grpo";
  /// advantage gae: the critic's starting checkpoint (models::value_model_from_pretrained); empty = the policy's
  /// weights with a new head (value_model_from_policy).
  std::filesystem::path critic_model;
  std::string rollout_is = "none";  ///< verl rollout correction: none, token or sequence (verl's threshold and bound)
  std::string rollout_rs, rollout_rs_threshold;
  bool adaptive_entropy = false;
  AdaptiveEntropyOptions entropy_control;  ///< used when adaptive_entropy
  // Curriculum (data sets).
  std::string curriculum_schedule = "none";
  std::vector<double> curriculum_start, curriculum_end;
  std::int64_t curriculum_start_step = 1, curriculum_end_step = 1;
  std::vector<std::string> curriculum_stages;
  std::int64_t curriculum_filter_window = 0, curriculum_filter_retire_steps = 0;
  std::string curriculum_filter_retire = "both";
  // Rewards: the default list weighs format at 0.2; a list the user gives weighs each reward 1 unless weighted.
  std::vector<std::string> rewards = {"accuracy", "format"};
  std::vector<double> reward_weights;
  std::filesystem::path reward_config;
  bool overlap_scoring = false;
  /// Train the run's "reward_model" rewards on the policy's samples as it goes (every_steps 0 = off).
  RewardModelRefreshOptions rm_refresh;
  // Output and the run loop.
  std::filesystem::path output_dir = "runs/r1_zero";
  std::int64_t log_every = 10, log_completions = 4, save_every = 50, keep_last = 2, eval_every = 25;
  bool resume = false, tensorboard = true;
  int threads = 0;  ///< 0 = 1 for the tiny task, else cores / processes
  /// Dedicated rollout ranks (rollout_ranks.hpp), one per trainer rank: of a launch of 2N processes, N train and N
  /// sample and score; 0 = every process does both.
  int rollout_ranks = 0;
  std::filesystem::path roll_config;

  // Multi-turn tool rollouts (agent/multi_turn_generator.hpp) in this environment; "" = single-turn completions.
  std::string env;
  agent::MultiTurnOptions multi_turn;

  GrpoTrainerOptions trainer;

  // What the config files gave beyond options (read by parse_run_settings).
  std::filesystem::path config_path;
  std::vector<DomainConfig> domains;
  std::string domains_json, stages_json;  ///< the sections as given, for config.yaml
  std::string rewards_json;               ///< `rewards` given as a list of entries ({name, weight, options})
  std::string rewards_source;             ///< "file:line" of that list, for errors
  bool rewards_given = false;             ///< a reward list was given (by flag or config)
  std::set<std::string> derived;          ///< keys whose value came from the recipe or the default reward list
  std::vector<std::string> roll_unmapped;  ///< --roll-config keys not used, each with its reason
};

/// The weights of the default reward list (accuracy, format).
inline const std::vector<double> kDefaultRewardWeights = {1.0, 0.2};

/// Every option of a run, bound to `settings` (and its trainer options).
OptionTable run_option_table(RunSettings& settings);

/// Reads a training command line (without the program's name) into `settings`: flags, --config FILE (YAML or JSON,
/// with `extends`), --set KEY=VALUE, --roll-config FILE; a config's `domains:`, `stages:` and `rewards:` sections.
/// Then resolves what depends on other settings (the task, the completion limit, the recipe's loss values, the reward
/// weights, the adaptive controllers) and checks the combination. Returns false after printing --help (with `usage`).
/// Throws ConfigError naming the flag, or file:line and key, at fault.
bool parse_run_settings(RunSettings& settings, std::span<const std::string> args, std::string_view usage);

/// Writes config.yaml: every written option with the value in effect (recipe-supplied values as comments), then the
/// rewards, domains and stages sections. `--config` on it runs the same run.
void write_run_config(const std::filesystem::path& path, RunSettings& settings);

}  // namespace grpo::train
