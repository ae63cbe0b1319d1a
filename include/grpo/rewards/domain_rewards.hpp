// SPDX-License-Identifier: Apache-2.0
// Per-domain reward sets for multi-domain RLVR, as ROLL runs it (ROLL roll/pipeline/rlvr): every dataset row carries a
// `tag`,
// each domain (a name and the tags it serves) has its own RewardSet (math: accuracy + format; code: code_tests;
// general: judge), an optional clip of its total and an optional normalisation over its own completions, and the
// metrics are reported per domain ("domains/math/accuracy", ...), so a mixed batch shows how each domain is learning.
//
// TagRouter (tag_router.hpp) routes one reward column; DomainRewards routes whole reward sets, so each domain keeps
// its own weights, labels, executor and metrics, and a reward of one domain never sees another domain's completions.
//
// The pipeline of one completion of domain d:
//   raw    = d.rewards' weighted total (RewardSet: nansum_k w_k·R_k; no value when no reward could judge)
//   clip   = clamp(raw, lo, hi)                                       (when d.clip is set)
//   final  = normalise(clip) over d's completions in this batch      (d.normalisation)
// then the caller hands with_nan(final) to GroupAdvantage. With clip_after_normalisation the clamp comes last, as in
// ROLL's reward_postprocess (reward_norm, then clamp to ±reward_clip).
#pragma once

#include <grpo/core/enum_names.hpp>
#include <grpo/rewards/reward_function.hpp>
#include <grpo/rewards/reward_set.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace grpo::rewards {

/// How a domain's totals are normalised over the domain's completions of one batch (ROLL reward_norm with
/// norm_mean_type = norm_std_type = "batch", computed per domain as ROLL's RLVR pipeline does). Notation: r_1..r_n
/// the domain's totals that have a finite value, m their mean, s their Bessel std (n − 1, torch's .std(), which
/// ROLL uses; s = 0 when n < 2, where ROLL would produce NaN).
enum class DomainNormalisation {
  none,      ///< r unchanged
  mean,      ///< r − m                    (ROLL norm_mean_type=batch, norm_std_type=None)
  mean_std,  ///< (r − m)/(s + 1e-6)       (ROLL norm_mean_type=batch, norm_std_type=batch)
};

namespace detail {
inline constexpr grpo::detail::EnumNames<DomainNormalisation, 3> kDomainNormalisationNames{{
    {DomainNormalisation::none, "none"},
    {DomainNormalisation::mean, "mean"},
    {DomainNormalisation::mean_std, "mean_std"},
}};
}  // namespace detail

/// "none", "mean" or "mean_std".
GRPO_ENUM_NAMES(DomainNormalisation, detail::kDomainNormalisationNames, "domain normalisation",
                parse_domain_normalisation);

/// The ε added to the std by DomainNormalisation::mean_std (ROLL reward_norm).
inline constexpr double kDomainNormalisationEps = 1e-6;

/// One domain of a mixed run. Move-only (a RewardSet owns its executor): build a vector with push_back/emplace_back.
struct DomainSpec {
  std::string name;               ///< metrics prefix "domains/<name>/"; must not be empty
  std::vector<std::string> tags;  ///< row tags routed here; empty = {name}
  RewardSet rewards;
  /// The (raw) total clamped to [lo, hi]; ROLL's reward_clip c is {-c, c}. nullopt = off.
  std::optional<std::pair<double, double>> clip = std::nullopt;
  /// Of the clipped totals over this domain's completions in the batch; applied before group advantages.
  DomainNormalisation normalisation = DomainNormalisation::none;
  /// Clamp after normalising instead of before (ROLL's order: reward_norm, then clamp ±reward_clip, so the clip
  /// bounds normalised values). Default false: the raw total is clamped first (OpenRLHF clip_range's order).
  bool clip_after_normalisation = false;
  /// Label of the reward whose value >= accuracy_threshold counts as "correct" in the accuracy metric; "" = the
  /// set's first entry.
  std::string accuracy_reward;
  double accuracy_threshold = 1.0;
};

/// The scores of one batch: final totals, each domain's own RewardSetScores, and per-domain summaries.
struct DomainScores {
  /// [B] final total per completion (after clip and normalisation); nullopt = no reward could judge (a NaN total
  /// is also reported as nullopt, GroupAdvantage's "no value").
  std::vector<std::optional<float>> total;
  std::vector<std::size_t> domain;                ///< [B] domain index per completion
  /// [B] 1 when the completion's domain accuracy reward gave a value >= its accuracy_threshold (the "accuracy"
  /// metric's numerator; a prompt's pass rate for curricula), else 0.
  std::vector<std::uint8_t> correct;
  /// [B] 1 when the completion's domain accuracy reward gave a value, 0 when it could not judge (a failed judge
  /// call, no test cases): a pass rate over the judged completions leaves these out.
  std::vector<std::uint8_t> judged;
  std::vector<std::vector<std::size_t>> members;  ///< [D] batch indices of each domain's completions, in order
  /// [D] each domain's RewardSetScores over its own completions, in batch order (entry k is completion members[d][k]);
  /// `total` there is the raw weighted total, before clip and normalisation. A domain absent from the batch has its
  /// labels and weights, empty value lists and zero metrics (its rewards are not called).
  std::vector<RewardSetScores> per_domain;

  struct Summary {
    std::string name;
    std::size_t completions = 0;  ///< the domain's completions in the batch
    std::size_t groups = 0;       ///< distinct Completion::group values among them
    /// Mean and Bessel std of the domain's raw totals (before clip and normalisation: after mean normalisation the
    /// final mean is 0 by construction), over the totals present.
    double reward_mean = 0.0;
    double reward_std = 0.0;
    /// Fraction of the domain's completions whose accuracy reward value is >= accuracy_threshold; a completion the
    /// reward gave no value counts as not correct.
    double accuracy = 0.0;
    /// Fraction of the domain's groups whose final totals have zero spread, counted exactly as GroupAdvantage counts
    /// frac_reward_zero_std: at least 2 values present and Bessel std <= 1e-8. Groups with fewer than 2 values are in
    /// the denominator but not counted, so Σ_d frac_d·groups_d / P equals GroupAdvantage's number for the batch.
    double frac_reward_zero_std = 0.0;
    /// Mean completion length in tokens (Completion::token_ids.size(); text bytes for a completion without ids).
    double mean_length = 0.0;
    /// Fraction of the domain's totals present that the clip changed (ROLL critic/reward_clip_frac); 0 without clip.
    double clip_frac = 0.0;
  };
  std::vector<Summary> summaries;  ///< [D], every domain even when it had no completions this batch (all zeros)

  /// Per domain d: "domains/<d>/reward/mean", "domains/<d>/reward/std", "domains/<d>/reward/clip_frac",
  /// "domains/<d>/accuracy", "domains/<d>/frac_reward_zero_std", "domains/<d>/completion_length",
  /// "domains/<d>/completions", "domains/<d>/groups", and for each reward of d
  /// "domains/<d>/rewards/<label>/{mean,std,frac_no_value,frac_over_budget,frac_error,seconds}". Overall, over every
  /// completion's final total (the finite ones): "reward" (mean), "reward_std" (Bessel), "reward/frac_no_value".
  std::map<std::string, double> metrics() const;
};

/// Scores a mixed-domain batch with each domain's own reward set (see the file comment).
class DomainRewards {
 public:
  /// Throws ConfigError for no domains, an empty or repeated name, a tag claimed by two domains, an accuracy_reward
  /// that is not a label of the domain's set, a non-finite accuracy_threshold, or a clip with lo > hi (or NaN).
  explicit DomainRewards(std::vector<DomainSpec> domains, std::string tag_field = "tag");

  /// Index of the domain serving `tag`, or nullopt.
  std::optional<std::size_t> domain_of_tag(std::string_view tag) const;

  /// Scores each domain's completions with its own RewardSet: one call per domain present in the batch, its
  /// completions kept in batch order (a contiguous run is passed without copying), so group statistics stay within a
  /// prompt. A completion's domain is Completion::domain when set (the prompt source decided it), else its row's tag.
  /// Throws grpo::Error, naming the tag and the configured ones, for a completion without a domain whose row has no
  /// tag field or a tag no domain serves (misuse here: data is validated at load time), a domain index out of range,
  /// and for a prompt (Completion::group) whose completions fall in two domains.
  DomainScores score(std::span<const Completion> batch) const;

  const std::vector<DomainSpec>& domains() const { return domains_; }
  const std::string& tag_field() const { return tag_field_; }

 private:
  std::vector<DomainSpec> domains_;
  std::string tag_field_;
  std::map<std::string, std::size_t, std::less<>> tag_to_domain_;
  std::vector<std::size_t> accuracy_index_;  // [D] entry index of each domain's accuracy reward
};

}  // namespace grpo::rewards
