// SPDX-License-Identifier: Apache-2.0
// Cosine, Kimi length, soft overlong and stop-properly rewards (see length_rewards.hpp).
#include <grpo/core/error.hpp>
#include <grpo/rewards/length_rewards.hpp>

#include "text_scan.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <numbers>
#include <utility>

namespace grpo::rewards {

std::size_t completion_length(const Completion& completion, LengthUnit unit) {
  return unit == LengthUnit::chars ? detail::utf8_length(completion.text) : completion.token_ids.size();
}

CosineReward::CosineReward(CosineOptions options, CorrectnessJudge judge)
    : options_(std::move(options)), judge_(judge ? std::move(judge) : math_correctness(options_.accuracy)) {
  GRPO_CHECK_CONFIG(options_.max_len > 0.0, "cosine: max_len must be > 0, got {}", options_.max_len);
  GRPO_CHECK_CONFIG(options_.min_value_wrong <= options_.max_value_wrong,
                    "cosine: min_value_wrong ({}) must be <= max_value_wrong ({}): short wrong answers must score "
                    "below long wrong ones (open-r1's config default min_value_wrong = 0.0 inverts this)",
                    options_.min_value_wrong, options_.max_value_wrong);
  GRPO_CHECK_CONFIG(options_.min_value_correct <= options_.max_value_correct,
                    "cosine: min_value_correct ({}) must be <= max_value_correct ({})", options_.min_value_correct,
                    options_.max_value_correct);
}

double CosineReward::value(bool correct, double length) const {
  double progress = length / options_.max_len;
  if (options_.clamp_progress) progress = std::min(progress, 1.0);
  // open-r1 names the value at progress 0 "max_value" and at progress 1 "min_value"; for wrong answers it swaps
  // the configured bounds so the value rises with length.
  const double at_start = correct ? options_.max_value_correct : options_.min_value_wrong;
  const double at_end = correct ? options_.min_value_correct : options_.max_value_wrong;
  return at_end + 0.5 * (at_start - at_end) * (1.0 + std::cos(std::numbers::pi * progress));
}

std::vector<std::optional<float>> CosineReward::score(std::span<const Completion> batch,
                                                      const ScoringContext& context) const {
  std::vector<std::optional<float>> values;
  values.reserve(batch.size());
  for (const Completion& completion : batch) {
    const Correctness verdict = judge_(completion, context);
    if (verdict == Correctness::no_gold || verdict == Correctness::timeout) {
      values.push_back(options_.unjudgeable_value);
      continue;
    }
    const double length = static_cast<double>(completion_length(completion, options_.unit));
    values.emplace_back(static_cast<float>(value(verdict == Correctness::correct, length)));
  }
  return values;
}

LengthReward::LengthReward(LengthOptions options, CorrectnessJudge judge)
    : options_(std::move(options)), judge_(judge ? std::move(judge) : math_correctness(options_.accuracy)) {}

std::vector<std::optional<float>> LengthReward::score(std::span<const Completion> batch,
                                                      const ScoringContext& context) const {
  struct Range {
    std::size_t min = 0, max = 0;
    bool seen = false;
  };
  std::vector<std::size_t> lengths(batch.size());
  std::map<std::size_t, Range> ranges;
  for (std::size_t i = 0; i < batch.size(); ++i) {
    lengths[i] = completion_length(batch[i], options_.unit);
    Range& range = ranges[batch[i].group];
    range.min = range.seen ? std::min(range.min, lengths[i]) : lengths[i];
    range.max = range.seen ? std::max(range.max, lengths[i]) : lengths[i];
    range.seen = true;
  }
  std::vector<std::optional<float>> values(batch.size());
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const Range& range = ranges[batch[i].group];
    if (range.max == range.min) {  // open-r1: all lengths equal → 0 for everyone, judged or not
      values[i] = 0.0f;
      continue;
    }
    const Correctness verdict = judge_(batch[i], context);
    const bool unjudgeable = verdict == Correctness::no_gold || verdict == Correctness::timeout;
    if (unjudgeable && !options_.unjudgeable_as_correct) continue;
    const double lambda = 0.5 - static_cast<double>(lengths[i] - range.min) / static_cast<double>(range.max - range.min);
    const bool correct = verdict == Correctness::correct || unjudgeable;
    values[i] = static_cast<float>(correct ? lambda : std::min(0.0, lambda));
  }
  return values;
}

SoftOverlongReward::SoftOverlongReward(SoftOverlongOptions options) : options_(options) {
  GRPO_CHECK_CONFIG(options_.soft_punish_cache <= options_.max_completion_len,
                    "soft_overlong: soft_punish_cache ({}) must be <= max_completion_len ({})",
                    options_.soft_punish_cache, options_.max_completion_len);
}

std::vector<std::optional<float>> SoftOverlongReward::score(std::span<const Completion> batch,
                                                            const ScoringContext& /*context*/) const {
  const double limit = static_cast<double>(options_.max_completion_len);
  const double cache = static_cast<double>(options_.soft_punish_cache);
  std::vector<std::optional<float>> values;
  values.reserve(batch.size());
  for (const Completion& completion : batch) {
    const double length = static_cast<double>(completion_length(completion, options_.unit));
    double value = 0.0;
    if (length > limit) {
      value = -1.0;
    } else if (length > limit - cache) {
      value = (limit - cache - length) / cache;
    }
    values.emplace_back(static_cast<float>(value));
  }
  return values;
}

StopProperlyReward::StopProperlyReward(StopProperlyOptions options) : options_(options) {
  GRPO_CHECK_CONFIG(options_.penalty <= 0.0 && std::isfinite(options_.penalty),
                    "stop_properly: penalty must be a finite value <= 0, got {}", options_.penalty);
}

std::vector<std::optional<float>> StopProperlyReward::score(std::span<const Completion> batch,
                                                            const ScoringContext& /*context*/) const {
  std::vector<std::optional<float>> values;
  values.reserve(batch.size());
  for (const Completion& completion : batch) {
    values.emplace_back(completion.truncated ? static_cast<float>(options_.penalty) : 0.0f);
  }
  return values;
}

}  // namespace grpo::rewards
