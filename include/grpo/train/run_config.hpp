// SPDX-License-Identifier: Apache-2.0
// The sections of a GRPO run config (io/layered_config.hpp) that are more than flat settings: `domains` (ROLL-style
// multi-domain data and rewards) and `stages` (DeepScaleR-style context lengthening). Errors name file:line and the
// key path ("run.yaml:12: 'domains.code.reward_clip' should be a number c or a pair [lo, hi]").
//
//   domains:
//     math: {kind: math, tags: [math], data: math.jsonl, probability: 0.5,
//            rewards: [{name: accuracy}, {name: format, weight: 0.2}], reward_clip: [-1, 1],
//            reward_normalisation: none, clip_after_normalisation: false, accuracy_reward: accuracy,
//            accuracy_threshold: 1.0, dynamic_sampling_filter: {min_std: 0.01, mean_above: 0.1, mean_below: 0.9}}
//   stages:
//     - {max_new_tokens: 8192}
//     - {max_new_tokens: 16384, group_size: 16, lr: 1e-6, when: "completions/clipped_ratio >= 0.1", patience: 3,
//        mask_truncated: true, overlong_buffer: 1024, overlong_factor: 1.0}     # or at_step: 500
#pragma once

#include <grpo/io/dataset.hpp>
#include <grpo/io/layered_config.hpp>
#include <grpo/rewards/domain_rewards.hpp>
#include <grpo/train/context_schedule.hpp>
#include <grpo/train/dynamic_sampling.hpp>
#include <grpo/train/mixed_prompt_source.hpp>
#include <grpo/train/step_scorer.hpp>

#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace grpo::train {

/// One entry of `domains`: its data (MixedPromptSource) and its rewards (StepScorer).
struct DomainConfig {
  std::string name;
  io::DomainKind kind = io::DomainKind::math;  ///< default: the name when it is "code" or "general", else math
  std::vector<std::string> tags;               ///< default: {name}
  std::vector<std::filesystem::path> data;     ///< files of this domain's rows (relative to the working directory)
  double probability = 1.0;                    ///< sampling weight (normalised over the domains)
  /// The domain's reward list as JSON (rewards::RewardSet::from_config); empty: the run's rewards (math), or
  /// [{"name": "code_tests"}] for code. A general domain must give one.
  std::string rewards_json;
  std::string rewards_source;                  ///< "file:line" of that list, for errors
  std::optional<std::pair<double, double>> clip;  ///< reward_clip: c (= [-c, c]) or [lo, hi]
  rewards::DomainNormalisation normalisation = rewards::DomainNormalisation::none;
  bool clip_after_normalisation = false;       ///< ROLL's order: normalise, then clip
  std::string accuracy_reward;                 ///< label of the entry deciding "correct"; "" = the first
  std::optional<double> accuracy_threshold;    ///< unset: correct_threshold() of that reward
  /// Dynamic sampling's group filter for this domain (ROLL's per-domain query_filter_config): keys min_std,
  /// mean_above, mean_below, each defaulting as in GroupFilter (not to the run's filter). Unset: the run's filter.
  std::optional<GroupFilter> dynamic_sampling_filter;
  std::string source;                          ///< "file:line" of the domain's section

  PromptDomain prompt_domain() const;
  /// The scoring side, with the reward set the caller built (from rewards_json, or the run's own when it is empty).
  ScoringDomain scoring_domain(rewards::RewardSet rewards) const;
};

/// Reads a `domains` map (marking what it reads). Throws ConfigError naming file:line and key path.
std::vector<DomainConfig> read_domains(const io::ConfigNode& section);

/// Reads a `stages` list; a stage's `when` is "METRIC OP THRESHOLD". Throws ConfigError naming file:line and key path;
/// the schedule's own checks happen in ContextSchedule.
std::vector<ContextStage> read_context_stages(const io::ConfigNode& section);

}  // namespace grpo::train
