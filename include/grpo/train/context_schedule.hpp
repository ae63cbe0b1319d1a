// SPDX-License-Identifier: Apache-2.0
// Iterative context lengthening (DeepScaleR: 8K → 16K → 24K with G 8 → 16; DeepCoder 16K → 32K): a run goes
// through stages, each with its own completion limit and optionally its own group size and learning rate, and
// overlong handling (mask truncated completions from the loss, DAPO's soft overlong penalty over the last
// `overlong_buffer` tokens). A stage after the first starts
//   - at a given step (`at_step`), or
//   - when a logged metric crosses a threshold (`metric` `op` `threshold`, e.g. completions/clipped_ratio >= 0.1:
//     the policy runs into the limit) on `patience` consecutive steps; the switch takes effect the next step.
// Stages run in order; a stage's trigger is looked at only while the stage before it runs. The state (stage index
// and the metric streak) is two numbers, saved with the checkpoint (state_values / restore). Torch-free.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace grpo::train {

struct ContextStage {
  std::int64_t max_new_tokens = 0;           ///< completion limit in this stage (> 0)
  std::optional<std::int64_t> group_size;    ///< G in this stage (default: the run's)
  std::optional<double> learning_rate;       ///< base learning rate in this stage (default: the run's)
  bool mask_truncated = false;               ///< drop truncated completions from the loss (DAPO overlong filtering)
  std::int64_t overlong_buffer = 0;          ///< > 0: soft overlong penalty over the last this many tokens
  double overlong_factor = 1.0;              ///< weight of that penalty in the total reward
  // Start of the stage (ignored for the first stage): a step, or a metric condition.
  std::optional<std::int64_t> at_step;
  std::string metric;                        ///< e.g. "completions/clipped_ratio"
  std::string op = ">=";                     ///< ">=", ">", "<=" or "<"
  double threshold = 0.0;
  std::int64_t patience = 1;                 ///< consecutive steps the condition must hold
};

/// What changed at a stage switch, for the log.
struct StageSwitch {
  std::size_t from = 0, to = 0;
  std::int64_t step = 0;  ///< the first step of the new stage
  std::string reason;     ///< "at step 500" or "completions/clipped_ratio = 0.12 >= 0.1 for 3 steps"
};

class ContextSchedule {
 public:
  /// Throws ConfigError naming the stage and field: no stages, max_new_tokens ≤ 0, group_size < 2, learning rate
  /// < 0, overlong_buffer outside [0, max_new_tokens], a later stage with neither at_step nor metric (or both), an
  /// unknown op, patience < 1, at_step not increasing.
  explicit ContextSchedule(std::vector<ContextStage> stages);

  const ContextStage& current() const { return stages_[index_]; }
  std::size_t index() const { return index_; }
  const std::vector<ContextStage>& stages() const { return stages_; }

  /// Before `step` runs: moves past every next stage whose at_step is reached (one, in a run that calls this every
  /// step; several when a run resumes from a checkpoint without schedule state, or starts late). The returned switch
  /// (to be logged) goes from the old stage to the new one.
  std::optional<StageSwitch> begin_step(std::int64_t step);
  /// After `step` logged `metrics`: counts the next stage's metric condition; when it has held `patience` times in a
  /// row, moves to that stage (from step + 1 on) and returns the switch. A missing metric breaks the streak.
  std::optional<StageSwitch> end_step(std::int64_t step, const std::map<std::string, double>& metrics);

  /// {"context/stage": index, "context/streak": streak} for a checkpoint, and back (ConfigError for values out of
  /// range).
  std::map<std::string, double> state_values() const;
  void restore(const std::map<std::string, double>& values);

 private:
  std::vector<ContextStage> stages_;
  std::size_t index_ = 0;
  std::int64_t streak_ = 0;
};

}  // namespace grpo::train
