// SPDX-License-Identifier: Apache-2.0
// The one-line console report of a training step: progress bar, elapsed time, ETA and chosen scalars.
#pragma once

#include <grpo/train/metrics_writer.hpp>

#include <cstdint>
#include <string>

namespace grpo::train {

struct ProgressLineOptions {
  int bar_width = 20;  ///< characters between the brackets (validated: ≥ 1)
  int precision = 4;   ///< significant digits of each scalar
};

/// Formats, without printing:
///   "step 25/100 [#####...............]  25% 00:50<02:30 | loss 0.1234 | reward 0.5"
/// `step` steps of `total_steps` are done after `elapsed_seconds`; ETA = elapsed / step · (total − step), the
/// average step time so far times the steps left ("--:--" before the first step). Times are MM:SS, or H:MM:SS from
/// one hour on. Non-finite scalars print as "nan"/"inf". Throws ConfigError for total_steps ≤ 0, step outside
/// [0, total_steps], a negative elapsed time or bar_width < 1.
std::string format_progress_line(std::int64_t step, std::int64_t total_steps, double elapsed_seconds,
                                 const Scalars& scalars, const ProgressLineOptions& options = {});

}  // namespace grpo::train
