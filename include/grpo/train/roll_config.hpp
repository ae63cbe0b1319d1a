// SPDX-License-Identifier: Apache-2.0
// --roll-config: a ROLL RLVR config (rlvr_config.yaml, alibaba/ROLL roll/pipeline/rlvr/rlvr_config.py and
// roll/configs/base_config.py @ 8eb27cc) read as run settings (run_settings.hpp). Each ROLL key that has a counterpart becomes that
// setting (with ROLL's file:line for errors); every other key is listed with the reason it is not used, so nothing is
// dropped silently. Settings given on the command line or by --config win over the ROLL file's.
//
//   ROLL                                            run setting
//   max_steps, save_steps, eval_steps, logging_steps steps, save_every, eval_every, log_every
//   rollout_batch_size, num_return_sequences_in_group prompts, group_size
//   response_length (or sequence_length − prompt_length, or actor_infer's max_new_tokens)   max_new_tokens
//   ppo_epochs, pg_clip / use_pg_clip_range + pg_clip_low/high   mu, epsilon, epsilon_high
//   dual_clip_loss (c = 1 + 2·pg_clip, ROLL's), advantage_clip, reward_clip   dual_clip, advantage_clip, reward_clip
//   difficulty_mask with difficulty_low/high_threshold   difficulty_mask
//   whiten_advantages                               whiten_advantages (with reinforce: reinforce_pp)
//   adv_estimator grpo | reinforce (with whiten_advantages) | a name r1_zero knows   advantage grpo | reinforce_pp | ...
//   loss_agg_mode token-mean | seq-mean-token-mean | seq-mean-token-sum-norm   loss dapo | grpo | dr_grpo
//   add_token_level_kl + init_kl_coef, target_kl, kl_horizon, kl_penalty   kl_in_reward.{coef, control, target, ...}
//   use_kl_loss + kl_loss_coef, entropy_loss_coef    beta, entropy_coef
//   actor_train.training_args: learning_rate, weight_decay, warmup_steps, max_grad_norm, lr_scheduler_type
//   actor_infer.generating_args: temperature, top_p, top_k
//   validation.data_args.file_name, validation.generating_args: temperature, top_p, top_k
//                                                   validation_data, eval_temperature, eval_top_p, eval_top_k
//   pretrain                                        model
//   actor_train.data_args.file_name, domain_interleave_probs, rewards.<d>.{worker_cls, tag_included}
//                                                   data, or a domains section (math / code_sandbox / llm_judge
//                                                   workers; every file goes to every domain: rows route by tag)
//   rewards.<d>.query_filter_config (std_filter: std_threshold; mean_filter: threshold_down/up)
//                                                   domains.<d>.dynamic_sampling_filter {min_std, mean_above,
//                                                   mean_below} (one domain: --dynamic-sampling-min-std/-mean-*),
//                                                   with per-domain dynamic sampling; ROLL samples until the batch is
//                                                   full, here at most kRollFilterRounds rounds a step
#pragma once

#include <grpo/io/layered_config.hpp>

#include <optional>
#include <string>
#include <vector>

namespace grpo::train {

/// One run setting taken from a ROLL config.
struct RollSetting {
  std::string key;                  ///< the run's config key ("prompts", "kl_in_reward_coef")
  std::vector<std::string> values;  ///< its value(s) as text
  std::string source;               ///< "file:line (ROLL key)" for error messages
};

struct RollConversion {
  std::vector<RollSetting> settings;
  std::string domains_yaml;          ///< an r1_zero `domains:` section (YAML), empty for one data set
  std::string unknown_tag;           ///< "skip" when some ROLL domain could not be converted, else ""
  /// "file:line: key: reason" for every ROLL key not used: values that have no counterpart first, then every key
  /// nothing read, in file order.
  std::vector<std::string> unmapped;
};

/// Rounds of prompts a step samples at most when a ROLL query filter drops groups (ROLL keeps sampling until the
/// batch is full; a bound keeps a filter that nothing passes from looping). --dynamic-sampling-max-rounds overrides.
inline constexpr int kRollFilterRounds = 8;

/// ROLL's query filter of one reward domain (user_defined_rollout_loop.py query_filter): std_filter drops a group
/// whose torch.std (Bessel) is <= std_threshold (default -1), mean_filter one whose mean is <= threshold_down
/// (default -1) or >= threshold_up (default inf); no_filter keeps every group. As GroupFilter values (text).
struct RollQueryFilter {
  std::string min_std = "-1";
  std::optional<std::string> mean_above, mean_below;
};

/// Converts a parsed ROLL RLVR config (io::parse_config of the file). Throws ConfigError naming file:line and
/// key for a value that cannot be read (a non-numeric pg_clip, an interpolation naming nothing).
RollConversion convert_roll_config(const io::ConfigNode& root);

}  // namespace grpo::train
