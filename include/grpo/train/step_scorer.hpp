// SPDX-License-Identifier: Apache-2.0
// StepScorer: what a GRPO step scores its completions with. Either one RewardSet for every completion, or one set per
// domain (rewards::DomainRewards: rows routed by tag, per-domain clip, normalisation and metrics). It owns the one
// rule for "correct" that training metrics, the pass-rates curricula read and evaluation all use: a completion is
// correct when its domain's accuracy entry gives a value >= the domain's threshold. It also owns reward shaping that
// is not a reward of the set (DAPO's soft overlong punishment of a context stage: ScoreShaping; a multi-turn
// environment's rewards: add_environment_rewards), so every total a step sees (training, dynamic sampling, ReMax's
// greedy baselines) comes out of one call. With `overlap`, completion-scoped rewards are wrapped for prefetching
// (rewards/reward_prefetch.hpp): a ScoringRound scores each chunk in the background while the next one is sampled,
// and its scores() then finds the values cached (bit-identical results).
//
//   grpo::train::ScoringRound round = scorer.round();          // one generation round
//   for (auto& chunk : chunks) round.add(chunk);                 // as each chunk is sampled
//   grpo::train::StepScores scores = round.scores(all, {.max_new_tokens = 512, .overlong_buffer = 128});
#pragma once

#include <grpo/rewards/domain_rewards.hpp>
#include <grpo/rewards/reward_prefetch.hpp>
#include <grpo/rewards/reward_set.hpp>
#include <grpo/train/metrics.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace grpo::train {

/// One domain of a per-domain scorer: rewards::DomainSpec, with the correctness threshold optional.
struct ScoringDomain {
  std::string name;
  std::vector<std::string> tags;  ///< row tags routed here; empty = {name}
  rewards::RewardSet rewards;
  std::optional<std::pair<double, double>> clip = std::nullopt;
  rewards::DomainNormalisation normalisation = rewards::DomainNormalisation::none;
  bool clip_after_normalisation = false;
  std::string accuracy_reward;                ///< label of the entry that decides "correct"; "" = the first entry
  std::optional<double> accuracy_threshold;   ///< nullopt = correct_threshold() of that entry's reward
  std::string source;                         ///< "file:line" of the domain's rewards in a config, for errors
};

/// The value from which `reward` calls a completion correct when no threshold is given: 1 (every test passes, the
/// verifier says equal), except for the verifier's accuracy with step credit w (a right final answer scores at least
/// 1 − w and a wrong one at most w), where it is 1 − w less float rounding. ConfigError for w >= 0.5, where no
/// threshold separates them.
double correct_threshold(const rewards::RewardFunction& reward);

/// The reward that decides whether a completion is correct, and from which value on.
struct CorrectnessJudge {
  rewards::RewardPtr reward;
  double threshold = 1.0;
};

/// One batch's scores.
struct StepScores {
  std::vector<std::optional<float>> total;  ///< [B] final total (nullopt: no reward could judge)
  std::vector<std::uint8_t> correct;        ///< [B] by the completion's CorrectnessJudge
  std::vector<std::uint8_t> judged;         ///< [B] 1 when the judge gave a value (a failed judge call gives none)
  /// [B] each reward's value by label, for the completion table
  std::vector<std::vector<std::pair<std::string, std::optional<double>>>> rewards;
  /// Reward metrics with their reductions over ranks: RewardSetScores::metrics() as completion-weighted means (one
  /// set), or DomainScores::metrics() with per-domain counts summed and means weighted by the domain's completions
  /// (groups for the zero-std fraction).
  std::vector<MetricValue> metrics;
};

/// Shaping the scorer adds to each total after the rewards: DAPO's soft overlong punishment (rewards::SoftOverlongReward)
/// over the last `overlong_buffer` tokens before `max_new_tokens`, weighted by `overlong_factor`, logged as
/// "soft_overlong" with the rewards and as rewards/soft_overlong/mean. A total no reward could judge stays missing.
struct ScoreShaping {
  std::int64_t max_new_tokens = 0;   ///< the completion limit the punishment counts back from
  std::int64_t overlong_buffer = 0;  ///< 0 = no punishment
  double overlong_factor = 1.0;
};

/// Adds each completion's environment return (`returns[b]`: the sum of its rollout's completion_rewards, the
/// multi-turn environment's turn rewards) to its total, lists it with the rewards as "environment" and logs
/// rewards/environment/mean: what every total of the step then holds (training, dynamic sampling, ReMax's baselines).
/// A total no reward could judge stays missing. Throws grpo::Error when returns.size() != the batch size.
void add_environment_rewards(StepScores& scores, std::span<const double> returns);

class ScoringRound;

class StepScorer {
 public:
  /// One reward set for every completion. Its "correct" entry is the one whose reward is called "accuracy", else
  /// the first; its threshold is correct_threshold() of that reward.
  explicit StepScorer(rewards::RewardSet rewards, bool overlap = false);
  /// One set per domain, in PromptSource::domain_names() order. ConfigError as rewards::DomainRewards, or for an
  /// accuracy_reward naming no entry of its domain (the message names the domain).
  explicit StepScorer(std::vector<ScoringDomain> domains, bool overlap = false);

  /// Scores one batch (each completion by its domain's rewards, or by the one set), then applies `shaping`.
  StepScores score(std::span<const rewards::Completion> batch, const ScoreShaping& shaping = {}) const;
  /// A new generation round: its chunks are scored in the background as they are added when the scorer prefetches.
  /// One round at a time per scorer.
  ScoringRound round();
  /// Domain d's judge (d = 0 for one set): the same rule score() counts correct completions by.
  CorrectnessJudge judge(std::size_t domain) const;

  bool per_domain() const { return domains_.has_value(); }
  /// Whether prefetch() does anything (overlap on, and some reward is completion-scoped).
  bool prefetches() const { return prefetcher_ != nullptr; }
  /// The first entry's label (of the first domain), for a console line.
  std::string headline_reward() const;

 private:
  friend class ScoringRound;
  StepScores reward_scores(std::span<const rewards::Completion> batch) const;
  rewards::RewardSet prepared(rewards::RewardSet set, std::function<bool(const rewards::Completion&)> only);

  bool overlap_ = false;
  std::optional<rewards::RewardSet> single_;
  std::size_t primary_ = 0;
  float primary_threshold_ = 1.0f;
  std::optional<rewards::DomainRewards> domains_;
  std::vector<std::shared_ptr<rewards::PrefetchedReward>> prefetched_;
  rewards::RewardPrefetcherOptions prefetcher_options_;
  std::unique_ptr<rewards::RewardPrefetcher> prefetcher_;
};

/// One round of a StepScorer (StepScorer::round()): add each chunk as it is sampled, then scores() the round.
class ScoringRound {
 public:
  /// Starts scoring `chunk` in the background when the scorer prefetches (else nothing: scores() scores it).
  void add(std::span<const rewards::Completion> chunk);
  /// Waits for the chunks added, then scores `batch` (the round's completions, the chunks in order) with `shaping`;
  /// the prefetched values are found cached. Rethrows a failure of a background scoring.
  StepScores scores(std::span<const rewards::Completion> batch, const ScoreShaping& shaping = {});

 private:
  friend class StepScorer;
  explicit ScoringRound(StepScorer& scorer);
  StepScorer& scorer_;
};

}  // namespace grpo::train
