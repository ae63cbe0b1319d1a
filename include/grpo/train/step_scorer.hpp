// SPDX-License-Identifier: Apache-2.0
// StepScorer: what a GRPO step scores its completions with. Either one RewardSet for every completion, or one set per
// domain (rewards::DomainRewards: rows routed by tag, per-domain clip, normalisation and metrics). It owns the one
// rule for "correct" that training metrics, the pass-rates curricula read and evaluation all use: a completion is
// correct when its domain's accuracy entry gives a value >= the domain's threshold. With `overlap`, completion-scoped
// rewards are wrapped for prefetching (rewards/reward_prefetch.hpp): prefetch(chunk) scores a chunk in the
// background while the next one is sampled, and score() then finds the values cached (bit-identical results).
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

class StepScorer {
 public:
  /// One reward set for every completion. Its "correct" entry is the one whose reward is called "accuracy", else
  /// the first; its threshold is correct_threshold() of that reward.
  explicit StepScorer(rewards::RewardSet rewards, bool overlap = false);
  /// One set per domain, in PromptSource::domain_names() order. ConfigError as rewards::DomainRewards, or for an
  /// accuracy_reward naming no entry of its domain (the message names the domain).
  explicit StepScorer(std::vector<ScoringDomain> domains, bool overlap = false);

  /// Scores one batch (each completion by its domain's rewards, or by the one set).
  StepScores score(std::span<const rewards::Completion> batch) const;
  /// Domain d's judge (d = 0 for one set): the same rule score() counts correct completions by.
  CorrectnessJudge judge(std::size_t domain) const;

  /// With overlap: starts scoring `chunk` in the background (score() later finds the values cached); wait() blocks
  /// until every submitted chunk is scored, clear() empties the caches (call it at the start of every round). Without
  /// overlap these do nothing.
  void prefetch(std::vector<rewards::Completion> chunk);
  void wait();
  void clear();

  bool per_domain() const { return domains_.has_value(); }
  /// Whether prefetch() does anything (overlap on, and some reward is completion-scoped).
  bool prefetches() const { return prefetcher_ != nullptr; }
  /// The first entry's label (of the first domain), for a console line.
  std::string headline_reward() const;

 private:
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

}  // namespace grpo::train
