// SPDX-License-Identifier: Apache-2.0
// Rewards for the shape of a completion, not its correctness: the R1-Zero think/answer format, open-r1's tag
// count (partial credit), and open-r1's reasoning-steps count (open-r1 src/open_r1/rewards.py).
//
// All three are hand-written linear scanners (no regex engine): each reproduces the match semantics of the
// Python regex it replaces, including backtracking over `.*?`, and runs in O(length) on any input (1 MB of text,
// invalid UTF-8). Whitespace (`\s`) is ASCII whitespace; `\d` is an ASCII digit.
#pragma once

#include <grpo/core/enum_names.hpp>
#include <grpo/rewards/reward_function.hpp>

#include <cstddef>
#include <string>
#include <string_view>

namespace grpo::rewards {

/// Which think/answer pattern the format reward checks (full match, `.` matches newline).
enum class FormatStyle {
  /// R1-Zero (DeepSeek-R1 paper; TRL examples): `^<think>.*?</think>\s*<answer>.*?</answer>$`, DOTALL.
  /// Python's `$` also matches before one final "\n", so a trailing newline is accepted.
  r1_zero,
  /// open-r1 `format_reward`: `re.match(r"^<think>\n.*?\n</think>\n<answer>\n.*?\n</answer>$", DOTALL|MULTILINE)`.
  /// Stricter about newlines around the tags; but because of MULTILINE, `$` matches at any line end, so text may
  /// follow "</answer>" on a later line (reproduced as written).
  open_r1,
};

namespace detail {
inline constexpr ::grpo::detail::EnumNames<FormatStyle, 2> kFormatStyleNames{{
    {FormatStyle::r1_zero, "r1_zero"},
    {FormatStyle::open_r1, "open_r1"},
}};
}  // namespace detail

/// "r1_zero" or "open_r1".
GRPO_ENUM_NAMES(FormatStyle, detail::kFormatStyleNames, "format style");

/// True when `text` matches the format `style` (see FormatStyle).
bool matches_format(std::string_view text, FormatStyle style);

struct FormatOptions {
  FormatStyle style = FormatStyle::r1_zero;
};

/// 1 if the completion matches the format, else 0. Always has a value.
class FormatReward final : public RewardFunction {
 public:
  explicit FormatReward(FormatOptions options = {}) : options_(options) {}
  std::string name() const override { return "format"; }
  std::vector<std::optional<float>> score(std::span<const Completion> batch,
                                          const ScoringContext& context) const override;
  const FormatOptions& options() const { return options_; }

 private:
  FormatOptions options_;
};

/// open-r1 `tag_count_reward`: 0.25 for each of "<think>\n", "\n</think>\n", "\n<answer>\n", "\n</answer>" that
/// occurs exactly once (Python str.count: non-overlapping occurrences). In [0, 1].
float tag_count_score(std::string_view text);

/// tag_count_score of each completion. Always has a value.
class TagCountReward final : public RewardFunction {
 public:
  std::string name() const override { return "tag_count"; }
  std::vector<std::optional<float>> score(std::span<const Completion> batch,
                                          const ScoringContext& context) const override;
};

/// Where a numbered line ("1.", "12.") may start to count as a reasoning step.
enum class StepLineAnchor {
  /// At the start of any line (MULTILINE `^`): counts every numbered line, what the pattern is meant to find.
  /// Our default.
  every_line,
  /// Only at the start of the text: open-r1's pattern `^\d+\.` is compiled without MULTILINE, so a numbered list
  /// counts at most its first item, and only when the completion starts with it. Reproduces open-r1 exactly.
  string_start,
};

namespace detail {
inline constexpr ::grpo::detail::EnumNames<StepLineAnchor, 2> kStepLineAnchorNames{{
    {StepLineAnchor::every_line, "every_line"},
    {StepLineAnchor::string_start, "string_start"},
}};
}  // namespace detail

/// "every_line" or "string_start".
GRPO_ENUM_NAMES(StepLineAnchor, detail::kStepLineAnchorNames, "step line anchor");

/// Counts the non-overlapping, leftmost matches of open-r1's
/// `(Step \d+:|^\d+\.|\n-|\n\*|First,|Second,|Next,|Finally,)` (Python re.findall), with `^` as `anchor` says.
std::size_t count_reasoning_steps(std::string_view text, StepLineAnchor anchor);

struct ReasoningStepsOptions {
  StepLineAnchor line_anchor = StepLineAnchor::every_line;
  double target_steps = 3.0;  ///< reward = min(1, count / target_steps); open-r1 uses 3 ("magic number")
};

/// open-r1 `reasoning_steps_reward`: min(1, count_reasoning_steps / target_steps). Always has a value.
class ReasoningStepsReward final : public RewardFunction {
 public:
  explicit ReasoningStepsReward(ReasoningStepsOptions options = {});
  std::string name() const override { return "reasoning_steps"; }
  std::vector<std::optional<float>> score(std::span<const Completion> batch,
                                          const ScoringContext& context) const override;
  const ReasoningStepsOptions& options() const { return options_; }

 private:
  ReasoningStepsOptions options_;
};

}  // namespace grpo::rewards
