// SPDX-License-Identifier: Apache-2.0
// RewardSet: the list of (reward, weight) a training run uses, built in code or from a JSON config through the
// registry; scores a batch into one value list per reward, the weighted total and metrics.
//
// The total follows TRL's sum_then_normalize (TRL trl/trainer/grpo_trainer.py): total = nansum_k w_k·R_k, where a
// reward without a
// value contributes nothing, and a completion no reward could judge has no total (excluded from its group's
// statistics; with_nan writes it as NaN for GroupAdvantage).
#pragma once

#include <grpo/rewards/executor.hpp>
#include <grpo/rewards/registry.hpp>
#include <grpo/rewards/reward_function.hpp>

#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace grpo::rewards {

struct RewardSetEntry {
  RewardPtr reward;
  double weight = 1.0;
  std::string label;  ///< name in scores and metrics; empty = reward->name()
};

struct RewardSetOptions {
  RewardExecutorOptions executor{};
  /// OpenRLHF's ProRL stop_properly_penalty_coef, applied to the total of truncated completions: coef in [0, 1]
  /// scales it (total·coef, kept missing when missing); coef < 0 replaces it (total = coef). nullopt = off.
  std::optional<double> truncated_coef = std::nullopt;
};

struct RewardSetScores {
  std::vector<std::string> names;                          ///< [K] reward labels
  std::vector<double> weights;                             ///< [K]
  std::vector<std::vector<std::optional<float>>> values;   ///< [K][B] each reward's values
  std::vector<std::optional<float>> total;                 ///< [B] weighted total (see the file comment)
  std::vector<RewardMetrics> reward_metrics;               ///< [K]
  RewardMetrics total_metrics;                             ///< over `total` (seconds = the whole score call)

  /// Flat metrics as TRL logs them: "rewards/<name>/{mean,std,frac_no_value,frac_over_budget,frac_error,seconds}",
  /// "reward" (mean total), "reward_std", "reward/frac_no_value", "reward/seconds".
  std::map<std::string, double> metrics() const;
};

/// The values with "no value" written as NaN, the convention of GroupAdvantage's reward matrices.
std::vector<float> with_nan(std::span<const std::optional<float>> values);

class RewardSet {
 public:
  /// Throws ConfigError for no entries, a null reward, a non-finite weight, or two entries with the same label.
  explicit RewardSet(std::vector<RewardSetEntry> entries, RewardSetOptions options = {});

  /// Builds from JSON: either an array of reward entries, or an object
  ///   {"rewards": [{"name": "accuracy"}, {"name": "format", "weight": 0.5, "label": "format_strict",
  ///                "style": "open_r1"}],
  ///    "executor": {"threads": 4, "budget_ms": 2000, "fallback": "none" | "zero", "on_error": "none" | "rethrow"},
  ///    "truncated_coef": -0.5}
  /// Each entry's "weight" (default 1) and "label" are read here, the rest by the reward's factory. Errors name the
  /// entry ("rewards[1] (format): option 'weight' must be a number, got \"high\"").
  static RewardSet from_config(std::string_view json, const RewardRegistry& registry);
  /// The same with RewardRegistry::with_builtins().
  static RewardSet from_config(std::string_view json);

  /// Scores the batch with every reward, one after another, each on the executor's threads.
  RewardSetScores score(std::span<const Completion> batch) const;

  const std::vector<RewardSetEntry>& entries() const { return entries_; }
  const RewardSetOptions& options() const { return options_; }

 private:
  std::vector<RewardSetEntry> entries_;
  RewardSetOptions options_;
  RewardExecutor executor_;
};

}  // namespace grpo::rewards
