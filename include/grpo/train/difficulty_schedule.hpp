// SPDX-License-Identifier: Apache-2.0
// A difficulty curriculum: the range of row difficulties (ROLL's `difficulty` field) a run samples from, widened over
// the steps. Two shapes:
//   linear   the range moves from [start_min, start_max] at start_step to [end_min, end_max] at end_step, both bounds
//            interpolated linearly, constant before and after (e.g. [0, 3] → [0, 10]: easy problems first, then all);
//   staged   a list of stages {step, min, max}: from `step` on, the range is [min, max] (the first stage also applies
//            before its step), as DeepScaleR-style staged recipes switch at fixed steps.
// A row without a difficulty is always admitted. The schedule is a pure function of the step: nothing to checkpoint.
// Torch-free.
#pragma once

#include <grpo/core/enum_names.hpp>
#include <grpo/core/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

namespace grpo::train {

enum class DifficultyScheduleKind {
  none,    ///< every difficulty, every step
  linear,
  staged,
};

namespace detail {
inline constexpr ::grpo::detail::EnumNames<DifficultyScheduleKind, 3> kDifficultyScheduleNames{{
    {DifficultyScheduleKind::none, "none"},
    {DifficultyScheduleKind::linear, "linear"},
    {DifficultyScheduleKind::staged, "staged"},
}};
}  // namespace detail

/// "none", "linear" or "staged".
GRPO_ENUM_NAMES(DifficultyScheduleKind, detail::kDifficultyScheduleNames, "difficulty schedule",
                parse_difficulty_schedule);

/// A closed range of difficulties.
struct DifficultyRange {
  double min = -INFINITY;
  double max = INFINITY;

  bool contains(double difficulty) const { return difficulty >= min && difficulty <= max; }
  bool operator==(const DifficultyRange&) const = default;
};

struct DifficultyStage {
  std::int64_t step = 1;  ///< first step of the stage
  DifficultyRange range;
};

struct DifficultyScheduleOptions {
  DifficultyScheduleKind kind = DifficultyScheduleKind::none;
  // linear
  DifficultyRange start, end;
  std::int64_t start_step = 1, end_step = 1;
  // staged
  std::vector<DifficultyStage> stages;
};

class DifficultySchedule {
 public:
  /// Throws ConfigError naming the field: a range with min > max or a NaN bound; linear with end_step < start_step;
  /// staged without stages or with steps not strictly increasing.
  explicit DifficultySchedule(DifficultyScheduleOptions options = {}) : options_(std::move(options)) {
    auto check_range = [](const DifficultyRange& r, std::string_view what) {
      GRPO_CHECK_CONFIG(!std::isnan(r.min) && !std::isnan(r.max) && r.min <= r.max,
                        "difficulty schedule: {} range [{}, {}] is empty", what, r.min, r.max);
    };
    switch (options_.kind) {
      case DifficultyScheduleKind::none:
        break;
      case DifficultyScheduleKind::linear:
        check_range(options_.start, "start");
        check_range(options_.end, "end");
        GRPO_CHECK_CONFIG(options_.end_step >= options_.start_step,
                          "difficulty schedule: end_step {} is before start_step {}", options_.end_step,
                          options_.start_step);
        break;
      case DifficultyScheduleKind::staged:
        GRPO_CHECK_CONFIG(!options_.stages.empty(), "difficulty schedule: 'staged' needs at least one stage");
        for (std::size_t i = 0; i < options_.stages.size(); ++i) {
          check_range(options_.stages[i].range, "stage");
          GRPO_CHECK_CONFIG(i == 0 || options_.stages[i].step > options_.stages[i - 1].step,
                            "difficulty schedule: stage {} starts at step {}, not after the previous stage's step {}",
                            i, options_.stages[i].step, options_.stages[i - 1].step);
        }
        break;
    }
  }

  /// The range in force at `step`.
  DifficultyRange range_at(std::int64_t step) const {
    switch (options_.kind) {
      case DifficultyScheduleKind::none:
        return {};
      case DifficultyScheduleKind::linear: {
        const std::int64_t span = options_.end_step - options_.start_step;
        const double t = span == 0 ? (step >= options_.end_step ? 1.0 : 0.0)
                                   : std::clamp(static_cast<double>(step - options_.start_step) /
                                                    static_cast<double>(span),
                                                0.0, 1.0);
        return {options_.start.min + t * (options_.end.min - options_.start.min),
                options_.start.max + t * (options_.end.max - options_.start.max)};
      }
      case DifficultyScheduleKind::staged: {
        DifficultyRange range = options_.stages.front().range;
        for (const DifficultyStage& stage : options_.stages) {
          if (stage.step <= step) range = stage.range;
        }
        return range;
      }
    }
    return {};
  }

  /// Whether a row of this difficulty (nullopt: none given) is sampled at `step`.
  bool admits(std::optional<double> difficulty, std::int64_t step) const {
    return !difficulty || range_at(step).contains(*difficulty);
  }

  /// The ranges the schedule ever uses (start and end, or every stage), to check at start-up that each holds rows.
  std::vector<DifficultyRange> ranges() const {
    switch (options_.kind) {
      case DifficultyScheduleKind::none:
        return {DifficultyRange{}};
      case DifficultyScheduleKind::linear:
        return {options_.start, options_.end};
      case DifficultyScheduleKind::staged: {
        std::vector<DifficultyRange> out;
        for (const DifficultyStage& stage : options_.stages) out.push_back(stage.range);
        return out;
      }
    }
    return {};
  }

  const DifficultyScheduleOptions& options() const { return options_; }

 private:
  DifficultyScheduleOptions options_;
};

}  // namespace grpo::train
