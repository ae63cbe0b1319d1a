// SPDX-License-Identifier: Apache-2.0
#include <grpo/core/error.hpp>
#include <grpo/train/context_schedule.hpp>

#include <fmt/format.h>

#include <cmath>

namespace grpo::train {
namespace {

bool holds(double value, std::string_view op, double threshold) {
  if (op == ">=") return value >= threshold;
  if (op == ">") return value > threshold;
  if (op == "<=") return value <= threshold;
  return value < threshold;  // "<", checked at construction
}

}  // namespace

ContextSchedule::ContextSchedule(std::vector<ContextStage> stages) : stages_(std::move(stages)) {
  GRPO_CHECK_CONFIG(!stages_.empty(), "context schedule: no stages");
  std::optional<std::int64_t> last_step;
  for (std::size_t i = 0; i < stages_.size(); ++i) {
    const ContextStage& s = stages_[i];
    GRPO_CHECK_CONFIG(s.max_new_tokens > 0, "context stage {}: max_new_tokens must be > 0, got {}", i, s.max_new_tokens);
    GRPO_CHECK_CONFIG(!s.group_size || *s.group_size >= 2, "context stage {}: group_size must be >= 2, got {}", i,
                      s.group_size.value_or(0));
    GRPO_CHECK_CONFIG(!s.learning_rate || (std::isfinite(*s.learning_rate) && *s.learning_rate >= 0.0),
                      "context stage {}: learning_rate must be finite and >= 0", i);
    GRPO_CHECK_CONFIG(s.overlong_buffer >= 0 && s.overlong_buffer <= s.max_new_tokens,
                      "context stage {}: overlong_buffer must be in [0, max_new_tokens = {}], got {}", i,
                      s.max_new_tokens, s.overlong_buffer);
    GRPO_CHECK_CONFIG(std::isfinite(s.overlong_factor), "context stage {}: overlong_factor must be finite", i);
    if (i == 0) continue;
    GRPO_CHECK_CONFIG(s.at_step.has_value() != !s.metric.empty(),
                      "context stage {}: give either at_step or a metric condition to start it, not {}", i,
                      s.at_step ? "both" : "neither");
    if (s.at_step) {
      GRPO_CHECK_CONFIG(!last_step || *s.at_step > *last_step,
                        "context stage {}: at_step {} is not after the previous stage's step {}", i, *s.at_step,
                        last_step.value_or(0));
      last_step = s.at_step;
    } else {
      GRPO_CHECK_CONFIG(s.op == ">=" || s.op == ">" || s.op == "<=" || s.op == "<",
                        "context stage {}: op must be >=, >, <= or <, got '{}'", i, s.op);
      GRPO_CHECK_CONFIG(std::isfinite(s.threshold), "context stage {}: threshold must be finite", i);
      GRPO_CHECK_CONFIG(s.patience >= 1, "context stage {}: patience must be >= 1, got {}", i, s.patience);
    }
  }
}

std::optional<StageSwitch> ContextSchedule::begin_step(std::int64_t step) {
  const std::size_t from = index_;
  while (index_ + 1 < stages_.size() && stages_[index_ + 1].at_step && step >= *stages_[index_ + 1].at_step) ++index_;
  if (index_ == from) return std::nullopt;
  streak_ = 0;
  return StageSwitch{from, index_, step, fmt::format("at step {}", *stages_[index_].at_step)};
}

std::optional<StageSwitch> ContextSchedule::end_step(std::int64_t step, const std::map<std::string, double>& metrics) {
  if (index_ + 1 >= stages_.size()) return std::nullopt;
  const ContextStage& next = stages_[index_ + 1];
  if (next.metric.empty()) return std::nullopt;
  const auto it = metrics.find(next.metric);
  if (it == metrics.end() || !holds(it->second, next.op, next.threshold)) {
    streak_ = 0;
    return std::nullopt;
  }
  if (++streak_ < next.patience) return std::nullopt;
  StageSwitch change{index_, index_ + 1, step + 1,
                     fmt::format("{} = {} {} {} for {} step{}", next.metric, it->second, next.op, next.threshold,
                                 streak_, streak_ == 1 ? "" : "s")};
  ++index_;
  streak_ = 0;
  return change;
}

std::map<std::string, double> ContextSchedule::state_values() const {
  return {{"context/stage", static_cast<double>(index_)}, {"context/streak", static_cast<double>(streak_)}};
}

void ContextSchedule::restore(const std::map<std::string, double>& values) {
  const auto stage = values.find("context/stage");
  const auto streak = values.find("context/streak");
  GRPO_CHECK_CONFIG(stage != values.end() && streak != values.end(),
                    "context schedule: the saved state has no context/stage and context/streak");
  GRPO_CHECK_CONFIG(stage->second >= 0 && stage->second < static_cast<double>(stages_.size()) && streak->second >= 0,
                    "context schedule: saved stage {} (of {}) or streak {} is out of range", stage->second,
                    stages_.size(), streak->second);
  index_ = static_cast<std::size_t>(stage->second);
  streak_ = static_cast<std::int64_t>(streak->second);
}

}  // namespace grpo::train
