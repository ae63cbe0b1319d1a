// SPDX-License-Identifier: Apache-2.0
#include <grpo/core/error.hpp>
#include <grpo/train/progress.hpp>

#include <fmt/format.h>

#include <cmath>

namespace grpo::train {
namespace {

std::string format_duration(double seconds) {
  const auto total = static_cast<std::int64_t>(std::llround(seconds));
  const std::int64_t hours = total / 3600;
  const std::int64_t minutes = total / 60 % 60;
  const std::int64_t secs = total % 60;
  if (hours > 0) return fmt::format("{}:{:02}:{:02}", hours, minutes, secs);
  return fmt::format("{:02}:{:02}", minutes, secs);
}

}  // namespace

std::string format_progress_line(std::int64_t step, std::int64_t total_steps, double elapsed_seconds,
                                 const Scalars& scalars, const ProgressLineOptions& options) {
  GRPO_CHECK_CONFIG(total_steps > 0, "format_progress_line: total_steps must be positive, got {}", total_steps);
  GRPO_CHECK_CONFIG(step >= 0 && step <= total_steps, "format_progress_line: step {} is outside [0, {}]", step,
                    total_steps);
  GRPO_CHECK_CONFIG(elapsed_seconds >= 0.0, "format_progress_line: elapsed_seconds must be ≥ 0, got {}",
                    elapsed_seconds);
  GRPO_CHECK_CONFIG(options.bar_width >= 1, "ProgressLineOptions: bar_width must be ≥ 1, got {}", options.bar_width);
  GRPO_CHECK_CONFIG(options.precision >= 1, "ProgressLineOptions: precision must be ≥ 1, got {}", options.precision);
  const double fraction = static_cast<double>(step) / static_cast<double>(total_steps);
  // Floor, so the bar is full only when the run is.
  const auto filled = static_cast<int>(std::floor(fraction * options.bar_width));
  const auto percent = static_cast<int>(std::floor(fraction * 100.0));
  const std::string eta =
      step == 0 ? std::string("--:--")
                : format_duration(elapsed_seconds / static_cast<double>(step) * static_cast<double>(total_steps - step));
  std::string line = fmt::format("step {}/{} [{}{}] {:3}% {}<{}", step, total_steps, std::string(filled, '#'),
                                 std::string(options.bar_width - filled, '.'), percent,
                                 format_duration(elapsed_seconds), eta);
  for (const auto& [name, value] : scalars) {
    fmt::format_to(std::back_inserter(line), " | {} {:.{}g}", name, value, options.precision);
  }
  return line;
}

}  // namespace grpo::train
