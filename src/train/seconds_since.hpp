// SPDX-License-Identifier: Apache-2.0
// Wall-clock seconds since a steady_clock time point: how the trainer and the rollout pipeline time their phases.
#pragma once

#include <chrono>

namespace grpo::train {

inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace grpo::train
