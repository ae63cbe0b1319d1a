// SPDX-License-Identifier: Apache-2.0
// Length-shaped rewards: cosine-scaled correctness (Yeo et al. 2025, "Demystifying Long Chain-of-Thought
// Reasoning"), the Kimi 1.5 length reward, DAPO's soft overlong punishment (eq. 13) and ProRL's stop-properly
// (truncation) penalty. Formulas and defaults: TRL trl/rewards, open-r1 src/open_r1/rewards.py, OpenRLHF
// openrlhf/trainer/ppo_utils.
#pragma once

#include <grpo/core/enum_names.hpp>
#include <grpo/rewards/accuracy_reward.hpp>
#include <grpo/rewards/reward_function.hpp>

#include <cstddef>
#include <optional>
#include <string>

namespace grpo::rewards {

/// How the length of a completion is measured.
enum class LengthUnit {
  chars,   ///< Unicode code points of the text (Python len(str)); open-r1
  tokens,  ///< number of token ids; TRL, DAPO
};

namespace detail {
inline constexpr ::grpo::detail::EnumNames<LengthUnit, 2> kLengthUnitNames{{
    {LengthUnit::chars, "chars"},
    {LengthUnit::tokens, "tokens"},
}};
}  // namespace detail

/// "chars" or "tokens".
GRPO_ENUM_NAMES(LengthUnit, detail::kLengthUnitNames, "length unit");

/// The completion's length in `unit`. Invalid UTF-8 bytes count one character each (continuation bytes none).
std::size_t completion_length(const Completion& completion, LengthUnit unit);

struct CosineOptions {
  double max_len = 1000.0;            ///< length at which the cosine reaches its end value
  double min_value_wrong = -0.5;      ///< a wrong answer of length 0 (shortest wrong answers are punished most)
  double max_value_wrong = -0.1;      ///< a wrong answer of length max_len
  double min_value_correct = 0.8;     ///< a correct answer of length max_len
  double max_value_correct = 1.0;     ///< a correct answer of length 0
  LengthUnit unit = LengthUnit::chars;
  /// progress = min(1, len/max_len) (TRL). false = open-r1's unclamped len/max_len: cos is periodic, so past
  /// max_len the value swings back towards the length-0 value.
  bool clamp_progress = true;
  /// Value when correctness cannot be judged (no gold, verifier timeout): no value by default; open-r1 gives 1.0.
  std::optional<float> unjudgeable_value = std::nullopt;
  AccuracyOptions accuracy{};         ///< settings of the default judge
};

/// Cosine-scaled correctness, open-r1 `get_cosine_scaled_reward` / TRL `get_cosine_scaled_reward`:
///   p = len/max_len (clamped to 1 unless disabled);  r = lo + ½(hi − lo)(1 + cos(π·p))
/// where (hi, lo) = (max_value_correct, min_value_correct) for a correct answer, so r falls from
/// max_value_correct at length 0 to min_value_correct at max_len; and (hi, lo) = (min_value_wrong,
/// max_value_wrong) for a wrong one, so r rises from min_value_wrong to max_value_wrong: short wrong answers are
/// punished most, which is the paper's intent. The constructor rejects min_value_wrong > max_value_wrong (open-r1's
/// config default min_value_wrong = 0.0 with max_value_wrong = −0.5 inverts that ordering) and
/// min_value_correct > max_value_correct.
class CosineReward final : public RewardFunction {
 public:
  explicit CosineReward(CosineOptions options = {}, CorrectnessJudge judge = {});
  std::string name() const override { return "cosine"; }
  std::vector<std::optional<float>> score(std::span<const Completion> batch,
                                          const ScoringContext& context) const override;
  const CosineOptions& options() const { return options_; }

  /// The formula alone, for a given correctness and length.
  double value(bool correct, double length) const;

 private:
  CosineOptions options_;
  CorrectnessJudge judge_;
};

struct LengthOptions {
  LengthUnit unit = LengthUnit::chars;
  /// Completions the judge cannot decide count as correct (open-r1: unparseable gold is "correct"); false gives
  /// them no value (they still take part in the group's min and max length).
  bool unjudgeable_as_correct = true;
  AccuracyOptions accuracy{};
};

/// Kimi 1.5 length reward (open-r1 `len_reward`). Within each group (Completion::group; open-r1 uses the whole
/// batch, which is the case when every completion has the same group): λ = 0.5 − (len − min)/(max − min);
/// correct → λ, wrong → min(0, λ); if every length in the group is equal, all get 0. Scope: batch.
class LengthReward final : public RewardFunction {
 public:
  explicit LengthReward(LengthOptions options = {}, CorrectnessJudge judge = {});
  std::string name() const override { return "length"; }
  RewardScope scope() const override { return RewardScope::batch; }
  std::vector<std::optional<float>> score(std::span<const Completion> batch,
                                          const ScoringContext& context) const override;
  const LengthOptions& options() const { return options_; }

 private:
  LengthOptions options_;
  CorrectnessJudge judge_;
};

struct SoftOverlongOptions {
  std::size_t max_completion_len = 16384;  ///< L (open-r1/TRL default)
  std::size_t soft_punish_cache = 4096;    ///< C, the width of the linear ramp; 0 <= C <= L
  LengthUnit unit = LengthUnit::tokens;
};

/// DAPO soft overlong punishment (eq. 13; TRL `get_soft_overlong_punishment`, open-r1, verl's DAPO reward
/// manager): |o| <= L − C → 0;  L − C < |o| <= L → (L − C − |o|)/C;  |o| > L → −1. Always has a value.
class SoftOverlongReward final : public RewardFunction {
 public:
  explicit SoftOverlongReward(SoftOverlongOptions options = {});
  std::string name() const override { return "soft_overlong"; }
  std::vector<std::optional<float>> score(std::span<const Completion> batch,
                                          const ScoringContext& context) const override;
  const SoftOverlongOptions& options() const { return options_; }

 private:
  SoftOverlongOptions options_;
};

struct StopProperlyOptions {
  double penalty = -1.0;  ///< added for a truncated completion; must be <= 0
};

/// ProRL stop-properly penalty as an additive reward: `penalty` for a truncated completion (stopped at the
/// length limit), 0 otherwise. OpenRLHF's exact form acts on the total reward instead (r·coef for coef in [0, 1],
/// r = coef for coef < 0): that is RewardSetOptions::truncated_coef. Always has a value.
class StopProperlyReward final : public RewardFunction {
 public:
  explicit StopProperlyReward(StopProperlyOptions options = {});
  std::string name() const override { return "stop_properly"; }
  std::vector<std::optional<float>> score(std::span<const Completion> batch,
                                          const ScoringContext& context) const override;
  const StopProperlyOptions& options() const { return options_; }

 private:
  StopProperlyOptions options_;
};

}  // namespace grpo::rewards
