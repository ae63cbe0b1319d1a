// SPDX-License-Identifier: Apache-2.0
// The limits of multi-turn tool rollouts (multi_turn_generator.hpp) and what each trajectory records: a header of its
// own so that the run settings can hold the options without the generator's template code.
#pragma once

#include <grpo/core/enum_names.hpp>
#include <grpo/core/error.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace grpo::agent {

/// Why a trajectory ended.
enum class TrajectoryEnd {
  answer,       ///< a turn ended with the end-of-turn token and made no tool call
  environment,  ///< the environment said the episode is over
  turns,        ///< the last allowed turn still made tool calls
  length,       ///< a turn reached the per-turn token limit (SamplerOptions::max_new_tokens) without ending
  budget,       ///< the trajectory's token budget was spent (a turn or a reply would not fit)
  timeout,      ///< the environment's step or the trajectory's time ran out
};

namespace detail {
inline constexpr ::grpo::detail::EnumNames<TrajectoryEnd, 6> kTrajectoryEndNames{{
    {TrajectoryEnd::answer, "answer"},
    {TrajectoryEnd::environment, "environment"},
    {TrajectoryEnd::turns, "turns"},
    {TrajectoryEnd::length, "length"},
    {TrajectoryEnd::budget, "budget"},
    {TrajectoryEnd::timeout, "timeout"},
}};
}  // namespace detail

GRPO_ENUM_NAMES(TrajectoryEnd, detail::kTrajectoryEndNames, "trajectory end", parse_trajectory_end);

struct MultiTurnOptions {
  /// Assistant turns per trajectory (a turn that still calls tools at the limit ends it: TrajectoryEnd::turns).
  std::int64_t max_turns = 4;
  /// Calls answered per turn; the blocks after them get an error reply (and count as failed calls).
  std::int64_t max_calls_per_turn = 4;
  /// A tool reply's own tokens; longer ones are cut (TurnCodec::cap_reply).
  std::int64_t max_reply_tokens = 256;
  /// Completion tokens of a trajectory, sampled and replies together. A turn is sampled with at most what is left
  /// (and at most SamplerOptions::max_new_tokens); a reply that would not fit ends the trajectory.
  std::int64_t max_total_tokens = 1024;
  /// Seconds of one environment step (all calls of a turn; each tool also has its own timeout); a step over it is
  /// abandoned and ends the trajectory.
  double step_timeout_seconds = 30.0;
  /// Seconds of a trajectory's wall time, sampling and tools together, checked before each environment step.
  double trajectory_timeout_seconds = 300.0;
  /// Environment steps of different trajectories run at the same time on this many threads.
  int tool_threads = 4;
  /// Added to a turn's reward for each of its calls that failed (unknown tool, bad JSON or arguments, error, timeout):
  /// a negative value penalises them. 0: off.
  double failed_call_reward = 0.0;

  /// Throws ConfigError naming the option.
  void validate() const {
    GRPO_CHECK_CONFIG(max_turns >= 1, "max_turns must be >= 1, got {}", max_turns);
    GRPO_CHECK_CONFIG(max_calls_per_turn >= 1, "max_calls_per_turn must be >= 1, got {}", max_calls_per_turn);
    GRPO_CHECK_CONFIG(max_reply_tokens >= 1, "max_reply_tokens must be >= 1, got {}", max_reply_tokens);
    GRPO_CHECK_CONFIG(max_total_tokens >= 1, "max_total_tokens must be >= 1, got {}", max_total_tokens);
    GRPO_CHECK_CONFIG(step_timeout_seconds > 0, "tool_step_timeout must be > 0 seconds, got {}", step_timeout_seconds);
    GRPO_CHECK_CONFIG(trajectory_timeout_seconds > 0, "trajectory_timeout must be > 0 seconds, got {}",
                      trajectory_timeout_seconds);
    GRPO_CHECK_CONFIG(tool_threads >= 1, "tool_threads must be >= 1, got {}", tool_threads);
  }
};

/// What happened in one trajectory (row) of the last generate call.
struct TrajectoryInfo {
  TrajectoryEnd end = TrajectoryEnd::answer;
  std::int64_t turns = 0;         ///< assistant turns sampled
  std::int64_t tool_calls = 0;    ///< call blocks written (malformed ones included)
  std::int64_t failed_calls = 0;  ///< blocks whose reply is an error
  std::int64_t sampled_tokens = 0, reply_tokens = 0;
  std::vector<double> turn_rewards;  ///< per turn: the environment's reward plus failed_call_reward per failed call
  double tool_seconds = 0.0;
  std::string final_turn;  ///< the last sampled turn as text (the answer when end == answer)
};

}  // namespace grpo::agent
