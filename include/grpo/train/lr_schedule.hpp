// SPDX-License-Identifier: Apache-2.0
// Learning-rate schedules as plain functions of the step (so a resumed run recomputes, never stores, its rate), as
// transformers' get_constant_schedule_with_warmup / get_cosine_schedule_with_warmup / get_linear_schedule_with_warmup.
#pragma once

#include <grpo/core/enum_names.hpp>
#include <grpo/core/error.hpp>

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>

namespace grpo::train {

enum class LrDecay {
  constant,  ///< base rate after warm-up (TRL's GRPOConfig default lr_scheduler_type is "linear"; verl's "constant")
  linear,    ///< linear decay from the base rate to 0 at total_steps
  cosine,    ///< half-cosine decay from the base rate to 0 at total_steps
};

namespace detail {
inline constexpr ::grpo::detail::EnumNames<LrDecay, 3> kLrDecayNames = {{
    {LrDecay::constant, "constant"},
    {LrDecay::linear, "linear"},
    {LrDecay::cosine, "cosine"},
}};
}  // namespace detail

/// "constant", "linear" or "cosine".
GRPO_ENUM_NAMES(LrDecay, detail::kLrDecayNames, "learning-rate decay", parse_lr_decay);

struct LrScheduleOptions {
  double base_lr = 1e-6;
  std::int64_t warmup_steps = 0;  ///< steps of linear warm-up from 0 (see learning_rate_at)
  std::int64_t total_steps = 1;
  LrDecay decay = LrDecay::constant;

  void validate() const {
    GRPO_CHECK_CONFIG(base_lr >= 0.0 && std::isfinite(base_lr), "LrScheduleOptions.base_lr must be >= 0, got {}", base_lr);
    GRPO_CHECK_CONFIG(warmup_steps >= 0, "LrScheduleOptions.warmup_steps must be >= 0, got {}", warmup_steps);
    GRPO_CHECK_CONFIG(total_steps >= 1, "LrScheduleOptions.total_steps must be >= 1, got {}", total_steps);
  }
};

/// The rate of optimizer step `step` (1-based: the first update is step 1), transformers' formulas with their
/// 0-based step s = step − 1: warm-up base·s/W for s < W (so the very first update has rate 0 when W > 0, as in
/// transformers), then base·f(p) with p = (s − W)/(total − W) clamped to [0, 1], f = 1 (constant), 1 − p (linear)
/// or (1 + cos πp)/2 (cosine).
inline double learning_rate_at(std::int64_t step, const LrScheduleOptions& options) {
  options.validate();
  GRPO_CHECK_CONFIG(step >= 1, "learning_rate_at: step must be >= 1, got {}", step);
  const auto s = static_cast<double>(step - 1);
  const auto warmup = static_cast<double>(options.warmup_steps);
  if (s < warmup) return options.base_lr * s / warmup;
  const double span = std::max(1.0, static_cast<double>(options.total_steps) - warmup);
  const double p = std::clamp((s - warmup) / span, 0.0, 1.0);
  switch (options.decay) {
    case LrDecay::linear:
      return options.base_lr * (1.0 - p);
    case LrDecay::cosine:
      return options.base_lr * 0.5 * (1.0 + std::cos(std::numbers::pi * p));
    case LrDecay::constant:
      break;
  }
  return options.base_lr;
}

/// Sets the learning rate of every parameter group of `optimizer`.
inline void set_learning_rate(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) group.options().set_lr(lr);
}

}  // namespace grpo::train
